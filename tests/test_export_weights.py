"""Release-layout weights files as found in the wild, through `da3-edge export --weights`.

The official file is written by safetensors' ``save_model``: a tensor shared by several
modules is stored once. Community conversions often clone the state dict and save it
with ``save_file``, storing every alias as its own tensor; the official
``from_pretrained`` (non-strict) accepts those, and so must we — unless an alias differs
from the tensor it aliases.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.support import children
from scripts.support.tools import run_cli

pytestmark = pytest.mark.export


def _aliased_folder(
    export_env: Path, random_weights: Path, folder: Path, *, tamper: bool
) -> list[str]:
    folder.mkdir()
    shutil.copy(random_weights / "config.json", folder / "config.json")
    src, dst = random_weights / "model.safetensors", folder / "model.safetensors"
    done = children.run("with-aliases", src, dst, int(tamper), python=export_env, timeout=600)
    assert done.returncode == 0, done.stderr
    proc = done.stdout
    # The reference package logs to stdout when imported: take the script's own line.
    line = next(x for x in proc.splitlines() if x.startswith("ALIASES "))
    return line.split()[1:]


def _export_weights_only(
    export_env: Path, weights: Path, out: Path
) -> subprocess.CompletedProcess[str]:
    """`da3-edge export --weights W --save-weights OUT --weights-only`: load and save."""
    args = ["--weights", str(weights), "--save-weights", str(out), "--weights-only"]
    return run_cli(["export", *args], python=export_env)


def test_every_alias_stored_is_accepted(
    export_env: Path, random_weights: Path, tmp_path: Path
) -> None:
    aliases = _aliased_folder(export_env, random_weights, tmp_path / "w", tamper=False)
    print(f"{len(aliases)} aliases stored as tensors of their own: {aliases}")
    assert aliases  # the network shares tensors, so the file really has extra keys
    proc = _export_weights_only(export_env, tmp_path / "w", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "(sha256:" in proc.stderr
    # Saved back in the official layout: each shared tensor once, as in the original.
    ours, theirs = tmp_path / "out" / "model.safetensors", random_weights / "model.safetensors"
    check = children.run("same-keys", ours, theirs, python=export_env)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip().splitlines()[-1] == "True"


def test_an_alias_that_differs_is_refused_by_name(
    export_env: Path, random_weights: Path, tmp_path: Path
) -> None:
    aliases = _aliased_folder(export_env, random_weights, tmp_path / "w", tamper=True)
    proc = _export_weights_only(export_env, tmp_path / "w", tmp_path / "out")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    print(last)
    assert last.startswith("da3-edge: error: ")
    assert f"{aliases[0]} is stored as an alias of " in last and last.endswith("differs from it")
    assert not (tmp_path / "out" / "model.safetensors").exists()
