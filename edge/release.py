"""DA3-small's release files read with numpy alone: no torch, no safetensors package.

A release is the folder ``PyTorchModelHubMixin`` writes: ``config.json``
(``{"model_name": "da3-small"}``) and ``model.safetensors``, the network's state dict
under the prefix ``model.``. The safetensors format is an 8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte span, then the raw
little-endian data; reading it here lets every fault be one line naming the file and
the tensor (a truncated file, a corrupt header, a span outside the file, a missing
tensor, a wrong shape or dtype, NaN or inf in a weight), and lets ``models build`` read
one tensor at a time: a 1 GB Pi never holds the 137 MB release in memory.

Two computations on weights reach the core's graph: DINOv2's bicubic interpolation of the
position embedding to the patch grid (``resample_pos_embed``), and each block's LayerNorm
scale and shift folded into the linear layer after it (``fold_norm``; LiteRT's converter
folds them too, summing in an order of its own). Both are computed here exactly or in
float64, rounded once, so they give the same bytes on every machine; the torch export
calls these same functions (``edge.export.mono``), so the export and ``models build``
write the same bytes. So are the constants the shape alone makes (``rope_tables``,
``uv_embedding_parts``). tests/test_release.py checks them against the reference package.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from edge.errors import WeightsError
from edge.models import (  # the release's layout, numpy-free
    CONFIG_FILE,
    HUB_REPO,
    MODEL_NAME,
    PREFIX,
    WEIGHTS_FILE,
    resolve_weights_file,
)

__all__ = [
    "CONFIG_FILE",
    "HUB_REPO",
    "MODEL_NAME",
    "PREFIX",
    "WEIGHTS_FILE",
    "resolve_weights_file",
]

# Bytes per element of each safetensors dtype (the format's list).
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2}
ITEMSIZE |= {"F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
MAX_HEADER = 16 << 20  # bytes: the real release's header is ~50 kB
DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "F64": np.dtype("<f8"),
}


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # the safetensors name: F32, F16, ...
    shape: tuple[int, ...]
    start: int  # absolute offsets in the file
    end: int


class Release:
    """A safetensors file opened for reading tensor by tensor (a context manager)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = resolve_weights_file(path)
        # Values computed from the release that every core of a build holds the same
        # (corebuild's folded biases), kept for the next core.
        self.derived: dict[str, np.ndarray] = {}
        self._fh: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        try:
            self.tensors, self.metadata = self._header()
        except BaseException:
            self._fh.close()
            raise

    def _header(self) -> tuple[dict[str, TensorInfo], dict[str, str]]:
        size = os.fstat(self._fh.fileno()).st_size
        head = self._fh.read(8)
        if len(head) < 8:
            raise WeightsError(f"{self.path}: truncated ({size} bytes): not a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER, size - 8):
            raise WeightsError(
                f"{self.path}: header of {length} bytes in a file of {size}: "
                "truncated or not a safetensors file"
            )
        try:
            header = json.loads(self._fh.read(length).decode("utf-8"))
            if not isinstance(header, dict):
                raise ValueError("not a JSON object")
        except (UnicodeDecodeError, ValueError) as exc:
            raise WeightsError(f"{self.path}: corrupt safetensors header ({exc})") from None
        base = 8 + length
        metadata = header.pop("__metadata__", None) or {}
        tensors = {}
        for name, info in header.items():
            tensors[name] = _tensor_info(self.path, name, info, base, size)
        return tensors, {str(k): str(v) for k, v in dict(metadata).items()}

    def info(self, name: str, shape: tuple[int, ...] | None = None) -> TensorInfo:
        """Where tensor ``name`` is, checked without reading it: present, of ``shape``
        when given, a float dtype."""
        info = self.tensors.get(name)
        if info is None:
            raise WeightsError(f"{self.path}: no tensor {name} (not a {MODEL_NAME} release)")
        if shape is not None and info.shape != tuple(shape):
            raise WeightsError(
                f"{self.path}: {name} has shape {list(info.shape)}, {MODEL_NAME} has {list(shape)}"
            )
        if info.dtype not in DTYPES:
            raise WeightsError(f"{self.path}: {name} is {info.dtype}; expected F32 or F16")
        return info

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Tensor ``name`` as float32, checked as ``info`` does and every value finite."""
        info = self.info(name, shape)
        dtype = DTYPES[info.dtype]
        self._fh.seek(info.start)
        raw = self._fh.read(info.end - info.start)
        if len(raw) != info.end - info.start:
            raise WeightsError(f"{self.path}: truncated inside {name}")
        array = np.frombuffer(raw, dtype=dtype).reshape(info.shape).astype(np.float32)
        if not np.isfinite(array).all():
            bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
            raise WeightsError(f"{self.path}: {name} holds {bad} NaN or infinite values")
        return array

    def random_seed(self) -> str | None:
        """The seed a random-weights release records (here or in its config.json)."""
        seed = self.metadata.get("random_init_seed")
        config = self.path.parent / CONFIG_FILE
        if seed is None and config.is_file():
            try:
                value = json.loads(config.read_text(encoding="utf-8")).get("random_init_seed")
            except (OSError, ValueError, AttributeError):
                value = None
            seed = None if value is None else str(value)
        return seed

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Release:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tensor_info(path: Path, name: str, info: Any, base: int, size: int) -> TensorInfo:
    try:
        dtype = str(info["dtype"])
        shape = tuple(int(n) for n in info["shape"])
        start, end = (int(n) for n in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise WeightsError(f"{path}: corrupt safetensors header entry for {name}") from None
    itemsize = ITEMSIZE.get(dtype)
    if itemsize is None:
        raise WeightsError(f"{path}: {name} has dtype {dtype!r}, unknown to safetensors")
    if not 0 <= start <= end or end - start != math.prod(shape) * itemsize:
        raise WeightsError(f"{path}: {name}'s byte span does not fit its shape {list(shape)}")
    if base + end > size:
        raise WeightsError(
            f"{path}: truncated: {name} ends at byte {base + end}, the file has {size}"
        )
    return TensorInfo(dtype, shape, base + start, base + end)


# -- the position embedding --------------------------------------------------------

CUBIC_A = -0.75  # torch's bicubic (Keys) coefficient
INTERPOLATE_OFFSET = 0.1  # DINOv2's interpolate_offset


def _cubic_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Source rows and weights of torch's bicubic (align_corners=False, no antialias)
    when DINOv2 asks for a scale factor of (n_out + 0.1) / n_in: (n_out, 4) each."""
    scale = 1.0 / ((n_out + INTERPOLATE_OFFSET) / n_in)
    real = scale * (np.arange(n_out, dtype=np.float64) + 0.5) - 0.5
    base = np.floor(real)
    t = real - base
    a = CUBIC_A

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return np.asarray(((a + 2) * x - (a + 3)) * x * x + 1)

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return np.asarray(((a * x - 5 * a) * x + 8 * a) * x - 4 * a)

    weights = np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)
    rows = np.clip(base[:, None].astype(np.int64) + np.arange(-1, 3), 0, n_in - 1)
    return rows, weights


