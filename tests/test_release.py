"""DA3's release file read with numpy alone (edge/release.py): every fault a download or
a hand-made file can have is one line naming the file and the tensor; the two
computations on weights give the same bytes wherever they run."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from edge.errors import ModelNotFound, WeightsError
from edge.release import Release, fold_norm, resample_pos_embed, rope_tables, uv_embedding_parts
from scripts.support.release import write_release, write_safetensors

TENSORS: dict[str, np.ndarray] = {
    "model.a": np.arange(12, dtype=np.float32).reshape(3, 4),
    "model.b": np.linspace(-1, 1, 5, dtype=np.float16),
}


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return write_release(tmp_path / "release", dict(TENSORS), seed=3)


@pytest.mark.arm
def test_reads_each_tensor_as_float32_and_the_seed(release: Path) -> None:
    with Release(release) as r:
        assert r.get("model.a", (3, 4)).tolist() == TENSORS["model.a"].tolist()
        b = r.get("model.b")
        assert (
            b.dtype == np.float32 and b.tolist() == TENSORS["model.b"].astype(np.float32).tolist()
        )
        assert r.random_seed() == "3"


def test_a_real_release_has_no_seed(tmp_path: Path) -> None:
    with Release(write_release(tmp_path / "r", dict(TENSORS), seed=None)) as r:
        assert r.random_seed() is None


def _refusal(path: Path, name: str | None = None, shape: tuple[int, ...] | None = None) -> str:
    with pytest.raises(WeightsError) as err, Release(path) as r:
        r.get(name or "model.a", shape)
    message = str(err.value)
    assert "\n" not in message
    print(message)
    return message


def test_truncated_inside_the_data(release: Path) -> None:
    file = release / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-3])
    message = _refusal(file)
    assert message.startswith(f"{file}: truncated: model.")
    assert f"the file has {file.stat().st_size}" in message


@pytest.mark.parametrize("keep", [0, 5, 8, 40])
def test_truncated_before_the_data(release: Path, keep: int) -> None:
    file = release / "model.safetensors"
    file.write_bytes(file.read_bytes()[:keep])
    assert "truncated" in _refusal(file)


def test_a_corrupt_header(release: Path) -> None:
    file = release / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[9] = ord("#")  # inside the JSON
    file.write_bytes(bytes(data))
    assert "corrupt safetensors header" in _refusal(file)


def test_a_span_that_does_not_fit_its_shape(tmp_path: Path) -> None:
    header = json.dumps({"model.a": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 40]}})
    file = tmp_path / "model.safetensors"
    file.write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(48))
    assert "byte span does not fit its shape [3, 4]" in _refusal(file)


def test_a_missing_tensor(release: Path) -> None:
    assert "no tensor model.c (not a da3-small release)" in _refusal(release, "model.c")


def test_a_wrong_shape(release: Path) -> None:
    assert "model.a has shape [3, 4], da3-small has [4, 3]" in _refusal(release, "model.a", (4, 3))


def test_a_wrong_dtype(tmp_path: Path) -> None:
    folder = write_release(tmp_path / "r", {"model.a": np.arange(4, dtype=np.int64)})
    assert "model.a is I64; expected F32 or F16" in _refusal(folder)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_a_weight(tmp_path: Path, bad: float) -> None:
    a = TENSORS["model.a"].copy()
    a[1, 2] = bad
    folder = write_release(tmp_path / "r", {"model.a": a})
    assert "model.a holds 1 NaN or infinite values" in _refusal(folder)


def test_a_config_for_another_model(tmp_path: Path) -> None:
    folder = write_release(tmp_path / "r", dict(TENSORS), model_name="da3-large")
    with pytest.raises(WeightsError, match="model_name is 'da3-large', expected 'da3-small'"):
        Release(folder)


def test_no_weights_in_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="no weights at"):
        Release(tmp_path)


def test_a_file_that_is_not_safetensors(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"<html>404 Not Found</html>" * 10)
    assert "not a safetensors file" in _refusal(file)


def test_the_writer_matches_the_format_its_reader_expects(tmp_path: Path) -> None:
    """The test's own writer: 8-byte length, a header padded to 8, then the data."""
    file = write_safetensors(tmp_path / "x.safetensors", {"model.a": TENSORS["model.a"]})
    data = file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0 and len(data) == 8 + n + 48


