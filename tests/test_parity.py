"""LiteRT artifacts against the reference implementation's own forward.

The oracle (scripts/support/oracle.py) is depth_anything_3's network, built by its
``create_object`` and run plain fp32 in the export environment; it shares no code
with ``edge``. Both sides read the same seeded random weights from a release-layout
folder; the artifacts were converted from it through ``da3-edge export --weights``.
Inputs are real photographs at every exported shape.

Tolerances (per artifact, per photo): fp32 Pearson >= 0.99999 and rel-L2 <= 1e-4;
fp16 Pearson >= 0.9999 and rel-L2 <= 5e-3; int8 Pearson >= 0.99. Each test prints
what it measured.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edge.core import Core
from edge.models import DEFAULT_SHAPES, PRECISIONS, Manifest
from edge.parity import TOLERANCES, compare, metrics
from scripts.support import ROOT
from scripts.support.photos import PHOTOS, normalised_photo

pytestmark = pytest.mark.parity


def _key(shape: tuple[int, int], photo: str) -> str:
    return f"{shape[0]}x{shape[1]}:{photo}"


@pytest.fixture(scope="session")
def oracle(
    export_env: Path, random_weights: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, np.ndarray]:
    """Reference depth/conf for every (shape, photo), from one oracle process."""
    work = tmp_path_factory.mktemp("oracle")
    inputs = {_key(s, p): normalised_photo(p, s) for s in DEFAULT_SHAPES for p in PHOTOS}
    np.savez(work / "in.npz", **inputs)  # type: ignore[arg-type]
    proc = subprocess.run(
        [
            str(export_env),
            "-m",
            "scripts.support.oracle",
            str(random_weights),
            str(work / "in.npz"),
            str(work / "out.npz"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(work / "out.npz") as data:
        out = {k: data[k] for k in data.files}
    out.update({f"{k}/input": v for k, v in inputs.items()})
    return out


@pytest.mark.parametrize("shape", DEFAULT_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_random_weights_are_not_degenerate(
    oracle: dict[str, np.ndarray], shape: tuple[int, int]
) -> None:
    """Parity on a flat map proves nothing: depth must vary within and across photos."""
    logs = []
    for photo in PHOTOS:
        depth = oracle[f"{_key(shape, photo)}/depth"]
        cv = float(depth.std() / depth.mean())
        print(f"{shape} {photo}: depth CV {cv:.3f}")
        assert cv >= 0.05
        logs.append(np.log(depth))
    worst = max(
        metrics(logs[i], logs[j])["pearson"]
        for i in range(len(logs))
        for j in range(i + 1, len(logs))
    )
    print(f"{shape}: max log-depth Pearson between different photos {worst:.3f}")
    assert worst <= 0.9


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape", DEFAULT_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_artifact_matches_reference(
    full_models: Path, oracle: dict[str, np.ndarray], shape: tuple[int, int], precision: str
) -> None:
    manifest = Manifest.load(full_models)
    artifact = manifest.find(shape, precision)
    assert artifact.random_init and artifact.weights.startswith("sha256:")
    min_pearson, max_rel = TOLERANCES[precision]
    with Core(manifest.verify(artifact), threads=2, fp16_arithmetic=False) as core:
        for photo in PHOTOS:
            key = _key(shape, photo)
            depth, conf = core.run(oracle[f"{key}/input"])
            d = compare(oracle[f"{key}/depth"], depth, precision)
            c = metrics(oracle[f"{key}/conf"], conf)
            print(
                f"{artifact.file} {photo}: depth pearson {d['pearson']:.7f} rel-L2 {d['rel_l2']:.2e} "
                f"max|d| {d['max_abs']:.2e} mean|d| {d['mean_abs']:.2e}; "
                f"conf pearson {c['pearson']:.7f} rel-L2 {c['rel_l2']:.2e}"
            )
            assert d["pearson"] >= min_pearson, (photo, d)
            if max_rel is not None:
                assert d["rel_l2"] <= max_rel, (photo, d)
            assert c["pearson"] >= min_pearson, (photo, c)
