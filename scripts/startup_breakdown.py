#!/usr/bin/env python3
"""Where a still's time and memory go: `da3-edge snap` in fresh processes, traced.

    uv run python -m scripts.startup_breakdown --models DIR [--image photo.jpg]
        [--precision fp16,int8] [--rounds 5] [--json out.json] [--fp16-arithmetic]

Each round runs, for every precision, one `snap` with the weight cache off and one with
it warm (built beforehand in a directory of this run's own), alternating (with
--fp16-arithmetic, fp16 also with XNNPACK's fp16 arithmetic, the others with it off), each with
``DA3_EDGE_TRACE`` (``edge/trace.py``): at every mark the time since the process
started and its memory (RSS, anonymous and file-backed, and the peak so far). Prints,
per precision and cache mode, the median of each mark over the rounds. Peak RSS of the
whole process is its VmHWM at the last mark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from edge import bench

FIELDS = ("s", "rss", "anon", "file", "hwm")
FP16 = "DA3_EDGE_FP16_ARITHMETIC"
# mode -> (weight cache: off, or this run's warm one; what it is)
MODES = {
    "off": ("off", "weight cache off"),
    "warm": ("warm", "weight cache warm"),
    "fp16-arithmetic": ("off", "fp16 arithmetic (no weight cache: LiteRT aborts)"),
}


def traced_snap(
    image: Path, models: Path, precision: str, cache: str, out: Path, env: dict[str, str]
) -> list[dict]:  # type: ignore[type-arg]
    trace = out / "trace.jsonl"
    trace.unlink(missing_ok=True)
    env = {**os.environ, **env, "DA3_EDGE_TRACE": str(trace)}
    argv = [sys.executable, "-m", "edge", "snap", str(image), "-o", str(out)]
    argv += ["--models", str(models), "--precision", precision, "--weight-cache", cache]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"snap failed: {proc.stderr.strip()[-500:]}")
    return [json.loads(line) for line in trace.read_text().splitlines()]


def median_marks(runs: list[list[dict]]) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    labels = [m["mark"] for m in runs[0]]
    out = []
    for i, label in enumerate(labels):
        row: dict[str, Any] = {"mark": label}
        for field in FIELDS:
            values = [run[i][field] for run in runs if i < len(run) and field in run[i]]
            row[field] = statistics.median(values) if values else None
        out.append(row)
    return out


def render(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    lines = []
    for precision, modes in results.items():
        for mode, marks in modes.items():
            what = MODES[mode][1]
            lines += ["", f"{precision}, {what} (medians; MiB)"]
            lines.append(
                f"{'mark':<24} {'t ms':>7} {'step':>6} {'RSS':>6} {'anon':>6} "
                f"{'file':>6} {'peak':>6}"
            )
            prev = 0.0
            for m in marks:
                t = m["s"] * 1000

                def mib(key: str, m: dict[str, Any] = m) -> str:
                    return f"{m[key] / 1024:>6.0f}" if m[key] is not None else "     -"

                lines.append(
                    f"{m['mark']:<24} {t:>7.0f} {t - prev:>6.0f} {mib('rss')} "
                    f"{mib('anon')} {mib('file')} {mib('hwm')}"
                )
                prev = t
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--image", type=Path, help="default: a synthetic 1200x1600 JPEG")
    p.add_argument("--precision", default="fp16,int8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument(
        "--baseline-kib",
        metavar="NATIVE,EMULATED",
        help="peak RSS of a Python with numpy and Pillow, natively and under the emulator "
        "this runs in (scripts/arm-lane.sh rss): recorded in the JSON",
    )
    p.add_argument(
        "--fp16-arithmetic",
        action="store_true",
        help="fp16 also with XNNPACK's fp16 arithmetic (a CPU with it: the emulated A76), "
        "the other fp16 runs with it off",
    )
    ns = p.parse_args()
    precisions = ns.precision.split(",")

    def modes(precision: str) -> dict[str, dict[str, str]]:
        if ns.fp16_arithmetic and precision == "fp16":
            return {"off": {FP16: "0"}, "warm": {FP16: "0"}, "fp16-arithmetic": {FP16: "1"}}
        return {"off": {}, "warm": {}}

    with tempfile.TemporaryDirectory(prefix="da3-edge-startup-") as tmp:
        work = Path(tmp)
        image = ns.image or work / "image.jpg"
        if ns.image is None:
            image.write_bytes(bench.synthetic_jpeg())
        cache = work / "cache"
        runs: dict[str, dict[str, list[list[dict]]]] = {}  # type: ignore[type-arg]
        for precision in precisions:  # build each cache once, untimed
            traced_snap(image, ns.models, precision, str(cache), work, modes(precision)["off"])
            runs[precision] = {mode: [] for mode in modes(precision)}
        for r in range(ns.rounds):
            print(f"round {r + 1}/{ns.rounds}", file=sys.stderr, flush=True)
            for precision in precisions:
                order = list(modes(precision).items())
                for mode, env in order if r % 2 == 0 else order[::-1]:
                    arg = str(cache) if MODES[mode][0] == "warm" else "off"
                    runs[precision][mode].append(
                        traced_snap(image, ns.models, precision, arg, work, env)
                    )
    results = {p: {m: median_marks(v) for m, v in modes.items()} for p, modes in runs.items()}
    print(render(results))
    if ns.json:
        data: dict[str, Any] = {
            "machine": bench.machine_info(),
            "rounds": ns.rounds,
            "results": results,
        }
        if ns.baseline_kib:
            native, emulated = (int(v) for v in ns.baseline_kib.split(","))
            data["baseline_peak_kib"] = {"native": native, "emulated": emulated}
        ns.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
