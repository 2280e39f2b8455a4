"""The ExecuTorch stages: pre- and post-processing as ``.pte`` programs (XNNPACK).

Chosen with ``--stages executorch``. The programs run on da3-edge's own runner over
ExecuTorch's C++ runtime (``edge.etrunner``; installed by ``da3-edge install-executorch``),
so this path imports neither torch nor the ``executorch`` Python package: on a Pi the
runtime install has neither. (ExecuTorch's Python bindings link libtorch: ~1 GB and
~2 s of import; the export environment still uses them to check what it writes.)

Split with numpy (see ``edge.export.stages``): numpy casts uint8 to float32 (the
program takes floats), shrinks images over ``MAX_SIDE`` a side by an exact integer
area factor first, and does what the writers need (min/max, colour lookup).
"""

from __future__ import annotations

import math

import numpy as np

from edge import etrunner
from edge.errors import EdgeError, ModelCorrupt
from edge.models import Artifact, Manifest

MAX_SIDE = 2048
# What each program's forward takes (dtype, rank per input): a model folder exported for
# another layout of the stages is refused with the way out, not run into garbage.
SIGNATURES = {
    "pre": ((np.dtype(np.float32), 4),),
    "post": ((np.dtype(np.float32), 4), (np.dtype(np.float32), 3)),
}


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
        self.runtime = etrunner.Runtime.get(threads)
        self._programs: dict[tuple[str, tuple[int, int]], etrunner.Program] = {}

    def _program(self, kind: str, shape: tuple[int, int]) -> etrunner.Program:
        key = (kind, shape)
        if key not in self._programs:
            artifact: Artifact = self.manifest.find_stage(kind, shape)
            path = self.manifest.verify(artifact)
            program = etrunner.Program(path, self.runtime)
            takes = tuple((m.dtype, len(m.shape)) for m in program.inputs)
            if takes != SIGNATURES[kind] or len(program.outputs) != 1:
                program.close()
                raise ModelCorrupt(
                    f"{path}: a {kind} program of another da3-edge version (it takes "
                    f"{len(takes)} inputs of other types): re-export the model directory "
                    "(da3-edge export)"
                )
            self._programs[key] = program
        return self._programs[key]

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        rgb = shrink_integer(rgb, MAX_SIDE)
        x = rgb.astype(np.float32)[None]
        (out,) = self._program("pre", shape).run([x])
        return out

    def postprocess(
        self, depth: np.ndarray, conf: np.ndarray, size: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        h, w = depth.shape
        target = size
        k = math.ceil(max(size) / MAX_SIDE)
        if k > 1:  # the program's bound; numpy finishes the last factor
            target = (math.ceil(size[0] / k), math.ceil(size[1] / k))
        stacked = np.stack([depth, conf])[None].astype(np.float32, copy=False)
        like = np.empty((1, *target), dtype=np.float32)  # only its shape is read
        # Views: each half is copied once below (the program's memory is reused).
        (out,) = self._program("post", (h, w)).run([stacked, like], copy=False)
        if target != size:
            from edge.stages.numpy import _resize_float

            return _resize_float(out[0, 0], size), _resize_float(out[0, 1], size)
        return out[0, 0].copy(), out[0, 1].copy()

    def close(self) -> None:
        for program in self._programs.values():
            program.close()
        self._programs.clear()


def open_stages(
    manifest: Manifest | None = None, threads: int | None = None, **_: object
) -> ExecuTorchStages:
    if manifest is None:
        raise EdgeError("the executorch stages need a model directory with .pte programs")
    return ExecuTorchStages(manifest, threads=threads)
