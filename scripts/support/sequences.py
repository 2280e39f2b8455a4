"""Replayed depth sequences with what a live DA3 stream does to a still camera's view,
made here so that the steady view can be measured and tested (scripts/steady.py,
tests/test_steady.py):

- a **still** scene (a board in front of a wall, scripts/support/scene.py) with a
  per-frame scale (DA3's depth is relative: each frame on its own scale, here 5 %
  log-normal), noise that is smooth over the model's 14-pixel patches (0.5 %), jitter
  (the picture moved by up to a pixel) and an unsure far region (a window in the wall,
  6 % of the picture, 1.3-2.5x as far from frame to frame, low confidence: DA3 on sky,
  glass, dark corners);
- a **pan**: the same, the camera turning 2 pixels a frame across a wider scene;
- a **cut**: the still scene, then another (a floor seen from above, farther at the top).

Each frame is (depth, confidence), float32, at ``size``; seeded, so a run is repeatable.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from edge.frames import inverse_in_range, inverse_normalised
from edge.steady import Alignment, Steady
from scripts.support.scene import board_and_wall, floor

SIZE = (378, 504)  # the default core's output: what the daemon writes (store.size = "core")
HFOV = 66.0
SCALE_SPREAD, NOISE, PATCH = 0.05, 0.005, 14
FAR = (1.3, 2.5)  # the unsure region: this much farther than the wall, a new draw a frame
PAN_STEP = 2  # pixels a frame
Frames = Iterator[tuple[np.ndarray, np.ndarray]]  # (depth, confidence) a frame


def _frame(
    truth: np.ndarray, rng: np.random.Generator, size: tuple[int, int], x0: int
) -> tuple[np.ndarray, np.ndarray]:
    h, w = size
    dy, dx = rng.integers(-1, 2, 2)
    y0 = int(np.clip(1 + dy, 0, truth.shape[0] - h))
    x = int(np.clip(x0 + dx, 0, truth.shape[1] - w))
    depth = truth[y0 : y0 + h, x : x + w] * np.float32(np.exp(rng.normal(0, SCALE_SPREAD)))
    patches = rng.normal(0, NOISE, (-(-h // PATCH), -(-w // PATCH)))
    depth = depth * (1 + np.kron(patches, np.ones((PATCH, PATCH)))[:h, :w]).astype(np.float32)
    conf = (2.0 + 0.3 * rng.random(size)).astype(np.float32)
    window = (slice(h // 10, h // 10 + h // 4), slice(w // 20, w // 20 + w // 4))
    depth[window] *= np.float32(rng.uniform(*FAR))
    conf[window] = 1.0
    return depth.astype(np.float32), conf


def _truth(size: tuple[int, int], tilt: float) -> np.ndarray:
    """The scene at ``size`` plus a pixel all round (for the jitter)."""
    h, w = size
    return board_and_wall((h + 2, w + 2), HFOV, tilt).depth


def still(frames: int, size: tuple[int, int] = SIZE, seed: int = 0) -> Frames:
    rng = np.random.default_rng(seed)
    truth = _truth(size, 30.0)
    for _ in range(frames):
        yield _frame(truth, rng, size, 1)


def pan(frames: int, size: tuple[int, int] = SIZE, seed: int = 1) -> Frames:
    rng = np.random.default_rng(seed)
    h, w = size
    wide = board_and_wall((h + 2, w + 2 + PAN_STEP * frames), HFOV * 1.6, 30.0).depth
    for n in range(frames):
        yield _frame(wide, rng, size, 1 + PAN_STEP * n)


def cut(frames: int, at: int, size: tuple[int, int] = SIZE, seed: int = 2) -> Frames:
    """``frames`` frames, the scene changing at frame ``at``."""
    rng = np.random.default_rng(seed)
    h, w = size
    first, second = _truth(size, 30.0), floor((h + 2, w + 2), HFOV, 50.0)
    for n in range(frames):
        yield _frame(first if n < at else second, rng, size, 1)


def previews(frames: Frames, steady: bool) -> tuple[list[np.ndarray], list[Alignment]]:
    """Each frame's preview as the daemon colours it (0..255 indices, before the PNG):
    on the frame's own range (today's, depth.steady off) or on edge.steady's; and the
    alignments made."""
    aligner, shown, made = Steady(), [], []
    for depth, conf in frames:
        if steady:
            alignment = aligner.step(depth, conf)
            made.append(alignment)
            inv = inverse_in_range(depth, alignment.scale, alignment.low, alignment.high)
        else:
            inv = inverse_normalised(depth)
        shown.append(np.rint(inv * 255).astype(np.int16))
    return shown, made


def changes(shown: list[np.ndarray]) -> list[float]:
    """The mean absolute change of the preview from each frame to the next (levels)."""
    return [float(np.abs(b - a).mean()) for a, b in itertools.pairwise(shown)]


RECOVERED_WITHIN, RECOVERED_HOLD = 1.5, 5


def recovery(change: list[float], at: int) -> int | None:
    """Frames from a cut at frame ``at`` until the preview is steady again: its change
    back within RECOVERED_WITHIN times the median change before the cut, and held there
    for RECOVERED_HOLD frames (1: the frame after the cut already is). None: never."""
    level = RECOVERED_WITHIN * float(np.median(change[: at - 1]))
    for j in range(at, len(change) - RECOVERED_HOLD + 1):
        if all(c <= level for c in change[j : j + RECOVERED_HOLD]):
            return j - at + 1
    return None
