"""Pre- and post-processing around the LiteRT core, behind one small protocol.

Two interchangeable backends:

- ``numpy`` (default): Pillow resampling and numpy arithmetic; torch-free, and the
  faster one in Python.
- ``executorch``: the same steps as ExecuTorch programs (``.pte``, XNNPACK delegate),
  the Arm-style pipeline; its runtime is imported only when chosen.

Preprocess follows DA3's own: resize to the core's (h, w) — area-averaging when
shrinking, bicubic when enlarging — then ImageNet mean/std. Postprocess returns depth
and confidence at the source resolution (bilinear).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Protocol

from edge.errors import UsageError

if TYPE_CHECKING:  # the config imports BACKENDS; numpy only where a backend loads
    import numpy as np

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BACKENDS = {"numpy": "edge.stages.numpy", "executorch": "edge.stages.executorch"}
ENV_STAGES = "DA3_EDGE_STAGES"


class Stages(Protocol):
    """What the pipeline needs from a backend."""

    name: str

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """(H, W, 3) uint8 RGB -> (1, 3, h, w) float32, normalised, at ``shape``."""
        ...

    def postprocess(
        self, depth: np.ndarray, conf: np.ndarray, size: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(h, w) depth and confidence -> (H, W) float32 each, at ``size``."""
        ...

    def close(self) -> None: ...


def load(name: str | None = None, **options: object) -> Stages:
    """The backend named by ``name``, else ``$DA3_EDGE_STAGES``, else ``numpy``."""
    chosen = name or os.environ.get(ENV_STAGES) or "numpy"
    if chosen not in BACKENDS:
        raise UsageError(f"unknown stages backend {chosen!r} (choose from {', '.join(BACKENDS)})")
    module = importlib.import_module(BACKENDS[chosen])
    backend: Stages = module.open_stages(**options)
    return backend
