"""Every shell program of the checkout passes shellcheck at its warning level (errors
and warnings; its notes and style hints are advice): the installer, the first-boot
script, the lanes, the test command and the VM guest's fragments (sourced into one
run.sh, each marked ``# shellcheck shell=bash``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from scripts.support import ROOT
from scripts.support.tools import require_tool


def shell_programs(root: Path) -> list[Path]:
    """Tracked files named *.sh or starting with a shell's #! line."""
    git = require_tool("git", "apt install git")
    names = subprocess.run(
        [git, "-c", "safe.directory=*", "ls-files", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    found = []
    for name in filter(None, names.split("\0")):
        path = root / name
        if not path.is_file() or path.is_symlink():
            continue
        with path.open("rb") as fh:
            first = fh.readline(200)
        if name.endswith(".sh") or (first.startswith(b"#!") and first.rstrip().endswith(b"sh")):
            found.append(path)
    return found


def shellcheck(paths: list[Path]) -> list[str]:
    tool = require_tool("shellcheck", "apt install shellcheck")
    proc = subprocess.run(
        [tool, "--severity=warning", "--format=gcc", *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return proc.stdout.splitlines()


def test_every_shell_program_is_shellcheck_clean() -> None:
    programs = shell_programs(ROOT)
    names = {p.relative_to(ROOT).as_posix() for p in programs}
    assert {".ci/run", "scripts/check", "scripts/install-pi.sh", "scripts/arm-lane.sh"} <= names
    assert "scripts/support/vm_guest/lay-out.sh" in names
    assert shellcheck(programs) == []


def test_shellcheck_finds_an_unquoted_fragment(tmp_path: Path) -> None:
    fragment = tmp_path / "fragment.sh"
    fragment.write_text('unused=1\ncd $(dirname "$0")\n')
    found = shellcheck([fragment])
    assert any("SC2148" in line for line in found), found  # no shell named
    fragment.write_text('# shellcheck shell=bash\nunused=1\necho "$1"\n')
    assert any("SC2034" in line for line in shellcheck([fragment]))
