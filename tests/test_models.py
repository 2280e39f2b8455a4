"""Manifest, model-directory lookup, DA3's shape rule, and refusing bad artifacts."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from edge.errors import ManifestError, ModelCorrupt, ModelNotFound
from edge.models import (
    Artifact,
    Manifest,
    check_size,
    da3_shape,
    default_models_dir,
    parse_shape,
    resolve_models_dir,
    sha256_file,
    size_of,
    size_shapes,
)


def counting(calls: list[Path], real: Callable[[Path], str]) -> Callable[[Path], str]:
    """``real``, noting each path it is called with in ``calls``."""

    def counted(path: Path) -> str:
        calls.append(path)
        return real(path)

    return counted


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((1200, 1600), (378, 504)),
        ((1600, 1200), (504, 378)),
        ((720, 1280), (280, 504)),
        ((1280, 720), (504, 280)),
        ((504, 504), (504, 504)),
        ((100, 100), (504, 504)),
        ((10, 5000), (14, 504)),
        ((287, 504), (294, 504)),  # a tie goes up, as in DA3
        ((1080, 1920), (280, 504)),
        ((3024, 4032), (378, 504)),
    ],
)
def test_da3_shape_rule(size: tuple[int, int], expected: tuple[int, int]) -> None:
    assert da3_shape(*size) == expected


@pytest.mark.parametrize(
    ("size", "shapes"),
    [
        (504, [(378, 504), (504, 378), (280, 504), (504, 280)]),
        (392, [(294, 392), (392, 294), (224, 392), (392, 224)]),
        (280, [(210, 280), (280, 210), (154, 280), (280, 154)]),
        (224, [(168, 224), (224, 168), (126, 224), (224, 126)]),
        (182, [(140, 182), (182, 140), (98, 182), (182, 98)]),  # the test models' size
    ],
)
def test_the_shapes_of_a_size(size: int, shapes: list[tuple[int, int]]) -> None:
    """4:3, 3:4, 16:9 and 9:16 by DA3's rule at that long side."""
    assert list(size_shapes(size)) == shapes
    assert [
        da3_shape(h, w, size) for h, w in ((1200, 1600), (1600, 1200), (720, 1280), (1280, 720))
    ] == shapes
    assert {size_of(s) for s in shapes} == {size}


@pytest.mark.parametrize("bad", [0, 14, 42, 281, 1022, 2016])
def test_a_size_is_a_multiple_of_14_in_range(bad: int) -> None:
    with pytest.raises(ValueError, match=f"size {bad}: the core's long side must be"):
        check_size(bad)
    assert check_size(56) == 56 and check_size(1008) == 1008


def test_da3_shape_rejects_empty() -> None:
    with pytest.raises(ValueError):
        da3_shape(0, 10)


def test_parse_shape() -> None:
    assert parse_shape("378x504") == (378, 504)
    for bad in ("378", "378x500", "0x14", "axb", "-14x14"):
        with pytest.raises(ValueError):
            parse_shape(bad)


def test_models_dir_lookup_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_models_dir() == tmp_path / "xdg" / "da3-edge" / "models"
    assert resolve_models_dir() == tmp_path / "xdg" / "da3-edge" / "models"
    monkeypatch.setenv("DA3_EDGE_MODELS", str(tmp_path / "env"))
    assert resolve_models_dir() == tmp_path / "env"
    assert resolve_models_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_models_dir() == tmp_path / "home" / ".local" / "share" / "da3-edge" / "models"


def _artifact(**kw: object) -> Artifact:
    base: dict[str, object] = dict(
        file="m.tflite",
        kind="core",
        shape=(14, 28),
        precision="fp16",
        bytes=3,
        sha256="0" * 64,
        provenance={"weights": "random-init:3", "random_init": True},
    )
    base.update(kw)
    return Artifact(**base)  # type: ignore[arg-type]


def test_manifest_round_trip(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.upsert(_artifact())
    m.upsert(_artifact(file="n.tflite", precision="fp32"))
    m.upsert(_artifact(bytes=4))  # same file replaces its entry
    m.save()
    loaded = Manifest.load(tmp_path)
    assert [a.file for a in loaded.cores()] == ["n.tflite", "m.tflite"]  # fp32 before fp16
    assert loaded.find((14, 28), "fp16").bytes == 4
    assert loaded.find((14, 28), "fp16").random_init
    with pytest.raises(ModelNotFound, match="no int8 model for 14x28"):
        loaded.find((14, 28), "int8")
    assert not list(tmp_path.glob("*.tmp"))


def test_missing_manifest_says_how_to_get_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="da3-edge models build --weights hub"):
        Manifest.load(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        "{",
        "[]",
        json.dumps({"format": 99}),
        json.dumps({"format": 1, "artifacts": [{"file": "x"}]}),
    ],
)
def test_bad_manifest_is_refused(tmp_path: Path, content: str) -> None:
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(ManifestError):
        Manifest.load(tmp_path)


