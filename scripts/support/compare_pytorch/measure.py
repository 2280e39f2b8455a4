"""What compare_pytorch times in this process or in runs of its own: the LiteRT
core, the network's FLOPs, this machine's GEMM rate, the daemon on replayed photos,
and the benchmark tools it runs in the runtime environment."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edge import bench
from scripts.support import ROOT
from scripts.support.replay import (
    counting_config,
    daemon_summary,
    replay_daemon,
    replay_photos,
    tmpfs_dir,
)


def core_latency(
    models: Path, threads: int, shape: tuple[int, int], only: str | None = None
) -> dict[str, float]:
    """Best of 5 runs after 2 warm-ups, per precision (or ``only`` that one)."""
    import numpy as np

    from edge.core import Core
    from edge.models import Manifest

    manifest = Manifest.load(models)
    x = np.random.default_rng(0).standard_normal((1, 3, *shape)).astype(np.float32)
    out = {}
    for artifact in manifest.cores():
        if artifact.shape != shape or (only and artifact.precision != only):
            continue
        with Core(manifest.verify(artifact), threads=threads, precision=artifact.precision) as core:
            core.run(x)
            core.run(x)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                core.run(x)
                times.append(time.perf_counter() - t)
        out[artifact.precision] = min(times)
    return out


def network_flops(shape: tuple[int, int]) -> dict[str, float]:
    """FLOPs (2 per multiply-add) of what the core computes: the export wrapper
    (edge/export/mono.py) at ``shape``, counted by torch's FlopCounterMode with the
    math attention kernel (the fused CPU kernel is not counted: 17 GFLOP missing at
    378x504); and of the reference forward, which also computes DA3's ray head."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from edge.export.mono import MonoDepth
    from edge.export.weights import build_network

    net = build_network()
    x = torch.zeros(1, 3, *shape)
    out = {}
    for name, module, arg in (
        ("core", MonoDepth(net, *shape).eval(), x),
        ("reference", net, x[None]),
    ):
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
            module(arg)
        out[name] = float(c.get_total_flops())
    return out


def gemm_peak(threads: int) -> dict[str, float]:
    """This machine's fp32 GEMM rate at ``threads``: XNNPACK (through LiteRT: what the
    core uses) on a 1024x2048x2048 product, and torch.mm on squares; best of 10."""
    import torch

    torch.set_num_threads(threads)
    best_mm = 0.0
    for n in (1024, 2048, 4096):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        for _ in range(3):
            t = time.perf_counter()
            torch.mm(a, b)
            best_mm = max(best_mm, 2 * n**3 / (time.perf_counter() - t))

    import litert_torch
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import CpuOptions, Options

    m, k, n = 1024, 2048, 2048
    x = torch.randn(m, k)
    path = Path(tempfile.mkdtemp(prefix="da3-gemm-")) / "gemm.tflite"
    litert_torch.config.show_progress = False
    litert_torch.convert(torch.nn.Linear(k, n, bias=False).eval(), (x,)).export(str(path))
    cpu = CpuOptions(num_threads=threads)
    model = CompiledModel.from_file(
        str(path), options=Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=cpu)
    )
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(x.numpy())
    best_xnn = 0.0
    for _ in range(10):
        t = time.perf_counter()
        model.run_by_index(0, inputs, outputs)
        best_xnn = max(best_xnn, 2 * m * k * n / (time.perf_counter() - t))
    return {"xnnpack": best_xnn, "torch_mm": best_mm, "peak": max(best_xnn, best_mm)}


