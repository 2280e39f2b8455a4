"""Benchmarks: the pipeline's latency per stage, load and cold start, peak memory.

Everything reported in one run comes from that run (ratios between configurations
are measured side by side, never against numbers from elsewhere). Used by
``da3-edge bench``; ``python -m scripts.compare_pytorch`` reuses ``cold_still``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform as _platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from edge import frames, images
from edge import platform as edge_platform
from edge.errors import EdgeError
from edge.stats import nearest_rank
from edge.version import version

STAGES = ("decode", "preprocess", "core", "postprocess", "write")


def synthetic_jpeg(height: int = 1200, width: int = 1600, seed: int = 0) -> bytes:
    """A photo-like JPEG (smooth shapes, texture, noise) of the given size."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    rgb = np.stack(
        [
            120
            + 80 * np.sin(xx / (90 + 30 * c) + c) * np.cos(yy / (70 + 20 * c))
            + 30 * np.sin((xx + yy) / 13.0)
            for c in range(3)
        ],
        axis=2,
    )
    rgb += rng.normal(0, 6, rgb.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99 by nearest rank (``edge.stats``), the mean and the minimum."""
    return {
        "p50": nearest_rank(samples, 50),
        "p90": nearest_rank(samples, 90),
        "p99": nearest_rank(samples, 99),
        "mean": statistics.fmean(samples),
        "min": min(samples),
    }


@dataclass
class RunResult:
    size: int | None  # the cores' long side (None: the pipeline's default)
    precision: str
    stages: str
    threads: int
    load_ms: float
    samples_ms: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None
    shape: tuple[int, int] | None = None  # the core shape the image ran at

    def summary(self) -> dict[str, Any]:
        key = {
            "size": self.size,
            "shape": list(self.shape) if self.shape else None,
            "precision": self.precision,
            "stages": self.stages,
            "threads": self.threads,
        }
        if self.error:
            return key | {"error": self.error}
        total = self.samples_ms["total"]
        return key | {
            "load_ms": round(self.load_ms, 2),
            "total_ms": {k: round(v, 2) for k, v in percentiles(total).items()},
            "images_per_s": round(1000.0 / statistics.fmean(total), 3),
            "stage_p50_ms": {s: round(nearest_rank(self.samples_ms[s], 50), 2) for s in STAGES},
        }


def run_pipeline(
    models: Path | None,
    image: bytes,
    precision: str,
    stages: str,
    threads: int,
    iterations: int,
    warmup: int,
    size: int | None = None,
) -> RunResult:
    """Warm-up, then ``iterations`` full passes: decode, preprocess, core,
    postprocess, write (render + write all formats into a temporary directory)."""
    from edge.pipeline import Pipeline, PipelineSpec

    t0 = time.perf_counter()
    try:
        pipe = Pipeline.load(PipelineSpec(models, precision, stages, threads, size=size))
        still = images.load(image, name="bench")
        shape = pipe.choose(still.size)[1]
        pipe.core(shape)  # open (and hash-check) the model
    except EdgeError as exc:
        return RunResult(size, precision, stages, threads, 0.0, error=str(exc))
    load_ms = (time.perf_counter() - t0) * 1000
    samples: dict[str, list[float]] = {s: [] for s in (*STAGES, "total")}
    result = RunResult(
        pipe.size, precision, pipe.stages.name, threads, load_ms, samples, shape=shape
    )
    out = Path(tempfile.mkdtemp(prefix="da3-edge-bench-"))
    try:
        with pipe:
            for i in range(warmup + iterations):
                t_start = time.perf_counter()
                still = images.load(image, name="bench")
                t_decoded = time.perf_counter()
                frame = pipe.run(still, decode_ms=(t_decoded - t_start) * 1000)
                t_run = time.perf_counter()
                frames.write(frame, out, "bench", frames.DEFAULT_FORMATS, durable=False)
                t_end = time.perf_counter()
                if i < warmup:
                    continue
                for stage in ("decode", "preprocess", "core", "postprocess"):
                    result.samples_ms[stage].append(frame.timings_ms[stage])
                result.samples_ms["write"].append((t_end - t_run) * 1000)
                result.samples_ms["total"].append((t_end - t_start) * 1000)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return result


# Run by a fresh, small interpreter: it spawns the command and reports that child's
# own rusage. Forking the command straight from the benchmark process would not do:
# a child's ru_maxrss includes the pages it shared with its parent before exec, so
# it showed the benchmark's own size (452 MiB, 809 MiB with torch loaded) instead of
# the command's (365 MiB).
_SPAWN = """
import json, os, sys, time
start = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - start,
                  "maxrss": usage.ru_maxrss}))
