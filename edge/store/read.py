"""Reading a store: what ``latest`` points at, the frames published since, and the
JSON files the daemon renames into place, each through ``trust.open_in``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.store import layout
from edge.store.trust import read_in


@dataclass(frozen=True)
class Published:
    """The frame ``latest`` points at: its store sequence number and directory."""

    seq: int
    path: Path


def frame_names(seq: int, fmt: str) -> tuple[str, str, str]:
    """The names from a store's root to a frame's file of format ``fmt``."""
    return layout.FRAMES, layout.frame_name(seq), layout.frame_file(Path(), fmt).name


def latest(root: Path) -> Published | None:
    """What ``root``/latest points at now (None: no frame yet, not a store, or a
    ``latest`` that points anywhere but ``frames/<10 digits>``)."""
    try:
        target = os.readlink(root / layout.LATEST)
    except OSError:
        return None
    found = layout.LATEST_TARGET.fullmatch(target)
    if found is None:
        return None
    return Published(int(found.group(1)), root / layout.FRAMES / found.group(1))


def published_since(root: Path, before: int | None, newest: Published) -> list[Published]:
    """The frames published after frame ``before`` up to ``newest``, in order: two
    renames of ``latest`` between two looks at it are two frames (the ones still in
    the ring, at most 16 before ``newest``). Without ``before``, or when the numbers
    started again (a store made anew), ``newest`` only."""
    if before is None or newest.seq <= before:
        return [newest]
    between = []
    for seq in range(max(before + 1, newest.seq - 16), newest.seq):
        path = root / layout.FRAMES / layout.frame_name(seq)
        if path.is_dir():
            between.append(Published(seq, path))
    return [*between, newest]


def read_json(root: Path, *names: str) -> dict[str, Any] | None:
    """A JSON object from a store's file the daemon renames into place (``read_in``);
    None if it is not there (yet, or pruned), not safe to read, or not an object."""
    raw = read_in(root, *names)
    try:
        # NaN and Infinity (an older writer's) read as null: what serve hands on is strict
        # JSON, which a browser's JSON.parse takes.
        data = json.loads(raw, parse_constant=lambda _: None) if raw is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_record(root: Path, seq: int) -> dict[str, Any] | None:
    """A frame's record (frame.json), as ``read_json`` reads it."""
    return read_json(root, *frame_names(seq, "json"))


def source_size(record: dict[str, Any], shape: tuple[int, ...]) -> tuple[int, int]:
    """The picture's (H, W) a frame's record says it was made from (``source_size``),
    else ``shape``, the map's own: a size that is no picture's (0, negative, not two
    whole numbers) is not used."""
    size = record.get("source_size")
    if isinstance(size, list) and len(size) == 2 and all(_positive(n) for n in size):
        return size[0], size[1]
    return int(shape[0]), int(shape[1])


def _positive(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0
