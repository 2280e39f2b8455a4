"""`da3-edge models --verify` on built models: a core built at 42x56 from the same
release, run in LiteRT, against DA3's forward computed with numpy (edge/forward.py,
itself checked against the reference package in tests/test_forward.py). It passes on a
right build, fails on a graph filled wrong or a release that is not the manifest's,
and says when it cannot run."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from edge import buildcheck, corebuild
from edge.errors import ModelCorrupt
from edge.release import Release
from scripts.support.release import tensors_for, write_release
from scripts.support.tools import as_user, run_cli, world_readable

PROBE = buildcheck.PROBE_SHAPE
TEXT = f"{PROBE[0]}x{PROBE[1]}"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tensors = tensors_for([PROBE], ("fp16", "fp32"))
    return write_release(tmp_path_factory.mktemp("release") / "da3-small", tensors, seed=4)


@pytest.fixture(scope="module")
def built(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built") / "models"
    args = ["models", "build", "--weights", str(release), "--shape", "42x56", "--out", str(out)]
    proc = run_cli([*args, "--precision", "fp16,fp32", "--no-stages"])
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_stand_in_release_gives_depth_that_varies(release: Path) -> None:
    """The check can only see a wrong fill if depth is not flat: the stand-in's log
    depth spreads like a trained network's (measured ~0.7)."""
    from edge import forward

    with Release(release) as r:
        depth, conf = forward.depth(r, buildcheck.probe_image())
    assert np.isfinite(depth).all() and np.isfinite(conf).all()
    assert 0.2 < float(np.log(depth).std()) < 3, np.log(depth).std()


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_a_right_fill_matches_numpy(release: Path, precision: str) -> None:
    result = buildcheck.check(release, precision)
    print(precision, result.depth, result.conf)
    assert result.depth["ok"] == result.conf["ok"] == 1.0


def test_a_graph_filled_wrong_is_caught(release: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One block's MLP weights written with their halves swapped (the right size, the
    wrong place): the core still loads and runs, and the check fails in one line."""
    right = corebuild.region_bytes
    target = "model.backbone.pretrained.blocks.6.mlp.fc2.weight"
    swapped = []

    def wrong(recipe: corebuild.Recipe, rel: Release, template: corebuild.Template) -> bytes:
        data = right(recipe, rel, template)
        if recipe.get("tensor") == target:
            swapped.append(len(data))
            data = data[len(data) // 2 :] + data[: len(data) // 2]
        return data

    monkeypatch.setattr(corebuild, "region_bytes", wrong)
    with pytest.raises(ModelCorrupt, match="does not compute DA3 here: its depth") as caught:
        buildcheck.check(release, "fp32")
    assert swapped, "the target tensor was never filled"
    print(caught.value)


def test_verify_runs_the_check_for_each_precision(built: Path) -> None:
    proc = run_cli(["models", "--models", str(built), "--verify"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    forward = [line.split() for line in lines if line.strip().startswith("forward")]
    assert [words[:3] for words in forward] == [
        ["forward", TEXT, "fp16"],
        ["forward", TEXT, "fp32"],
    ], lines
    assert all(words[-1] == "ok" and float(words[4].rstrip(",")) >= 0.9999 for words in forward)
    print(proc.stdout)


def test_verify_names_a_release_that_is_not_the_manifests(
    built: Path, release: Path, tmp_path: Path
) -> None:
    tensors = tensors_for([PROBE], ("fp16",))
    tensors["model.head.norm.bias"] += 0.01
    other = write_release(tmp_path / "other", tensors, seed=4)
    proc = run_cli(["models", "--models", str(built), "--verify", "--weights", str(other)])
    assert proc.returncode == 1
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and "not the release these models were built from" in errors[0]
    assert str(other / "model.safetensors") in errors[0]
    assert f"forward {TEXT}: FAILED" in proc.stdout


def test_verify_says_when_the_release_is_gone(built: Path, release: Path, tmp_path: Path) -> None:
    moved = tmp_path / "models"
    shutil.copytree(built, moved)
    manifest = (moved / "manifest.json").read_text()
    (moved / "manifest.json").write_text(manifest.replace(str(release), str(tmp_path / "gone")))
    proc = run_cli(["models", "--models", str(moved), "--verify"])
    assert proc.returncode == 0, proc.stderr
    assert f"forward check skipped: the release is not at {tmp_path / 'gone'}" in proc.stdout
    assert "--weights DIR" in proc.stdout


@pytest.mark.root
def test_verify_as_a_user_who_cannot_read_the_release(built: Path, release: Path) -> None:
    """The installer verifies as the service user: a release only root reads is one
    line, the rest still checked."""
    nobody = 65534
    with world_readable() as base:
        copy = base / "da3-small"
        shutil.copytree(release, copy)
        (copy / "model.safetensors").chmod(0o600)
        models = base / "models"
        shutil.copytree(built, models)
        for path in [models, *models.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        argv = ["models", "--models", str(models), "--verify", "--weights", str(copy)]
        proc = as_user(nobody, nobody, "", *argv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and "cannot read it (Permission denied)" in errors[0], errors
    assert proc.stdout.count("  ok\n") == 2, proc.stdout  # the two cores still checked
