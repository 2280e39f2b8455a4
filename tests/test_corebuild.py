"""`da3-edge models build`: the cores from DA3's release file with numpy alone.

Byte for byte the export's cores from the same weights (the seeded release the test
models are exported from; the shipped graphs were made from other seeded weights, so
the equality is the build's, not a copy's); a stand-in release of the right shapes in
the quick lane, where the cores it builds load and run in LiteRT; and each fault a
release can have refused in one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge import corebuild, graphs
from edge.core import Core
from edge.models import DEFAULT_SHAPES, Manifest
from scripts.support import children
from scripts.support.models import SMALL_SHAPE, VM_SHAPES
from scripts.support.release import tensors_for, write_release
from scripts.support.tools import run_cli, tmpfs

SHAPE = VM_SHAPES[0]  # 42x56: the smallest shipped graph
TEXT = f"{SHAPE[0]}x{SHAPE[1]}"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A release of seeded values with the shapes DA3-small's tensors have."""
    tensors = tensors_for([SHAPE], ("fp16", "fp32"))
    return write_release(tmp_path_factory.mktemp("release") / "da3-small", tensors, seed=5)


def build(*args: str, weights: Path, out: Path) -> tuple[int, list[str], str]:
    proc = run_cli(["models", "build", "--weights", str(weights), "--out", str(out), *args])
    return proc.returncode, proc.stderr.strip().splitlines(), proc.stdout


def refused(code: int, lines: list[str], stdout: str, out: Path) -> str:
    """A refusal: exit 1, one error line (after the progress lines), nothing written."""
    assert not stdout
    assert code == 1, lines
    errors = [line for line in lines if line.startswith("da3-edge: error: ")]
    assert errors == lines[-1:], lines
    assert not any("Traceback" in line for line in lines), lines
    assert not out.exists(), list(out.iterdir())
    print(lines[-1])
    return lines[-1]


def test_a_built_core_loads_and_runs(stand_in: Path, tmp_path: Path) -> None:
    out = tmp_path / "models"
    code, lines, stdout = build(
        "--shape", TEXT, "--precision", "fp16,fp32", weights=stand_in, out=out
    )
    assert code == 0, lines
    assert lines[0] == f"weights: {stand_in / 'model.safetensors'} (100 MB)"
    assert lines[1] == "weights: 269 tensors read and checked"
    assert lines[-2].startswith(f"[2/2] {TEXT} fp32: ") and lines[-2].endswith(
        "RANDOM-INIT (not a real model)"
    )
    assert lines[-1] == "stage programs: pre, pre1, post for 1 shapes"
    assert stdout.strip() == f"wrote 5 artifacts to {out} (random-init: not a real model)"
    manifest = Manifest.load(out)
    core = manifest.find(SHAPE, "fp16")
    assert core.random_init and core.provenance["built_by"].endswith("models build")
    assert core.weights.startswith("sha256:")
    verify = run_cli(["models", "--verify", "--models", str(out)])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.count("  ok") == 5 + 2  # the files, the forward check per precision
    image = np.random.default_rng(0).standard_normal((1, 3, *SHAPE)).astype(np.float32)
    with Core(manifest.artifact_path(core), threads=1) as runner:
        depth, conf = runner.run(image)
    assert depth.shape == conf.shape == SHAPE
    assert np.isfinite(depth).all() and np.isfinite(conf).all() and depth.std() > 0


