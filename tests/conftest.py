"""Shared fixtures: test models built once per run with the real export path.

Models come from `da3-edge export` run in the export environment (a separate venv
with torch), exactly as a user would run it: seeded random weights are first written
in the official release layout, then converted through ``--weights``. They are cached
under ``$DA3_EDGE_TEST_CACHE`` (default ``.cache/tests``) with a stamp of the code
that made them, so a second run reuses them and CI builds them once.

Models whose cache is current are reused without the export environment: that is how
the aarch64 lane (scripts/arm-lane.sh) runs the runtime tests on the very models the
x86_64 run exported. Without the export environment (or, for the disk tests, without
permission to mount a tmpfs), tests that need it skip, unless
``DA3_EDGE_STRICT_TESTS=1`` (set by scripts/check, so CI never passes by skipping),
where they fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
SEED = 0
SMALL_SHAPE = (140, 182)
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "motorcycle_left.png")


def export_python() -> Path:
    return Path(os.environ.get("DA3_EDGE_EXPORT_PYTHON", ROOT / ".venv-export" / "bin" / "python"))


def cache_dir() -> Path:
    return Path(os.environ.get("DA3_EDGE_TEST_CACHE", ROOT / ".cache" / "tests"))


@pytest.fixture(autouse=True)
def _isolated_paths(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """No test reads or writes the user's model directory, cache or env overrides.
    (Kept out of tmp_path, which tests list as output directories.)"""
    xdg = tmp_path_factory.mktemp("xdg")
    monkeypatch.delenv("DA3_EDGE_MODELS", raising=False)
    monkeypatch.delenv("DA3_EDGE_CACHE", raising=False)
    monkeypatch.delenv("DA3_EDGE_FP16_ARITHMETIC", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg / "cache"))
    # XNNPACK's weight cache ("auto" by default) is shared by the session, as on a user's
    # machine: built once per model, not once per test (tests/test_weightcache.py
    # points it elsewhere to test it).
    monkeypatch.setenv("DA3_EDGE_WEIGHT_CACHE", str(tmp_path_factory.getbasetemp() / "xnnpack"))


@pytest.fixture(scope="session")
def export_env() -> Path:
    python = export_python()
    if not python.exists():
        message = f"export environment not found at {python} (scripts/setup-export-env.sh)"
        skip_or_fail(message)
    return python


@pytest.fixture(scope="session")
def executorch_runtime() -> Path:
    """The torch-free ExecuTorch runner (`da3-edge install-executorch`; .ci/run installs it)."""
    from edge import etrunner
    from edge.errors import StagesUnavailable

    directory = etrunner.runtime_dir()
    try:
        etrunner.check_record(etrunner.read_record(directory), directory)
    except StagesUnavailable as exc:
        skip_or_fail(str(exc))
    return directory


def require_tool(name: str, install: str) -> str:
    """The path of a host tool the test needs; skip (fail when strict) without it."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} not found ({install})")
    assert path is not None
    return path


