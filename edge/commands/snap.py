"""``da3-edge snap``: depth maps for stills.

For each input ``photo.jpg`` it writes ``photo.depth.png``, ``photo.npz``,
``photo.preview.png`` and ``photo.json`` into ``-o`` (see ``edge.frames``), and with
``--ply`` the point cloud ``photo.ply``. A bad input gets one error line naming it and
no outputs, the rest of the batch goes on, and the exit code is 1 if any input failed.
A photo whose field of view is not known (no ``--hfov``, no EXIF focal length) gets
its depth outputs and an error line instead of the point cloud. Usage errors exit 2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge import fov, frames, geometry, images, trace
from edge.commands import options
from edge.errors import (
    EdgeError,
    InputUnreadable,
    NoFieldOfView,
    OutputError,
    UsageError,
    report,
)

if TYPE_CHECKING:
    from edge.pipeline import Pipeline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge snap",
        description=(
            "Relative depth and confidence for still images. For photo.jpg writes "
            "photo.depth.png (16-bit inverse depth, larger = nearer), photo.npz (depth: "
            "larger = farther, and conf; float32), photo.preview.png (colour, near = warm) "
            "and photo.json (model, shapes, timings, field of view), at the photo's displayed "
            "size; with --ply, photo.ply (the point cloud)."
        ),
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="image files, directories (their images, not recursive), globs, or - for stdin",
    )
    p.add_argument(
        "-o", "--out", default=".", metavar="OUTDIR", help="output directory (default: .)"
    )
    options.add_models(p)
    options.add_precision(p, default="fp16")
    options.add_size(p)
    options.add_stages(p, default="$DA3_EDGE_STAGES, else auto")
    options.add_weight_cache(p)
    p.add_argument(
        "--threads", type=int, metavar="N", help="CPU threads for the core (default: cores, max 4)"
    )
    p.add_argument(
        "--format",
        default=",".join(frames.DEFAULT_FORMATS),
        metavar="LIST",
        help=f"comma-separated outputs from {','.join(frames.FORMATS)} (default: "
        f"{','.join(frames.DEFAULT_FORMATS)}; rgb: the image itself as JPEG, beside the depth)",
    )
    _add_cloud(p)
    p.add_argument(
        "--strict-shape",
        action="store_true",
        help="fail when DA3's shape for an image was not exported, instead of resizing to "
        "the exported shape with the nearest aspect ratio",
    )
    p.add_argument(
        "--max-pixels",
        type=int,
        default=images.MAX_PIXELS,
        metavar="N",
        help=f"refuse larger images before decoding (default: {images.MAX_PIXELS})",
    )
    return p


def _add_cloud(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ply",
        action="store_true",
        help="also write NAME.ply: the point cloud (binary PLY: x y z in the camera's frame, "
        "OpenCV axes, relative scale, not metres; the photo's colours; pixels below DA3's "
        f"confidence threshold left out; at most {geometry.CLOUD_MAX_POINTS:,} points). "
        "Needs the field of view: --hfov, else the photo's EXIF 35 mm focal length",
    )
    p.add_argument(
        "--hfov",
        type=hfov,
        metavar="DEG",
        help="the photos' horizontal field of view in degrees (default: from each photo's "
        "EXIF 35 mm-equivalent focal length, when it has one); recorded in NAME.json",
    )


def hfov(text: str) -> float:
    """``--hfov``'s type: degrees within geometry.HFOV_RANGE."""
    try:
        degrees = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of degrees") from None
    if not fov.in_range(degrees):
        low, high = fov.HFOV_RANGE
        raise argparse.ArgumentTypeError(f"{text} is not from {low:g} to {high:g} degrees")
    return degrees


@dataclass(frozen=True)
class Item:
    label: str  # how errors name it
    source: str  # what is read: a path, or "-"
    stem: str


def expand(inputs: Sequence[str]) -> Iterator[Item | EdgeError]:
    """Inputs in order; an input that names nothing becomes an error in place."""
    for arg in inputs:
        if arg == "-":
            yield Item("stdin", "-", "stdin")
            continue
        path = Path(arg)
        if path.is_dir():
            found = sorted(
                p
                for p in path.iterdir()
                if p.is_file() and p.suffix.lower() in images.IMAGE_SUFFIXES
            )
            if not found:
                yield InputUnreadable(f"{arg}: no images in this directory")
            for p in found:
                yield Item(str(p), str(p), p.stem)
        elif path.exists() or not any(ch in arg for ch in "*?["):
            yield Item(arg, arg, path.stem)
        else:
            matches = sorted(m for m in glob.glob(arg) if Path(m).is_file())
            if not matches:
                yield InputUnreadable(f"{arg}: no file matches")
            for m in matches:
                yield Item(m, m, Path(m).stem)