def daemon_fps(
    python: Path,
    models: Path,
    threads: int,
    work: Path,
    frames: int,
    warmup: int,
    fps: float,
    workers: int,
    size: int,
) -> dict[str, Any]:
    """`da3-edge run` (default config: fp16, the stages ``auto`` picks, the outputs at the
    core's size) on replayed 1200x1600 JPEGs delivered at ``fps``; sustained frames/s over
    the frames written after ``warmup``, from the store's own frame.json timestamps. With
    ``workers`` > 1 (``model.workers``), the ``threads`` are shared among the workers;
    ``size``: ``model.size``."""
    replay = replay_photos(work / "replay")
    # The store on a tmpfs, as the daemon's default store is (/run/da3-edge, systemd's
    # RuntimeDirectory) when one is at hand; else the work directory (said in the JSON).
    tmpfs = tmpfs_dir()
    store = Path(tempfile.mkdtemp(prefix="da3-compare-store-", dir=tmpfs or work)) / "store"
    config = counting_config(work / "daemon.toml", warmup + frames, workers=workers, size=size)
    try:
        records = replay_daemon(
            replay,
            store,
            models,
            config=config,
            fps=fps,
            frames=warmup + frames,
            python=str(python),
            threads=max(1, threads // workers),
        )
    finally:
        shutil.rmtree(store.parent, ignore_errors=True)
    return {
        "replay_fps": fps,
        **daemon_summary(records, warmup),
        "store": "tmpfs" if tmpfs else "disk",
    }


def daemon_rounds(
    ns: argparse.Namespace, work: Path, shape: tuple[int, int]
) -> dict[int, dict[str, Any]]:
    """The daemon target: sustained frames/s >= 0.95 x (1 / core latency), same precision,
    threads and ``--size``; per ``--daemon-workers`` value (1 is the default config).

    Each round measures the core's latency right before its daemon runs, so the ratio
    compares them in the same minute (this machine's speed drifts by several % over
    minutes); the summary is the median round."""
    rounds: dict[int, list[dict[str, Any]]] = {w: [] for w in ns.daemon_workers}
    for r in range(ns.daemon_rounds):
        print(f"daemon round {r + 1}/{ns.daemon_rounds}", file=sys.stderr, flush=True)
        core_s = core_latency(ns.models, ns.threads, shape, only="fp16")["fp16"]
        for workers in ns.daemon_workers:
            run = work / f"daemon{r}-{workers}"
            run.mkdir()
            setup = (ns.runtime_python, ns.models, ns.threads, run)
            d = daemon_round(*setup, ns.daemon_frames, ns.daemon_fps, workers, ns.size, core_s)
            rounds[workers].append(d)
    return {workers: median_round(runs) for workers, runs in rounds.items()}


def daemon_round(
    python: Path,
    models: Path,
    threads: int,
    work: Path,
    frames: int,
    fps: float,
    workers: int,
    size: int,
    core_s: float,
) -> dict[str, Any]:
    """One round of the daemon target: ``daemon_fps`` (3 frames of warm-up) against
    ``core_s``, the fp16 core's latency timed just before it; ``ratio_to_core_rate`` is
    frames/s x ``core_s``. A daemon that ran another precision than its default fp16
    is refused: the ratio would compare it with the wrong core."""
    d = daemon_fps(python, models, threads, work, frames, 3, fps, workers, size)
    if d["precision"] != "fp16":
        raise SystemExit(f"the daemon ran {d['precision']}, not its default fp16")
    return {**d, "core_s": core_s, "ratio_to_core_rate": d["fps"] * core_s}


def median_round(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio to the core's rate is the median (the upper one of an even
    count), with every round and the range of their ratios."""
    ratios = [r["ratio_to_core_rate"] for r in runs]
    middle = sorted(runs, key=lambda r: r["ratio_to_core_rate"])[len(runs) // 2]
    return {**middle, "rounds": runs, "ratio_range": [min(ratios), max(ratios)]}


def still(
    argv: list[str], env: dict[str, str], trace: bool = False, cwd: Path | None = None
) -> dict[str, Any]:
    """``bench.cold_still`` with ``env`` added. ``cwd``: run there (``python -m edge``
    puts its working directory first on sys.path, ahead of PYTHONPATH)."""
    return bench.cold_still(argv, cwd=cwd, trace=trace, env=env)


def tool(python: Path, module: str, *args: str, out: Path | None = None) -> Any:
    """``python -m scripts.<module> ARGS`` from the checkout (the runtime environment's
    Python: its tools need no torch); its JSON, from stdout or from the file ``out``."""
    argv = [str(python), "-m", f"scripts.{module}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"scripts.{module} failed: {proc.stderr[-2000:]}")
    return json.loads(out.read_text() if out is not None else proc.stdout)
