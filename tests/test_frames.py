"""The writers in edge/frames.py: the in-house PNGs, decoded by Pillow; the npz."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from edge import frames

pytestmark = pytest.mark.arm  # runs on the emulated Cortex-A76 too (docs/arm.md)


def _smooth(shape: tuple[int, ...], dtype: type, top: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    base = (np.sin(xx / 37.0) + np.cos(yy / 23.0) + 2) / 4 * top
    if len(shape) == 3:
        base = base[..., None] * np.array([1.0, 0.7, 0.4])
    noisy = base + rng.normal(0, top / 200, base.shape)
    return np.asarray(np.clip(np.rint(noisy), 0, top), dtype=dtype)


def _depth(shape: tuple[int, int], seed: int) -> np.ndarray:
    """A positive relative-depth map: smooth, with noise, both extremes present."""
    depth = 1.0 + _smooth(shape, np.uint16, 65535, seed).astype(np.float32) / 1000.0
    depth.flat[0], depth.flat[-1] = 0.5, 200.0
    return depth


@pytest.mark.parametrize("shape", [(1200, 1600), (37, 1), (1, 5), (2, 2)])
def test_depth_png_round_trips_bit_exact(shape: tuple[int, int]) -> None:
    depth = _depth(shape, seed=shape[0])
    inv = frames.inverse_normalised(depth)
    with Image.open(io.BytesIO(frames.depth_png(depth))) as im:
        im.load()
        assert im.format == "PNG" and im.mode.startswith("I;16") and im.size == shape[::-1]
        decoded = np.asarray(im).astype(np.int64)
    expected = np.rint(inv * np.float32(65535.0)).astype(np.int64)  # float32, as written
    np.testing.assert_array_equal(decoded, expected)
    assert decoded.min() == 0 and decoded.max() == 65535


def test_depth_png_of_a_flat_map_is_zeros() -> None:
    with Image.open(io.BytesIO(frames.depth_png(np.full((3, 4), 2.0, np.float32)))) as im:
        assert not np.asarray(im).any()


@pytest.mark.parametrize("shape", [(480, 641), (3, 2), (1, 1), (1, 7), (9, 1)])
def test_preview_is_the_colormap_as_a_palette(shape: tuple[int, int]) -> None:
    depth = _depth(shape, seed=shape[1])
    index = np.rint(frames.inverse_normalised(depth) * np.float32(255.0)).astype(np.uint8)
    with Image.open(io.BytesIO(frames.preview_png(depth))) as im:
        im.load()
        assert im.format == "PNG" and im.mode == "P" and im.size == shape[::-1]
        assert im.palette is not None
        palette = np.frombuffer(im.palette.tobytes(), np.uint8).reshape(-1, 3)
        np.testing.assert_array_equal(palette, frames.COLORMAP)
        np.testing.assert_array_equal(np.asarray(im), index)
        rgb = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(rgb, frames.COLORMAP[index])


def test_preview_size_is_close_to_pillows() -> None:
    depth = _depth((1200, 1600), seed=1)
    ours = frames.preview_png(depth)
    index = np.rint(frames.inverse_normalised(depth) * np.float32(255.0)).astype(np.uint8)
    image = Image.fromarray(index, mode="L").convert("P")
    image.putpalette(frames.COLORMAP.tobytes())
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=frames.PNG_LEVEL)
    print(f"preview 1200x1600: ours {len(ours)} bytes, Pillow's {buf.tell()}")
    assert len(ours) < 1.25 * buf.tell()


def test_preview_shrinks_by_box_average() -> None:
    depth = 1.0 + _smooth((1200, 1600), np.uint16, 65535, seed=3).astype(np.float32)
    with Image.open(io.BytesIO(frames.preview_png(depth, max_side=640))) as small:
        assert small.size == (533, 400)  # 1600/3 x 1200/3: blocks of 3 x 3
    with Image.open(io.BytesIO(frames.preview_png(depth))) as full:
        assert full.size == (1600, 1200)
    with Image.open(io.BytesIO(frames.preview_png(depth[:90, :90], max_side=640))) as tiny:
        assert tiny.size == (90, 90)  # never enlarged
    inv = frames.inverse_normalised(depth)
    expected = inv[:1200, :1599].reshape(400, 3, 533, 3).mean(axis=(1, 3))
    with Image.open(io.BytesIO(frames.preview_png(depth, max_side=640))) as small:
        np.testing.assert_array_equal(np.asarray(small), np.rint(expected * 255).astype(np.uint8))


def test_inverse_from_a_known_depth_range_is_bit_identical() -> None:
    """frames.render passes depth's (min, max) instead of reducing the inverse map."""
    rng = np.random.default_rng(5)
    cases = [
        rng.uniform(0.5, 80.0, (120, 160)).astype(np.float32),
        np.full((4, 4), 3.0, np.float32),  # flat: zeros
        np.array([[0.0, 1e-20, 2.0, 7.5]], np.float32),  # at and below the clamp
        np.array([[1.0, np.inf, 2.0]], np.float32),
        np.array([[1.0, np.nan, 2.0]], np.float32),
    ]
    for depth in cases:
        plain = frames.inverse_normalised(depth)
        known = frames.inverse_normalised(depth, (float(depth.min()), float(depth.max())))
        np.testing.assert_array_equal(known, plain)


