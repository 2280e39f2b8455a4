"""depth-anything.cpp, the C++/ggml peer, beside da3-edge in the same rounds: its
first depth map as it reports it, its PFM read back, its agreement with da3-edge's map,
and what it was built from."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path
from typing import Any


def peer_first_depth(cli: Path, gguf: Path, image: Path, threads: int) -> dict[str, float]:
    """depth-anything.cpp's model load and first depth map, as its bench hook prints
    them (``--repeat 1``: ``load=...ms infer=...ms/iter``). Its load reads the GGUF and
    places the weights; its graphs are built inside each inference, so ``to_depth_ms``
    (load + the first inference, which decodes and preprocesses the image) is the
    like-for-like figure to da3-edge's."""
    argv = [str(cli), "depth", "--model", str(gguf), "--input", str(image)]
    argv += ["--threads", str(threads), "--repeat", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    found = {}
    for word in proc.stdout.split():
        key, _, value = word.partition("=")
        if key in ("load", "infer") and value.endswith(("ms", "ms/iter")):
            found[f"{key}_ms"] = float(value.split("ms")[0])
    if len(found) != 2:
        raise SystemExit(f"{cli}: no load=/infer= in its output ({proc.stderr.strip()[-300:]})")
    return {**found, "to_depth_ms": found["load_ms"] + found["infer_ms"]}


def read_pfm(path: Path) -> Any:
    """A PFM file (greyscale ``Pf``) as a top-down float32 array."""
    import numpy as np

    with path.open("rb") as fh:
        kind = fh.readline().strip()
        w, h = (int(v) for v in fh.readline().split())
        scale = float(fh.readline())
        data = np.frombuffer(fh.read(), dtype="<f4" if scale < 0 else ">f4")
    if kind != b"Pf" or data.size != w * h:
        raise SystemExit(f"{path}: not a greyscale PFM")
    return data.reshape(h, w)[::-1].astype(np.float32)


def peer_agreement(peer_pfm: Path, ours_npz: Path) -> float:
    """Pearson correlation of log-depth, the peer's map (at the processing size)
    resized to ours with Pillow's bilinear filter (what da3-edge's postprocess uses)."""
    import numpy as np
    from PIL import Image

    ours = np.load(ours_npz)["depth"]
    theirs = read_pfm(peer_pfm)
    up = Image.fromarray(theirs, mode="F").resize(ours.shape[::-1], Image.Resampling.BILINEAR)
    a = np.log(np.maximum(ours, 1e-12)).ravel()
    b = np.log(np.maximum(np.asarray(up), 1e-12)).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def git_revision(directory: Path) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or None


def peer_source(cli: Path) -> str | None:
    """What scripts/peer/build.sh recorded the CLI was built from (``CLI.source``)."""
    record = cli.with_name(cli.name + ".source")
    return record.read_text().strip() if record.is_file() else git_revision(cli.parent)


def summary(
    cli: Path,
    ggufs: dict[str, Path],
    firsts: dict[str, list[dict[str, float]]],
    work: Path,
    image: Path,
) -> dict[str, Any]:
    """The peer's part of the JSON: what ran, its load and first depth (medians), and
    the log-depth Pearson of the last round's maps against da3-edge's."""
    return {
        "measured": True,
        "cli": str(cli),
        "source": peer_source(cli),
        "ggufs": {k: {"file": str(v), "bytes": v.stat().st_size} for k, v in ggufs.items()},
        **{
            span: {k: statistics.median(r[span] for r in v) for k, v in firsts.items()}
            for span in ("load_ms", "to_depth_ms")
        },
        "first_depth_raw": firsts,
        # The same weights on both sides, shown: the last round's outputs.
        "log_depth_pearson": {
            k: peer_agreement(work / f"peer-{k}.pfm", work / "edge" / f"{image.stem}.npz")
            for k in ggufs
        },
    }
