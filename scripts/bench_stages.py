#!/usr/bin/env python3
"""Per-frame cost of the two stage backends, measured in one run, side by side.

Needs the ExecuTorch runner (`da3-edge install-executorch`; no torch), in the runtime env:

    uv run python -m scripts.bench_stages --models DIR [--size 1200x1600] [--shape 378x504] [-n 20]

Prints median and p90 milliseconds for preprocess (uint8 RGB -> normalised tensor)
and postprocess (depth + conf back to the source size) for each backend, and the
ratio executorch / numpy (the median of per-round ratios: the backends alternate call by
call). Timings, not correctness: the tests check that.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from edge import stages as stages_mod
from edge.models import Manifest, parse_shape
from edge.stats import nearest_rank
from scripts.support import processes


def paired(fns: dict[str, object], n: int) -> dict[str, list[float]]:
    """Each function once per round, alternating, after one warm-up call each (the first
    call loads programs and plans memory): on a shared machine the neighbours' noise then
    falls on both alike, and the per-round ratio is the fair one."""
    for fn in fns.values():
        fn()  # type: ignore[operator]
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(n):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()  # type: ignore[operator]
            out[name].append((time.perf_counter() - t) * 1000)
    return out


def _status(key: str) -> float:
    """VmRSS / VmHWM of this process, MiB."""

    return processes.kib("self", key) / 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:  # 5: reset VmHWM to VmRSS (Linux)
        fh.write("5")


def rss_breakdown(manifest, rgb, depth, conf, shape, threads) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Where the ExecuTorch stages' memory goes, in a fresh process (run this first)."""
    from edge.stages.executorch import ExecuTorchStages, pre_input

    out: dict[str, float] = {}
    base = _status("VmRSS")
    stages = ExecuTorchStages(manifest, threads=threads)
    out["runner_and_libraries_mib"] = _status("VmRSS") - base
    image, plan = pre_input(rgb, shape)
    pre = stages.program(plan.program, shape)  # the one this frame runs
    post = stages.program("post", shape)
    out["programs_open_mib"] = _status("VmRSS") - base - out["runner_and_libraries_mib"]
    out["planned_bound_mib"] = (pre.planned_bytes + post.planned_bytes) / 2**20
    rows = max(strip.rows.size for strip in plan.strips)
    out["pre_input_copy_mib"] = rows * image.shape[1] * image.shape[2] * 4 / 2**20
    for kind, call in (
        ("pre", lambda: stages.preprocess(rgb, shape)),
        ("post", lambda: stages.postprocess(depth, conf, rgb.shape[:2])),
    ):
        call()  # first run: code pages, the CPU probe
        before = _status("VmRSS")
        _reset_peak()
        result = call()
        out[f"{kind}_peak_over_before_mib"] = _status("VmHWM") - before
        out[f"{kind}_resident_after_mib"] = _status("VmRSS") - before
        del result
    out["total_resident_mib"] = _status("VmRSS") - base
    stages.close()
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--size", default="1200x1600", help="source image HxW")
    p.add_argument("--shape", default="378x504", help="core shape HxW (must be exported)")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--threads", type=int, help="ExecuTorch's thread pool (default: its own)")
    p.add_argument(
        "--rss", action="store_true", help="also break the ExecuTorch stages' memory down (Linux)"
    )
    p.add_argument("--json", action="store_true")
    return p


def photo_like(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A smooth image with texture, not noise: resampling cost does not depend on it,
    but keep it photo-like anyway."""
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack(
        [(127 + 100 * np.sin(xx / 37 + c) * np.cos(yy / 23)).astype(np.uint8) for c in range(3)],
        axis=2,
    )
    noisy = rgb.astype(np.int16) + rng.integers(-8, 8, rgb.shape)
    return np.asarray(np.clip(noisy, 0, 255), dtype=np.uint8)


def compare(
    backends: dict[str, Any],
    rgb: np.ndarray,
    depth: np.ndarray,
    conf: np.ndarray,
    shape: tuple[int, int],
    n: int,
) -> dict[str, Any]:
    """Both backends' pre and post, call by call alternating: per backend the median and
    p90 (nearest rank), and the median of the per-round ratios executorch / numpy."""
    h, w = rgb.shape[:2]
    pre = paired({k: (lambda b=b: b.preprocess(rgb, shape)) for k, b in backends.items()}, n)
    post = paired(
        {k: (lambda b=b: b.postprocess(depth, conf, (h, w))) for k, b in backends.items()}, n
    )
    results: dict[str, Any] = {}
    for name in backends:
        results[name] = {
            "pre_ms_median": statistics.median(pre[name]),
            "pre_ms_p90": nearest_rank(pre[name], 90),
            "post_ms_median": statistics.median(post[name]),
            "post_ms_p90": nearest_rank(post[name], 90),
        }
    for kind, samples in (("pre", pre), ("post", post)):
        ratios = [a / b for a, b in zip(samples["executorch"], samples["numpy"], strict=True)]
        results[f"ratio_{kind}_median"] = statistics.median(ratios)
    return results


def show(
    results: dict[str, Any], breakdown: dict[str, float] | None, ns: argparse.Namespace
) -> None:
    threads = f", {ns.threads} thread(s)" if ns.threads else ""
    shape = parse_shape(ns.shape)
    print(f"source {ns.size} -> core {shape[0]}x{shape[1]}, {ns.n} runs each{threads} (ms)")
    print(f"{'backend':<12}{'pre p50':>10}{'pre p90':>10}{'post p50':>10}{'post p90':>10}")
    for name in ("numpy", "executorch"):
        r = results[name]
        print(
            f"{name:<12}{r['pre_ms_median']:>10.1f}{r['pre_ms_p90']:>10.1f}{r['post_ms_median']:>10.1f}{r['post_ms_p90']:>10.1f}"
        )
    if breakdown:
        print(
            "executorch stages, memory (MiB): "
            + ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items())
        )
    print(
        f"ratio executorch/numpy (median of per-round ratios): pre {results['ratio_pre_median']:.2f}x, "
        f"post {results['ratio_post_median']:.2f}x"
    )


def main() -> int:
    ns = parser().parse_args()
    h, w = (int(v) for v in ns.size.split("x"))
    shape = parse_shape(ns.shape)
    manifest = Manifest.load(ns.models)
    rng = np.random.default_rng(0)
    rgb = photo_like(h, w, rng)
    depth = (1 + rng.random(shape)).astype(np.float32)
    conf = (1 + rng.random(shape)).astype(np.float32)
    breakdown = rss_breakdown(manifest, rgb, depth, conf, shape, ns.threads) if ns.rss else None
    backends = {
        name: stages_mod.load(name, manifest=manifest, threads=ns.threads)
        for name in ("numpy", "executorch")
    }
    results = compare(backends, rgb, depth, conf, shape, ns.n)
    for backend in backends.values():
        backend.close()
    if ns.json:
        record = {
            "size": [h, w],
            "shape": list(shape),
            "n": ns.n,
            "results": results,
            "rss_mib": breakdown,
        }
        print(json.dumps(record, indent=2))
    else:
        show(results, breakdown, ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
