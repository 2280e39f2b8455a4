"""DA3's resizing in numpy, against independent ways to compute the same thing.

(The comparison with OpenCV itself, through DA3's own preprocessing, is in
test_stages.py and needs the export environment.)
"""

from __future__ import annotations

import numpy as np
import pytest

from edge.stages import resample

pytestmark = pytest.mark.arm  # runs on the emulated Cortex-A76 too (docs/arm.md)


def _area_mean(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """INTER_AREA by definition, in exact integers: cut every input pixel into out_len
    equal parts along an axis (repeat it out_len times), sum the n parts each output
    pixel covers; the mean is that sum over n_rows * n_cols (float64, before rounding)."""
    total = image.astype(np.int64)
    for axis, m in ((0, size[0]), (1, size[1])):
        n = total.shape[axis]
        rep = np.repeat(total, m, axis=axis)
        shape = list(rep.shape)
        shape[axis : axis + 1] = [m, n]
        total = rep.reshape(shape).sum(axis=axis + 1)
    mean: np.ndarray = total / (image.shape[0] * image.shape[1])
    return mean


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ((12, 16), (4, 8)),
        ((30, 40), (9, 12)),
        ((61, 47), (13, 29)),
        ((120, 160), (37, 50)),
        ((200, 90), (70, 30)),
        ((7, 9), (7, 2)),
        ((5, 5), (1, 1)),
    ],
)
def test_area_is_the_overlap_weighted_mean(src: tuple[int, int], dst: tuple[int, int]) -> None:
    rng = np.random.default_rng(src[0] * 1000 + dst[1])
    image = rng.integers(0, 256, (*src, 3), dtype=np.uint8)
    ours = resample.area(image, dst)
    mean = _area_mean(image, dst)
    diff = np.abs(ours.astype(int) - np.rint(mean))
    print(f"{src} -> {dst}: {int((diff > 0).sum())} of {diff.size} values differ, max {diff.max()}")
    # float32 sums may only send a mean lying within 1e-4 of a .5 the other way.
    assert diff.max() <= 1
    near_half = np.abs(mean - np.floor(mean) - 0.5) < 1e-4
    assert not (diff > 0)[~near_half].any()


def test_area_keeps_a_flat_image_flat() -> None:
    image = np.full((1200, 1600, 3), 77, dtype=np.uint8)
    assert (resample.area(image, (378, 504)) == 77).all()
