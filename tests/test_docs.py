"""Docs that must not drift from the code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT


@pytest.mark.parametrize(
    "script",
    [
        "gen-cli-docs.py",  # docs/reference/cli.md is every command's --help
        "gen-performance-table.py",  # docs/performance.md's table is its committed JSON
    ],
)
def test_generated_docs_are_current(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_names_the_test_command_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/check" in readme and "scripts/check" in ci
