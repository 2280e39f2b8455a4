"""Checkpoints of time and memory through one process, for finding where a still goes.

With ``DA3_EDGE_TRACE=FILE`` set, each ``mark(label)`` appends one JSON line to FILE:
the label, seconds since the process started (from the kernel's start time: imports
count), and on Linux the process's memory from ``/proc/self/status`` in KiB (``rss``,
its peak so far ``hwm``, and the resident split ``anon`` / ``file`` / ``shmem``).
Unset (the default), ``mark`` returns at once. ``scripts/startup_breakdown.py`` runs
``da3-edge snap`` with it and tabulates the lines.

A line is appended and flushed per mark (no buffering to lose when a process dies);
marks sit at stage boundaries, never in per-pixel code.
"""

from __future__ import annotations

import json
import os
import time

from edge import procfs

_FIELDS = {
    "VmRSS": "rss",
    "VmHWM": "hwm",
    "RssAnon": "anon",
    "RssFile": "file",
    "RssShmem": "shmem",
}
_started: float | None = None


def _age() -> float:
    """Seconds since this process started (Linux: its start time in /proc; elsewhere
    since the first mark)."""
    global _started
    if _started is None:
        try:
            ticks = int(procfs.stat_fields()[19])
            boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
            _started = time.perf_counter() - (boot_now - ticks / os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError, AttributeError):
            _started = time.perf_counter()
    return time.perf_counter() - _started


def _memory() -> dict[str, int]:
    try:
        found = procfs.status()
    except OSError:
        return {}
    return {name: int(found[key].split()[0]) for key, name in _FIELDS.items() if key in found}


def mark(label: str) -> None:
    path = os.environ.get("DA3_EDGE_TRACE")
    if not path:
        return
    record = {"mark": label, "s": round(_age(), 6), **_memory()}
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    except OSError:
        pass  # tracing never breaks the work it watches
