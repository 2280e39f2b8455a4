"""Docs that must not drift from the code."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_cli_reference_matches_help() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-cli-docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_names_the_test_command_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/check" in readme and "scripts/check" in ci


def test_performance_table_matches_its_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-performance-table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
