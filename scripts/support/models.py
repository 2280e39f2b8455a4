"""Test models built with the real export path, once per run.

Models come from `da3-edge export` run in the export environment (a separate venv
with torch), exactly as a user would run it: seeded random weights are first written
in the official release layout, then converted through ``--weights``. They are cached
under ``$DA3_EDGE_TEST_CACHE`` (default ``.cache/tests``) with a stamp of the code
that made them, so a second run reuses them and CI builds them once.

Models whose cache is current are reused without the export environment: that is how
the aarch64 lane (scripts/arm-lane.sh) runs the runtime tests on the very models the
x86_64 run exported.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import ROOT
from .tools import skip_or_fail

SEED = 0
SMALL_SHAPE = (140, 182)
# The VM's core (tests/test_vm.py, scripts/vm_camera.py): 4:3 like its camera, 12
# patches. Emulated by qemu's TCG a forward at SMALL_SHAPE takes minutes (234 s in
# qemu-user on this machine kind), at VM_SHAPE an eighth of that (28 s); the VM checks
# the install, the unit and the camera, for which any core shape serves.
VM_SHAPE = (42, 56)
# The VM's two core sizes (56 and 70): the config's, built at first boot, and the one the
# owner's `config set model.size` builds.
VM_SHAPES = (VM_SHAPE, (42, 70))
PLAIN = ("coffee.png", "chelsea.png")  # the photos the ``plain`` fixture runs
Plain = dict[str, tuple[np.ndarray, np.ndarray]]  # photo -> depth, confidence


def export_python() -> Path:
    return Path(os.environ.get("DA3_EDGE_EXPORT_PYTHON", ROOT / ".venv-export" / "bin" / "python"))


def cache_dir() -> Path:
    return Path(os.environ.get("DA3_EDGE_TEST_CACHE", ROOT / ".cache" / "tests"))


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
    (Also used by scripts/arm-lane.sh, so both lanes use the same files.)"""
    weights = build_random_weights()
    out = cache_dir() / "small"
    shape = f"{SMALL_SHAPE[0]}x{SMALL_SHAPE[1]}"
    return run_export(
        out, ["export", "--weights", str(weights), "--shape", shape, "--out", str(out)]
    )


def build_vm_models() -> Path:
    """fp16 and the stage programs at ``VM_SHAPE``: what the VM's card carries (the
    folder a user exporting fp16 only would have)."""
    weights = build_random_weights()
    out = cache_dir() / "vm"
    shape = f"{VM_SHAPE[0]}x{VM_SHAPE[1]}"
    export = ["export", "--weights", str(weights), "--shape", shape, "--precision", "fp16"]
    return run_export(out, [*export, "--out", str(out)])


def build_full_models() -> Path:
    """The default export: four shapes x fp32/fp16/int8, from the same weights.
    (Also used by scripts/arm-lane.sh rss.)"""
    weights = build_random_weights()
    out = cache_dir() / "full"
    return run_export(out, ["export", "--weights", str(weights), "--out", str(out)])


if __name__ == "__main__":
    # python -m scripts.support.models {weights,small,vm,full}...: built (or reused) in that
    # order, each folder printed on a line of its own
    builders = {
        "weights": build_random_weights,
        "small": build_small_models,
        "vm": build_vm_models,
        "full": build_full_models,
    }
    for name in sys.argv[1:]:
        print(builders[name]())
