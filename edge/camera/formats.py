"""libcamera's pixel formats, as picamera2's ``make_array`` returns them, to RGB.

Packed RGB by its memory order; NV12 and YUV420 (I420) through the YCbCr encoding and
range libcamera reports for the configuration (``yuv_encoding``), chroma upsampled by
repetition. Anything else is a ``CameraError`` naming the format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edge.errors import CameraError

# libcamera's packed RGB formats name the colour order of a little-endian word, so in
# memory (what make_array returns) RGB888 is B, G, R: the index that gives R, G, B.
_PACKED = {"RGB888": [2, 1, 0], "BGR888": [0, 1, 2], "XRGB8888": [2, 1, 0], "XBGR8888": [0, 1, 2]}
CONVERTIBLE = (*_PACKED, "NV12", "YUV420")


def to_rgb_for(
    fmt: str, size: tuple[int, int], colour: tuple[str, bool] = ("Rec601", True)
) -> Callable[[np.ndarray], np.ndarray]:
    """The function from ``make_array`` of ``fmt`` at ``size`` (w, h) to an owned HxWx3
    RGB array, YUV decoded by ``colour`` (``yuv_encoding``); ``CameraError`` naming
    the format when there is none."""
    w, h = size
    if fmt in _PACKED:
        order = _PACKED[fmt]
        return lambda a: np.ascontiguousarray(a[:h, :w, order])
    if fmt == "NV12":
        return lambda a: yuv_to_rgb(a[:h, :w], *_nv12_chroma(a[h : h + h // 2, :w]), *colour)
    if fmt == "YUV420":
        return lambda a: yuv_to_rgb(a[:h, :w], *_i420_chroma(a, w, h), *colour)
    raise CameraError(
        f"picamera2: the camera delivers {fmt}, which da3-edge cannot convert "
        f"(it takes {', '.join(CONVERTIBLE)})"
    )


def _nv12_chroma(uv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return uv[:, 0::2], uv[:, 1::2]


def _i420_chroma(a: np.ndarray, w: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    # picamera2 gives YUV420 as (h * 3 / 2, stride): U then V, each (h/2) x (w/2),
    # packed two chroma rows to a luma row.
    flat = a[h:].reshape(-1)
    stride = a.shape[1]
    u = flat[: h // 2 * stride // 2].reshape(h // 2, stride // 2)[:, : w // 2]
    v = flat[h // 2 * stride // 2 : h // 2 * stride].reshape(h // 2, stride // 2)[:, : w // 2]
    return u, v


# (Kr, Kb) of each YCbCr encoding libcamera names.
_KRKB = {"Rec601": (0.299, 0.114), "Rec709": (0.2126, 0.0722), "Rec2020": (0.2627, 0.0593)}


def yuv_encoding(colour_space: Any) -> tuple[str, bool]:
    """(YCbCr encoding, full range) of a libcamera ``ColorSpace`` as picamera2 reads it
    back; sYCC's (Rec601, full: JPEG's, what libcamera's virtual camera carries) when
    it has none or names one this module lacks."""
    if colour_space is None:
        return "Rec601", True

    def name(value: Any) -> str:
        return str(getattr(value, "name", None) or value).rpartition(".")[2]

    encoding = name(getattr(colour_space, "ycbcrEncoding", ""))
    full = name(getattr(colour_space, "range", "Full")) != "Limited"
    return (encoding if encoding in _KRKB else "Rec601"), full


def yuv_to_rgb(
    y: np.ndarray, u: np.ndarray, v: np.ndarray, encoding: str = "Rec601", full: bool = True
) -> np.ndarray:
    """YCbCr of ``encoding`` (full or limited range) to RGB, chroma upsampled 2x by
    repetition."""
    kr, kb = _KRKB[encoding]
    kg = 1.0 - kr - kb
    u = np.repeat(np.repeat(u, 2, axis=0), 2, axis=1)[: y.shape[0], : y.shape[1]]
    v = np.repeat(np.repeat(v, 2, axis=0), 2, axis=1)[: y.shape[0], : y.shape[1]]
    yf = y.astype(np.float32)
    uf = u.astype(np.float32) - 128.0
    vf = v.astype(np.float32) - 128.0
    if not full:  # Y in 16-235, Cb/Cr in 16-240
        yf = (yf - 16.0) * np.float32(255 / 219)
        uf *= np.float32(255 / 224)
        vf *= np.float32(255 / 224)
    r = yf + np.float32(2 * (1 - kr)) * vf
    g = yf - np.float32(2 * kb * (1 - kb) / kg) * uf - np.float32(2 * kr * (1 - kr) / kg) * vf
    b = yf + np.float32(2 * (1 - kb)) * uf
    return np.clip(np.stack([r, g, b], -1) + 0.5, 0, 255).astype(np.uint8)
