"""`da3-edge snap` end to end, in real processes, on real photographs and bad files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import plyfile
import pytest
from PIL import Image

from edge.parity import metrics
from scripts.support.photos import photo_path, sized_photos
from scripts.support.tools import auto_stages, run_cli, run_main, tmpfs

GOOD = {
    # name: displayed (H, W)
    "exif-rotated.jpg": (400, 600),
    "alpha.png": (512, 512),
    "grey.png": (300, 451),
    "cmyk.jpg": (427, 640),
    "grey16.png": (400, 600),
    "palette.png": (512, 512),
    "wide-16x9.jpg": (360, 640),
    "tall-9x16.jpg": (427, 240),
    "landscape-4x3.jpg": (400, 533),
    "portrait-3x4.png": (300, 225),
}
BAD = {
    "not-an-image.jpg": "not an image",
    "empty.png": "empty file",
    "truncated.jpg": "truncated or corrupt image data",
    "corrupt.png": "corrupt PNG",
    "bomb.png": "too many pixels",
}
FILES = (".depth.png", ".npz", ".preview.png", ".json")


def _check_outputs(
    out: Path, stem: str, size: tuple[int, int], stages: str | None = None
) -> dict[str, Any]:
    """``stages``: the backend the record names (None: what the default, auto, runs)."""
    stages = stages or auto_stages()
    h, w = size
    with Image.open(out / f"{stem}.depth.png") as png:
        assert png.mode in ("I;16", "I;16B", "I;16L", "I") and png.size == (w, h)
        inv = np.asarray(png, dtype=np.float64)
    assert inv.min() == 0 and inv.max() == 65535
    with np.load(out / f"{stem}.npz") as npz:
        depth, conf = npz["depth"], npz["conf"]
    assert depth.dtype == conf.dtype == np.float32 and depth.shape == conf.shape == (h, w)
    assert (depth > 0).all() and (conf >= 1).all()
    # larger = nearer in the PNG, larger = farther in the npz
    assert metrics(1.0 / depth, inv)["pearson"] > 0.999
    with Image.open(out / f"{stem}.preview.png") as preview:
        assert preview.mode == "P" and preview.size == (w, h)
    meta: dict[str, Any] = json.loads((out / f"{stem}.json").read_text())
    assert meta["random_init"] is True and "NOT a real model" in meta["warning"]
    assert (
        meta["source_size"] == [h, w] and meta["stages"] == stages and meta["precision"] == "fp16"
    )
    assert meta["depth"]["min"] == pytest.approx(float(depth.min()))
    assert set(meta["timings_ms"]) == {"decode", "preprocess", "core", "postprocess"}
    assert "da3-edge" in meta["versions"] and "ai-edge-litert" in meta["versions"]
    return meta


def test_mixed_batch_good_and_bad(small_models: Path, photos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    bad = [str(photos / "bad" / name) for name in BAD]
    proc = run_cli(
        ["snap", str(photos / "good"), *bad, "--models", str(small_models), "-o", str(out)]
    )
    assert proc.returncode == 1, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("da3-edge: error:")]
    assert len(errors) == len(BAD)
    for name, message in BAD.items():
        (line,) = [ln for ln in errors if f"/bad/{name}:" in ln]
        assert message in line
    assert proc.stderr.splitlines()[-1] == f"{len(GOOD)} written, {len(BAD)} failed"
    assert proc.stderr.splitlines()[0].startswith(
        "da3-edge: warning: these models have random-init weights"
    )
    resized = set()
    for name, size in GOOD.items():
        meta = _check_outputs(out, Path(name).stem, size)
        assert meta["shape_used"] == [140, 182] and meta["size"] == 182
        assert meta["resized_to_nearest_shape"] == (meta["shape_wanted"] != [140, 182])
        resized |= {name} if meta["resized_to_nearest_shape"] else set()
    # At the small models' size (182) only the 4:3 landscape photo is DA3's 140x182.
    assert set(GOOD) - resized == {"landscape-4x3.jpg"}
    assert json.loads((out / "exif-rotated.json").read_text())["exif_transposed"] is True
    assert json.loads((out / "cmyk.json").read_text())["source_mode"] == "CMYK"
    produced = {p.name for p in out.iterdir()}
    assert produced == {f"{Path(n).stem}{s}" for n in GOOD for s in FILES}  # nothing for bad inputs


def test_single_file_is_quiet_and_exact(small_models: Path, photos: Path, tmp_path: Path) -> None:
    proc = run_cli(
        [
            "snap",
            str(photos / "good" / "grey.png"),
            "--models",
            str(small_models),
            "-o",
            str(tmp_path),
            "--format",
            "npz,json",
        ]
    )
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "da3-edge: warning: these models have random-init weights: outputs are NOT a real model's depth (flagged in every .json)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grey.json", "grey.npz"]


def test_the_scene_beside_the_depth(small_models: Path, photos: Path, tmp_path: Path) -> None:
    """``--format rgb``: the image itself as JPEG at the outputs' size, beside the depth."""
    photo = photos / "good" / "wide-16x9.jpg"
    snap = ["snap", str(photo), "--models", str(small_models), "-o", str(tmp_path)]
    proc = run_cli([*snap, "--format", "preview,rgb"])
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "wide-16x9.preview.png",
        "wide-16x9.rgb.jpg",
    ]
    with Image.open(tmp_path / "wide-16x9.rgb.jpg") as scene, Image.open(photo) as original:
        assert scene.format == "JPEG" and scene.size == original.size
        err = np.abs(np.asarray(scene, np.int16) - np.asarray(original.convert("RGB"), np.int16))
    print(f"rgb output vs the photo: mean |error| {err.mean():.2f} levels")
    assert err.mean() < 3.0


