"""The fixtures; what they are built from lives in scripts/support (models exported once
per run with the real export path, the photos, host tools and mounts).

Without the export environment (or, for the disk tests, without permission to mount a
tmpfs), tests that need it skip, unless ``DA3_EDGE_STRICT_TESTS=1`` (set by
scripts/check, so CI never passes by skipping), where they fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.support.models import (
    PLAIN,
    SMALL_SHAPE,
    Plain,
    build_full_models,
    build_random_weights,
    build_small_models,
    export_python,
)
from scripts.support.photos import make, normalised_photo
from scripts.support.tools import skip_or_fail

# What these fixtures build needs the export environment (torch) or the ExecuTorch
# runtime: a test that uses one, even through another fixture, is marked ``models``, so
# the quick lane (scripts/check --quick) leaves it out without a list kept by hand.
NEEDS_MODELS = frozenset(
    {"export_env", "executorch_runtime", "random_weights", "small_models", "full_models"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if NEEDS_MODELS & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.models)


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


# Emulated (the aarch64 lane) a load and a forward of the small model cost ~20 s, ~50 s
# with fp16 arithmetic (the A76's default; qemu computes fp16 in software): test_core.py
# and test_coreproc.py share forwards through this fixture and test_core's ``fp16_runs``,
# and use fp16 arithmetic where it is what they check.
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


@pytest.fixture(scope="session")
def fake_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder of FakeCore placeholders: for the daemon of tests where the model
    is not the subject (scripts.support.fakedaemon); no export needed."""
    from scripts.support import fakedaemon

    return fakedaemon.models(tmp_path_factory.mktemp("fake-models"))


@pytest.fixture(scope="session")
def full_models(random_weights: Path) -> Path:
    return build_full_models()


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("photos")
    make(out)
    return out