@pytest.mark.parametrize("name", ["/etc/hostname", "../outside.tflite", "sub/m.tflite", "..", ""])
def test_a_manifest_file_outside_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    """A manifest names files in its own folder only: an absolute path or a way out of
    the folder would let a model check (and the hash that matches) read any file."""
    target = Path("/etc/hostname")
    entry = {
        "file": name,
        "kind": "core",
        "shape": [14, 14],
        "precision": "fp32",
        "bytes": target.stat().st_size,
        "sha256": sha256_file(target),
    }
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "artifacts": [entry]}))
    with pytest.raises(ManifestError, match="must be a plain file name in the model folder"):
        Manifest.load(tmp_path)


def _copy_models(src: Path, dst: Path, precision: str = "fp16") -> tuple[Manifest, Artifact]:
    manifest = Manifest.load(src)
    artifact = next(a for a in manifest.cores() if a.precision == precision)
    dst.mkdir()
    shutil.copy(src / "manifest.json", dst / "manifest.json")
    shutil.copy(src / artifact.file, dst / artifact.file)
    return Manifest.load(dst), artifact


def test_intact_artifact_verifies(small_models: Path) -> None:
    manifest = Manifest.load(small_models)
    for artifact in manifest.cores():
        assert manifest.verify(artifact) == small_models / artifact.file


def test_tampered_artifact_is_refused(small_models: Path, tmp_path: Path) -> None:
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    path = manifest.artifact_path(artifact)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelCorrupt, match="SHA-256") as info:
        manifest.verify(artifact)
    assert "\n" not in str(info.value)


def test_truncated_artifact_is_refused(small_models: Path, tmp_path: Path) -> None:
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    path = manifest.artifact_path(artifact)
    path.write_bytes(path.read_bytes()[: artifact.bytes // 3])
    with pytest.raises(ModelCorrupt, match="truncated"):
        manifest.verify(artifact)


def test_missing_artifact_is_reported(small_models: Path, tmp_path: Path) -> None:
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    manifest.artifact_path(artifact).unlink()
    with pytest.raises(ModelNotFound, match="missing"):
        manifest.verify(artifact)


def test_stage_programs_are_listed_and_verified(small_models: Path) -> None:
    manifest = Manifest.load(small_models)
    kinds = sorted(a.kind for a in manifest.stage_programs())
    assert kinds == ["post", "pre", "pre1"]
    for kind in ("pre", "pre1", "post"):
        artifact = manifest.find_stage(kind, (140, 182))
        assert artifact.file == f"da3-small_{kind}_140x182.pte"
        assert manifest.verify(artifact).stat().st_size == artifact.bytes
        assert artifact.provenance["verify"]["max_abs"] < 1e-3
    with pytest.raises(ModelNotFound, match="no ExecuTorch pre program for 378x504"):
        manifest.find_stage("pre", (378, 504))


def test_verified_stamp_skips_the_rehash_until_the_file_changes(
    small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    path = manifest.verify(artifact)  # full hash, stamp written
    from edge.models import cache_dir

    assert (cache_dir() / "verified.json").exists()

    calls: list[Path] = []
    import edge.models

    real = edge.models.sha256_file
    monkeypatch.setattr(edge.models, "sha256_file", counting(calls, real))
    manifest.verify(artifact)
    assert calls == []  # unchanged file: no re-read
    manifest.verify(artifact, full=True)
    assert calls == [path]  # --verify always hashes

    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10  # same size, new content: ctime/mtime change
    path.write_bytes(bytes(data))
    with pytest.raises(ModelCorrupt, match="SHA-256"):
        manifest.verify(artifact)
    assert len(calls) == 2


def test_a_chmod_alone_also_forces_a_rehash(
    small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    path = manifest.verify(artifact)
    calls: list[Path] = []
    import edge.models

    real = edge.models.sha256_file
    monkeypatch.setattr(edge.models, "sha256_file", counting(calls, real))
    path.chmod(0o600)
    manifest.verify(artifact)
    assert calls == [path]


def test_unwritable_cache_still_avoids_a_second_hash_in_one_process(
    small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service user without a home cannot save stamps; within the process a model
    checked at start is still not re-read when it is opened."""
    import edge.models

    cache = tmp_path / "cache-is-a-file"
    cache.write_text("not a directory")
    monkeypatch.setenv("DA3_EDGE_CACHE", str(cache))
    manifest, artifact = _copy_models(small_models, tmp_path / "m")
    calls: list[Path] = []
    real = edge.models.sha256_file
    monkeypatch.setattr(edge.models, "sha256_file", counting(calls, real))
    path = manifest.verify(artifact)
    manifest.verify(artifact)
    assert calls == [path]