def _expected_points(npz: Path) -> tuple[int, int, float]:
    """(points, step, threshold) of a map's cloud, worked out here: every step-th pixel
    (at most a million), DA3's threshold (1.05 within the 40th..90th percentile)."""
    with np.load(npz) as arrays:
        conf = arrays["conf"]
    step = 1
    while len(range(0, conf.shape[0], step)) * len(range(0, conf.shape[1], step)) > 1_000_000:
        step += 1
    grid = conf[::step, ::step]
    low, high = np.percentile(grid, [40, 90])
    threshold = min(max(1.05, float(low)), float(high))
    return int((grid >= threshold).sum()), step, threshold


def test_point_clouds_of_every_photo_kind(small_models: Path, photos: Path, tmp_path: Path) -> None:
    """``--ply --hfov 60`` over every kind of photo: a PLY beside each depth map that
    plyfile reads, with the points the map's confidence lets through, the photo's
    colours, and the field of view's source in the JSON."""
    out = tmp_path / "out"
    snap = ["snap", str(photos / "good"), "--ply", "--hfov", "60"]
    proc = run_cli([*snap, "--models", str(small_models), "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    for name in GOOD:
        stem = Path(name).stem
        meta = json.loads((out / f"{stem}.json").read_text())
        assert meta["field_of_view"] == {"horizontal_degrees": 60.0, "source": "--hfov"}
        points, step, threshold = _expected_points(out / f"{stem}.npz")
        assert meta["point_cloud"]["points"] == points and meta["point_cloud"]["step"] == step
        assert meta["point_cloud"]["conf_threshold"] == pytest.approx(threshold, rel=1e-5)
        ply = plyfile.PlyData.read(str(out / f"{stem}.ply"))
        assert ply["vertex"].count == points > 0, name
        assert [p.name for p in ply["vertex"].properties] == ["x", "y", "z", "red", "green", "blue"]
        assert (ply["vertex"]["z"] > 0).all()
        assert any("random-init" in c for c in ply.comments), name
    produced = {p.name for p in out.iterdir()}
    assert produced == {f"{Path(n).stem}{s}" for n in GOOD for s in (*FILES, ".ply")}


def test_a_photos_exif_focal_length_and_a_photo_without_one(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    """``--ply`` alone: a phone photo's EXIF 35 mm focal length gives its field of view
    (the JSON says so); a photo without one gets its depth outputs and one error line
    saying to give --hfov, and no PLY (exit 1)."""
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0xA405] = 26  # FocalLengthIn35mmFilm
    with Image.open(photos / "good" / "landscape-4x3.jpg") as photo:
        photo.save(tmp_path / "phone.jpg", exif=exif)
    out = tmp_path / "out"
    plain = photos / "good" / "grey.png"
    snap = ["snap", str(tmp_path / "phone.jpg"), str(plain), "--ply"]
    proc = run_cli([*snap, "--models", str(small_models), "-o", str(out)])
    assert proc.returncode == 1, proc.stderr
    fov = json.loads((out / "phone.json").read_text())["field_of_view"]
    assert fov["source"] == "EXIF: 26 mm (35 mm equivalent)"
    assert fov["horizontal_degrees"] == pytest.approx(67.28, abs=0.01)  # 533x400 at 26 mm
    assert plyfile.PlyData.read(str(out / "phone.ply"))["vertex"].count > 0
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("da3-edge: error:")]
    assert "grey.png: no point cloud" in error and "--hfov" in error, error
    grey = json.loads((out / "grey.json").read_text())["field_of_view"]
    assert grey["horizontal_degrees"] is None and grey["source"].startswith("none: ")
    assert sorted(p.name for p in out.iterdir() if p.stem.startswith("grey")) == sorted(
        f"grey{s}" for s in FILES
    )


def test_stdin(small_models: Path, photos: Path, tmp_path: Path) -> None:
    data = (photos / "good" / "wide-16x9.jpg").read_bytes()
    proc = run_cli(["snap", "-", "--models", str(small_models), "-o", str(tmp_path)], stdin=data)
    assert proc.returncode == 0, proc.stderr
    meta = _check_outputs(tmp_path, "stdin", (360, 640))
    assert meta["name"] == "stdin" and meta["source"] == "-"


def test_same_stem_never_overwrites_another_input(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(photos / "good" / "grey.png", a / "photo.png")
    shutil.copy(photos / "good" / "wide-16x9.jpg", b / "photo.jpg")
    out = tmp_path / "out"
    args = ["--models", str(small_models), "-o", str(out)]
    assert run_cli(["snap", str(a / "photo.png"), str(b / "photo.jpg"), *args]).returncode == 0
    assert json.loads((out / "photo.json").read_text())["source"] == str(
        (a / "photo.png").resolve()
    )
    assert json.loads((out / "photo-2.json").read_text())["source"] == str(
        (b / "photo.jpg").resolve()
    )
    # A later run of one of them rewrites its own files, not the other's.
    assert run_cli(["snap", str(b / "photo.jpg"), *args]).returncode == 0
    assert not (out / "photo-3.json").exists()
    assert json.loads((out / "photo.json").read_text())["source"] == str(
        (a / "photo.png").resolve()
    )
    # Files nobody claims (no sidecar) are left alone too.
    (out / "other.depth.png").write_bytes(b"someone else's")
    shutil.copy(photos / "good" / "grey.png", a / "other.png")
    assert run_cli(["snap", str(a / "other.png"), *args]).returncode == 0
    assert (out / "other.depth.png").read_bytes() == b"someone else's"
    assert (out / "other-2.json").exists()


def test_no_model_says_how_to_get_one(photos: Path, tmp_path: Path) -> None:
    proc = run_cli(
        [
            "snap",
            str(photos / "good" / "grey.png"),
            "--models",
            str(tmp_path / "none"),
            "-o",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("da3-edge: error: no model in ") and "da3-edge models build" in line


def test_strict_shape_refuses_unexported_shapes(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    proc = run_cli(
        [
            "snap",
            str(photos / "good" / "grey.png"),
            "--strict-shape",
            "--models",
            str(small_models),
            "-o",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 1
    assert "no fp16 model for 126x182 (have 140x182)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_size_not_exported_is_one_line_naming_the_export(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    """The small models are size 182: asking 280 never runs them instead."""
    photo = str(photos / "good" / "grey.png")
    argv = ["snap", photo, "--models", str(small_models), "-o", str(tmp_path)]
    proc = run_cli([*argv, "--size", "280"])
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"da3-edge: error: {small_models}: no fp16 models of size 280 (have 182); "
        "make them with `da3-edge models build --weights hub --size 280 --precision fp16`"
    ]
    assert list(tmp_path.iterdir()) == []
    bad = run_cli([*argv, "--size", "281"])
    assert (
        bad.returncode == 2
        and "size 281: the core's long side must be a multiple of 14" in bad.stderr
    )
    ok = run_cli([*argv, "--size", "182"])
    assert ok.returncode == 0, ok.stderr
    meta = json.loads((tmp_path / "grey.json").read_text())
    assert meta["size"] == 182 and meta["shape_used"] == [140, 182]


def linked_copy(src: Path, dst: Path) -> Path:
    """``src``'s files in ``dst``: hard links where the filesystem allows, else copies."""
    dst.mkdir()
    for f in src.iterdir():
        try:
            os.link(f, dst / f.name)
        except OSError:
            shutil.copy2(f, dst / f.name)
    return dst


@pytest.mark.export
def test_snap_at_a_smaller_size_runs_that_sizes_core(
    export_env: Path, random_weights: Path, full_models: Path, tmp_path: Path
) -> None:
    """A 210x280 core exported beside the 504 ones (same weights, one folder): `snap
    --size 280` on a 1200x1600 photo runs it; without --size the 378x504 core runs."""
    models = linked_copy(full_models, tmp_path / "models")
    export = ["export", "--weights", str(random_weights), "--shape", "210x280"]
    exported = run_cli(
        [*export, "--precision", "fp16", "--no-stages", "--out", str(models)], python=export_env
    )
    assert exported.returncode == 0, exported.stderr
    photo = tmp_path / "photo.jpg"
    with Image.open(photo_path("astronaut.png")) as im:
        im.convert("RGB").resize((1600, 1200)).save(photo, quality=90)
    for size, shape in (("280", [210, 280]), (None, [378, 504])):
        out = tmp_path / f"out-{size}"
        args = ["snap", str(photo), "--models", str(models), "-o", str(out)]
        proc = run_cli(args + (["--size", size] if size else []))
        assert proc.returncode == 0, proc.stderr
        meta = json.loads((out / "photo.json").read_text())
        print(f"--size {size}: {meta['shape_used']}, core {meta['timings_ms']['core']:.0f} ms")
        assert meta["shape_used"] == meta["shape_wanted"] == shape
        assert meta["size"] == max(shape) and meta["random_init"] is True
        with np.load(out / "photo.npz") as npz:
            assert npz["depth"].shape == (1200, 1600)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "png,tiff"], "unknown format 'tiff'"),
        (["--threads", "0"], "--threads must be at least 1"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--stages", "torch"], "invalid choice: 'torch'"),
        (["-", "-"], "- (stdin) can be given once"),
        (["--hfov", "0"], "0 is not from 1 to 179 degrees"),
        (["--hfov", "wide"], "'wide' is not a number of degrees"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    proc = run_main(["snap", "x.jpg", *args, "-o", str(tmp_path)])
    assert proc.returncode == 2
    assert message in proc.stderr


def test_read_only_output_dir(small_models: Path, photos: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        proc = run_cli(
            [
                "snap",
                str(photos / "good" / "grey.png"),
                "--models",
                str(small_models),
                "-o",
                str(ro / "out"),
            ]
        )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert (
        line == f"da3-edge: error: {ro / 'out'}: cannot write outputs here (Read-only file system)"
    )


def test_disk_full_leaves_no_partial_files(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    # ~1.3 MB per 600x400 photo with all outputs: the third or fourth one runs out.
    with tmpfs(tmp_path / "full", size="3m") as full:
        proc = run_cli(
            ["snap", str(photos / "good"), "--models", str(small_models), "-o", str(full)]
        )
        assert proc.returncode == 1
        failed = [ln for ln in proc.stderr.splitlines() if ln.startswith("da3-edge: error:")]
        assert failed and all("No space left on device" in ln for ln in failed)
        names = [p.name for p in full.iterdir()]
        assert not [n for n in names if n.endswith(".tmp")]
        stems = {n.split(".")[0] for n in names}
        assert 0 < len(stems) < len(GOOD) - len(failed) + 1
        for stem in stems:  # a frame's files are all there or none are
            assert {f"{stem}{s}" for s in FILES} <= set(names), stem
        for name in names:  # everything visible is complete and readable
            path = full / name
            if name.endswith(".npz"):
                with np.load(path) as npz:
                    assert npz["depth"].size > 0
            elif name.endswith(".png"):
                with Image.open(path) as im:
                    im.load()
            else:
                json.loads(path.read_text())


def test_executorch_stages_match_numpy(
    executorch_runtime: Path, small_models: Path, photos: Path, tmp_path: Path
) -> None:
    """The Arm-style pipeline: same photos through .pte stages (ExecuTorch, XNNPACK), from
    the runtime env (no torch), on da3-edge's runner."""
    np_out, et_out = tmp_path / "numpy", tmp_path / "executorch"
    good = str(photos / "good")
    assert run_cli(["snap", good, "--models", str(small_models), "-o", str(np_out)]).returncode == 0
    proc = run_cli(
        ["snap", good, "--stages", "executorch", "--models", str(small_models), "-o", str(et_out)],
    )
    assert proc.returncode == 0, proc.stderr
    assert not [ln for ln in proc.stderr.splitlines() if "cpuinfo" in ln]  # native chatter captured
    worst = 1.0
    for name, size in GOOD.items():
        stem = Path(name).stem
        _check_outputs(et_out, stem, size, stages="executorch")
        with np.load(np_out / f"{stem}.npz") as a, np.load(et_out / f"{stem}.npz") as b:
            r = metrics(np.log(a["depth"]), np.log(b["depth"]))["pearson"]
        print(f"{name}: log-depth Pearson numpy vs executorch stages {r:.7f} (1 - r {1 - r:.1e})")
        worst = min(worst, r)
    assert worst >= 0.999


def test_executorch_stages_end_to_end_at_the_stage_sizes(
    executorch_runtime: Path, full_models: Path, tmp_path: Path
) -> None:
    """snap with the ExecuTorch stages against the numpy stages, the same photo at eight
    sizes from 40x30 to 12 MP: log-depth Pearson >= 0.999 on every one."""
    photos = tmp_path / "in"
    photos.mkdir()
    for name, rgb in sized_photos().items():
        Image.fromarray(rgb).save(photos / f"{name}.png", compress_level=1)
    runs = {}
    for stages in ("numpy", "executorch"):
        out = tmp_path / stages
        args = ["snap", str(photos), "--models", str(full_models), "--stages", stages]
        proc = run_cli([*args, "-o", str(out)])
        assert proc.returncode == 0, proc.stderr
        runs[stages] = out
    worst = 1.0
    for name in sized_photos():
        with (
            np.load(runs["numpy"] / f"{name}.npz") as a,
            np.load(runs["executorch"] / f"{name}.npz") as b,
        ):
            r = metrics(np.log(a["depth"]), np.log(b["depth"]))["pearson"]
            assert a["depth"].shape == b["depth"].shape
        print(f"{name}: log-depth Pearson numpy vs executorch stages {r:.7f} (1 - r {1 - r:.1e})")
        worst = min(worst, r)
    assert worst >= 0.999


def test_executorch_stages_without_the_runtime_is_one_line(
    small_models: Path, photos: Path, tmp_path: Path
) -> None:
    """No runner installed: asking for the ExecuTorch stages names the install step."""
    proc = run_cli(
        [
            "snap",
            str(photos / "good" / "grey.png"),
            "--stages",
            "executorch",
            "--models",
            str(small_models),
            "-o",
            str(tmp_path / "out"),
        ],
        extra_env={"DA3_EDGE_EXECUTORCH": str(tmp_path / "no-runtime")},
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        "da3-edge: error: the executorch stages need da3-edge's ExecuTorch runner"
    )
    assert "da3-edge install-executorch" in line and "--stages numpy" in line
    assert list((tmp_path / "out").iterdir()) == []  # checked writable first, then left empty
