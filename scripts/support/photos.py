"""Real photographs for the tests, and the mixed set a camera kit meets in the wild.

The photographs ship inside the scikit-image wheel (skimage/data/). ``make`` derives
the variants the stills tests use, plus the inputs they must refuse:

    python -m scripts.support.photos OUTDIR

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

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png")
# The stage-fidelity sizes (H x W): tiny, small, HD both ways, the default camera both
# ways, 12 MP photos both ways (over the ExecuTorch stages' 2048-a-side bound).
STAGE_SIZES: tuple[tuple[int, int], ...] = (
    (40, 30),
    (300, 200),
    (720, 1280),
    (1280, 720),
    (1200, 1600),
    (1600, 1200),
    (3000, 4000),
    (4032, 3024),
)


def skimage_data() -> Path:
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-image (a dev dependency) is not installed: uv sync")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def photo_path(name: str) -> Path:
    """A real photograph shipped inside the scikit-image wheel (read with Pillow)."""
    return skimage_data() / name


def sized_photos() -> dict[str, np.ndarray]:
    """A real photograph (astronaut) resized with Pillow to each of STAGE_SIZES."""
    with Image.open(photo_path("astronaut.png")) as im:
        base = im.convert("RGB")
        return {
            f"{h}x{w}": np.asarray(base.resize((w, h), Image.Resampling.LANCZOS))
            for h, w in STAGE_SIZES
        }


def normalised_photo(name: str, shape: tuple[int, int]) -> np.ndarray:
    """A photo resized to ``shape`` and ImageNet-normalised, (1, 3, h, w) float32."""
    h, w = shape
    with Image.open(photo_path(name)) as im:
        rgb = im.convert("RGB").resize((w, h), Image.Resampling.BICUBIC)
    array = (np.asarray(rgb, dtype=np.float32) / 255.0 - MEAN) / STD
    return np.ascontiguousarray(array.transpose(2, 0, 1)[None], dtype=np.float32)


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
    """The good and the bad photos under ``out``, by kind."""
    data = skimage_data()
    photos = {
        name: Image.open(data / file).convert("RGB")
        for name, file in (
            ("coffee", "coffee.png"),  # 600x400
            ("astronaut", "astronaut.png"),  # 512x512
            ("rocket", "rocket.jpg"),  # 640x427
            ("chelsea", "chelsea.png"),  # 451x300
        )
    }
    return {
        "good": make_good(out / "good", **photos),
        "bad": make_bad(out / "bad", photos["rocket"], photos["chelsea"]),
    }


def make_good(
    good: Path,
    coffee: Image.Image,
    astronaut: Image.Image,
    rocket: Image.Image,
    chelsea: Image.Image,
) -> list[Path]:
    """What a still must read: orientation, alpha, grey, CMYK, 16 bits, palette, crops."""
    good.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    # EXIF orientation 6: the pixels are stored as a 400x600 (W x H) portrait that
    # viewers turn 90 degrees clockwise: displayed, it is coffee's 600x400 landscape.
    stored = coffee.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = good / "exif-rotated.jpg"
    stored.save(path, quality=92, exif=exif.tobytes())
    made.append(path)

    rgba = astronaut.convert("RGBA")
    alpha = np.full((512, 512), 255, np.uint8)
    alpha[:, :128] = 0
    rgba.putalpha(Image.fromarray(alpha))
    path = good / "alpha.png"
    rgba.save(path)
    made.append(path)

    path = good / "grey.png"
    chelsea.convert("L").save(path)
    made.append(path)

    path = good / "cmyk.jpg"
    rocket.convert("CMYK").save(path, quality=92)
    made.append(path)

    grey16 = (np.asarray(coffee.convert("L"), dtype=np.uint16) * 257).astype(np.uint16)
    path = good / "grey16.png"
    Image.fromarray(grey16).save(path)
    made.append(path)

    path = good / "palette.png"
    astronaut.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(path)
    made.append(path)

    for name, src, (rw, rh) in (
        ("wide-16x9.jpg", rocket, (16, 9)),
        ("tall-9x16.jpg", rocket, (9, 16)),
        ("landscape-4x3.jpg", coffee, (4, 3)),
        ("portrait-3x4.png", chelsea, (3, 4)),
    ):
        path = good / name
        if name.endswith(".jpg"):
            crop_to(src, rw, rh).save(path, quality=92)
        else:
            crop_to(src, rw, rh).save(path)
        made.append(path)

    return made


def make_bad(bad: Path, rocket: Image.Image, chelsea: Image.Image) -> list[Path]:
    """What a still must refuse in one line: not an image, empty, truncated, corrupt, a
    decompression bomb, a directory."""
    bad.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    path = bad / "not-an-image.jpg"
    path.write_text("this is a text file, not a JPEG\n")
    made.append(path)
    path = bad / "empty.png"
    path.write_bytes(b"")
    made.append(path)
    buf = io.BytesIO()
    rocket.save(buf, format="JPEG", quality=92)
    path = bad / "truncated.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    made.append(path)
    buf = io.BytesIO()
    chelsea.save(buf, format="PNG")
    raw = bytearray(buf.getvalue())
    for i in range(200, len(raw) - 200, 97):  # scramble the compressed pixel data
        raw[i] ^= 0x5A
    path = bad / "corrupt.png"
    path.write_bytes(bytes(raw))
    made.append(path)
    path = bad / "bomb.png"
    path.write_bytes(bomb_png(30000, 30000))
    made.append(path)
    path = bad / "folder.jpg"
    path.mkdir(exist_ok=True)
    made.append(path)
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    for kind, paths in make(Path(sys.argv[1])).items():
        for p in paths:
            print(f"{kind}: {p}")
