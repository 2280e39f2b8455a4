"""XNNPACK's packed-weight cache, on by default: built once, mapped after, never unsafe.

Real LiteRT throughout: the child process that builds a cache, the abort LiteRT 2.3.0
commits when the cache cannot be written (a size-limited tmpfs), a read-only mount.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge import weightcache
from edge.core import Core
from edge.models import Manifest
from scripts.support.models import SMALL_SHAPE
from scripts.support.photos import normalised_photo, photo_path
from scripts.support.tools import run_cli


@pytest.fixture
def fp32_path(small_models: Path) -> Path:
    manifest = Manifest.load(small_models)
    return manifest.verify(manifest.find(SMALL_SHAPE, "fp32"))


def _caches(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.xnnpack"))


def _depth(out: Path) -> np.ndarray:
    with np.load(next(out.glob("*.npz"))) as data:
        return np.array(data["depth"])


def test_snap_builds_the_cache_once_then_maps_it(
    small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default ("auto"): the user's cache directory, made 0700; the first still builds
    the cache (a child process), the next maps the same file untouched; the depth is
    bit-identical to a run without it."""
    monkeypatch.delenv("DA3_EDGE_WEIGHT_CACHE")
    home = Path(os.environ["XDG_CACHE_HOME"]) / "da3-edge" / "xnnpack"
    photo = photo_path("coffee.png")
    base = ["snap", "--models", str(small_models), "--precision", "fp32", str(photo)]
    first = run_cli([*base, "-o", str(tmp_path / "a")])
    assert first.returncode == 0, first.stderr
    (cache,) = _caches(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    record = json.loads(Path(f"{cache}.json").read_text())
    assert record["stamp"][0] == cache.stat().st_size > 10_000_000  # models.file_identity
    before = cache.stat()
    second = run_cli([*base, "-o", str(tmp_path / "b")])
    off = run_cli([*base, "-o", str(tmp_path / "c"), "--weight-cache", "off"])
    assert second.returncode == off.returncode == 0, second.stderr + off.stderr
    after = cache.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert _caches(home) == [cache]
    np.testing.assert_array_equal(_depth(tmp_path / "a"), _depth(tmp_path / "c"))
    np.testing.assert_array_equal(_depth(tmp_path / "b"), _depth(tmp_path / "c"))


def _open(path: Path, cache: Path) -> Core:
    return Core(path, threads=1, fp16_arithmetic=False, weight_cache=cache)


def test_a_changed_cache_file_is_rebuilt_not_mapped(fp32_path: Path, tmp_path: Path) -> None:
    """Appended bytes (its stat no longer matches its record): rebuilt, same answers."""
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with _open(fp32_path, tmp_path) as core:
        expected = core.run(x)[0]
        assert core.weight_cache_built
    (cache,) = _caches(tmp_path)
    with open(cache, "ab") as fh:
        fh.write(b"\0" * 4096)
    with _open(fp32_path, tmp_path) as core:
        assert core.weight_cache_built and core.weight_cache_file == cache
        np.testing.assert_array_equal(core.run(x)[0], expected)
    assert weightcache.valid(cache)
    with _open(fp32_path, tmp_path) as core:
        assert not core.weight_cache_built and core.weight_cache_file == cache


@pytest.mark.parametrize("why", ["group-writable", "another user's", "a symlink"])
def test_an_unsafe_directory_is_not_used(
    fp32_path: Path, tmp_path: Path, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "cache"
    directory.mkdir()
    if why == "group-writable":
        directory.chmod(0o770)
    elif why == "another user's":
        os.chown(directory, 65534, 65534)  # CI runs as root: nobody's directory
    else:
        (tmp_path / "elsewhere").mkdir()
        directory.rmdir()
        directory.symlink_to(tmp_path / "elsewhere")
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with _open(fp32_path, directory) as core:
        assert core.weight_cache_file is None
        core.run(x)
    assert list(directory.iterdir()) == []
    print(caplog.text.strip())
    assert "weight cache not used" in caplog.text


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m,mode=0700", "tmpfs", str(mnt)], check=True
    )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_never_kills_the_process(
    fp32_path: Path,
    tiny_tmpfs: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """20 MiB free for ~95 MiB of packed weights: the free-space check declines; and if
    the disk fills anyway (the check skipped here), LiteRT aborts the builder child,
    not this process, and nothing half-written is left."""
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with Core(fp32_path, threads=1) as plain:
        expected = plain.run(x)[0]
    with _open(fp32_path, tiny_tmpfs) as core:
        assert core.weight_cache_file is None
        np.testing.assert_array_equal(core.run(x)[0], expected)
    assert "MiB free" in caplog.text
    monkeypatch.setattr(weightcache, "_room", lambda directory, model: True)
    with _open(fp32_path, tiny_tmpfs) as core:
        assert core.weight_cache_file is None
        np.testing.assert_array_equal(core.run(x)[0], expected)
    print(caplog.text.strip().splitlines()[-1])
    assert "the builder exited -6" in caplog.text  # SIGABRT, in the child
    assert list(tiny_tmpfs.iterdir()) == []


def test_a_read_only_cache_directory_is_passed_over(
    fp32_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o700)
    subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
    try:
        with _open(fp32_path, ro) as core:
            assert core.weight_cache_file is None
            core.run(normalised_photo("chelsea.png", SMALL_SHAPE))
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    print(caplog.text.strip().splitlines()[-1])
    assert "weight cache not built" in caplog.text


def test_older_keys_of_a_model_are_pruned(fp32_path: Path, tmp_path: Path) -> None:
    """A re-export or a LiteRT upgrade changes the key: the model name's old cache goes
    when the new one is built (another flags tag is another cache and stays)."""
    old = tmp_path / f"{fp32_path.stem}.0123.litert-0.0.default.xnnpack"
    other_flags = tmp_path / f"{fp32_path.stem}.0123.litert-0.0.f7.xnnpack"
    for path in (old, other_flags):
        path.write_bytes(b"old")
        Path(f"{path}.json").write_text("{}")
    with _open(fp32_path, tmp_path) as core:
        assert core.weight_cache_built
    assert not old.exists() and not Path(f"{old}.json").exists()
    assert other_flags.exists()
    assert core.weight_cache_file is not None
    assert _caches(tmp_path) == sorted([core.weight_cache_file, other_flags])
