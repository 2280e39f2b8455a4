"""Pipeline: shape choice, inputs it takes, what a DepthFrame carries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from edge.errors import ModelNotFound, ShapeError
from edge.pipeline import Pipeline, PipelineSpec, nearest_shape

from .support.photos import photo_path

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
        assert frame.shape_wanted == (336, 504) and frame.shape_used == (140, 182)
        assert frame.resized_to_nearest and frame.random_init
        assert frame.weights.startswith("sha256:") and frame.artifact.endswith("_fp16.tflite")
        assert set(frame.timings_ms) == {"decode", "preprocess", "core", "postprocess"}
    np.testing.assert_array_equal(a.depth, b.depth)
    np.testing.assert_array_equal(a.depth, c.depth)
    assert a.summary()["depth"]["kind"].startswith("relative")


def test_strict_shape_and_missing_precision(small_models: Path, tmp_path: Path) -> None:
    with (
        Pipeline.load(PipelineSpec(small_models, strict_shape=True)) as pipe,
        pytest.raises(ShapeError, match="336x504"),
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
