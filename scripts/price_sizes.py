"""The price of each core size (``--size``): GFLOP per forward, the core's time and a
cold still, fp16 and int8, and the daemon's frames/s (its default config), measured
side by side in one run; the ratios are to 504's in that run, the daemon's to the
rate of the core timed just before it.

Run it in the export environment (it exports the models and counts FLOPs with torch;
the timings run in the runtime environment's Python, as a user's would):

    .venv-export/bin/python -m scripts.price_sizes --weights DIR --json docs/bench/sizes-x86_64.json

``--weights``: the official release folder or seeded random weights (``da3-edge export
--random-init 0 --save-weights DIR --weights-only``). Random weights price the cost of
a size, never its accuracy. Each size is exported at the shape a 1200x1600 photo runs
at (its 4:3 shape), fp16 and int8, into one folder with the stage programs (the
daemon's default stages run them where the runner is installed); rounds alternate the
sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.support import ROOT
from scripts.support.measured import refuse_dirty
from scripts.support.sizes import IMAGE, PRECISIONS, summarise

SIZES = (504, 448, 392, 336, 280, 224)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--weights", required=True, type=Path)
    p.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="comma-separated; the first is the one ratios are to",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--daemon-frames",
        type=int,
        default=30,
        help="frames the daemon is timed over at each size (0: no daemon)",
    )
    p.add_argument("--runtime-python", type=Path, default=ROOT / ".venv" / "bin" / "python")
    p.add_argument("--models", type=Path, help="export into (and reuse) this folder")
    p.add_argument("--json", type=Path, help="write the results here")
    return p


def export(weights: Path, out: Path, shapes: list[tuple[int, int]]) -> None:
    """The cores at ``shapes``, fp16 and int8, and the stage programs, verified."""
    argv = [sys.executable, "-m", "edge", "export", "--weights", str(weights), "--out", str(out)]
    argv += ["--precision", ",".join(PRECISIONS)]
    for h, w in shapes:
        argv += ["--shape", f"{h}x{w}"]
    subprocess.run(argv, check=True, cwd=ROOT)


def core_ms(models: Path, shape: tuple[int, int], precision: str, threads: int) -> float:
    """The core's best of 5 runs after 2 warm-ups (this process: the runtime env's)."""
    from scripts.support.compare_pytorch.measure import core_latency

    return core_latency(models, threads, shape, only=precision)[precision] * 1000


def timed_core(
    python: Path, models: Path, shape: tuple[int, int], precision: str, threads: int
) -> float:
    """``core_ms`` in a fresh runtime-env process (no torch beside the core)."""
    args = [str(models), f"{shape[0]}x{shape[1]}", precision, str(threads)]
    argv = [str(python), "-m", "scripts.price_sizes", "core", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"core timing failed: {proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout)["ms"])


def gflop(shape: tuple[int, int]) -> float:
    from scripts.support.compare_pytorch.measure import network_flops

    return network_flops(shape)["core"] / 1e9


def daemon(
    ns: argparse.Namespace, models: Path, work: Path, size: int, core_ms: float
) -> dict[str, Any]:
    """`da3-edge run` with the default config at ``model.size = size`` on replayed
    1200x1600 JPEGs, delivered at twice the core's rate (10 fps at least) so the camera
    never sets the pace: compare_pytorch's daemon round against the fp16 ``core_ms``."""
    from scripts.support.compare_pytorch.measure import daemon_round

    replay_fps = max(10.0, float(round(2000.0 / core_ms)))
    core_s = core_ms / 1000
    return daemon_round(
        ns.runtime_python, models, ns.threads, work, ns.daemon_frames, replay_fps, 1, size, core_s
    )


def one_round(
    ns: argparse.Namespace, models: Path, photo: Path, work: Path, daemons: bool = True
) -> dict[str, Any]:
    """Every size and precision once: the core's time and a cold still; with
    ``daemons``, then the daemon at that size (fp16, its default), against the fp16
    core timed just before it."""
    from edge import bench
    from edge.models import da3_shape

    out: dict[str, Any] = {}
    env = {"XDG_CACHE_HOME": str(work / "cache")}  # the weight cache: warm after round 0
    for size in ns.sizes:
        shape = da3_shape(*IMAGE, size)
        for precision in PRECISIONS:
            snap = [str(ns.runtime_python), "-m", "edge", "snap", str(photo)]
            snap += ["-o", str(work / "out"), "--models", str(models), "--size", str(size)]
            snap += ["--precision", precision, "--threads", str(ns.threads)]
            still = bench.cold_still(snap, cwd=ROOT, env=env)
            out[f"{size}/{precision}"] = {
                "core_ms": timed_core(ns.runtime_python, models, shape, precision, ns.threads),
                "still_s": still["seconds"],
                "still_peak_rss_mib": still["peak_rss_mib"],
            }
            print(
                f"  {size} {precision}: core {out[f'{size}/{precision}']['core_ms']:.0f} ms, "
                f"still {still['seconds']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        if daemons and ns.daemon_frames:
            run = Path(tempfile.mkdtemp(prefix=f"daemon-{size}-", dir=work))
            d = daemon(ns, models, run, size, out[f"{size}/fp16"]["core_ms"])
            out[f"{size}/daemon"] = d
            ratio = d["ratio_to_core_rate"]
            print(
                f"  {size} daemon: {d['fps']:.2f} frames/s = {ratio:.2f} x (1 / core)",
                file=sys.stderr,
                flush=True,
            )
    return out


def child(argv: list[str]) -> int:
    """``python -m scripts.price_sizes core DIR HxW PRECISION THREADS``: ``core_ms``."""
    directory, shape, precision, threads = argv
    h, w = (int(v) for v in shape.split("x"))
    print(json.dumps({"ms": core_ms(Path(directory), (h, w), precision, int(threads))}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["core"]:
        return child(argv[1:])
    ns = parser().parse_args(argv)
    refuse_dirty(ns.json)
    ns.sizes = [int(v) for v in ns.sizes.split(",")]
    from edge import bench
    from edge.models import Manifest, da3_shape

    machine = bench.machine_info()  # the checkout as measured: before, not after, the run
    with tempfile.TemporaryDirectory(prefix="da3-edge-price-") as tmp:
        work = Path(tmp)
        models = ns.models or work / "models"
        shapes = [da3_shape(*IMAGE, size) for size in ns.sizes]
        export(ns.weights.absolute(), models, shapes)
        flops = {size: gflop(shape) for size, shape in zip(ns.sizes, shapes, strict=True)}
        photo = work / "photo.jpg"
        photo.write_bytes(bench.synthetic_jpeg(*IMAGE))
        print("warm-up round (builds the weight caches; not counted)", file=sys.stderr)
        one_round(ns, models, photo, work, daemons=False)
        rounds = []
        for n in range(ns.rounds):
            print(f"round {n + 1} of {ns.rounds}", file=sys.stderr, flush=True)
            rounds.append(one_round(ns, models, photo, work))
        random_init = any(a.random_init for a in Manifest.load(models).cores())
    rows = summarise(ns.sizes, rounds)
    for row in rows:
        row["gflop"] = flops[row["size"]]
    data = {
        "machine": machine,
        "threads": ns.threads,
        "rounds": ns.rounds,
        "image": f"synthetic {IMAGE[0]}x{IMAGE[1]} JPEG",
        "daemon_frames": ns.daemon_frames,
        "random_init": random_init,
        "sizes": rows,
        "raw": rounds,
    }
    text = json.dumps(data, indent=1) + "\n"
    if ns.json:
        ns.json.write_text(text)
    from scripts.support.performance_tables import render_sizes

    print(render_sizes(data))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
