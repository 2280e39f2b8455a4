"""Stores written by hand, as a daemon (or a hostile local user) would leave them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

STORE_ID = "0123456789abcdef"


def frame(directory: Path, seq: int, *, npz: bytes = b"NPZ", preview: bytes | None = None) -> Path:
    """frames/<seq>/ as the daemon writes one: record, npz, preview."""
    path = directory / f"{seq:010d}"
    path.mkdir(parents=True)
    record = {"store_seq": seq, "t_written": time.time(), "random_init": True}
    (path / "frame.json").write_text(json.dumps(record))
    (path / "frame.npz").write_bytes(npz)
    if preview is not None:
        (path / "frame.preview.png").write_bytes(preview)
    return path


def store(tmp_path: Path, *, seq: int = 42) -> Path:
    """A store with one honest frame and ``latest`` at it."""
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    frame(root / "frames", seq)
    (root / "store-id").write_text(STORE_ID + "\n")
    os.symlink(f"frames/{seq:010d}", root / "latest")
    return root
