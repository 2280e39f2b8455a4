"""The daemon on replayed photos, timed: what the scripts that measure the daemon and its
companions (bench_*, compare_pytorch) share. ``da3-edge run`` in a child process on
``replay:`` photos, its frame records, and what they say after a warmup."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from edge.bench import synthetic_jpeg


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
    argv = [python, "-m", "edge", "run", "--config", str(config)]
    argv += ["--source", f"replay:{replay}@{fps:g}", "--store", str(store)]
    argv += ["--models", str(models), "--max-frames", str(frames)]
    argv += ["--threads", str(threads)] if threads is not None else []
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
