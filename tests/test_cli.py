"""The `da3-edge` dispatcher and the export/models commands: exit codes and messages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from edge import cli
from edge.commands import export as export_cmd
from scripts.support import ROOT
from scripts.support.models import export_python


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "export" in out and "models" in out
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("da3-edge ")


def test_the_version_is_written_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyproject.toml holds the version; ``edge.__version__`` reads it from the installed
    distribution, or from the checkout's pyproject.toml where edge runs uninstalled
    (PYTHONPATH at a checkout, as the VM's laid-out daemon does)."""
    from importlib import metadata

    import edge
    from edge import version

    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert edge.__version__ == version.version() == written
    version.version.cache_clear()

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    try:
        assert version.version() == written
    finally:
        version.version.cache_clear()
    sources = [p for p in (ROOT / "edge").rglob("*.py") if f'"{written}"' in p.read_text()]
    assert sources == []


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
    assert cli.main(["models", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert cli.main(["models", "--help"]) == 0
    assert "--verify" in capsys.readouterr().out
    assert cli.main(["export", "--shape", "100x100", "--random-init", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "da3-edge: error: shape '100x100': both sides must be positive multiples of 14"
    )
    assert cli.main(["export", "--precision", "fp8", "--random-init", "0"]) == 2
    assert cli.main(["export", "--weights-only", "--random-init", "0"]) == 2


def test_shape_selection() -> None:
    assert export_cmd.parse_shapes(None) == [(378, 504), (504, 378), (280, 504), (504, 280)]
    assert export_cmd.parse_shapes(["140x182"]) == [(140, 182)]
    assert export_cmd.parse_shapes(["default", "140x182,378x504"])[-1] == (140, 182)
    assert len(export_cmd.parse_shapes(["default", "140x182,378x504"])) == 5
    # --size N: its four shapes; with --shape, those follow; no --shape: no default.
    at_280 = [(210, 280), (280, 210), (154, 280), (280, 154)]
    assert export_cmd.parse_shapes(None, [280]) == at_280
    assert export_cmd.parse_shapes(["140x182"], [280, 504]) == [
        *at_280,
        (378, 504),
        (504, 378),
        (280, 504),
        (504, 280),
        (140, 182),
    ]
    assert export_cmd.parse_shapes(["default"], [504]) == export_cmd.parse_shapes(None)


def test_models_without_a_model_dir_says_how_to_get_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli.main(["models", "--models", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "da3-edge models build --weights hub" in err


def _run(args: list[str], python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
    return subprocess.run(
        [python, "-m", "edge", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_export_without_export_env_is_one_line() -> None:
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("torch is importable here; this test runs in the runtime env")
    proc = _run(["export", "--random-init", "0", "--out", "/nonexistent/x"])
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "setup-export-env.sh" in lines[0] and "torch" in lines[0]


def test_models_verify_lists_and_flags_random_init(small_models: Path) -> None:
    proc = _run(["models", "--models", str(small_models), "--verify"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"{small_models} (da3-small)"
    assert len(lines) == 9
    for line, precision in zip(lines[1:4], ("fp32", "fp16", "int8"), strict=True):
        assert f"140x182 {precision}" in line
        assert line.endswith("RANDOM-INIT (not a real model)  ok")
    for line, kind in zip(lines[4:7], ("post", "pre", "pre1"), strict=True):
        assert line.startswith(f"  {kind} 140x182") and line.endswith(
            f"da3-small_{kind}_140x182.pte  ok"
        )
    # The export's weights are a release file: the forward check runs (int8 has none).
    for line, precision in zip(lines[7:], ("fp16", "fp32"), strict=True):
        assert line.startswith(f"  forward 42x56 {precision} Pearson ") and line.endswith("ok")
    assert proc.stderr == ""


def test_models_verify_refuses_a_tampered_artifact(small_models: Path, tmp_path: Path) -> None:
    copy = tmp_path / "m"
    shutil.copytree(small_models, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    victim = copy / manifest["artifacts"][1]["file"]
    data = bytearray(victim.read_bytes())
    data[-100] ^= 0x01
    victim.write_bytes(bytes(data))
    proc = _run(["models", "--models", str(copy), "--verify"])
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "does not match the manifest" in err[0] and victim.name in err[0]
    forward = 2  # the forward check, per precision, runs still
    assert proc.stdout.count(" ok\n") == len(manifest["artifacts"]) - 1 + forward
    assert "FAILED" in proc.stdout


@pytest.mark.export
def test_export_refuses_mixing_weights(
    export_env: Path, small_models: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "m"
    shutil.copytree(small_models, copy)
    proc = _run(
        ["export", "--random-init", "5", "--shape", "140x182", "--out", str(copy)],
        python=str(export_env),
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"da3-edge: error: {copy} already holds models from other weights")
    )


@pytest.mark.export
def test_export_with_bad_weights_is_one_line(export_env: Path, tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text('{"model_name": "da3-small"}')
    (tmp_path / "w" / "model.safetensors").write_bytes(b"\x00" * 64)
    proc = _run(
        ["export", "--weights", str(tmp_path / "w"), "--out", str(tmp_path / "o")],
        python=str(export_env),
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("da3-edge: error: ")
    assert "not readable as da3-small weights" in proc.stderr
    proc = _run(
        ["export", "--weights", str(tmp_path / "missing"), "--out", str(tmp_path / "o")],
        python=str(export_env),
    )
    assert proc.returncode == 1 and "no weights at" in proc.stderr


def test_export_python_default_points_into_the_repo() -> None:
    assert export_python().is_absolute()


@pytest.mark.export
def test_random_weights_are_reproducible(
    export_env: Path, random_weights: Path, tmp_path: Path
) -> None:
    """Same seed, same bytes: the manifest's weights hash must not change between runs."""
    proc = _run(
        ["export", "--random-init", "0", "--save-weights", str(tmp_path / "w"), "--weights-only"],
        python=str(export_env),
    )
    assert proc.returncode == 0, proc.stderr
    again = (tmp_path / "w" / "model.safetensors").read_bytes()
    assert again == (random_weights / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "w" / "config.json").read_text()) == {
        "model_name": "da3-small",
        "random_init_seed": 0,
    }
