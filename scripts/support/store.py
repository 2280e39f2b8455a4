"""Stores written by hand, as a daemon (or a hostile local user) would leave them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from edge.depth import DepthFrame

STORE_ID = "0123456789abcdef"


def depth_frame(n: int, size: tuple[int, int] = (60, 80)) -> DepthFrame:
    """A DepthFrame of seeded noise (incompressible: its files are as large as they
    get at ``size``), flagged random-init, for the store to write."""
    rng = np.random.default_rng(n)
    depth = (1 + rng.random(size)).astype(np.float32)
    return DepthFrame(
        depth=depth,
        conf=depth + 1,
        name=f"f{n}",
        source_size=size,
        shape_wanted=(14, 14),
        shape_used=(14, 14),
        precision="fp16",
        stages="numpy",
        model="da3-small",
        weights="random-init:0",
        random_init=True,
        artifact="x.tflite",
    )


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