def parse_formats(value: str) -> list[str]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if item not in frames.FORMATS:
            raise UsageError(f"unknown format {item!r} (choose from {', '.join(frames.FORMATS)})")
        if item not in out:
            out.append(item)
    return out


def _owner(sidecar: Path) -> str | None:
    try:
        return str(json.loads(sidecar.read_text()).get("source"))
    except (OSError, ValueError, AttributeError):
        return None


def claim_stem(out: Path, stem: str, source: str, taken: set[str], formats: Sequence[str]) -> str:
    """A stem whose outputs belong to ``source``: never overwrite another input's files.

    Within one run the first input keeps ``photo``, the next ``photo-2``...; across
    runs the JSON sidecar says whose outputs are there (no sidecar: the files are
    taken to be someone else's and left alone)."""
    n = 1
    while True:
        candidate = stem if n == 1 else f"{stem}-{n}"
        if candidate not in taken:
            existing = [out / f"{candidate}{suffix}" for suffix in frames.SUFFIXES.values()]
            if not any(p.exists() for p in existing):
                break
            if _owner(out / f"{candidate}.json") == source:
                break
        n += 1
    taken.add(candidate)
    return candidate


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    formats = parse_formats(ns.format) + (["ply"] if ns.ply else [])
    given = fov.configured(ns.hfov or 0.0, "--hfov")
    if ns.threads is not None and ns.threads < 1:
        raise UsageError("--threads must be at least 1")
    if ns.max_pixels < 1:
        raise UsageError("--max-pixels must be positive")
    if list(ns.inputs).count("-") > 1:
        raise UsageError("- (stdin) can be given once")
    out = Path(ns.out)
    _check_writable(out)

    from edge.pipeline import Pipeline, PipelineSpec

    trace.mark("imports")
    items = list(expand(ns.inputs))
    total = len(items)
    failures = written = 0
    taken: set[str] = set()
    say_progress = total > 1
    spec = PipelineSpec(
        ns.models,
        precision=ns.precision,
        stages=ns.stages,
        size=ns.size,
        threads=ns.threads,
        strict_shape=ns.strict_shape,
        max_pixels=ns.max_pixels,
        weight_cache=ns.weight_cache,
    )
    with Pipeline.load(spec) as pipeline:
        trace.mark("pipeline loaded")
        if any(a.random_init for a in pipeline.manifest.cores()):
            print(
                "da3-edge: warning: these models have random-init weights: outputs are NOT "
                "a real model's depth (flagged in every .json)",
                file=sys.stderr,
            )
        for index, item in enumerate(items, 1):
            start = time.perf_counter()
            try:
                if isinstance(item, EdgeError):
                    raise item
                stem = _snap_one(
                    pipeline, item, out, formats, taken, last=index == total, given=given
                )
            except EdgeError as exc:
                failures += 1
                report(exc)
                continue
            written += 1
            if say_progress:
                ms = (time.perf_counter() - start) * 1000
                print(f"[{index}/{total}] {item.label} -> {stem}: {ms:.0f} ms", file=sys.stderr)
    if say_progress or failures:
        print(f"{written} written, {failures} failed", file=sys.stderr)
    return 1 if failures else 0


def _check_writable(out: Path) -> None:
    """OutputError unless ``out`` is (or can be made) a folder this user can write in."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".da3-edge-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"{out}: cannot write outputs here ({exc.strerror or exc})") from None


def _snap_one(
    pipeline: Pipeline,
    item: Item,
    out: Path,
    formats: list[str],
    taken: set[str],
    *,
    last: bool,
    given: fov.FieldOfView | None,
) -> str:
    """One input through the pipeline, its outputs written under a stem of its own. A
    point cloud without a field of view: the other outputs, then NoFieldOfView."""
    source = sys.stdin.buffer.read() if item.source == "-" else item.source
    keep_rgb = "rgb" in formats or "ply" in formats
    frame = pipeline.run(source, name=item.label, last=last, keep_rgb=keep_rgb)
    frame.fov = given
    seen = frame.field_of_view()
    cloudless = "ply" in formats and seen.degrees is None
    if cloudless:
        formats = [f for f in formats if f != "ply"]
    key = "-" if item.source == "-" else str(Path(item.source).resolve())
    stem = claim_stem(out, item.stem, key, taken, formats)
    try:
        frames.write(frame, out, stem, formats, extra={"source": key})
        trace.mark("written")
    except OSError as exc:
        raise OutputError(f"{item.label}: cannot write to {out} ({exc.strerror or exc})") from None
    if cloudless:
        raise NoFieldOfView(
            f"{item.label}: no point cloud: its field of view is not known "
            f"({seen.source.removeprefix('none: ')}); give --hfov DEGREES "
            f"(its other outputs are written as {stem})"
        )
    return stem
