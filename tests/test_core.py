"""The LiteRT runner on a real exported model (small shape, random-init weights)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.core import Core
from edge.errors import EdgeError, ModelCorrupt, ModelNotFound, ShapeError
from edge.models import Manifest

from .conftest import SMALL_SHAPE, normalised_photo


@pytest.fixture(scope="module")
def fp16_path(small_models: Path) -> Path:
    manifest = Manifest.load(small_models)
    return manifest.verify(manifest.find(SMALL_SHAPE, "fp16"))


def test_runs_and_depends_on_the_input(fp16_path: Path) -> None:
    with Core(fp16_path, threads=2) as core:
        assert core.shape == SMALL_SHAPE
        a = core.run(normalised_photo("astronaut.png", SMALL_SHAPE))
        b = core.run(normalised_photo("coffee.png", SMALL_SHAPE))
        again = core.run(normalised_photo("astronaut.png", SMALL_SHAPE))
    for depth, conf in (a, b):
        assert depth.shape == conf.shape == SMALL_SHAPE
        assert depth.dtype == conf.dtype == np.float32
        assert np.isfinite(depth).all() and (depth > 0).all()
        assert (conf >= 1.0).all()  # expp1 activation
    assert not np.allclose(a[0], b[0])
    np.testing.assert_array_equal(a[0], again[0])


def test_thread_counts_agree(fp16_path: Path) -> None:
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with Core(fp16_path, threads=1) as one, Core(fp16_path, threads=2) as two:
        np.testing.assert_allclose(one.run(x)[0], two.run(x)[0], rtol=1e-5, atol=1e-5)


def test_weight_cache_gives_the_same_answer(fp16_path: Path, tmp_path: Path) -> None:
    x = normalised_photo("coffee.png", SMALL_SHAPE)
    with Core(fp16_path, threads=2) as plain:
        expected = plain.run(x)[0]
    for _ in range(2):  # first run writes the cache, second reads it
        with Core(fp16_path, threads=2, weight_cache=tmp_path / "cache") as cached:
            np.testing.assert_allclose(cached.run(x)[0], expected, rtol=1e-6, atol=1e-6)
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 1 and files[0].name.startswith(fp16_path.stem)
    assert files[0].stat().st_size > 10_000_000  # the packed weights


def test_wrong_input_is_refused(fp16_path: Path) -> None:
    with Core(fp16_path, threads=1) as core:
        with pytest.raises(ShapeError, match="does not match"):
            core.run(np.zeros((1, 3, 14, 14), np.float32))
        with pytest.raises(ShapeError, match="float32"):
            core.run(np.zeros((1, 3, *SMALL_SHAPE), np.float64))
    with pytest.raises(EdgeError, match="closed"):
        core.run(np.zeros((1, 3, *SMALL_SHAPE), np.float32))


def test_missing_and_corrupt_files(tmp_path: Path, fp16_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        Core(tmp_path / "nope.tflite")
    garbage = tmp_path / "garbage.tflite"
    garbage.write_bytes(b"not a model" * 100)
    with pytest.raises(ModelCorrupt, match="cannot load") as info:
        Core(garbage)
    assert "\n" not in str(info.value)
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(fp16_path.read_bytes()[:1_000_000])
    with pytest.raises(ModelCorrupt):
        Core(truncated)


def test_runtime_path_never_imports_torch(fp16_path: Path) -> None:
    code = (
        "import sys, numpy as np\n"
        "import edge\n"
        "assert 'ai_edge_litert' not in sys.modules, 'import edge loaded LiteRT'\n"
        "from edge.core import Core\n"
        f"with Core({str(fp16_path)!r}, threads=1) as c:\n"
        f"    c.run(np.zeros((1, 3, {SMALL_SHAPE[0]}, {SMALL_SHAPE[1]}), np.float32))\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'litert_torch', 'depth_anything_3')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    # LiteRT's load/first-run chatter is captured, not printed. (Its static
    # destructors still log "DestroyAccelerator" at interpreter exit; the CLI entry
    # point silences those, a library user sees them.)
    chatter = [ln for ln in proc.stderr.splitlines() if "DestroyAccelerator" not in ln]
    assert chatter == []
