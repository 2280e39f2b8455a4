"""Pipeline: shape choice, inputs it takes, what a DepthFrame carries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edge.errors import ModelNotFound, ShapeError
from edge.fakecore import FakeCore, fake_models
from edge.models import size_shapes
from edge.pipeline import Pipeline, PipelineSpec, nearest_shape
from scripts.support.photos import photo_path

DEFAULTS = [(378, 504), (504, 378), (280, 504), (504, 280)]


@pytest.mark.parametrize(
    ("wanted", "used"),
    [
        ((336, 504), (378, 504)),  # 3:2 is nearest 4:3
        ((504, 504), (378, 504)),  # square: 4:3 and 3:4 tie on ratio and size; first listed wins
        ((224, 504), (280, 504)),  # 9:4 panorama -> 16:9
        ((504, 224), (504, 280)),
        ((462, 308), (504, 378)),  # 2:3 portrait -> 3:4
    ],
)
def test_nearest_shape(wanted: tuple[int, int], used: tuple[int, int]) -> None:
    assert nearest_shape(wanted, DEFAULTS) == used


def test_nearest_shape_needs_a_model() -> None:
    with pytest.raises(ModelNotFound):
        nearest_shape((378, 504), [])


def sized(tmp_path: Path, *sizes: int) -> Path:
    """A folder of FakeCore placeholders: the four shapes of each size."""
    return fake_models(tmp_path / "m", [s for size in sizes for s in size_shapes(size)])


def fake_pipeline(models: Path, size: int | None = None) -> Pipeline:
    open_core, _ = FakeCore.opener()
    return Pipeline.load(PipelineSpec(models, size=size), open_core=open_core)


@pytest.mark.parametrize(
    ("sizes", "asked", "used"),
    [
        ((504, 280), None, 504),  # unasked: DA3's own size when it is there
        ((504, 280), 280, 280),
        ((280,), None, 280),  # unasked, one size there: that one
        ((280, 224), 224, 224),
    ],
)
def test_the_size_asked_or_the_default(
    tmp_path: Path, sizes: tuple[int, ...], asked: int | None, used: int
) -> None:
    with fake_pipeline(sized(tmp_path, *sizes), asked) as pipe:
        assert pipe.size == used
        assert pipe.shapes == sorted(size_shapes(used))
        # DA3's rule at that size: a 1200x1600 photo is 378x504 at 504, 210x280 at 280.
        wanted, shape = pipe.choose((1200, 1600))
        assert wanted == shape == size_shapes(used)[0]
        assert pipe.choose((720, 1280))[1] == size_shapes(used)[2]  # 16:9


def test_a_size_not_there_is_an_error_never_another_size(tmp_path: Path) -> None:
    models = sized(tmp_path, 504, 280)
    with pytest.raises(ModelNotFound) as caught:
        fake_pipeline(models, 392)
    assert str(caught.value) == (
        f"{models}: no fp16 models of size 392 (have 280, 504); "
        "make them with `da3-edge models build --weights hub --size 392 --precision fp16`"
    )
    two = sized(tmp_path / "two", 280, 224)
    with pytest.raises(ModelNotFound, match=r"sizes 224, 280, none of 504: choose one with --size"):
        fake_pipeline(two)
    # A shape of another size never stands in for a missing aspect ratio.
    odd = fake_models(tmp_path / "odd", [(378, 504), (210, 280), (280, 210)])
    with fake_pipeline(odd, 280) as pipe:
        assert pipe.choose((720, 1280))[1] == (210, 280)  # 16:9 at 280 was not exported
        assert pipe.shapes == [(210, 280), (280, 210)]


def test_frame_from_path_pil_and_array(small_models: Path) -> None:
    path = photo_path("coffee.png")
    with Pipeline.load(PipelineSpec(small_models, precision="fp16", threads=2)) as pipe:
        a = pipe(path)
        with Image.open(path) as im:
            b = pipe(im.copy(), name="coffee")
        c = pipe(np.asarray(Image.open(path).convert("RGB")), name="array")
    for frame in (a, b, c):
        assert frame.depth.shape == frame.conf.shape == (400, 600)
        assert frame.source_size == (400, 600)
        assert frame.shape_wanted == (126, 182) and frame.shape_used == (140, 182)
        assert frame.resized_to_nearest and frame.random_init
        assert frame.weights.startswith("sha256:") and frame.artifact.endswith("_fp16.tflite")
        assert set(frame.timings_ms) == {"decode", "preprocess", "core", "postprocess"}
    np.testing.assert_array_equal(a.depth, b.depth)
    np.testing.assert_array_equal(a.depth, c.depth)
    assert a.summary()["depth"]["kind"].startswith("relative")


def test_strict_shape_and_missing_precision(small_models: Path, tmp_path: Path) -> None:
    with (
        Pipeline.load(PipelineSpec(small_models, strict_shape=True)) as pipe,
        pytest.raises(ShapeError, match="126x182"),
    ):
        pipe(photo_path("coffee.png"))
    # A directory holding only fp32 cannot serve fp16.
    only = tmp_path / "m"
    only.mkdir()
    manifest = json.loads((small_models / "manifest.json").read_text())
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["precision"] == "fp32"]
    (only / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(small_models / manifest["artifacts"][0]["file"], only)
    with pytest.raises(ModelNotFound, match=r"no fp16 models \(have: fp32\)"):
        Pipeline.load(PipelineSpec(only, precision="fp16"))
    with Pipeline.load(PipelineSpec(only, precision="fp32")) as pipe:
        assert pipe(photo_path("chelsea.png")).precision == "fp32"


def test_workers_share_the_threads(small_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge import platform

    with pytest.raises(ValueError, match="core_process"):
        PipelineSpec(small_models, workers=2)  # in one process they would share the GIL
    monkeypatch.setattr(platform, "default_threads", lambda: 4)
    with Pipeline.load(PipelineSpec(small_models, core_process=True, workers=2)) as pipe:
        assert pipe.worker_threads() == 2  # the default, shared
        with pytest.raises(ValueError, match="worker 2 of 2"):
            pipe.prepare(photo_path("chelsea.png"), worker=2)
    with Pipeline.load(PipelineSpec(small_models, core_process=True, workers=3, threads=1)) as pipe:
        assert pipe.worker_threads() == 1  # given: per worker
    with Pipeline.load(PipelineSpec(small_models)) as pipe:
        assert pipe.worker_threads() is None  # one worker: the core's own default


def test_model_dir_from_environment(small_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DA3_EDGE_MODELS", str(small_models))
    with Pipeline.load() as pipe:
        assert pipe.manifest.directory == small_models
        assert pipe.shapes == [(140, 182)]
