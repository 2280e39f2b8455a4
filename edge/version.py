"""da3-edge's version, written once: in pyproject.toml. Read from the installed
distribution's metadata, or from the checkout's pyproject.toml when edge runs from a
source tree that was never installed (PYTHONPATH at a checkout)."""

from __future__ import annotations

import functools
import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "da3-edge"


@functools.cache
def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"
    return str(project["version"]) if project.get("name") == DISTRIBUTION else "unknown"
