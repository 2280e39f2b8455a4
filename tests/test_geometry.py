"""Depth to points (edge.geometry): where the field of view comes from, back-projection
against an independent one and against DA3's own export, the plane test, the PLY."""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path

import numpy as np
import plyfile
import pytest
from PIL import Image

from edge import fov, frames, geometry, images
from edge.fov import FieldOfView
from edge.geometry import Intrinsics
from scripts.support import ROOT
from scripts.support.scene import angle, board_and_wall, plane_normal

SIZE = (378, 504)
HFOV = 66.0


def test_the_field_of_view_comes_from_the_config_then_the_camera_then_exif() -> None:
    camera = fov.of_camera("imx708")
    exif = fov.of_exif(26.0, (3000, 4000))
    assert camera == FieldOfView(66.0, "camera imx708: published 66 degrees")
    assert exif is not None and exif.source == "EXIF: 26 mm (35 mm equivalent)"
    said = fov.choose(fov.configured(80.0, "config camera.hfov"), camera, exif, none="x")
    assert said == FieldOfView(80.0, "config camera.hfov")
    assert fov.choose(fov.configured(0.0, "--hfov"), camera, exif, none="x") == camera
    assert fov.choose(None, None, exif, none="x") == exif
    nothing = fov.choose(None, None, none="no camera.hfov")
    assert nothing == FieldOfView(None, "none: no camera.hfov")
    # A camera without a published field of view says why, and a later source may still
    # have one.
    hq = fov.of_camera("imx477")
    assert hq.degrees is None and "camera.hfov" in hq.source and "HQ" in hq.source
    assert fov.choose(hq, None, none="x") == hq
    assert fov.choose(hq, exif, none="x") == exif


def test_camera_modules_by_sensor_and_crop() -> None:
    """The published fields of view; a NoIR module is its sensor; a crop of the sensor
    (libcamera's ScalerCrop: a 4:3 picture from the 16:9 Camera Module 3) narrows it."""
    assert fov.of_camera("imx708_wide_noir").degrees == 102.0
    assert fov.of_camera("imx219", 3280, 3280).degrees == 62.2
    cropped = fov.of_camera("imx708", 4608, 3456)
    expected = math.degrees(2 * math.atan(math.tan(math.radians(33.0)) * 3456 / 4608))
    assert cropped.degrees == pytest.approx(expected, abs=1e-3)
    assert "3456 of 4608" in cropped.source
    unknown = fov.of_camera("Virtual0")
    assert unknown.degrees is None and "'Virtual0'" in unknown.source


def test_exif_35mm_focal_length_through_the_photo_aspect() -> None:
    """A 35 mm-equivalent focal length is against the 36x24 frame's diagonal: a 3:2
    photo's width is 36 mm, a 4:3 one's 43.27 * 4/5 mm, upright or turned."""
    wide = fov.of_exif(24.0, (2000, 3000))
    assert wide is not None and wide.degrees == pytest.approx(73.74, abs=0.01)
    four_three = fov.of_exif(26.0, (3000, 4000))
    width_mm = math.hypot(36, 24) * 4 / 5
    assert four_three is not None and four_three.degrees is not None
    assert four_three.degrees == pytest.approx(math.degrees(2 * math.atan(width_mm / 52)), 1e-4)
    upright = fov.of_exif(26.0, (4000, 3000))
    assert upright is not None and upright.degrees is not None
    assert upright.degrees < four_three.degrees  # the narrow side is across
    assert fov.of_exif(None, (10, 10)) is None and fov.of_exif(0.0, (10, 10)) is None
    assert fov.of_exif(0.01, (10, 10)) is None  # a 179+ degree lens: not believed


@pytest.mark.parametrize("kind", ["JPEG", "WEBP"])
def test_a_photo_carries_its_exif_focal_length(kind: str) -> None:
    exif = Image.Exif()
    exif.get_ifd(images.EXIF_IFD)[images.FOCAL_35MM] = 26
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (9, 9, 9)).save(out, kind, exif=exif)
    assert images.load(out.getvalue()).focal_35mm == 26.0
    plain = io.BytesIO()
    Image.new("RGB", (64, 48)).save(plain, kind)
    assert images.load(plain.getvalue()).focal_35mm is None


