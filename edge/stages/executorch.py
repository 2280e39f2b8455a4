"""The ExecuTorch stages: pre- and post-processing as ``.pte`` programs (XNNPACK).

Chosen with ``--stages executorch``. It needs the ExecuTorch runtime, whose Python
bindings link libtorch: ``executorch==1.5.1`` with ``torch==2.13.0`` (the export
environment has both; the default runtime install has neither, on purpose).

Import cost, measured here: ``executorch.runtime`` 3.7 s (it pulls in the export
stack); ``executorch.extension.pybindings.portable_lib`` 2.7 s + torch, 354 MB RSS (it
imports ``executorch.exir`` for one warning class); the extension module underneath,
``executorch.extension.pybindings._C``, 4 ms + torch's ~0.95 s, 221 MB. This backend
imports ``_C`` and falls back to ``portable_lib``.

Split with numpy (see ``edge.export.stages``): numpy casts uint8 to float32 (the
program takes floats), shrinks images over ``MAX_SIDE`` a side by an exact integer
area factor first, and does what the writers need (min/max, colour lookup).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from edge.errors import EdgeError, ModelCorrupt, StagesUnavailable
from edge.models import Artifact, Manifest
from edge.native import captured_stderr

MAX_SIDE = 2048
INSTALL_HINT = (
    "the executorch stages need the ExecuTorch runtime (pip install executorch==1.5.1 "
    "torch==2.13.0, ~1.1 GB; the export environment has it: .venv-export/bin/da3-edge), "
    "or use --stages numpy"
)


def _import_runtime() -> tuple[Any, Any, float]:
    start = time.perf_counter()
    try:
        import torch
    except ImportError as exc:
        raise StagesUnavailable(f"{INSTALL_HINT} ({exc})") from None
    try:
        from executorch.extension.pybindings import _C as runtime
    except ImportError:
        try:
            from executorch.extension.pybindings import portable_lib as runtime
        except ImportError as exc:
            raise StagesUnavailable(f"{INSTALL_HINT} ({exc})") from None
    return torch, runtime, (time.perf_counter() - start) * 1000


def shrink_integer(rgb: np.ndarray, limit: int) -> np.ndarray:
    """Exact area average by the smallest integer factor that brings both sides to
    ``limit`` or less (edge rows/columns that do not fill a block are dropped)."""
    h, w = rgb.shape[:2]
    k = math.ceil(max(h, w) / limit)
    if k <= 1:
        return rgb
    hh, ww = (h // k) * k, (w // k) * k
    blocks = rgb[:hh, :ww].reshape(hh // k, k, ww // k, k, rgb.shape[2])
    out: np.ndarray = np.rint(blocks.mean(axis=(1, 3))).astype(np.uint8)
    return out


class ExecuTorchStages:
    name = "executorch"

    def __init__(self, manifest: Manifest, threads: int | None = None) -> None:
        self.manifest = manifest
        self._torch, self._rt, self.import_ms = _import_runtime()
        if threads:
            self._rt._unsafe_reset_threadpool(int(threads))
        self._programs: dict[tuple[str, tuple[int, int]], Any] = {}
        self._warm: set[tuple[str, tuple[int, int]]] = set()

    def _program(self, kind: str, shape: tuple[int, int]) -> Any:
        key = (kind, shape)
        if key not in self._programs:
            artifact: Artifact = self.manifest.find_stage(kind, shape)
            path = self.manifest.verify(artifact)
            try:
                with captured_stderr([]):
                    self._programs[key] = self._rt._load_for_executorch(str(path))
            except Exception as exc:
                raise ModelCorrupt(f"{path}: ExecuTorch cannot load it ({exc})") from None
        return self._programs[key]

    def _run(self, kind: str, shape: tuple[int, int], inputs: list[Any]) -> np.ndarray:
        program = self._program(kind, shape)
        if (kind, shape) in self._warm:
            out: np.ndarray = program.forward(inputs)[0].numpy()
            return out
        with captured_stderr([]):  # XNNPACK's cpuinfo probe talks on first use
            out = program.forward(inputs)[0].numpy()
        self._warm.add((kind, shape))
        return out

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        rgb = shrink_integer(rgb, MAX_SIDE)
        x = self._torch.from_numpy(rgb.astype(np.float32)[None])
        return self._run("pre", shape, [x])

    def postprocess(
        self, depth: np.ndarray, conf: np.ndarray, size: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        h, w = depth.shape
        target = size
        k = math.ceil(max(size) / MAX_SIDE)
        if k > 1:  # the program's bound; numpy finishes the last factor
            target = (math.ceil(size[0] / k), math.ceil(size[1] / k))
        stacked = self._torch.from_numpy(np.stack([depth, conf])[None].astype(np.float32))
        like = self._torch.empty((1, *target))
        out = self._run("post", (h, w), [stacked, like])[0]
        if target != size:
            from edge.stages.numpy import _resize_float

            return _resize_float(out[0], size), _resize_float(out[1], size)
        return np.ascontiguousarray(out[0]), np.ascontiguousarray(out[1])

    def close(self) -> None:
        self._programs.clear()


def open_stages(
    manifest: Manifest | None = None, threads: int | None = None, **_: object
) -> ExecuTorchStages:
    if manifest is None:
        raise EdgeError("the executorch stages need a model directory with .pte programs")
    return ExecuTorchStages(manifest, threads=threads)
