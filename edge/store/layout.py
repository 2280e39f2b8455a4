"""Names on disk: the frame store's layout (a frame's formats: edge.outputs).

Free of numpy, as the whole reading side of the store is, so that what only reads a
store (``da3-edge serve``, the MQTT publisher) and the config can know the names
without loading the writers. See docs/reference/store.md.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from edge.errors import ConfigError
from edge.outputs import SUFFIXES

# The store: frames/<10-digit seq>/frame.<suffix>, `latest` pointing at the newest.
FRAMES = "frames"
LATEST = "latest"
STEM = "frame"
STATUS = "status.json"  # the daemon's state (edge/daemon/status.py)
STORE_ID = "store-id"  # one random id per store instance: frame numbers restart with it
STORE_ID_FORMAT = re.compile(r"[0-9a-f]{16}")  # what the daemon writes (8 random bytes)


# A frame's directory is its sequence number in ten digits (frame_name), so that names
# sort as numbers do; `latest` points at frames/<that> and nothing else (LATEST_TARGET).
FRAME_NAME = re.compile(r"[0-9]{10}")
LATEST_TARGET = re.compile(rf"{FRAMES}/({FRAME_NAME.pattern})")


def frame_name(seq: int) -> str:
    """The directory name of frame ``seq``."""
    return f"{seq:010d}"


def is_frame_name(name: str) -> bool:
    """A whole frame's directory name (``.tmp-*`` and the like are not)."""
    return FRAME_NAME.fullmatch(name) is not None


def frame_file(frame_dir: Path, fmt: str) -> Path:
    """The file of format ``fmt`` (a key of SUFFIXES) in a store frame directory."""
    return frame_dir / f"{STEM}{SUFFIXES[fmt]}"


def default_store_dir() -> Path:
    """``$DA3_EDGE_STORE``, else systemd's ``$RUNTIME_DIRECTORY``, else /run/da3-edge
    when writable, else ``$XDG_RUNTIME_DIR/da3-edge``, else on macOS ``$TMPDIR/da3-edge``
    (per user there). Never a shared directory such as /tmp, where another user could
    make the store first: ConfigError instead."""
    for env in ("DA3_EDGE_STORE", "RUNTIME_DIRECTORY"):
        value = os.environ.get(env)
        if value:
            return Path(value.split(":")[0])
    if os.access("/run", os.W_OK):
        return Path("/run/da3-edge")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "da3-edge"
    tmpdir = os.environ.get("TMPDIR")
    if sys.platform == "darwin" and tmpdir:  # macOS: a folder of this user's alone
        return Path(tmpdir) / "da3-edge"
    raise ConfigError(
        "no private place for the store: /run is not writable and $XDG_RUNTIME_DIR is not "
        "set; give --store DIR (config store.dir), a directory only this user can write"
    )