def skip_or_fail(message: str) -> None:
    if os.environ.get("DA3_EDGE_STRICT_TESTS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def run_cli(
    args: list[str],
    *,
    python: Path | str = sys.executable,
    stdin: bytes | None = None,
    cwd: Path = ROOT,
    extra_env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`da3-edge ARGS` in a fresh process: exit code, stdout, stderr as a user sees them."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DA3_EDGE_MODELS")}
    env.update(extra_env or {})
    proc = subprocess.run(
        [str(python), "-m", "edge", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
    )


@contextlib.contextmanager
def tmpfs(path: Path, *, size: str = "4m", read_only: bool = False) -> Iterator[Path]:
    """A real tmpfs mounted at ``path``: size-limited (disk full) or read-only.

    CI runs as root, where permission bits prove nothing; a mount does."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here ({proc.stderr.strip()}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _code_stamp(args: list[str]) -> str:
    digest = hashlib.sha256(json.dumps(args).encode())
    for pattern in (
        "edge/export/*.py",
        "edge/stages/*.py",  # the stage programs and their export check
        "edge/models.py",
        "edge/parity.py",
        "requirements/export*.txt",
    ):
        for path in sorted(ROOT.glob(pattern)):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_export(out: Path, args: list[str]) -> Path:
    """Run `da3-edge export ARGS` in the export env unless ``out`` is current."""
    stamp_file = out / ".stamp"
    stamp = _code_stamp(args)
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        return out
    python = export_python()
    if not python.exists():
        skip_or_fail(f"{out} is not current and the export environment is not at {python}")
    shutil.rmtree(out, ignore_errors=True)  # a stale cache: rebuild from scratch
    start = time.monotonic()
    cmd = [str(python), "-m", "edge", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    print(f"\n[models] {' '.join(args)}: {time.monotonic() - start:.1f} s", file=sys.stderr)
    return out


def build_random_weights() -> Path:
    """Seeded random DA3-small weights in the official release layout."""
    out = cache_dir() / f"weights-seed{SEED}"
    args = ["export", "--random-init", str(SEED), "--save-weights", str(out), "--weights-only"]
    return run_export(out, args)


def build_small_models() -> Path:
    """fp32/fp16/int8 at one small shape: for tests that need a model, not the shapes.
    (Also called by scripts/arm-lane.sh, so both lanes use the same files.)"""
    weights = build_random_weights()
    out = cache_dir() / "small"
    shape = f"{SMALL_SHAPE[0]}x{SMALL_SHAPE[1]}"
    return run_export(
        out, ["export", "--weights", str(weights), "--shape", shape, "--out", str(out)]
    )


@pytest.fixture(scope="session")
def random_weights() -> Path:
    return build_random_weights()


@pytest.fixture(scope="session")
def small_models() -> Path:
    return build_small_models()


@pytest.fixture(scope="session")
def fp16_path(small_models: Path) -> Path:
    """The small fp16 core, verified against its manifest."""
    from edge.models import Manifest

    manifest = Manifest.load(small_models)
    return manifest.verify(manifest.find(SMALL_SHAPE, "fp16"))


PLAIN = ("coffee.png", "chelsea.png")  # the photos the ``plain`` fixture runs
Plain = dict[str, tuple[np.ndarray, np.ndarray]]  # photo -> depth, confidence


# Emulated (the aarch64 lane, 2026-12-03, AVX-512 host) a load and a forward of the small
# model cost ~20 s, ~50 s with fp16 arithmetic (the A76's default; qemu computes fp16 in
# software): test_core.py and test_coreproc.py share forwards through this fixture and
# test_core's ``fp16_runs``, and use fp16 arithmetic where it is what they check.
@pytest.fixture(scope="session")
def plain(fp16_path: Path) -> Plain:
    """Depth and confidence of two photos from an in-process Core with fp32 arithmetic,
    two threads and the model file's pages kept: what the tests of other options
    (threads, weight cache, released pages, the worker process) must give."""
    from edge.core import Core

    with Core(fp16_path, threads=2, fp16_arithmetic=False, release_file_pages=False) as core:
        assert core.fp16_arithmetic is False
        out = {}
        for name in PLAIN:
            depth, conf = core.run(normalised_photo(name, SMALL_SHAPE))
            out[name] = (depth.copy(), conf.copy())
        return out


def build_full_models() -> Path:
    """The default export: four shapes x fp32/fp16/int8, from the same weights.
    (Also called by scripts/arm-lane.sh rss.)"""
    weights = build_random_weights()
    out = cache_dir() / "full"
    return run_export(out, ["export", "--weights", str(weights), "--out", str(out)])


@pytest.fixture(scope="session")
def full_models(random_weights: Path) -> Path:
    return build_full_models()


def photo_path(name: str) -> Path:
    """A real photograph shipped inside the scikit-image wheel (read with Pillow)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-image (a dev dependency) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / name


# The stage-fidelity sizes (H x W): tiny, small, HD both ways, the default camera both
# ways, 12 MP photos both ways (over the ExecuTorch stages' 2048-a-side bound).
STAGE_SIZES = ((40, 30), (300, 200), (720, 1280), (1280, 720), (1200, 1600), (1600, 1200))
STAGE_SIZES += ((3000, 4000), (4032, 3024))


def sized_photos() -> dict[str, np.ndarray]:
    """A real photograph (astronaut) resized with Pillow to each of STAGE_SIZES."""
    from PIL import Image

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


def load_script(path: str, name: str) -> ModuleType:
    """The script at ``path`` (under the checkout) as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _make_photos(out: Path) -> dict[str, list[Path]]:
    module = load_script("scripts/make-test-photos.py", "make_test_photos")
    made: dict[str, list[Path]] = module.make(out)
    return made


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("photos")
    _make_photos(out)
    return out
