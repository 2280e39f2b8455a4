"""Every error type lives in edge.errors and is exported from edge; one error line."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import edge
from edge import errors


def _edge_errors() -> set[type[BaseException]]:
    # Import every runtime module (edge.export needs torch: only its torch-free parts;
    # edge.__main__ runs the CLI).
    for info in pkgutil.walk_packages(edge.__path__, "edge."):
        if info.name == "edge.__main__" or (
            info.name.startswith("edge.export.") and info.name != "edge.export.quiet"
        ):
            continue
        importlib.import_module(info.name)
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [errors.EdgeError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_type_is_in_edge_errors_and_exported() -> None:
    classes = _edge_errors()
    print(sorted(c.__name__ for c in classes))
    assert len(classes) >= 15
    for cls in classes:
        assert cls.__module__ == "edge.errors", f"{cls.__name__} is defined in {cls.__module__}"
        assert cls.__name__ in edge.__all__ and getattr(edge, cls.__name__) is cls


def test_report_is_the_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    errors.report(errors.ModelNotFound("no model at /x"))
    assert capsys.readouterr().err == "da3-edge: error: no model at /x\n"
