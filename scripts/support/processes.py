"""Processes watched from outside, through /proc (edge.procfs): memory, CPU time,
descriptors, liveness and parents, for the benchmarks, the soak and the tests."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from edge.procfs import Pid, stat_fields, status


def kib(pid: Pid, key: str) -> int:
    """A memory line of /proc/PID/status in KiB ("VmRSS", "VmHWM"); KeyError if none."""
    return int(status(pid)[key].split()[0])


def alive(pid: int) -> bool:
    """``pid`` runs (not gone, not a zombie waiting to be reaped)."""
    try:
        return stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def cpu_seconds(pid: Pid) -> float:
    """CPU time of a live process: its threads' time on a CPU in ns (``schedstat``;
    threads that have ended no longer count), else user + system in clock ticks
    (``stat``: 10 ms steps, too coarse for a process that works ~1 ms at a time: a
    run's difference could read 0)."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        if total:  # all zeros: a kernel without scheduler statistics
            return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fds(pid: Pid) -> dict[int, str]:
    """Each open descriptor of ``pid`` and what it points at; those closed while being
    read are left out, and a process gone meanwhile has none."""
    out = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return out


def parents() -> dict[int, int]:
    """Every process's parent (pid -> ppid), for the processes readable now."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, KeyError):
                out[int(entry)] = int(status(entry)["PPid"])
    return out
