"""Steady depth for live views: each frame's relative depth brought to the scale of
the frames before it, and the preview's colour range smoothed.

DA3's depth is relative: every frame comes on a scale of its own, and a preview
coloured by each frame's own range (``frames.inverse_normalised``) moves with its
extremes: a few far pixels, a hand at the edge, sensor noise. For a camera that keeps
looking at a scene that is wasted motion on the page.

``Steady.step`` takes each frame's depth and confidence, in capture order, and says:

- **scale**: the median of reference / depth over the pixels that are confident (in
  the top half of the frame's confidence) on a small grid (at most ``GRID`` a side),
  the reference being a running mean of the frames before, aligned (``FOLLOW`` of each
  new frame). A median of ratios ignores what moved; a scale only, no shift, because
  DA3's relative depth is known up to a scale.
- **range**: the inverse aligned depth's 2nd and 98th percentiles over the confident
  cells, smoothed (``RANGE_FOLLOW`` of each frame's): the preview's colours from one frame to
  the next.
- **a scene change** (the stated rule): fewer than ``AGREE`` of the confident pixels
  have a ratio within ``TOLERANCE`` of the median scale: the reference and the range
  start again from this frame, whose scale keeps the reference's median depth (the
  colours jump once, to the new scene, rather than drift to it).

The raw depth is never altered: the daemon writes the scale beside it (frame.json's
``steady``) and colours the preview with it; the npz and the 16-bit PNG are the frame's
own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID = 64  # the reference's long side, in cells: enough for a median, cheap at any size
FOLLOW = 0.2  # of each aligned frame in the reference
RANGE_FOLLOW = 0.15  # of each frame's range in the preview's
AGREE = 0.5  # the share of confident cells that must agree with the scale; else a new scene
TOLERANCE = 0.15  # a cell agrees when its ratio is within 15 % of the median
PERCENTILES = (2.0, 98.0)  # of the inverse aligned depth: the preview's range


@dataclass(frozen=True)
class Alignment:
    """What ``Steady.step`` made of one frame."""

    scale: float  # aligned depth = scale * depth
    low: float  # the preview's range of inverse aligned depth (1 / (scale * depth))
    high: float
    new_scene: bool  # the reference started again at this frame
    agreement: float  # the share of confident cells that agreed (1.0 on a new start)

    def record(self) -> dict[str, object]:
        """As frame.json has it (``steady``)."""
        return {
            "scale": round(self.scale, 6),
            "preview_range": [round(self.low, 6), round(self.high, 6)],
            "new_scene": self.new_scene,
            "agreement": round(self.agreement, 4),
        }


def grid_of(depth: np.ndarray, conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every k-th pixel of ``depth`` and ``conf`` so that the long side is at most GRID."""
    k = max(1, -(-max(depth.shape) // GRID))
    return depth[k // 2 :: k, k // 2 :: k], conf[k // 2 :: k, k // 2 :: k]


class Steady:
    """One stream's alignment state; ``step`` once per frame, in order (one thread)."""

    def __init__(self) -> None:
        self.reference: np.ndarray | None = None  # aligned depth on the grid
        self.range: tuple[float, float] | None = None

    def step(self, depth: np.ndarray, conf: np.ndarray) -> Alignment:
        small, sure = grid_of(depth, conf)
        small = small.astype(np.float32)
        usable = np.isfinite(small) & (small > 0)
        confident = usable & (sure >= np.median(sure[usable])) if usable.any() else usable
        if not confident.any():  # nothing to align on: the frame as it is, nothing kept
            return Alignment(1.0, *self._frame_range(small[usable]), False, 0.0)
        reference = self.reference
        if reference is None or reference.shape != small.shape:
            return self._start(small, confident, float(np.median(small[confident])))
        ratios = reference[confident] / small[confident]
        scale = float(np.median(ratios))
        agreement = float(np.mean(np.abs(ratios / scale - 1.0) <= TOLERANCE))
        if agreement < AGREE:
            return self._start(small, confident, float(np.median(reference)), agreement)
        aligned = _scaled(small, scale)
        kept = usable & np.isfinite(aligned)  # a pixel near float32's largest overflows
        self.reference = np.where(kept, reference + FOLLOW * (aligned - reference), reference)
        low, high = self._frame_range(aligned[confident & kept])
        assert self.range is not None
        self.range = (
            self.range[0] + RANGE_FOLLOW * (low - self.range[0]),
            self.range[1] + RANGE_FOLLOW * (high - self.range[1]),
        )
        return Alignment(scale, *self.range, False, agreement)

    def _start(
        self, small: np.ndarray, confident: np.ndarray, level: float, agreement: float = 1.0
    ) -> Alignment:
        """A new reference from this frame, scaled so that its confident median depth is
        ``level`` (the old reference's; the frame's own at the first)."""
        scale = level / float(np.median(small[confident]))
        aligned = _scaled(small, scale)
        usable = np.isfinite(aligned) & (aligned > 0)
        fill = float(np.median(aligned[usable])) if usable.any() else level
        self.reference = np.where(usable, aligned, np.float32(fill)).astype(np.float32)
        self.range = self._frame_range(aligned[confident & usable])
        return Alignment(scale, *self.range, True, agreement)

    @staticmethod
    def _frame_range(aligned: np.ndarray) -> tuple[float, float]:
        if aligned.size == 0:
            return (0.0, 1.0)
        inverse = np.reciprocal(aligned.astype(np.float32))
        low, high = np.percentile(inverse, PERCENTILES)
        return float(low), float(max(high, low * (1 + 1e-6) + 1e-12))


def _scaled(small: np.ndarray, scale: float) -> np.ndarray:
    """``small`` times ``scale`` in float32; what overflows is infinity, for the caller
    to leave out."""
    with np.errstate(over="ignore"):
        return small * np.float32(scale)
