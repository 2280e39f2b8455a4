"""Decoding stills into RGB uint8 arrays, refusing what should be refused.

What comes out is always (H, W, 3) uint8 RGB at the size the photo is *displayed*:
EXIF orientation applied; CMYK, palette, greyscale, 16-bit and alpha images converted
(alpha dropped). What goes in may be a path, bytes, a PIL image or an array.

Refused, each with a one-line ``ImageError`` naming the input: empty files, files that
are not images, truncated or corrupt data, and images over ``max_pixels`` — checked
from the header, before any pixel is decoded, so a decompression bomb costs nothing.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from edge.errors import ImageError, InputUnreadable, first_line

#: What counts as an image when a directory is given (snap, replay).
IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp", ".webp", ".gif", ".ppm", ".pgm", ".pnm"}
)

#: Default cap on decoded pixels (40 MP: a 7296x5472 photo). An RGB copy is 120 MB and
#: the float stages need a few times that; ``--max-pixels`` raises it.
MAX_PIXELS = 40_000_000


@dataclass(frozen=True)
class Still:
    """A decoded image and what was done to it on the way."""

    rgb: np.ndarray  # (H, W, 3) uint8
    name: str
    mode: str  # the file's own mode (e.g. "CMYK", "I;16", "P", "RGBA")
    exif_transposed: bool
    focal_35mm: float | None = None  # EXIF FocalLengthIn35mmFilm, when given (mm)

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) as displayed."""
        return int(self.rgb.shape[0]), int(self.rgb.shape[1])


def load(source: Any, name: str | None = None, max_pixels: int = MAX_PIXELS) -> Still:
    """Decode ``source`` (path, bytes, PIL image, or HxWx3/HxW array) to RGB uint8."""
    if isinstance(source, np.ndarray):
        return Still(_array_rgb(source, name or "array"), name or "array", "array", False)
    if isinstance(source, Image.Image):
        label = name or "image"
        _check_pixels(source, label, max_pixels)
        rgb, mode, turned = _to_rgb(source, label)
        return Still(rgb, label, mode, turned, _focal_35mm(source))
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        label = name or "bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        label = name or str(path)
        try:
            data = path.read_bytes()
        except IsADirectoryError:
            raise InputUnreadable(f"{label}: is a directory") from None
        except OSError as exc:
            raise InputUnreadable(f"{label}: cannot read ({exc.strerror or exc})") from None
    else:
        raise TypeError(f"cannot read an image from {type(source).__name__}")
    if not data:
        raise ImageError(f"{label}: empty file")
    try:
        with warnings.catch_warnings():
            # Our own pixel cap below is stricter than Pillow's bomb warning.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageError(
            f"{label}: too many pixels, refused before decoding ({first_line(exc)})"
        ) from None
    except UnidentifiedImageError:
        kind = _magic(data)
        if kind:
            raise ImageError(f"{label}: corrupt {kind} (its header cannot be parsed)") from None
        raise ImageError(f"{label}: not an image (or a format Pillow cannot read)") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"{label}: corrupt image header ({first_line(exc)})") from None
    with image:
        _check_pixels(image, label, max_pixels)
        rgb, mode, turned = _to_rgb(image, label)
        focal = _focal_35mm(image)
    return Still(rgb, label, mode, turned, focal)


def _check_pixels(image: Image.Image, label: str, max_pixels: int) -> None:
    w, h = image.size
    if w <= 0 or h <= 0:
        raise ImageError(f"{label}: image has no pixels ({w}x{h})")
    if w * h > max_pixels:
        raise ImageError(
            f"{label}: {w}x{h} is {w * h / 1e6:.0f} MP, over the {max_pixels / 1e6:.0f} MP cap "
            "(refused before decoding; raise it with --max-pixels)"
        )


def _to_rgb(image: Image.Image, label: str) -> tuple[np.ndarray, str, bool]:
    mode = image.mode
    try:
        image.load()
        transposed = _has_orientation(image)
        rgb = _convert(ImageOps.exif_transpose(image) if transposed else image)
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise ImageError(f"{label}: truncated or corrupt image data ({first_line(exc)})") from None
    array = np.asarray(rgb, dtype=np.uint8)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ImageError(f"{label}: could not convert mode {mode} to RGB")
    return np.ascontiguousarray(array), mode, transposed


def _has_orientation(image: Image.Image) -> bool:
    try:
        return int(image.getexif().get(0x0112, 1)) not in (0, 1)
    except (ValueError, TypeError):
        return False


EXIF_IFD, FOCAL_35MM = 0x8769, 0xA405  # the Exif sub-IFD; FocalLengthIn35mmFilm in it


def _focal_35mm(image: Image.Image) -> float | None:
    """The photo's 35 mm-equivalent focal length from its EXIF (mm), None when absent,
    0 ("unknown" in EXIF) or unreadable."""
    try:
        value = image.getexif().get_ifd(EXIF_IFD).get(FOCAL_35MM)
        focal = float(value) if value is not None else 0.0
    except (ValueError, TypeError, ZeroDivisionError, OSError, SyntaxError):
        return None
    return focal if 0 < focal < 10_000 else None


def _convert(image: Image.Image) -> Image.Image:
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        # 16-bit (or 32-bit int) greyscale: scale the full range to 8 bits.
        values = np.asarray(image, dtype=np.float64)
        peak = 65535.0 if mode.startswith("I;16") else max(float(values.max()), 1.0)
        grey = np.clip(values / peak * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return Image.fromarray(grey).convert("RGB")
    if mode == "F":
        values = np.asarray(image, dtype=np.float64)
        lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
        scaled = (values - lo) / (hi - lo) if hi > lo else np.zeros_like(values)
        return Image.fromarray((scaled * 255 + 0.5).astype(np.uint8)).convert("RGB")
    if mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    # RGBA/LA/PA: alpha dropped; CMYK, YCbCr, LAB, HSV, L, 1, P: converted by Pillow.
    return image.convert("RGB")


def _array_rgb(array: np.ndarray, label: str) -> np.ndarray:
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if (
        array.ndim != 3
        or array.shape[2] not in (3, 4)
        or array.shape[0] == 0
        or array.shape[1] == 0
    ):
        raise ImageError(f"{label}: expected an HxWx3 array, got shape {array.shape}")
    if array.dtype != np.uint8:
        raise ImageError(f"{label}: expected uint8 pixels, got {array.dtype}")
    return np.ascontiguousarray(array[:, :, :3])


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF8", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"BM", "BMP"),
)


def _magic(data: bytes) -> str | None:
    for prefix, kind in _MAGIC:
        if data.startswith(prefix):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return None
