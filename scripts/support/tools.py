"""Host tools, mounts and the CLI as a user runs them; skip, or fail when strict."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import ROOT

# uv's cache as the shell that started pytest has it, read when this module is imported
# (conftest's first import), before the tests' own XDG_CACHE_HOME: a uv run by a test
# finds what ``uv sync`` fetched there.
UV_CACHE = os.environ.get("UV_CACHE_DIR") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"
)


def skip_or_fail(message: str, *, host_tool: bool = False) -> None:
    """Skip the test; fail it under ``DA3_EDGE_STRICT_TESTS=1`` (scripts/check sets it,
    so CI never passes by skipping). Under ``DA3_EDGE_STRICT_TESTS=quick`` (the quick
    lane) only a missing ``host_tool`` skips: a contributor's machine may lack
    requirements/apt.txt, while a test that wants models or root there lacks its marker."""
    strict = os.environ.get("DA3_EDGE_STRICT_TESTS")
    if strict == "1" or (strict == "quick" and not host_tool):
        pytest.fail(message)
    pytest.skip(message)


# Debian puts daemons and admin commands (mosquitto, chroot) in sbin, which a normal
# user's PATH leaves out; most of them run as any user.
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"


def which(name: str) -> str | None:
    """The path of a host command on PATH, else in sbin."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


def require_tool(name: str, install: str) -> str:
    """The path of a host tool the test needs; skip (fail when strict) without it."""
    path = which(name)
    if path is None:
        skip_or_fail(f"{name} not found ({install})", host_tool=True)
    assert path is not None
    return path


def auto_stages() -> str:
    """What ``--stages auto`` (the default) runs here with a model folder that has its
    programs: the ExecuTorch stages where the runner is installed (.ci/run installs it),
    else numpy. tests/test_etrunner.py pins both branches."""
    from edge import etrunner

    return "executorch" if etrunner.status()[0] else "numpy"


def run_cli(
    args: list[str],
    *,
    python: Path | str = sys.executable,
    stdin: bytes | None = None,
    cwd: Path = ROOT,
    extra_env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`da3-edge ARGS` in a fresh process: exit code, stdout, stderr as a user sees them."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DA3_EDGE_MODELS")}
    env.update(extra_env or {})
    proc = subprocess.run(
        [str(python), "-m", "edge", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )


def run_main(args: list[str]) -> subprocess.CompletedProcess[str]:
    """`da3-edge ARGS` in this process (``edge.cli.main``), its output captured: for
    refusals that come before any work, where a fresh process would add only its start.
    (Commands that run, or whose exit path matters, go through ``run_cli``.)"""
    from edge import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def tmpfs(
    path: Path, *, size: str = "4m", read_only: bool = False, mode: str | None = None
) -> Iterator[Path]:
    """A real tmpfs mounted at ``path``: size-limited (disk full) or read-only; ``mode``:
    its root's (a tmpfs's own is 1777).

    CI runs as root, where permission bits prove nothing; a mount does."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "") + (f",mode={mode}" if mode else "")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here ({proc.stderr.strip()}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_user(
    uid: int,
    gid: int,
    groups: str,
    *argv: str,
    cwd: Path | str = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``da3-edge ARGV`` as ``uid``, primary group ``gid``, supplementary ``groups`` (comma
    separated, or none): setpriv, since CI runs as root, whom no permission stops.
    TimeoutExpired if it still runs at 60 s."""
    if os.geteuid() != 0:
        skip_or_fail("runs da3-edge as another user: needs root (mark the test root)")
    command = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={groups}" if groups else "--clear-groups",
    ]
    return subprocess.run(
        [*command, sys.executable, "-m", "edge", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


@contextlib.contextmanager
def world_readable() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is root's, 0700), for what
    runs as that user (``setpriv``: CI runs as root, where permissions prove nothing)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="da3-edge-other-user-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def tool_install(wheel: Path, into: Path) -> Path:
    """``uv tool install`` of the wheel into ``into`` (the lock's versions, through
    requirements/runtime.txt), as an owner installs the tool; its Python. Offline first,
    from the cache ``uv sync`` filled; that sync fetches wheels by the lock's URLs and
    not the index pages a resolution reads, so on a machine whose cache lacks those
    pages the install asks the index (tests that call this are marked ``models``, out of
    the offline quick lane)."""
    uv = require_tool("uv", "python3 -m pip install uv (the version in requirements/uv.txt)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(UV_TOOL_DIR=str(into / "venvs"), UV_TOOL_BIN_DIR=str(into / "bin"))
    env.update(UV_PYTHON_DOWNLOADS="never", UV_CACHE_DIR=UV_CACHE)
    runtime = ROOT / "requirements" / "runtime.txt"
    into.mkdir()
    args = [uv, "tool", "install", "--python", sys.executable, "-c", str(runtime), str(wheel)]
    proc = subprocess.run([*args, "--offline"], env=env, cwd=into, capture_output=True, text=True)
    if proc.returncode != 0 and "network was disabled" in proc.stderr:
        proc = subprocess.run(args, env=env, cwd=into, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (into / "bin" / "da3-edge").is_file(), proc.stderr
    return into / "venvs" / "da3-edge" / "bin" / "python"
