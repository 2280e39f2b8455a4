#!/usr/bin/env python3
"""Make the mixed photo set the stills tests use, from real photographs.

The photographs ship inside the scikit-image wheel (skimage/data/); this script
derives the variants a camera kit meets in the wild, plus the inputs it must refuse:

    python scripts/make-test-photos.py OUTDIR

good/: JPEG with EXIF orientation 6 (stored sideways), PNG with alpha, greyscale,
CMYK JPEG, 16-bit greyscale PNG, palette PNG, 16:9 and 9:16 and 4:3 and 3:4 crops.
bad/: not an image, empty file, truncated JPEG, corrupt PNG data, a PNG whose header
claims 30000x30000 pixels (a decompression bomb), a directory named like an image.
"""

from __future__ import annotations

import importlib.util
import io
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def skimage_data() -> Path:
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-image is not installed (it is a dev dependency: uv sync)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def crop_to(image: Image.Image, ratio_w: int, ratio_h: int) -> Image.Image:
    w, h = image.size
    if w / h > ratio_w / ratio_h:
        new_w = round(h * ratio_w / ratio_h)
        left = (w - new_w) // 2
        return image.crop((left, 0, left + new_w, h))
    new_h = round(w * ratio_h / ratio_w)
    top = (h - new_h) // 2
    return image.crop((0, top, w, top + new_h))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height, with a tiny (invalid) data stream."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def make(out: Path) -> dict[str, list[Path]]:
    data = skimage_data()
    good, bad = out / "good", out / "bad"
    good.mkdir(parents=True, exist_ok=True)
    bad.mkdir(parents=True, exist_ok=True)
    coffee = Image.open(data / "coffee.png").convert("RGB")  # 600x400
    astronaut = Image.open(data / "astronaut.png").convert("RGB")  # 512x512
    rocket = Image.open(data / "rocket.jpg").convert("RGB")  # 640x427
    chelsea = Image.open(data / "chelsea.png").convert("RGB")  # 451x300
    made: dict[str, list[Path]] = {"good": [], "bad": []}

    def keep(kind: str, path: Path) -> None:
        made[kind].append(path)

    # EXIF orientation 6: the pixels are stored as a 400x600 (W x H) portrait that
    # viewers turn 90 degrees clockwise: displayed, it is coffee's 600x400 landscape.
    stored = coffee.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = good / "exif-rotated.jpg"
    stored.save(path, quality=92, exif=exif.tobytes())
    keep("good", path)

    rgba = astronaut.convert("RGBA")
    alpha = np.full((512, 512), 255, np.uint8)
    alpha[:, :128] = 0
    rgba.putalpha(Image.fromarray(alpha))
    path = good / "alpha.png"
    rgba.save(path)
    keep("good", path)

    path = good / "grey.png"
    chelsea.convert("L").save(path)
    keep("good", path)

    path = good / "cmyk.jpg"
    rocket.convert("CMYK").save(path, quality=92)
    keep("good", path)

    grey16 = (np.asarray(coffee.convert("L"), dtype=np.uint16) * 257).astype(np.uint16)
    path = good / "grey16.png"
    Image.fromarray(grey16).save(path)
    keep("good", path)

    path = good / "palette.png"
    astronaut.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(path)
    keep("good", path)

    for name, src, (rw, rh) in (
        ("wide-16x9.jpg", rocket, (16, 9)),
        ("tall-9x16.jpg", rocket, (9, 16)),
        ("landscape-4x3.jpg", coffee, (4, 3)),
        ("portrait-3x4.png", chelsea, (3, 4)),
    ):
        path = good / name
        crop_to(src, rw, rh).save(path, **({"quality": 92} if name.endswith(".jpg") else {}))
        keep("good", path)

    path = bad / "not-an-image.jpg"
    path.write_text("this is a text file, not a JPEG\n")
    keep("bad", path)
    path = bad / "empty.png"
    path.write_bytes(b"")
    keep("bad", path)
    buf = io.BytesIO()
    rocket.save(buf, format="JPEG", quality=92)
    path = bad / "truncated.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    keep("bad", path)
    buf = io.BytesIO()
    chelsea.save(buf, format="PNG")
    raw = bytearray(buf.getvalue())
    for i in range(200, len(raw) - 200, 97):  # scramble the compressed pixel data
        raw[i] ^= 0x5A
    path = bad / "corrupt.png"
    path.write_bytes(bytes(raw))
    keep("bad", path)
    path = bad / "bomb.png"
    path.write_bytes(bomb_png(30000, 30000))
    keep("bad", path)
    path = bad / "folder.jpg"
    path.mkdir(exist_ok=True)
    keep("bad", path)
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for kind, paths in make(Path(sys.argv[1])).items():
        for p in paths:
            print(f"{kind}: {p}")
