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
    result = RunResult(
        pipe.size, precision, pipe.stages.name, threads, load_ms,
        {s: [] for s in (*STAGES, "total")}, shape=shape,
    )  # fmt: skip
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
            cwd=cwd, capture_output=True, text=True, check=False, env=child_env,
        )  # fmt: skip
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


def tmpfs_dir() -> str | None:
    """A writable tmpfs directory: $XDG_RUNTIME_DIR or /dev/shm, if mounted as tmpfs."""
    try:
        mounts = {
            fields[1]: fields[2]
            for fields in (line.split() for line in Path("/proc/mounts").read_text().splitlines())
        }
    except OSError:
        return None
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if candidate and mounts.get(candidate) == "tmpfs" and os.access(candidate, os.W_OK):
            return candidate
    return None


# -- helpers for the scripts that time the daemon and its companions ----------------
def replay_photos(directory: Path, n: int = 4, size: tuple[int, int] = (1200, 1600)) -> Path:
    """``n`` photo-like JPEGs of ``size`` (H, W) in ``directory``, for ``replay:``."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (directory / f"{i:02d}.jpg").write_bytes(synthetic_jpeg(*size, seed=i))
    return directory


def counting_config(dest: Path, frames: int, **model: int) -> Path:
    """``dest``: the daemon's default config, except a ring that keeps all ``frames`` for
    counting (32 MiB a frame: the default 64 MiB holds ~2 frames at store.size
    "camera"), and the ``[model]`` keys given (workers, size; 0 is size's default)."""
    text = "".join(f"{key} = {value}\n" for key, value in model.items())
    text = f"[model]\n{text}" if text else ""
    dest.write_text(f"{text}[store]\nkeep_frames = {frames}\nmax_bytes = {frames << 25}\n")
    return dest


def replay_daemon(
    replay: Path,
    store: Path,
    models: Path,
    *,
    config: Path,
    fps: float,
    frames: int,
    code: Path | None = None,
    python: str = sys.executable,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """`da3-edge run` on ``replay`` at ``fps`` until ``frames`` are written (from the
    package in ``code`` when given, else the installed one; ``threads`` per worker when
    given, else the config's); the frame records, in store order. SystemExit with its
    stderr if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    argv = [
        python, "-m", "edge", "run", "--config", str(config),
        "--source", f"replay:{replay}@{fps:g}", "--store", str(store),
        "--models", str(models), "--max-frames", str(frames),
        *(["--threads", str(threads)] if threads is not None else []),
    ]  # fmt: skip
    proc = subprocess.run(
        argv, cwd=code, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"da3-edge run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return sorted(
        (json.loads(p.read_text()) for p in (store / "frames").glob("*/frame.json")),
        key=lambda r: int(r["store_seq"]),
    )


def steady_fps(records: list[dict[str, Any]], warmup: int) -> float:
    """Written frames/s after the first ``warmup`` frames, from their t_written."""
    return _rate(_steady(records, warmup))


def _steady(records: list[dict[str, Any]], warmup: int) -> list[dict[str, Any]]:
    steady = [r for r in records if r["store_seq"] >= warmup]
    if len(steady) < 2:
        raise SystemExit(f"{len(records)} frames written; too few to measure")
    return steady


def _rate(steady: list[dict[str, Any]]) -> float:
    return float((len(steady) - 1) / (steady[-1]["t_written"] - steady[0]["t_written"]))


def daemon_summary(records: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """What a daemon run's frame records say after the first ``warmup`` frames: the
    sustained frames/s (``steady_fps``), the median latency, the median core and
    preprocessing times inside the daemon, and what ran (from the last record)."""
    steady = _steady(records, warmup)
    last = steady[-1]
    return {
        "frames": len(steady),
        "fps": _rate(steady),
        "latency_p50_ms": statistics.median(r["latency_ms"] for r in steady),
        # The core's own time inside the daemon (its worker's LiteRT call), to set beside
        # the core timed alone: what sharing the cores with the daemon's threads costs.
        "core_in_daemon_p50_ms": statistics.median(r["timings_ms"]["core"] for r in steady),
        "preprocess_in_daemon_p50_ms": statistics.median(
            r["timings_ms"]["preprocess"] for r in steady
        ),
        "dropped_stale": last["dropped_stale_total"],
        "precision": last["precision"],
        "stages": last["stages"],
        "workers": last["workers"],
        "threads_per_worker": last["threads"],
    }
