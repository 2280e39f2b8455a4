"""`da3-edge export` shows the kit's lines; what third-party code prints goes to a log.

The redirection works on file descriptors, so it is tested in a fresh process with real
ones (pytest's own capture replaces sys.stderr and the warnings machinery).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from scripts.support import children
from scripts.support.tools import run_cli


def _scenario(how: str) -> subprocess.CompletedProcess[str]:
    return children.run("export-console", how)


def test_only_the_kits_lines_and_warnings_reach_the_terminal() -> None:
    proc = _scenario("ok")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote 1 artifacts\nafter\n"
    lines = proc.stderr.splitlines()
    assert lines[0].endswith("UserWarning: a real warning"), lines
    assert lines[-1] == "[1/1] the kit's progress"
    assert not [x for x in lines if "absl" in x or "FutureWarning" in x or "print" in x]


def test_a_failure_names_the_log_and_keeps_it() -> None:
    proc = _scenario("fail")
    assert proc.returncode == 3
    match = re.search(r"\(third-party output of this export: (\S+); --verbose .*\)", proc.stderr)
    assert match, proc.stderr
    log = Path(match.group(1))
    text = log.read_text()
    log.unlink()
    for kept in ("C library on stdout", "I0000 absl", "python print", "FutureWarning"):
        assert kept in text
    assert "the kit's progress" not in text


@pytest.mark.export
def test_export_prints_only_its_own_lines(
    export_env: Path, random_weights: Path, tmp_path: Path
) -> None:
    args = [
        "export",
        "--weights",
        str(random_weights),
        "--save-weights",
        str(tmp_path / "w"),
        "--weights-only",
    ]
    quiet = run_cli(args, python=export_env)
    assert quiet.returncode == 0, quiet.stderr
    print(quiet.stderr)
    assert quiet.stdout == ""
    lines = quiet.stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["weights", "saved weights"], lines
    # The same run with --verbose shows what was kept back (so this test can fail).
    loud = run_cli([*args, "--verbose"], python=export_env)
    assert loud.returncode == 0
    shown = loud.stderr.splitlines() + loud.stdout.splitlines()
    print(f"--verbose: {len(shown)} lines, default: {len(lines)}")
    assert len(shown) > len(lines)