def test_the_owner_path_loads_no_torch(stand_in: Path, tmp_path: Path) -> None:
    args = ("--weights", stand_in, "--shape", TEXT, "--out", tmp_path / "m", "--no-stages")
    done = children.run("build-imports", *args, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED"


def test_a_truncated_release_is_refused(stand_in: Path, tmp_path: Path) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "config.json").write_bytes((stand_in / "config.json").read_bytes())
    data = (stand_in / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    line = refused(*build("--shape", TEXT, weights=folder, out=tmp_path / "m"), tmp_path / "m")
    assert "model.safetensors: truncated: model." in line


def test_nan_in_a_weight_is_refused_by_name(tmp_path: Path) -> None:
    tensors = tensors_for([SHAPE])
    name = sorted(tensors)[-1]
    tensors[name].flat[7] = np.nan
    folder = write_release(tmp_path / "r", tensors)
    line = refused(*build("--shape", TEXT, weights=folder, out=tmp_path / "m"), tmp_path / "m")
    assert line.endswith(f"{name} holds 1 NaN or infinite values")


def test_a_missing_tensor_is_refused_by_name(tmp_path: Path) -> None:
    tensors = tensors_for([SHAPE])
    name = sorted(tensors)[0]
    del tensors[name]
    folder = write_release(tmp_path / "r", tensors)
    line = refused(*build("--shape", TEXT, weights=folder, out=tmp_path / "m"), tmp_path / "m")
    assert line.endswith(f"no tensor {name} (not a da3-small release)")


def test_a_wrong_shape_is_refused_by_name(tmp_path: Path) -> None:
    tensors = tensors_for([SHAPE])
    name = sorted(tensors)[1]
    want = list(tensors[name].shape)
    tensors[name] = tensors[name].reshape(-1)[:-1]
    folder = write_release(tmp_path / "r", tensors)
    line = refused(*build("--shape", TEXT, weights=folder, out=tmp_path / "m"), tmp_path / "m")
    assert line.endswith(f"{name} has shape [{tensors[name].size}], da3-small has {want}")


def test_a_config_for_another_model_is_refused(tmp_path: Path) -> None:
    folder = write_release(
        tmp_path / "r", {"model.x": np.zeros(1, np.float32)}, model_name="da3-giant"
    )
    line = refused(*build("--shape", TEXT, weights=folder, out=tmp_path / "m"), tmp_path / "m")
    assert line.endswith("model_name is 'da3-giant', expected 'da3-small'")


def test_a_shape_without_a_graph_is_refused(stand_in: Path, tmp_path: Path) -> None:
    line = refused(*build("--shape", "70x70", weights=stand_in, out=tmp_path / "m"), tmp_path / "m")
    assert "no fp16 graph for 70x70 in this da3-edge (it builds fp16 at " in line
    assert "(it builds fp16 at sizes 224, 280, 336, 392, 448, 504 in the four aspects, " in line
    assert line.endswith(
        "42x56, 42x70, 140x182); other shapes come from `da3-edge export` (the export environment)"
    )


def test_a_folder_of_other_weights_is_refused(stand_in: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert build("--shape", TEXT, "--no-stages", weights=stand_in, out=out)[0] == 0
    other = write_release(tmp_path / "other", tensors_for([SHAPE]), seed=6)
    data = bytearray((other / "model.safetensors").read_bytes())
    data[-1] ^= 1  # other weights: another SHA-256
    (other / "model.safetensors").write_bytes(bytes(data))
    before = (out / "manifest.json").read_bytes()
    code, lines, _ = build("--shape", TEXT, weights=other, out=out)
    assert code == 1 and len(lines) == 2 and "already holds models from other weights" in lines[-1]
    assert (out / "manifest.json").read_bytes() == before


def test_for_config_builds_the_cores_the_daemon_runs(stand_in: Path, tmp_path: Path) -> None:
    """--for-config: the config's precision, at its size the camera's shape (and the
    other aspects that have a graph); built again, no file changes (the same cores keep
    their manifest entry). A config whose camera has no graph: one line, nothing written."""
    config = tmp_path / "pi.toml"
    config.write_text("[camera]\nwidth = 640\nheight = 480\n[model]\nsize = 56\n")
    out = tmp_path / "m"
    code, lines, _ = build("--for-config", str(config), "--no-stages", weights=stand_in, out=out)
    assert code == 0, lines
    assert [(a.shape, a.precision) for a in Manifest.load(out).cores()] == [(SHAPE, "fp16")]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert build("--for-config", str(config), "--no-stages", weights=stand_in, out=out)[0] == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    config.write_text("[model]\nsize = 98\n")
    line = refused(
        *build("--for-config", str(config), weights=stand_in, out=tmp_path / "n"), tmp_path / "n"
    )
    assert line.endswith(
        "model.size 98: no fp16 graph ships at that size "
        "(sizes 224, 280, 336, 392, 448, 504 in the four aspects, 42x56, 42x70, 140x182)"
    )
    code, lines, _ = build("--for-config", str(config), "--size", "280", weights=stand_in, out=out)
    assert code == 2 and "--for-config takes the shapes and precision from the config" in lines[-1]


@pytest.mark.root
def test_a_full_disk_leaves_no_partial(stand_in: Path, tmp_path: Path) -> None:
    """On a 60 MB filesystem the 49 MB fp16 core fits and the 98 MB fp32 one does not:
    the fp32 partial is removed, the fp16 core and its manifest entry stay."""
    with tmpfs(tmp_path / "small", size="60m") as disk:
        out = disk / "models"
        code, lines, _ = build(
            "--shape", TEXT, "--precision", "fp16,fp32", "--no-stages", weights=stand_in, out=out
        )
        assert code == 1, lines
        print(lines[-1])
        assert lines[-1].startswith("da3-edge: error: ") and "No space left on device" in lines[-1]
        assert sorted(p.name for p in out.iterdir()) == [
            "da3-small_42x56_fp16.tflite",
            "manifest.json",
        ]
        manifest = Manifest.load(out)
        assert [a.precision for a in manifest.cores()] == ["fp16"]
        manifest.verify(manifest.cores()[0], full=True)


# -- the same bytes as the export ----------------------------------------------------


def _same_as_export(
    exported: Path, weights: Path, shapes: list[tuple[int, int]], tmp_path: Path
) -> None:
    out = tmp_path / "built"
    args = [a for s in shapes for a in ("--shape", f"{s[0]}x{s[1]}")]
    code, lines, _ = build(*args, "--precision", "fp16,fp32", weights=weights, out=out)
    assert code == 0, lines
    export, built = Manifest.load(exported), Manifest.load(out)
    for shape in shapes:
        for precision in ("fp16", "fp32"):
            theirs, ours = export.find(shape, precision), built.find(shape, precision)
            print(f"{shape} {precision}: {ours.sha256}")
            assert ours.sha256 == theirs.sha256 and ours.bytes == theirs.bytes, (shape, precision)
            assert ours.weights == theirs.weights
        for kind in ("pre", "pre1", "post"):
            assert built.find_stage(kind, shape).sha256 == export.find_stage(kind, shape).sha256


def test_the_same_bytes_as_the_export_small(
    small_models: Path, random_weights: Path, tmp_path: Path
) -> None:
    _same_as_export(small_models, random_weights, [SMALL_SHAPE], tmp_path)


def test_the_same_bytes_as_the_export_at_504(
    full_models: Path, random_weights: Path, tmp_path: Path
) -> None:
    _same_as_export(full_models, random_weights, list(DEFAULT_SHAPES), tmp_path)


@pytest.mark.export
def test_the_position_embedding_is_dinov2s(export_env: Path) -> None:
    shapes = ["378x504", "504x378", "280x504", "42x56", "140x182", "518x518", "1008x756"]
    done = children.run("pos-embed-against-torch", *shapes, python=export_env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("POS ")]
    assert [line[1] for line in lines] == shapes
    for _, shape, same_shape, diff in lines:
        print(shape, diff)
        assert same_shape == "True" and float(diff) < 5e-7, shape


@pytest.mark.export
def test_the_shape_constants_are_da3s(export_env: Path) -> None:
    """The RoPE tables and the head's UV embeddings, computed in float64 with libm and
    rounded once (the same bytes on every CPU, unlike torch's vectorised sin and cos),
    against DA3's own torch functions: the UV parts within an ulp, the RoPE tables
    within the rounding of torch's float32 angles (up to ~37 rad: ~2e-6)."""
    shapes = ["378x504", "504x378", "42x56", "140x182"]
    done = children.run("shape-constants-against-torch", *shapes, python=export_env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("SHAPE ")]
    assert [line[1] for line in lines] == shapes
    for _, shape, d_rope, d_uv in lines:
        print(shape, d_rope, d_uv)
        assert float(d_rope) < 4e-6 and float(d_uv) < 5e-8, shape


def test_every_shipped_graph_is_readable_and_named_for_what_it_holds() -> None:
    shipped = graphs.available()
    assert {(s, p) for s in DEFAULT_SHAPES for p in ("fp16", "fp32")} <= set(shipped)
    for (shape, precision), path in shipped.items():
        template = corebuild.Template.read(path)
        assert (template.shape, template.precision) == (shape, precision)
        assert template.made_with["litert-torch"] == "0.10.0"
        header_bytes = sum(size for _, size, _ in template.regions)
        assert 0 < header_bytes < template.size
    print(
        json.dumps({f"{s[0]}x{s[1]} {p}": path.stat().st_size for (s, p), path in shipped.items()})
    )
