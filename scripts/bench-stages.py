#!/usr/bin/env python3
"""Per-frame cost of the two stage backends, measured in one run, side by side.

Needs the ExecuTorch runner (`da3-edge install-executorch`; no torch), in the runtime env:

    uv run python scripts/bench-stages.py --models DIR [--size 1200x1600] [--shape 378x504] [-n 20]

Prints median and p90 milliseconds for preprocess (uint8 RGB -> normalised tensor)
and postprocess (depth + conf back to the source size) for each backend, and the
ratio executorch / numpy. Timings, not correctness: the tests check that.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge import stages as stages_mod
from edge.models import Manifest, parse_shape


def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    fn()  # warm-up (first call plans memory, loads programs)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--size", default="1200x1600", help="source image HxW")
    p.add_argument("--shape", default="378x504", help="core shape HxW (must be exported)")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--json", action="store_true")
    ns = p.parse_args()
    h, w = (int(v) for v in ns.size.split("x"))
    shape = parse_shape(ns.shape)
    manifest = Manifest.load(ns.models)
    rng = np.random.default_rng(0)
    # A smooth image with texture, not noise: resampling cost does not depend on it,
    # but keep it photo-like anyway.
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack(
        [(127 + 100 * np.sin(xx / 37 + c) * np.cos(yy / 23)).astype(np.uint8) for c in range(3)],
        axis=2,
    )
    rgb = np.clip(rgb.astype(np.int16) + rng.integers(-8, 8, rgb.shape), 0, 255).astype(np.uint8)
    depth = (1 + rng.random(shape)).astype(np.float32)
    conf = (1 + rng.random(shape)).astype(np.float32)
    results = {}
    for name in ("numpy", "executorch"):
        backend = stages_mod.load(name, manifest=manifest, threads=None)
        pre = timed(lambda b=backend: b.preprocess(rgb, shape), ns.n)
        post = timed(lambda b=backend: b.postprocess(depth, conf, (h, w)), ns.n)
        results[name] = {
            "pre_ms_median": statistics.median(pre),
            "pre_ms_p90": sorted(pre)[int(0.9 * (len(pre) - 1))],
            "post_ms_median": statistics.median(post),
            "post_ms_p90": sorted(post)[int(0.9 * (len(post) - 1))],
        }
        backend.close()
    if ns.json:
        print(
            json.dumps(
                {"size": [h, w], "shape": list(shape), "n": ns.n, "results": results}, indent=2
            )
        )
        return 0
    print(f"source {h}x{w} -> core {shape[0]}x{shape[1]}, {ns.n} runs each (ms)")
    print(f"{'backend':<12}{'pre p50':>10}{'pre p90':>10}{'post p50':>10}{'post p90':>10}")
    for name, r in results.items():
        print(
            f"{name:<12}{r['pre_ms_median']:>10.1f}{r['pre_ms_p90']:>10.1f}{r['post_ms_median']:>10.1f}{r['post_ms_p90']:>10.1f}"
        )
    a, b = results["executorch"], results["numpy"]
    print(
        f"ratio executorch/numpy: pre {a['pre_ms_median'] / b['pre_ms_median']:.2f}x, post {a['post_ms_median'] / b['post_ms_median']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
