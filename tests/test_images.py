"""Decoding stills: conversions that must happen, inputs that must be refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edge import images
from edge.errors import ImageError, InputUnreadable
from scripts.support.photos import photo_path

pytestmark = pytest.mark.arm  # runs on the emulated Cortex-A76 too (docs/arm.md)


def test_exif_orientation_is_applied(photos: Path) -> None:
    still = images.load(photos / "good" / "exif-rotated.jpg")
    with Image.open(photos / "good" / "exif-rotated.jpg") as raw:
        assert raw.size == (400, 600)  # stored portrait
    assert still.size == (400, 600)  # displayed landscape (H, W)
    assert still.exif_transposed
    # It is the coffee photo the right way up: compare with the original.
    with Image.open(photo_path("coffee.png")) as original:
        ref = np.asarray(original.convert("RGB"), dtype=np.float32)
    assert np.abs(still.rgb.astype(np.float32) - ref).mean() < 6  # JPEG noise only


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("alpha.png", "RGBA"),
        ("grey.png", "L"),
        ("cmyk.jpg", "CMYK"),
        ("grey16.png", "I;16"),
        ("palette.png", "P"),
    ],
)
def test_modes_are_converted_to_rgb(photos: Path, name: str, mode: str) -> None:
    still = images.load(photos / "good" / name)
    assert still.mode == mode
    assert still.rgb.dtype == np.uint8 and still.rgb.ndim == 3 and still.rgb.shape[2] == 3
    assert still.rgb.std() > 10  # a real picture, not a flat conversion accident


def test_grey16_keeps_its_range(photos: Path) -> None:
    still = images.load(photos / "good" / "grey16.png")  # coffee's grey * 257
    with Image.open(photo_path("coffee.png")) as original:
        grey = np.asarray(original.convert("L"))
    np.testing.assert_array_equal(still.rgb[:, :, 0], grey)


def test_alpha_is_dropped_not_blended(photos: Path) -> None:
    still = images.load(photos / "good" / "alpha.png")
    with Image.open(photo_path("astronaut.png")) as original:
        ref = np.asarray(original.convert("RGB"))
    np.testing.assert_array_equal(still.rgb, ref)  # transparent columns keep their colour


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("not-an-image.jpg", "not an image"),
        ("empty.png", "empty file"),
        ("truncated.jpg", "truncated or corrupt image data"),
        ("corrupt.png", "corrupt PNG"),
        ("bomb.png", "too many pixels, refused before decoding"),
    ],
)
def test_bad_files_are_refused_in_one_line(photos: Path, name: str, message: str) -> None:
    path = photos / "bad" / name
    with pytest.raises(ImageError) as info:
        images.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text


def test_pixel_cap_is_checked_before_decoding(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    Image.new("RGB", (3000, 2000)).save(path)
    with pytest.raises(ImageError, match="6 MP, over the 5 MP cap"):
        images.load(path, max_pixels=5_000_000)
    assert images.load(path, max_pixels=6_000_000).size == (2000, 3000)


def test_unreadable_inputs(photos: Path, tmp_path: Path) -> None:
    with pytest.raises(InputUnreadable, match="No such file"):
        images.load(tmp_path / "missing.jpg")
    with pytest.raises(InputUnreadable, match="is a directory"):
        images.load(photos / "bad" / "folder.jpg")


def test_arrays_and_pil_images() -> None:
    rgb = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    assert images.load(rgb).size == (30, 40)
    np.testing.assert_array_equal(images.load(Image.fromarray(rgb)).rgb, rgb)
    assert images.load(rgb[:, :, 0]).rgb.shape == (30, 40, 3)
    with pytest.raises(ImageError, match="uint8"):
        images.load(rgb.astype(np.float32))
    with pytest.raises(ImageError, match="HxWx3"):
        images.load(np.zeros((0, 4, 3), np.uint8))
