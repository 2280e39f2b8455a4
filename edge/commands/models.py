"""``da3-edge models``: what a model directory holds, and whether it is intact."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge.commands import options
from edge.errors import EdgeError, UsageError, report
from edge.models import HUB_REPO, Artifact, Manifest, resolve_models_dir

BUILD_SIZES = (504, 448, 392, 336, 280, 224)  # the sizes whose graphs ship (edge/data/cores)
BUILD_PRECISIONS = ("fp16", "fp32")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge models",
        description="List the models in a model directory; with --verify, check each "
        "file's size and SHA-256 and load each core model with LiteRT, and for models "
        "built from a release file, build a 42x56 core of each precision from it and "
        "compare its depth with DA3's forward computed with numpy (no torch). `pack` and `pull` "
        "carry a model directory from the machine that exported it to others (a .tar.gz "
        "and its SHA-256); `build` makes a model directory from DA3's release file, "
        "with no torch.",
    )
    options.add_models(p)
    p.add_argument("--verify", action="store_true", help="check hashes and load each model")
    p.add_argument(
        "--weights",
        dest="release",
        metavar="DIR",
        help="with --verify: the release folder (or model.safetensors) the models were "
        "built from (default: the one their manifest names)",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    pack = sub.add_parser(
        "pack",
        help="a model directory as one .tar.gz for `pull` and the Pi installer's "
        "--models-url; prints its SHA-256",
        description="Pack a model directory (its manifest and the files it lists, each "
        "checked first) into one reproducible .tar.gz, and print its SHA-256: serve it "
        "over HTTP(S) to `da3-edge models pull`, `da3-edge card --models URL` or the "
        "installer's --models-url.",
    )
    pack.add_argument("directory", metavar="DIR", help="the model directory")
    pack.add_argument(
        "-o", "--out", metavar="FILE", help="the pack (default: ./da3-small-models.tar.gz)"
    )
    pull = sub.add_parser(
        "pull",
        help="fetch a pack (resumed if interrupted), check it, and make it the model directory",
        description="Download a pack made by `da3-edge models pack` (http, https or file "
        "URL) with a progress line, resuming an interrupted download when run again, "
        "check its SHA-256, its manifest and every file's size and SHA-256, and only then "
        "replace the model directory. A refusal is one line, with nothing replaced.",
    )
    pull.add_argument("url", metavar="URL")
    pull.add_argument("--sha256", required=True, metavar="HEX", help="the pack's SHA-256")
    pull.add_argument(
        "--out", metavar="DIR", help=f"the model directory to replace ({options.MODELS_DEFAULT})"
    )
    _build_parser(sub)
    return p


def _build_parser(sub: Any) -> None:
    build = sub.add_parser(
        "build",
        help="make the models from DA3's release file with numpy alone (no torch): on the "
        "Pi itself, or any computer",
        description="Build LiteRT cores from the official release (config.json + "
        "model.safetensors): each the file `da3-edge export` converts from the same "
        "weights, byte for byte, made by filling the graph this da3-edge ships for the "
        "shape with the release's tensors. fp16 and fp32 at sizes "
        f"{', '.join(map(str, BUILD_SIZES))} in the four aspects; int8 and other shapes "
        "come from `da3-edge export` (the export environment). The release is checked "
        "whole before anything is written; a core is written under a temporary name and "
        "renamed, so a failure leaves no partial file.",
    )
    build.add_argument(
        "--weights",
        required=True,
        metavar="PATH",
        help="the release folder (config.json + model.safetensors) or the .safetensors "
        "file; 'hub': fetch it first, as `models fetch` does, into its default folder",
    )
    build.add_argument(
        "--size",
        action="append",
        type=options.size,
        metavar="N",
        help="the four shapes (4:3, 3:4, 16:9, 9:16) whose long side is N; repeatable; "
        "the default (with no --shape) is 504",
    )
    build.add_argument(
        "--shape",
        action="append",
        metavar="HxW",
        help="one input shape (one that has a graph in this da3-edge); repeatable",
    )
    build.add_argument(
        "--precision",
        default="fp16",
        help="comma-separated subset of fp16,fp32 (default: fp16; int8: `da3-edge export`)",
    )
    build.add_argument(
        "--for-config",
        metavar="FILE",
        help="instead of --size, --shape and --precision: the cores a daemon with this "
        "config runs (its model.precision; at its model.size, 504 when none, the camera's "
        "shape and the other aspects that have a graph)",
    )
    build.add_argument(
        "--out", metavar="DIR", help=f"the model directory to write ({options.MODELS_DEFAULT})"
    )
    build.add_argument(
        "--no-stages", action="store_true", help="skip the ExecuTorch stage programs (.pte)"
    )
    build.add_argument("--sha256", metavar="HEX", help="with --weights hub: as `models fetch`")
    _fetch_parser(sub)


def _fetch_parser(sub: Any) -> None:
    fetch = sub.add_parser(
        "fetch",
        help="download DA3-small's release from the Hugging Face hub (resumed, SHA-256 "
        "checked) for `models build`",
        description=f"Download {HUB_REPO}'s config.json and model.safetensors from the "
        "Hugging Face hub ($HF_ENDPOINT, else https://huggingface.co) with a progress line, "
        "resuming an interrupted download when run again. The weights' SHA-256 is checked "
        "against --sha256, else the hub's own (its X-Linked-Etag header); their size is "
        "capped and the free space checked first. A refusal is one line, with the partial "
        "download removed.",
    )
    fetch.add_argument(
        "--out", metavar="DIR", help="the release folder (default: ~/.local/share/da3-edge/release)"
    )
    fetch.add_argument("--sha256", metavar="HEX", help="the weights' SHA-256 (pinned)")
    fetch.add_argument("--revision", default="main", help="the hub revision (default: main)")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fetch_main(ns: argparse.Namespace) -> int:
    from edge import hub

    out = Path(ns.out) if ns.out else hub.default_dir()
    weights = hub.fetch(out, _say, revision=ns.revision, sha256=ns.sha256)
    print(weights.parent)
    return 0


def build_main(ns: argparse.Namespace) -> int:
    from edge import corebuild
    from edge.commands.export import parse_shapes

    if ns.for_config:
        if ns.shape or ns.size or ns.precision != "fp16":
            raise UsageError("--for-config takes the shapes and precision from the config")
        from edge import graphs

        shapes, precisions = graphs.for_config(ns.for_config)
    else:
        try:
            shapes = parse_shapes(ns.shape, ns.size)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        precisions = options.split_list(ns.precision, BUILD_PRECISIONS, "precision")
    out = resolve_models_dir(ns.out)
    weights = Path(ns.weights)
    if ns.weights == "hub":
        from edge import hub

        weights = hub.fetch(hub.default_dir(), _say, sha256=ns.sha256)
    made = corebuild.build_models(
        weights, out, shapes, precisions, with_stages=not ns.no_stages, progress=_say
    )
    random = any(a.random_init for a in made)
    print(
        f"wrote {len(made)} artifacts to {out}"
        + (" (random-init: not a real model)" if random else "")
    )
    return 0


def pack_main(ns: argparse.Namespace) -> int:
    from edge import packs

    out = Path(ns.out or "da3-small-models.tar.gz")
    digest = packs.pack(Path(ns.directory), out)
    print(f"{out}  {out.stat().st_size / 1e6:.1f} MB")
    print(f"sha256 {digest}")
    return 0


def pull_main(ns: argparse.Namespace) -> int:
    from edge import packs

    out = resolve_models_dir(ns.out)
    meter = packs.Meter("download", lambda line: print(line, file=sys.stderr, flush=True))
    manifest, downloaded = packs.pull(ns.url, ns.sha256, out, meter)
    if not downloaded:
        print(f"download: not needed: {out} holds that pack (every file checked)", file=sys.stderr)
    print(f"{out}: {packs.describe(manifest)}")
    return 0


def check(manifest: Manifest, artifact: Artifact) -> None:
    """Size and SHA-256 in full; a core model must load in LiteRT at its shape."""
    path = manifest.verify(artifact, full=True)
    if artifact.kind == "core":
        from edge.core import Core

        with Core(path, threads=1, precision=artifact.precision) as core:
            if core.shape != artifact.shape:
                raise EdgeError(f"{path}: takes {core.shape}, manifest says {artifact.shape}")


def _line(artifact: Artifact) -> str:
    shape = f"{artifact.shape[0]}x{artifact.shape[1]}"
    if artifact.kind == "core":
        flag = "  RANDOM-INIT (not a real model)" if artifact.random_init else ""
        label = f"{shape} {artifact.precision}"
        return f"  {label:<16} {artifact.bytes / 1e6:7.1f} MB  {artifact.file}{flag}"
    label = f"{artifact.kind} {shape}"
    return f"  {label:<16} {artifact.bytes / 1e3:7.1f} kB  {artifact.file}"


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    if ns.action == "pack":
        return pack_main(ns)
    if ns.action == "pull":
        return pull_main(ns)
    if ns.action == "build":
        return build_main(ns)
    if ns.action == "fetch":
        return fetch_main(ns)
    directory = resolve_models_dir(ns.models)
    manifest = Manifest.load(directory)
    print(f"{directory} ({manifest.model})")
    failures = 0
    for artifact in [*manifest.cores(), *manifest.stage_programs()]:
        line = _line(artifact)
        if ns.verify:
            try:
                check(manifest, artifact)
            except EdgeError as exc:
                failures += 1
                print(line + "  FAILED", flush=True)
                report(exc)
                continue
            line += "  ok"
        print(line)
    if ns.verify:
        failures += forward_checks(manifest, ns.release)
    return 1 if failures else 0


def forward_checks(manifest: Manifest, release: str | None) -> int:
    """``edge.buildcheck`` for each precision of the cores made from a release file
    (provenance "sha256:..."); the number that failed."""
    wanted: dict[str, tuple[str, set[str]]] = {}
    for core in manifest.cores():
        if core.weights.startswith("sha256:") and core.precision in BUILD_PRECISIONS:
            source = release or str(core.provenance.get("source", ""))
            wanted.setdefault(core.weights, (source, set()))[1].add(core.precision)
    failures = 0
    for weights, (source, precisions) in wanted.items():
        if not source or not Path(source).exists():
            note = f"the release is not at {source or '(no path recorded)'}"
            print(f"  forward check skipped: {note}; name it with --weights DIR")
            continue
        failures += _forward_check(weights, Path(source), sorted(precisions))
    return failures


def _forward_check(weights: str, source: Path, precisions: list[str]) -> int:
    from edge import buildcheck

    shape = "x".join(map(str, buildcheck.PROBE_SHAPE))
    failures = 0
    try:
        path = buildcheck.release_for(weights, source)
        ref = buildcheck.reference(path)  # once for every precision
    except EdgeError as exc:
        print(f"  forward {shape}: FAILED", flush=True)
        report(exc)
        return len(precisions)
    for precision in precisions:
        label = f"forward {shape} {precision}"
        try:
            result = buildcheck.check(path, precision, ref)
        except EdgeError as exc:
            failures += 1
            print(f"  {label:<16} FAILED", flush=True)
            report(exc)
            continue
        numbers = f"Pearson {result.depth['pearson']:.7f}, rel-L2 {result.depth['rel_l2']:.1e}"
        print(f"  {label:<16} {numbers} against numpy  ok")
    return failures
