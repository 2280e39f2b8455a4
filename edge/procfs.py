"""Linux's /proc as the daemon's trace marks read it: a process's stat fields and status
lines (scripts/support/processes.py builds the maintainer's process watching on them).
Light: no imports beyond the standard library."""

from __future__ import annotations

from pathlib import Path

Pid = int | str  # a process id, or "self"


def stat_fields(pid: Pid = "self") -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and
    parentheses): [0] the state, [11] and [12] user and system time in clock ticks,
    [19] the start time in ticks after boot."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def status(pid: Pid = "self") -> dict[str, str]:
    """/proc/PID/status: each key and its value, stripped ("VmRSS" -> "1234 kB")."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out
