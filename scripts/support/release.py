"""Release folders written with numpy: the layout DA3 publishes (config.json +
model.safetensors), filled with seeded values of the shapes a core template reads, or
damaged on purpose. What ``models build`` is tested on where the export environment's
seeded release is not needed (the quick lane), and the faults a Pi owner's download can
have."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from edge import corebuild
from edge.release import CONFIG_FILE, MODEL_NAME, WEIGHTS_FILE

LAST_CONV = "model.head.scratch.output_conv2.2."
SAFETENSORS_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}


def write_safetensors(
    path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
) -> Path:
    """A safetensors file: header length, JSON header, the tensors' bytes in order."""
    header: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    blobs, at = [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [at, at + len(data)],
        }
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


def tensors_for(
    shapes: list[tuple[int, int]], precisions: tuple[str, ...] = ("fp16",)
) -> dict[str, np.ndarray]:
    """Seeded float32 values for every tensor the shipped templates of ``shapes`` read,
    at a trained network's scales (norm scales near 1, layer scales near 0.1,
    convolutions He-initialised), so that depth varies across an image and a tensor in
    the wrong place changes it."""
    wanted: dict[str, tuple[int, ...]] = {}
    for shape in shapes:
        for precision in precisions:
            wanted.update(corebuild.find(shape, precision).tensors)
    rng = np.random.default_rng(0)
    return {name: _value(rng, name, size) for name, size in sorted(wanted.items())}


def _value(rng: np.random.Generator, name: str, size: tuple[int, ...]) -> np.ndarray:
    noise = rng.standard_normal(size)
    if name.startswith(LAST_CONV):  # logits of a spread below 1: exp stays finite
        value = 0.005 * noise if name.endswith("weight") else np.array([0.0, 1.0])
    elif name.endswith("gamma"):
        value = 0.1 + 0.005 * noise
    elif "norm" in name.rsplit(".", 2)[-2] and name.endswith("weight"):
        value = 1.0 + 0.01 * noise
    elif len(size) == 4 and "patch_embed" not in name:
        value = noise * (2.0 / np.prod(size[1:])) ** 0.5
    elif name.endswith("bias"):
        value = 0.002 * noise
    else:
        value = 0.02 * noise
    return value.astype(np.float32)


def write_release(
    folder: Path,
    tensors: dict[str, np.ndarray],
    *,
    model_name: str = MODEL_NAME,
    seed: int | None = 0,
) -> Path:
    """A release folder; ``seed`` is recorded as random weights' seed (None: none)."""
    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {"model_name": model_name}
    if seed is not None:
        config["random_init_seed"] = seed
    (folder / CONFIG_FILE).write_text(json.dumps(config) + "\n")
    metadata = None if seed is None else {"random_init_seed": str(seed)}
    write_safetensors(folder / WEIGHTS_FILE, tensors, metadata)
    return folder
