"""What a sample reads: the daemon's process tree from /proc (summed RSS, threads, the
descriptors held), and the store's frames and bytes."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from edge import procfs
from scripts.support.daemon import frame_dirs
from scripts.support.processes import fds
from scripts.support.processes import parents as parents_of

FD_READINGS, FD_GAP_S = 3, 0.1


def open_fds(pids: list[int]) -> set[tuple[int, int, str]]:
    """(pid, fd, target) of every descriptor the processes hold now."""
    return {(pid, fd, target) for pid in pids for fd, target in fds(pid).items()}


def held_fds(pids: list[int]) -> tuple[set[tuple[int, int, str]], list[str]]:
    """The descriptors open at each of ``FD_READINGS`` readings ``FD_GAP_S`` apart, and
    the targets of those open at some but not all: a file being written at the sampling
    instant is not a leak, and a leaked descriptor stays open, so it is in every reading."""
    readings = []
    for i in range(FD_READINGS):
        if i:
            time.sleep(FD_GAP_S)
        readings.append(open_fds(pids))
    held = set.intersection(*readings)
    return held, sorted({target for _, _, target in set.union(*readings) - held})


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (the core workers)."""
    parents = parents_of()
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        tree += frontier
    return tree


def processes(pids: list[int]) -> dict[str, Any]:
    """The processes' summed VmRSS (KiB) and threads, and the descriptors they hold."""
    rss = threads = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = procfs.status(pid)
            rss += int(fields["VmRSS"].split()[0])
            threads += int(fields["Threads"])
    held, transient = held_fds(pids)
    return {
        "processes": len(pids),
        "rss_kib": rss,
        "fds": len(held),
        "fds_transient": transient,
        "threads": threads,
    }


def store(directory: Path) -> dict[str, int]:
    """The store's published frames and their bytes."""
    frames = frame_dirs(directory)
    size = sum(f.stat().st_size for d in frames for f in d.iterdir() if f.is_file())
    return {"store_frames": len(frames), "store_bytes": size}
