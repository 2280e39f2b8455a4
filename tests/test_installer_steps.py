"""Steps of scripts/install-pi.sh taken out of it word for word and run as it runs them:
those that run as the service user, from root's terminal (a pty here); the copy of an
owner's model folder (``--models DIR``) that root makes."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
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


def function(name: str) -> str:
    """install-pi.sh's shell function ``name``, word for word."""
    text = (ROOT / "scripts/install-pi.sh").read_text()
    found = re.search(rf"^{name}\(\) \{{.*?^\}}\n", text, re.M | re.S)
    assert found, f"install-pi.sh has no {name}()"
    return found[0]


def on_a_terminal(script: str, timeout: float = 60) -> int:
    """``bash -c script`` with a pty as its controlling terminal (root's shell, as the
    installer is run from one); its exit status."""
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader, the pty its terminal
        try:
            os.execv("/bin/bash", ["bash", "-c", script])
        finally:
            os._exit(127)  # never back into pytest
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
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
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
            "as_service": f"USER_NAME={NOBODY} STATE={state}\n{function('as_service')}"
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


def stage(models: Path, into: Path) -> subprocess.CompletedProcess[str]:
    """install-pi.sh's ``stage_models models into``, with its die and note."""
    script = (
        'die() { echo "install-pi.sh: error: $*" >&2; exit 1; }\nnote() { echo "    $*"; }\n'
        + function("listed_files")
        + function("stage_models")
        + 'stage_models "$1" "$2"\n'
    )
    args = ["bash", "-c", script, "stage", str(models), str(into)]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_an_owners_model_folder_gives_only_the_plain_files_its_manifest_lists(
    tmp_path: Path,
) -> None:
    """`--models DIR`, which root copies and then makes readable to all: the manifest's
    files are copied; one that is not listed is named, not copied; a listed name that
    is a link (to a file only root may read), or a manifest that is a link, stops the
    run in one line with that file not copied."""
    secret = tmp_path / "shadow"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    models = tmp_path / "models"
    models.mkdir()
    (models / "manifest.json").write_text(json.dumps({"artifacts": [{"file": "a.tflite"}]}))
    (models / "a.tflite").write_bytes(b"core")
    (models / "stray.tflite").write_bytes(b"stray")
    (tmp_path / "one").mkdir()
    done = stage(models, tmp_path / "one")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "    not in its manifest, not copied: stray.tflite\n"
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["a.tflite", "manifest.json"]
    listed = {"artifacts": [{"file": "a.tflite"}, {"file": "b.tflite"}]}
    (models / "manifest.json").write_text(json.dumps(listed))
    (models / "b.tflite").symlink_to(secret)
    (tmp_path / "two").mkdir()
    done = stage(models, tmp_path / "two")
    assert done.returncode == 1
    assert done.stderr == f"install-pi.sh: error: {models}/b.tflite: not a plain file: refused\n"
    assert not (tmp_path / "two" / "b.tflite").exists()
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "manifest.json").symlink_to(models / "manifest.json")
    done = stage(linked, tmp_path / "three")
    assert done.returncode == 1 and done.stderr.endswith("manifest.json: a link: refused\n")