"""


def cold_still(
    argv: list[str],
    cwd: Path | None = None,
    *,
    trace: bool = False,
    env: Mapping[str, str] | None = None,
) -> dict[str, float | None]:
    """Run ``argv`` (absolute executable first) in a fresh process, with ``env`` over
    this one's environment; its wall seconds and peak RSS in MiB. ``trace``: also, from
    its ``edge.trace`` marks (None where it made none), ``load_ms`` (the model's open
    to ready) and ``to_depth_ms`` (the pipeline loaded to the first core run done:
    decoding, the model's load, preprocessing and the run; no postprocessing, no
    writing)."""
    child_env = {**os.environ, **(env or {})}
    marks = None
    if trace:
        fd, name = tempfile.mkstemp(prefix="da3-edge-trace-", suffix=".jsonl")
        os.close(fd)
        marks = Path(name)
        child_env["DA3_EDGE_TRACE"] = str(marks)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SPAWN, *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            env=child_env,
        )
        spans = _trace_spans(marks.read_text()) if marks else {}
    finally:
        if marks:
            marks.unlink(missing_ok=True)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise EdgeError(f"cold start measurement failed: {proc.stderr.strip()[-300:]}") from None
    if report["code"] != 0:
        raise EdgeError(
            f"{' '.join(argv[:4])}... exited {report['code']}: {proc.stderr.strip()[-300:]}"
        )
    # ru_maxrss is KiB on Linux, bytes on macOS.
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    out: dict[str, float | None] = {
        "seconds": report["seconds"],
        "peak_rss_mib": report["maxrss"] / scale,
    }
    if trace:
        out.update(spans)
    return out


_SPANS = {"load_ms": ("core: open", "core: ready"), "to_depth_ms": ("pipeline loaded", "core run")}


def _trace_spans(lines: str) -> dict[str, float | None]:
    """Each of ``_SPANS`` in an ``edge.trace`` file: ms from its first mark's first
    occurrence to its second's (None if either is missing)."""
    seen: dict[str, float] = {}
    for line in lines.splitlines():
        record = json.loads(line)
        seen.setdefault(str(record["mark"]), float(record["s"]))
    return {
        name: (seen[b] - seen[a]) * 1000 if a in seen and b in seen else None
        for name, (a, b) in _SPANS.items()
    }


def machine_info() -> dict[str, Any]:
    feats = edge_platform.cpu_features()
    info: dict[str, Any] = {
        "cpu": feats.as_dict(),
        "system": _platform.system(),
        "release": _platform.release(),
        "python": _platform.python_version(),
        "fp16_arithmetic_policy": edge_platform.fp16_arithmetic(),
        "versions": frames.versions(),
        "da3_edge": version(),
        "git_revision": git_revision(),
    }
    temp = Path("/sys/class/thermal/thermal_zone0/temp")
    if temp.exists():
        with contextlib.suppress(OSError, ValueError):
            info["temperature_c"] = int(temp.read_text().strip()) / 1000
    if shutil.which("vcgencmd"):
        out = subprocess.run(
            ["vcgencmd", "get_throttled"], capture_output=True, text=True, check=False
        )
        info["throttled"] = out.stdout.strip()  # e.g. throttled=0x0; bits: see Raspberry Pi docs
    return info


def git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists() or shutil.which("git") is None:
        return "unknown"
    out = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (out.stdout.strip() or "unknown") + ("+dirty" if dirty.stdout.strip() else "")


def to_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=False) + "\n"