def test_back_projection_matches_an_independent_one() -> None:
    """Every point against K^-1 (u + 0.5, v + 0.5, 1) * depth, on a map of another
    aspect than its picture's and a grid step of 3, coloured from a picture of another
    size; the threshold leaves out the least confident pixels."""
    rng = np.random.default_rng(3)
    depth = (1 + 4 * rng.random((90, 120))).astype(np.float32)
    conf = (1 + rng.random((90, 120))).astype(np.float32)
    colours = rng.integers(0, 256, (45, 60, 3), dtype=np.uint8)
    k = Intrinsics.of(HFOV, (90, 120), (100, 120))
    cloud = geometry.back_project(depth, conf, colours, k, step=3)
    matrix = np.array([[k.fx, 0, k.cx], [0, k.fy, k.cy], [0, 0, 1]])
    v, u = np.mgrid[0:90:3, 0:120:3]
    keep = conf[::3, ::3] >= cloud.conf_threshold
    pixels = np.stack([u[keep] + 0.5, v[keep] + 0.5, np.ones(keep.sum())])
    expected = (np.linalg.inv(matrix) @ pixels * depth[::3, ::3][keep]).T
    error = float(np.abs(cloud.points - expected).max())
    print(f"back-projection: {cloud.count} points, max |error| {error:.2e}")
    assert cloud.count == keep.sum() < keep.size and error < 1e-5
    assert (cloud.colours == colours[v[keep] // 2, u[keep] // 2]).all()
    # square pixels in the picture: the map's 90 rows span the picture's 100
    assert k.fy / k.fx == pytest.approx(0.9)


def test_a_board_comes_back_planar_and_at_its_angle() -> None:
    """A board turned 30 degrees in front of a wall, ray-cast (scripts/support/scene.py)
    at a known field of view, back-projected: the board's points lie on a plane (RMS
    distance under 1e-4 of its depth) at 30 degrees within 0.05; the wall's face the
    camera. With a wrong field of view the angle is off, so the test can fail."""
    scene = board_and_wall(SIZE, HFOV, tilt=30.0)
    conf = np.full(SIZE, 2.0, np.float32)
    cloud = geometry.cloud_of(scene.depth, conf, scene.rgb, FieldOfView(HFOV, "test"), SIZE)
    assert cloud.count == SIZE[0] * SIZE[1]  # all equally sure: all kept
    board = (cloud.colours == (40, 200, 90)).all(axis=1)
    normal, rms = plane_normal(cloud.points[board])
    off = angle(normal, scene.board_normal)
    tilt = angle(normal, np.array([0.0, 0.0, 1.0]))
    wall_normal, wall_rms = plane_normal(cloud.points[~board])
    print(f"board: {board.sum()} points at {tilt:.4f} deg (off by {off:.2e}), RMS {rms:.2e}")
    assert off < 0.05 and abs(tilt - 30.0) < 0.05 and rms < 3.0 * 1e-4
    assert angle(wall_normal, np.array([0.0, 0.0, 1.0])) < 0.05 and wall_rms < 6.0 * 1e-4
    wrong = geometry.cloud_of(scene.depth, conf, scene.rgb, FieldOfView(50.0, "wrong"), SIZE)
    wrong_tilt = angle(plane_normal(wrong.points[board])[0], np.array([0.0, 0.0, 1.0]))
    assert abs(wrong_tilt - 30.0) > 5.0, wrong_tilt


def test_the_ply_is_what_a_standard_reader_reads() -> None:
    """plyfile (not ours) reads the binary PLY: the count, the fields, the points and
    colours as made, and a header that says the scale is relative and the weights are
    random-init."""
    rng = np.random.default_rng(5)
    depth = (1 + rng.random((60, 80))).astype(np.float32)
    conf = (1 + rng.random((60, 80))).astype(np.float32)
    rgb = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    given = FieldOfView(70.0, "--hfov")
    data, cloud = frames.point_cloud(depth, conf, rgb, given, (60, 80), random_init=True)
    ply = plyfile.PlyData.read(io.BytesIO(data))
    vertex = ply["vertex"]
    assert [p.name for p in vertex.properties] == ["x", "y", "z", "red", "green", "blue"]
    assert vertex.count == cloud.count == (conf >= cloud.conf_threshold).sum()
    assert np.array_equal(np.stack([vertex["x"], vertex["y"], vertex["z"]], 1), cloud.points)
    assert np.array_equal(np.stack([vertex[c] for c in ("red", "green", "blue")], 1), cloud.colours)
    said = " | ".join(ply.comments)
    assert "relative" in said and "not metres" in said and "70 degrees (--hfov)" in said
    assert "random-init" in said
    real, _ = frames.point_cloud(depth, conf, None, given, (60, 80), random_init=False)
    assert "random-init" not in " ".join(plyfile.PlyData.read(io.BytesIO(real)).comments)
    with pytest.raises(ValueError, match="no field of view"):
        frames.point_cloud(
            depth, conf, rgb, FieldOfView(None, "none: x"), (60, 80), random_init=True
        )


def test_a_large_map_is_sampled_to_a_million_points() -> None:
    """At most a million points (DA3's own cap): every pixel of a 1000x1000 map, every
    other of a 1200x1600 one, every fourth of a 12 MP photo's."""
    assert geometry.step_for((1000, 1000)) == 1 and geometry.step_for((1001, 1000)) == 2
    assert geometry.step_for((3000, 4000)) == 4 and geometry.step_for((378, 504)) == 1
    depth = np.ones((1200, 1600), np.float32)
    cloud = geometry.cloud_of(
        depth, depth * 2, np.zeros((1, 1, 3), np.uint8), FieldOfView(60.0, "t"), (1200, 1600)
    )
    assert cloud.count == 600 * 800 and cloud.step == 2


def test_the_cloud_matches_da3s_own_export(export_env: Path, tmp_path: Path) -> None:
    """DA3's confidence threshold (get_conf_thresh with export_to_glb's defaults) and
    its back-projection (_depths_to_world_points_with_colors), run by the reference
    package in the export environment: the same threshold, points within 1e-5
    relative, the same colours. DA3 takes pixel (u, v) at u, ours at its centre: the
    reference's K is ours shifted by half a pixel."""
    rng = np.random.default_rng(11)
    depth = (0.5 + 3 * rng.random(SIZE)).astype(np.float32)
    conf = (1 + 2 * rng.random(SIZE)).astype(np.float32)
    rgb = rng.integers(0, 256, (*SIZE, 3), dtype=np.uint8)
    k = Intrinsics.of(HFOV, SIZE, SIZE)
    matrix = np.array([[k.fx, 0, k.cx - 0.5], [0, k.fy, k.cy - 0.5], [0, 0, 1]])
    np.savez(tmp_path / "in.npz", depth=depth, conf=conf, image=rgb, K=matrix)
    proc = subprocess.run(
        [
            str(export_env),
            "-m",
            "scripts.support.reference_cloud",
            str(tmp_path / "in.npz"),
            str(tmp_path / "out.npz"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as ref:
        threshold, points, colours = float(ref["threshold"]), ref["points"], ref["colours"]
    cloud = geometry.back_project(depth, conf, rgb, k)
    error = float((np.abs(cloud.points - points) / np.abs(points).max()).max())
    print(
        f"DA3 reference: threshold {threshold:.6f} (ours {cloud.conf_threshold:.6f}), "
        f"{len(points)} points, max relative error {error:.2e}"
    )
    assert cloud.conf_threshold == pytest.approx(threshold, rel=1e-6)  # float32 percentiles
    assert cloud.count == len(points) and error < 1e-5
    assert np.array_equal(cloud.colours, colours)
