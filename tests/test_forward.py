"""DA3's forward in numpy (edge/forward.py) against the reference package's own.

The check `models --verify` runs on a device is only as good as this forward: here it
meets the oracle (scripts/support/oracle.py: depth_anything_3's network, untouched, fp32
in the export environment) on the seeded release the test models come from, on real
photos at the probe shape and at a portrait one. Measured: rel-L2 ~1e-6 (the oracle is
float32, this forward float64)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edge import forward
from edge.parity import metrics
from edge.release import Release
from scripts.support import ROOT
from scripts.support.photos import normalised_photo

SHAPES = [(140, 182), (196, 154)]
PHOTOS = ("astronaut.png", "coffee.png")


def test_forward_equals_the_reference_package(
    export_env: Path, random_weights: Path, tmp_path: Path
) -> None:
    inputs = {f"{h}x{w}:{p}": normalised_photo(p, (h, w)) for h, w in SHAPES for p in PHOTOS}
    np.savez(tmp_path / "in.npz", **inputs)  # type: ignore[arg-type]
    command = [str(export_env), "-m", "scripts.support.oracle", str(random_weights)]
    command += [str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(tmp_path / "out.npz") as oracle, Release(random_weights) as release:
        for key, image in inputs.items():
            depth, conf = forward.depth(release, image[0])
            for name, ours in (("depth", depth), ("conf", conf)):
                m = metrics(oracle[f"{key}/{name}"], ours)
                print(key, name, m)
                assert m["pearson"] >= 0.999999 and m["rel_l2"] <= 1e-5, (key, name, m)


@pytest.mark.parametrize(
    "x",
    [np.linspace(-6, 6, 49), np.array([0.0, -0.0, 1e-8, -40.0, 40.0])],
    ids=["range", "edges"],
)
def test_gelu_is_the_erf_one(x: np.ndarray) -> None:
    from math import erf

    exact = np.array([0.5 * v * (1 + erf(v / 2**0.5)) for v in x])
    assert np.abs(forward.gelu(x) - exact).max() < 1e-6
