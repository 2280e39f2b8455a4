#!/usr/bin/env python3
"""What preprocessing the camera's picture costs the daemon, in paired alternating rounds.

    uv run --frozen --no-sync python -m scripts.experiments.bench_daemon_preprocess [--rounds 8]

Each round times the fp16 core alone (compare_pytorch's ``core_latency``: best of 5),
then runs `da3-edge run` (this checkout, default config) twice: on replayed 1200x1600
photo-like JPEGs, and on the same kind of photos already at the core's 378x504, where
DA3's resize is the identity and preprocessing only normalises; the order alternates.
The report gives, per round, each run's frames/s, its ratio to 1 / core and the
preprocessing time inside the daemon, and the median of the per-round frames/s ratios
small / full: how much faster the daemon would be if the 1200x1600 frame's resize cost
nothing. Prints the JSON report; ``--out FILE`` also writes it. Figures from one run only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from edge import bench
from scripts.experiments.bench_daemon_ab import one_run
from scripts.support import ROOT
from scripts.support.compare_pytorch.measure import core_latency
from scripts.support.replay import replay_photos, tmpfs_dir

SIZES = {"full": (1200, 1600), "small": (378, 504)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        type=Path,
        default=ROOT / ".cache" / "tests" / "full",
        help="model directory (default: the tests' full-size random-init models)",
    )
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--frames", type=int, default=30, help="frames measured per run")
    p.add_argument("--warmup", type=int, default=3, help="frames written before measuring")
    p.add_argument("--fps", type=float, default=10.0, help="replay rate (above the daemon's)")
    p.add_argument("--threads", type=int, default=2, help="the core's, timed alone")
    p.add_argument("--out", type=Path)
    return p


def replays(work: Path) -> dict[str, Path]:
    return {name: replay_photos(work / f"replay-{name}", size=size) for name, size in SIZES.items()}


def paired_rounds(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    photos = replays(work)
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        core_s = core_latency(args.models, args.threads, SIZES["small"], only="fp16")["fp16"]
        order = ("full", "small") if i % 2 == 0 else ("small", "full")
        got: dict[str, Any] = {"order": list(order), "core_s": core_s}
        for name in order:
            run = one_run(ROOT, args.models, photos[name], work, args)
            got[name] = {**run, "ratio_to_core_rate": run["fps"] * core_s}
        got["small_over_full"] = got["small"]["fps"] / got["full"]["fps"]
        rounds.append(got)
        print(
            f"round {i + 1}/{args.rounds}: core {core_s * 1000:.0f} ms; full "
            f"{got['full']['fps']:.3f} frames/s ({got['full']['ratio_to_core_rate']:.3f}), "
            f"small {got['small']['fps']:.3f} ({got['small']['ratio_to_core_rate']:.3f})",
            file=sys.stderr,
        )
    return rounds


def main() -> int:
    p = parser()
    args = p.parse_args()
    if args.rounds < 1 or args.frames < 2:
        p.error("--rounds must be >= 1 and --frames >= 2")
    work = Path(tempfile.mkdtemp(prefix="da3-daemon-pre-", dir=tmpfs_dir()))
    try:
        rounds = paired_rounds(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [r["small_over_full"] for r in rounds]
    report = {
        "what": "da3-edge run frames/s on 1200x1600 replayed photos and on 378x504 ones",
        "machine": bench.machine_info(),
        "models": str(args.models),
        "replay_fps": args.fps,
        "frames": args.frames,
        "warmup": args.warmup,
        "rounds": rounds,
        "median_small_over_full": statistics.median(ratios),
        "range_small_over_full": [min(ratios), max(ratios)],
        "median_ratio_to_core_rate": {
            name: statistics.median(r[name]["ratio_to_core_rate"] for r in rounds) for name in SIZES
        },
    }
    text = json.dumps(report, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
