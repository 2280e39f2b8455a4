"""The installer's steps that run as the service user, taken out of scripts/install-pi.sh
and run as it runs them: from root's terminal (a pty here), as an unprivileged user."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import tempfile
import time
from pathlib import Path

import pytest

from scripts.support import ROOT

NOBODY = "nobody"
PYTHON = "/usr/bin/python3"  # the system's: one the service user can run
PROBE = """
import fcntl, json, os, site, sys, termios
seen = {
    "stdin_is_a_terminal": os.isatty(0),
    "own_session": os.getsid(0) == os.getpid(),
    "user_site": site.ENABLE_USER_SITE,
    "home": os.environ.get("HOME"),
}
try:
    fcntl.ioctl(1, termios.TIOCSTI, b"#")
    seen["tiocsti"] = "pushed"
except OSError as exc:
    seen["tiocsti"] = exc.strerror
with open(sys.argv[1], "w") as out:
    json.dump(seen, out)
"""


def as_service_function() -> str:
    """install-pi.sh's ``as_service``, word for word."""
    text = (ROOT / "scripts/install-pi.sh").read_text()
    found = re.search(r"^as_service\(\) \{\n.*?^\}\n", text, re.M | re.S)
    assert found, "install-pi.sh has no as_service()"
    return found[0]


def on_a_terminal(script: str, timeout: float = 60) -> int:
    """``bash -c script`` with a pty as its controlling terminal (root's shell, as the
    installer is run from one); its exit status."""
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader, the pty its terminal
        os.execv("/bin/bash", ["bash", "-c", script])
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    if not os.read(master, 4096):
                        break
                except OSError:  # EIO: the child side closed
                    break
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        else:
            raise AssertionError(f"not done within {timeout:g} s: {script}")
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(master)


@pytest.mark.root
def test_the_service_users_steps_never_reach_roots_terminal() -> None:
    """The installer's ``as_service`` from a terminal: the command runs with stdin from
    /dev/null, in a session of its own (no controlling terminal, so TIOCSTI into the
    terminal it writes to is refused: nothing typed into root's shell), without a user
    site (a .pth planted in its home never runs), HOME its state folder. The control,
    plain ``runuser`` as the installer once ran it, pushes the character."""
    assert Path(PYTHON).is_file(), f"{PYTHON}: the system's Python is missing"
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # a folder nobody can reach
        state = Path(where) / "state"
        state.mkdir()
        os.chown(state, 65534, 65534)
        probe = Path(where) / "probe.py"
        probe.write_text(PROBE)
        Path(where).chmod(0o755)
        runs = {
            "as_service": f"USER_NAME={NOBODY} STATE={state}\n{as_service_function()}"
            f"as_service {PYTHON} {probe} {state}/as_service.json",
            "plain runuser": f"runuser -u {NOBODY} -- env HOME={state} "
            f"{PYTHON} {probe} '{state}/plain runuser.json'",
        }
        results = {}
        for name, script in runs.items():
            assert on_a_terminal(script) == 0, name
            results[name] = json.loads((state / f"{name}.json").read_text())
    print(results)
    # A kernel with TIOCSTI off for all but CAP_SYS_ADMIN (dev.tty.legacy_tiocsti = 0)
    # refuses it to both (EIO) before it asks whose terminal it is.
    legacy = Path("/proc/sys/dev/tty/legacy_tiocsti")
    allowed = not legacy.exists() or legacy.read_text().strip() != "0"
    assert results["as_service"] == {
        "stdin_is_a_terminal": False,
        "own_session": True,
        "user_site": False,
        "home": str(state),
        "tiocsti": "Operation not permitted" if allowed else "Input/output error",
    }
    control = results["plain runuser"]
    assert control["stdin_is_a_terminal"] and not control["own_session"], control
    assert control["tiocsti"] == ("pushed" if allowed else "Input/output error"), control