def test_rgb_is_the_scene_at_the_outputs_size() -> None:
    """The "rgb" output: the frame's pixels as JPEG at the depth's size (resized when the
    outputs are smaller than the image), and refused without pixels."""
    from edge.depth import DepthFrame

    rgb = _smooth((120, 160, 3), np.uint8, 255, seed=4)
    ran = ("fp16", "numpy", "m", "random-init:0", True, "a.tflite")  # precision ... artifact
    for shape in ((120, 160), (60, 80)):
        depth = np.ones(shape, np.float32)
        frame = DepthFrame(depth, depth, "x", (120, 160), (14, 14), (14, 14), *ran, rgb=rgb)
        rgb_jpeg = frames.render(frame, ["rgb"])["rgb"]
        assert isinstance(rgb_jpeg, bytes)
        with Image.open(io.BytesIO(rgb_jpeg)) as im:
            assert im.format == "JPEG" and im.size == (shape[1], shape[0])
            if shape == (120, 160):
                err = np.abs(np.asarray(im, np.int16) - rgb.astype(np.int16)).mean()
                assert err < 3.0, err
    frame.rgb = None
    with pytest.raises(ValueError, match="no camera image kept"):
        frames.render(frame, ["rgb"])


def test_npz_is_what_np_savez_writes() -> None:
    """npz_writer lays the archive out itself (no copies of the arrays); np.load must
    read it like np.savez's, at the same size."""
    from edge.depth import DepthFrame

    rng = np.random.default_rng(2)
    ran = ("fp16", "numpy", "m", "random-init:0", True, "a.tflite")  # precision ... artifact
    for shape in ((1200, 1600), (3, 5), (1, 1)):
        depth = rng.random(shape, dtype=np.float32)
        conf = 1 + rng.random(shape, dtype=np.float32)
        frame = DepthFrame(depth, conf, "x", shape, (14, 14), (14, 14), *ran)
        ours, theirs = io.BytesIO(), io.BytesIO()
        frames.npz_writer(frame)(ours)
        np.savez(theirs, depth=depth, conf=conf)
        assert len(ours.getvalue()) == len(theirs.getvalue())
        ours.seek(0)
        with np.load(ours) as npz:
            assert sorted(npz.files) == ["conf", "depth"]
            np.testing.assert_array_equal(npz["depth"], depth)
            np.testing.assert_array_equal(npz["conf"], conf)
            assert npz["depth"].dtype == np.float32
