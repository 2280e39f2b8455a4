"""The house rules of the maintainer's code (scripts/, tests/): every Python file is a
module of its package, none loaded by path; test modules share through tests/support;
no function longer than a screen."""

from __future__ import annotations

import ast
from pathlib import Path

from .support import ROOT

# What loads a file by its path, or puts a folder on the import path by hand (spelt in
# two pieces, so this file does not find itself).
BY_PATH = ("load_" + "script", "sys.path." + "insert", "sys.path." + "append",
           "spec_from_" + "file_location")  # fmt: skip
LONGEST = 60  # lines of a function, its decorators and docstring included


def files(*folders: str, pattern: str = "*") -> list[Path]:
    return [
        p
        for folder in folders
        for p in (ROOT / folder).rglob(pattern)
        if p.is_file() and "__pycache__" not in p.parts
    ]


def test_nothing_is_imported_by_path() -> None:
    """Every Python file of the checkout is imported as a module of its package (edge,
    scripts, tests): none is loaded by its path, none edits sys.path."""
    found = [
        f"{p.relative_to(ROOT)}: {word}"
        for p in [ROOT / "pyproject.toml", *files(".ci", "edge", "scripts", "tests", "systemd")]
        for word in BY_PATH
        if word in p.read_text(errors="replace")
    ]
    assert not found, found


def test_no_test_module_imports_another() -> None:
    """What several test modules share lives in tests/support, not in a test module
    another one imports (which would also run its tests' module fixtures' imports)."""
    found = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in files("tests", pattern="*.py")
        for line in p.read_text().splitlines()
        if line.lstrip().startswith(("from .test_", "from tests.test_", "from . import test_"))
    ]
    assert not found, found


def long_functions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > LONGEST:
                found.append(f"{path.relative_to(ROOT)}:{first} {node.name}: {lines} lines")
    return found


def test_no_maintainer_function_is_over_a_screen() -> None:
    python = files("scripts", "tests", pattern="*.py")
    assert len(python) > 80
    found = [line for path in python for line in long_functions(path)]
    assert not found, found


def test_the_rule_finds_a_long_function(tmp_path: Path) -> None:
    path = ROOT / "tests" / f".house-{tmp_path.name}.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))
    try:
        path.write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}")
        assert [f.split()[1] for f in long_functions(path)] == ["long:"]
    finally:
        path.unlink()
