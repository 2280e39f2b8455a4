"""The committed measurements in docs/bench: where they are, which may come from a tree
with uncommitted changes and why, and the refusals that keep the others from one.
A leaf: the tools that measure and the docs made from their figures both read it."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from scripts.support import ROOT

BENCH = ROOT / "docs" / "bench"
# Committed measurements made from a tree with uncommitted changes (their revision ends
# in +dirty), each with why it still stands; a table refuses any other, and the tools
# that write docs/bench refuse to measure from such a tree (refuse_dirty).
MEASURED_DIRTY = {
    "peer-x86_64.json": "the peer's tree (depth-anything.cpp) is out of reach of this "
    "project's machines (package registries only): a run with --peer from a commit "
    "replaces it",
    "kernels-a76.json": "measured before the rule; `KERNELS_WARM=1 scripts/arm-lane.sh "
    "kernels` on the full-size models from a commit replaces it (instruction counts: "
    "the code it ran is the commit's)",
}


class DirtyMeasurement(Exception):
    pass


def revision(data: dict[str, Any]) -> str:
    """The checkout a measurement was made from, as it recorded it."""
    machine, run = data.get("machine") or {}, data.get("_run") or {}
    return str(machine.get("git_revision") or run.get("revision") or "")


def load_measurement(path: Path, dirty_ok: Collection[str] = tuple(MEASURED_DIRTY)) -> Any:
    """A committed measurement; DirtyMeasurement when it was made from a tree with
    uncommitted changes and is not one of ``dirty_ok``."""
    data = json.loads(path.read_text())
    rev = revision(data) if isinstance(data, dict) else ""
    if rev.endswith("+dirty") and path.name not in dirty_ok:
        raise DirtyMeasurement(
            f"{path.name}: measured from a tree with uncommitted changes (git {rev}): "
            "measure it again from a commit"
        )
    return data


def refuse_dirty(out: Path | None) -> None:
    """For a tool about to measure into ``out``: exit when ``out`` is in docs/bench and
    this checkout has uncommitted changes (a committed figure comes from a commit)."""
    from edge.bench import git_revision

    if out is not None and out.resolve().is_relative_to(BENCH.resolve()):
        rev = git_revision()
        if rev.endswith("+dirty"):
            raise SystemExit(
                f"{out}: this checkout has uncommitted changes (git {rev}); commit them "
                "first, or write the results outside docs/bench"
            )