# -- the computations on weights -----------------------------------------------------


@pytest.mark.arm
def test_fold_norm_is_the_norm_then_the_linear() -> None:
    """linear(norm(x) * g + b) == folded(norm(x)), and the bias sum is exact: the same
    as a sum in rationals, rounded once (no BLAS order in it)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((24, 16)).astype(np.float32)
    b, g, beta = (rng.standard_normal(n).astype(np.float32) for n in (24, 16, 16))
    x = rng.standard_normal((5, 16)).astype(np.float32)
    fw, fb = fold_norm(w, b, g, beta)
    assert fw.dtype == fb.dtype == np.float32
    assert np.array_equal(fw, w * g)  # float32 products, as the converter makes them
    expect = (x * g + beta).astype(np.float64) @ w.T.astype(np.float64) + b
    assert np.allclose(x.astype(np.float64) @ fw.T.astype(np.float64) + fb, expect, atol=1e-5)
    from fractions import Fraction

    for i in range(24):
        exact = Fraction(float(b[i])) + sum(
            Fraction(float(w[i, j])) * Fraction(float(beta[j])) for j in range(16)
        )
        assert fb[i] == np.float32(float(exact)), i


@pytest.mark.arm
def test_resample_pos_embed_keeps_the_class_row_and_the_grid_at_its_own_size() -> None:
    rng = np.random.default_rng(2)
    pos = rng.standard_normal((1, 1 + 37 * 37, 8)).astype(np.float32)
    same = resample_pos_embed(pos, 518, 518)
    assert np.array_equal(same, pos)
    out = resample_pos_embed(pos, 378, 504)
    assert out.shape == (1, 1 + 27 * 36, 8) and out.dtype == np.float32
    assert np.array_equal(out[0, 0], pos[0, 0])


@pytest.mark.arm
def test_resample_pos_embed_keeps_a_constant_field() -> None:
    """The four taps' weights sum to one at every output, edges included (clamped)."""
    pos = np.full((1, 1 + 37 * 37, 3), 0.25, dtype=np.float32)
    out = resample_pos_embed(pos, 42, 1008)
    assert out.shape == (1, 1 + 3 * 72, 3)
    assert np.abs(out - 0.25).max() < 1e-7


@pytest.mark.arm
def test_the_computations_give_the_same_bytes_on_every_cpu() -> None:
    """Seeded inputs, the SHA-256 of both computations' outputs as x86_64 computed them
    when this test was written: the aarch64 lane runs it on the emulated Cortex-A76."""
    rng = np.random.default_rng(11)
    pos = rng.standard_normal((1, 1 + 37 * 37, 16)).astype(np.float32)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    b, g, beta = (rng.standard_normal(n).astype(np.float32) for n in (96, 64, 64))
    digest = hashlib.sha256()
    outputs = (resample_pos_embed(pos, 378, 504), resample_pos_embed(pos, 42, 56))
    for array in (*outputs, *fold_norm(w, b, g, beta)):
        digest.update(array.tobytes())
    assert digest.hexdigest() == "59da61aec8f357e2c984ce93ff88e80dea2450507f5cf49819899249ec96518f"


@pytest.mark.arm
def test_the_shape_constants_give_the_same_bytes_on_every_cpu() -> None:
    """The RoPE tables and UV embedding parts of two shapes, their SHA-256 as x86_64
    computed them when this test was written: the aarch64 lane runs it on the A76, and
    torch's own (vectorised float32 sin and cos) differed between two x86_64 CPUs."""
    digest = hashlib.sha256()
    for h, w in ((378, 504), (42, 56)):
        ph, pw = h // 14, w // 14
        grid = np.stack(np.meshgrid(np.arange(ph), np.arange(pw), indexing="ij"), -1)
        positions = np.concatenate([np.zeros((1, 2), np.int64), grid.reshape(-1, 2) + 1])
        for array in (*rope_tables(positions, 64, 100.0), *uv_embedding_parts(128, h, w, h, w)):
            digest.update(array.tobytes())
    assert digest.hexdigest() == "59db6cdc61f02ffe50df5531107d264909142f4fe19e2a1509966357410dff1d"
