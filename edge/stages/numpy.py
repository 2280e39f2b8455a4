"""The default stages: Pillow resampling, numpy arithmetic, no torch.

Pillow's ``BOX`` filter is an exact area average (what OpenCV calls INTER_AREA, which
DA3 uses to shrink); enlarging uses bicubic, as DA3 does. Normalisation is a lookup
table per channel (uint8 -> normalised float32), which is cheaper than converting
the image to float and doing the arithmetic.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from edge.stages import MEAN, STD

_LUT = np.stack(
    [(np.arange(256, dtype=np.float64) / 255.0 - m) / s for m, s in zip(MEAN, STD, strict=True)]
).astype(np.float32)  # (3, 256)


def resample_filter(src: tuple[int, int], dst: tuple[int, int]) -> Image.Resampling:
    """DA3's choice: area when no side grows, bicubic when any side grows."""
    grows = dst[0] > src[0] or dst[1] > src[1]
    return Image.Resampling.BICUBIC if grows else Image.Resampling.BOX


class NumpyStages:
    name = "numpy"

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        h, w = shape
        src = (int(rgb.shape[0]), int(rgb.shape[1]))
        if src != (h, w):
            image = Image.fromarray(rgb)
            rgb = np.asarray(image.resize((w, h), resample_filter(src, (h, w))))
        out = np.empty((1, 3, h, w), dtype=np.float32)
        for c in range(3):
            np.take(_LUT[c], rgb[:, :, c], out=out[0, c])
        return out

    def postprocess(
        self, depth: np.ndarray, conf: np.ndarray, size: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        return _resize_float(depth, size), _resize_float(conf, size)

    def close(self) -> None:
        pass


def _resize_float(values: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    if values.shape == (h, w):
        return np.ascontiguousarray(values, dtype=np.float32)
    image = Image.fromarray(np.ascontiguousarray(values, dtype=np.float32), mode="F")
    return np.asarray(image.resize((w, h), Image.Resampling.BILINEAR), dtype=np.float32)


def open_stages(**_: object) -> NumpyStages:
    return NumpyStages()
