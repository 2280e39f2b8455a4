"""edge.procfs and scripts.support.processes against this process and a child of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from edge import procfs
from scripts.support import processes


def test_this_process_as_proc_shows_it(tmp_path: Path) -> None:
    assert procfs.stat_fields()[0] == "R"  # running: it is reading its own stat
    assert processes.kib("self", "VmRSS") > 1000 and processes.kib(os.getpid(), "VmHWM") > 1000
    assert procfs.status()["Name"] and int(procfs.status()["PPid"]) == os.getppid()
    with (tmp_path / "held").open("w") as fh:
        assert processes.fds("self")[fh.fileno()] == str(tmp_path / "held")
    assert processes.parents()[os.getpid()] == os.getppid()
    start = processes.cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert processes.cpu_seconds(os.getpid()) - start >= 0.04


def test_a_child_alive_then_a_zombie_then_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert processes.alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 10
        while processes.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert procfs.stat_fields(child.pid)[0] == "Z"  # dead, not yet reaped
        assert not processes.alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not processes.alive(child.pid) and processes.fds(child.pid) == {}
