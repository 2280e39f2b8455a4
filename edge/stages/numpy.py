"""The default stages: numpy (and Pillow for the way back), no torch.

Preprocess is DA3's own resize (``edge.stages.resample``: OpenCV's INTER_AREA / INTER_CUBIC
semantics and DA3's two steps, written in numpy; within one uint8 level of DA3's
reference) followed by a lookup table per channel (uint8 -> normalised float32),
cheaper than converting the image to float and doing the arithmetic. When the core
shape is not DA3's shape for the image (nearest-aspect fallback) it is one resize
step with the same filter rule.

Postprocess resizes depth and confidence to the source size with Pillow's bilinear
filter on float32 images.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from edge.models import da3_shape
from edge.stages import MEAN, STD, resample

_LUT = np.stack(
    [(np.arange(256, dtype=np.float64) / 255.0 - m) / s for m, s in zip(MEAN, STD, strict=True)]
).astype(np.float32)  # (3, 256)


class NumpyStages:
    name = "numpy"
    reason = ""

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        h, w = shape
        src = (int(rgb.shape[0]), int(rgb.shape[1]))
        if src != (h, w):
            # DA3's two steps when the core is the image's DA3 shape at its size (the
            # core's long side), else one.
            if da3_shape(*src, max(h, w)) == (h, w):
                rgb = resample.da3_resize(rgb, (h, w), max(h, w))
            else:
                rgb = resample.resize(rgb, (h, w))
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
