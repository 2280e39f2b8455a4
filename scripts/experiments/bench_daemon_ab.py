#!/usr/bin/env python3
"""Daemon frames/s, old code against new, in paired alternating rounds.

    uv run --frozen --no-sync python -m scripts.experiments.bench_daemon_ab --old REV [--rounds 5]

Each round runs `da3-edge run` twice on the same replay (1200x1600 photo-like JPEGs,
delivered faster than the daemon keeps up; the store on a tmpfs), once from ``REV`` (a `git archive` of
it, imported first through PYTHONPATH) and once from the working tree, in
alternating order (old-new, new-old, ...) so that a machine warming up or slowing
down weighs on both alike. Frames/s is the sustained rate after ``--warmup`` frames,
from the store's own frame.json timestamps. The verdict is the median of the
per-round new/old ratios against ``--min-ratio`` (0.98). Prints a JSON report;
``--out FILE`` also writes it. Compare only figures from one run: machines differ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from edge import platform as edge_platform
from scripts.support import ROOT
from scripts.support.replay import (
    counting_config,
    daemon_summary,
    replay_daemon,
    replay_photos,
    tmpfs_dir,
)


def checkout(rev: str, into: Path) -> str:
    """The package of ``rev`` (its edge/), unpacked into ``into``; its full hash."""
    full = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tar = subprocess.run(
        ["git", "archive", full, "edge"], cwd=ROOT, capture_output=True, check=True
    )
    with tarfile.open(fileobj=BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return full


def one_run(
    code: Path, models: Path, replay: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    store = Path(tempfile.mkdtemp(prefix="store-", dir=work))
    total = args.warmup + args.frames
    config = counting_config(work / "daemon.toml", total)
    records = replay_daemon(
        replay, store, models, config=config, fps=args.fps, frames=total, code=code
    )
    shutil.rmtree(store, ignore_errors=True)
    return daemon_summary(records, args.warmup)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, metavar="REV", help="the code to compare against")
    p.add_argument(
        "--models",
        type=Path,
        default=ROOT / ".cache" / "tests" / "full",
        help="model directory (default: the tests' full-size random-init models)",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--frames", type=int, default=30, help="frames measured per run")
    p.add_argument("--warmup", type=int, default=5, help="frames written before measuring")
    p.add_argument("--fps", type=float, default=10.0, help="replay rate (above the daemon's)")
    p.add_argument("--min-ratio", type=float, default=0.98)
    p.add_argument("--out", type=Path)
    return p


def paired_rounds(args: argparse.Namespace, old_code: Path, work: Path) -> list[dict[str, Any]]:
    """``--rounds`` rounds of the old code and this checkout, the order alternating."""
    replay = replay_photos(work / "replay")
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        got: dict[str, dict[str, Any]] = {}
        for which in order:
            code = old_code if which == "old" else ROOT
            got[which] = one_run(code, args.models, replay, work, args)
        ratio = got["new"]["fps"] / got["old"]["fps"]
        rounds.append({"order": list(order), **got, "new_over_old": round(ratio, 4)})
        print(
            f"round {i + 1}/{args.rounds} ({order[0]} first): old {got['old']['fps']:.3f} "
            f"new {got['new']['fps']:.3f} frames/s, new/old {ratio:.3f}",
            file=sys.stderr,
        )
    return rounds


def main() -> int:
    p = parser()
    args = p.parse_args()
    if args.rounds < 1 or args.frames < 2:
        p.error("--rounds must be >= 1 and --frames >= 2")
    # On a tmpfs, as the daemon's store is under systemd (RuntimeDirectory).
    work = Path(tempfile.mkdtemp(prefix="da3-daemon-ab-", dir=tmpfs_dir()))
    try:
        old_code = work / "old"
        old_rev = checkout(args.old, old_code)
        new_rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "edge"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
        )
        rounds = paired_rounds(args, old_code, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = statistics.median(r["new_over_old"] for r in rounds)
    report = {
        "what": "da3-edge run frames/s, paired alternating rounds, same replay and models",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "platform": platform.platform(),
            "cpu": edge_platform.cpu_features().model,
            "cores": os.cpu_count(),
        },
        "old": old_rev,
        "new": new_rev + (" + working tree" if dirty else ""),
        "models": str(args.models),
        "replay": {"size": "1200x1600", "fps": args.fps},
        "store": str(work),
        "frames": args.frames,
        "warmup": args.warmup,
        "rounds": rounds,
        "median_new_over_old": round(median, 4),
        "min_ratio": args.min_ratio,
        "pass": median >= args.min_ratio,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
