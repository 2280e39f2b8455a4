"""Stores written by hand, as a daemon (or a hostile local user) would leave them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from edge.config import StoreConfig
from edge.depth import DepthFrame
from edge.fov import FieldOfView
from edge.store.ring import FrameStore
from scripts.support.scene import board_and_wall

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


def board_store(
    root: Path, seen: FieldOfView, formats: tuple[str, ...], frames: int = 1
) -> FrameStore:
    """A store the daemon's FrameStore wrote: ``frames`` frames of a board turned 30
    degrees in front of a wall (scripts/support/scene.py) seen at 66 degrees, its
    depth at half the camera's 240x320, with the scene's picture (a confidence of 2
    everywhere: every point kept)."""
    store = FrameStore(root, StoreConfig(formats=formats))
    for n in range(frames):
        write_board(store, seen, n)
    return store


def write_board(
    store: FrameStore,
    seen: FieldOfView,
    n: int = 0,
    size: tuple[int, int] = (120, 160),
    t_capture: float | None = None,
) -> None:
    """Frame ``n`` of the board scene, its depth at ``size``, its picture twice that
    (its record's ``t_capture`` when given)."""
    h, w = size
    scene = board_and_wall((2 * h, 2 * w), 66.0, tilt=30.0)
    frame = depth_frame(n, size)
    frame.depth = board_and_wall(size, 66.0, tilt=30.0).depth
    frame.conf = np.full(size, 2.0, np.float32)
    frame.source_size, frame.rgb, frame.fov = (2 * h, 2 * w), scene.rgb, seen
    record: dict[str, float] = {"t_written": time.time(), "camera_seq": n}
    if t_capture is not None:
        record["t_capture"] = t_capture
    store.write(frame, record)
