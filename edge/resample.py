"""DA3's resizing, in numpy: OpenCV's INTER_AREA and INTER_CUBIC, and DA3's two steps.

DA3's ``InputProcessor`` shrinks with ``cv2.INTER_AREA`` and enlarges with
``cv2.INTER_CUBIC``, in two steps (longest side to 504 with each side rounded, then
each side to the nearest multiple of 14), going through uint8 between them. Pillow
has neither filter: its BOX weights input pixels by their centres (not by overlap)
and its BICUBIC uses a = -0.5, not OpenCV's -0.75; measured against DA3's own
preprocessing that left errors of up to 2.2 (normalised units). These are the same
operations written out:

- area: each output pixel is the exact overlap-weighted mean of the input pixels it
  covers. Computed per axis from a cumulative sum, which is exact for a
  piecewise-constant signal and costs O(pixels).
- cubic: Keys' kernel with a = -0.75, sample positions ``(x + 0.5) * scale - 0.5``,
  edges replicated.
"""

from __future__ import annotations

import numpy as np

CUBIC_A = -0.75


def _area_axis(values: np.ndarray, out_len: int, axis: int) -> np.ndarray:
    n = values.shape[axis]
    if n == out_len:
        return values.astype(np.float32, copy=False)
    # uint8 input sums exactly in int32 (up to 8.4 M pixels along one axis); float
    # input (the second pass) in float64.
    acc = np.int32 if values.dtype == np.uint8 else np.float64
    shape = list(values.shape)
    shape[axis] = n + 1
    csum = np.zeros(shape, dtype=acc)
    np.cumsum(values, axis=axis, dtype=acc, out=_tail(csum, axis))
    scale = n / out_len
    edges = np.arange(out_len + 1, dtype=np.float64) * scale
    edges[-1] = n  # exact end, whatever the rounding
    lo = np.minimum(np.floor(edges).astype(np.int64), n - 1)
    bshape = [1] * values.ndim
    bshape[axis] = out_len + 1
    frac = (edges - lo).reshape(bshape)
    base = np.take(csum, lo, axis=axis)
    step = np.take(values, lo, axis=axis)
    # Integral of the piecewise-constant signal up to each edge.
    integral = base + frac * step
    out: np.ndarray = (np.diff(integral, axis=axis) / scale).astype(np.float32)
    return out


def _tail(csum: np.ndarray, axis: int) -> np.ndarray:
    index = [slice(None)] * csum.ndim
    index[axis] = slice(1, None)
    return csum[tuple(index)]


def _cubic_weights(out_len: int, in_len: int) -> tuple[np.ndarray, np.ndarray]:
    scale = in_len / out_len
    pos = (np.arange(out_len, dtype=np.float64) + 0.5) * scale - 0.5
    base = np.floor(pos).astype(np.int64)
    f = pos - base
    a = CUBIC_A
    w0 = ((a * (f + 1) - 5 * a) * (f + 1) + 8 * a) * (f + 1) - 4 * a
    w1 = ((a + 2) * f - (a + 3)) * f * f + 1
    w2 = ((a + 2) * (1 - f) - (a + 3)) * (1 - f) * (1 - f) + 1
    w3 = 1.0 - w0 - w1 - w2
    idx = np.clip(base[:, None] + np.arange(-1, 3)[None, :], 0, in_len - 1)
    return idx, np.stack([w0, w1, w2, w3], axis=1)


def _cubic_axis(values: np.ndarray, out_len: int, axis: int) -> np.ndarray:
    n = values.shape[axis]
    if n == out_len:
        return values
    idx, weights = _cubic_weights(out_len, n)
    moved = np.moveaxis(values, axis, 0).astype(np.float64, copy=False)
    shape = (out_len, 4) + (1,) * (moved.ndim - 1)
    out: np.ndarray = np.moveaxis((moved[idx] * weights.reshape(shape)).sum(axis=1), 0, axis)
    return out


def _to_uint8(values: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return out


def area(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """OpenCV ``INTER_AREA`` shrink of an (H, W, C) uint8 image to ``size`` (h, w)."""
    h, w = size
    out = np.empty((h, w, image.shape[2]), dtype=np.uint8)
    # One channel at a time: the same numbers, a third of the peak memory (the
    # cumulative sums of a 1200x1600 frame are ~60 MB for all three channels).
    for c in range(image.shape[2]):
        plane = image[:, :, c]
        out[:, :, c] = _to_uint8(_area_axis(_area_axis(plane, w, axis=1), h, axis=0))
    return out


def cubic(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """OpenCV ``INTER_CUBIC`` resize of an (H, W, C) uint8 image to ``size`` (h, w)."""
    h, w = size
    out = _cubic_axis(_cubic_axis(image, w, axis=1), h, axis=0)
    return _to_uint8(out)


def resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """DA3's choice for one step: cubic if any side grows, else area."""
    src = image.shape[:2]
    if tuple(src) == tuple(size):
        return image
    grows = size[0] > src[0] or size[1] > src[1]
    return cubic(image, size) if grows else area(image, size)


def da3_resize(image: np.ndarray, size: tuple[int, int], longest: int = 504) -> np.ndarray:
    """DA3's ``upper_bound_resize``: longest side to ``longest`` (sides rounded), then
    to ``size`` (DA3's multiples of 14), through uint8 as DA3 does. ``size`` must be
    what ``models.da3_shape`` gives for this image; for any other size use
    ``resize`` (one step)."""
    h, w = image.shape[:2]
    if max(h, w) != longest:
        scale = longest / max(h, w)
        first = (max(1, round(h * scale)), max(1, round(w * scale)))
        image = cubic(image, first) if scale > 1.0 else area(image, first)
    return resize(image, size)