def resample_pos_embed(
    pos_embed: np.ndarray, height: int, width: int, patch: int = 14
) -> np.ndarray:
    """DINOv2's ``interpolate_pos_encoding`` for a (height, width) input: the class row,
    then the square grid of patch embeddings resized bicubically to (height // patch,
    width // patch). ``pos_embed`` is (1, 1 + M*M, C); the result (1, 1 + h*w, C),
    float32, computed in float64 with the taps in a fixed order (the same bytes on
    every machine)."""
    n_grid = pos_embed.shape[1] - 1
    side = math.isqrt(n_grid)
    if side * side != n_grid:
        raise WeightsError(f"pos_embed has {n_grid} patch rows, not a square grid")
    if n_grid == (height // patch) * (width // patch) and height == width:
        return pos_embed.astype(np.float32)  # DINOv2 returns its own at its own size
    grid = pos_embed[0, 1:].astype(np.float64).reshape(side, side, -1)
    rows, wy = _cubic_taps(side, height // patch)
    cols, wx = _cubic_taps(side, width // patch)
    along_x = sum(grid[:, cols[:, k]] * wx[None, :, k, None] for k in range(4))
    out = sum(along_x[rows[:, k]] * wy[:, k, None, None] for k in range(4))
    patches = np.asarray(out).reshape(1, -1, grid.shape[-1])
    return np.concatenate([pos_embed[:, :1].astype(np.float64), patches], axis=1).astype(np.float32)


def fold_norm(
    weight: np.ndarray, bias: np.ndarray, gamma: np.ndarray, beta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``linear(layer_norm(x) * gamma + beta)`` as one linear on the plain normalised x:
    ``fold_weight`` and ``fold_bias``."""
    return fold_weight(weight, gamma), fold_bias(weight, bias, beta)


def fold_weight(weight: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """The folded linear's weight: weight * gamma, column by column."""
    folded: np.ndarray = (weight * gamma[None, :]).astype(np.float32)
    return folded


def fold_bias(weight: np.ndarray, bias: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """The folded linear's bias: bias + weight @ beta summed exactly (``math.fsum`` of
    float64 products, which are exact for float32 factors) and rounded once: float32
    results that do not depend on the machine's BLAS. The costly part of a build (a
    row's exact sum in Python), so a build computes it once per block, not per core."""
    rows = (weight.astype(np.float64) * beta.astype(np.float64)[None, :]).tolist()
    sums = []
    for row, b in zip(rows, bias.tolist(), strict=True):
        row.append(b)  # an exact sum does not depend on the order
        sums.append(math.fsum(row))
    return np.asarray(sums, dtype=np.float64).astype(np.float32)


# -- what the shape alone makes ---------------------------------------------------------
# The RoPE tables and the head's UV embeddings depend only on the input shape. torch
# computes them in float32 with vectorised sin and cos whose last bit depends on the
# CPU (AVX-512 and AVX2 differ in a few elements), so an export's bytes would depend on
# the machine that made it. Here: float64, libm's sin and cos one value at a time,
# rounded once.


def _sin_cos(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = angles.astype(np.float64).ravel().tolist()
    sin = np.array([math.sin(a) for a in flat], dtype=np.float64).reshape(angles.shape)
    cos = np.array([math.cos(a) for a in flat], dtype=np.float64).reshape(angles.shape)
    return sin, cos


def rope_tables(
    positions: np.ndarray, head_dim: int, base: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """DA3's 2D RoPE (``RotaryPositionEmbedding2D``) looked up for (N, 2) integer (y, x)
    ``positions``: cos_y, sin_y, cos_x, sin_x, each (1, 1, N, head_dim // 2) float32."""
    dim = head_dim // 2
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    tables = []
    for axis in (0, 1):
        angles = positions[:, axis].astype(np.float64)[:, None] * inv_freq[None, :]
        sin, cos = _sin_cos(np.concatenate([angles, angles], axis=-1))
        tables += [cos.astype(np.float32)[None, None], sin.astype(np.float32)[None, None]]
    return tables[0], tables[1], tables[2], tables[3]


def uv_embedding_parts(
    channels: int, ph: int, pw: int, height: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The head's UV sin/cos embedding (``create_uv_grid``, ``position_grid_to_embed``,
    times 0.1) on a (ph, pw) grid of an input (height, width), as its two separable
    parts: the first channels/2 depend on the column only, (1, channels/2, 1, pw); the
    rest on the row only, (1, channels/2, ph, 1). float32."""
    aspect = width / height
    diag = (aspect**2 + 1.0) ** 0.5
    span_x, span_y = aspect / diag, 1.0 / diag
    xs = np.linspace(-span_x * (pw - 1) / pw, span_x * (pw - 1) / pw, pw)
    ys = np.linspace(-span_y * (ph - 1) / ph, span_y * (ph - 1) / ph, ph)
    quarter = channels // 4
    omega = 1.0 / 100.0 ** (np.arange(quarter, dtype=np.float64) / quarter)

    def embed(pos: np.ndarray) -> np.ndarray:  # (n,) -> (channels/2, n), times 0.1
        sin, cos = _sin_cos(pos[:, None] * omega[None, :])
        return (np.concatenate([sin, cos], axis=1) * 0.1).T

    cols = embed(xs).astype(np.float32)[None, :, None, :]
    rows = embed(ys).astype(np.float32)[None, :, :, None]
    return cols, rows
