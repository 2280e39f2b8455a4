"""Pre- and post-processing around the LiteRT core, behind one small protocol.

Two interchangeable backends, and ``auto`` (the default) to pick one:

- ``executorch``: DA3's steps as ExecuTorch programs (``.pte``, XNNPACK delegate), the
  Arm-style pipeline, on da3-edge's torch-free runner; its runtime is imported only
  when chosen.
- ``numpy``: the same steps in numpy (and Pillow's bilinear); needs nothing installed.
- ``auto``: ``executorch`` where the runner is installed and the model folder's
  programs open (the Pi installer installs both), else ``numpy``; the backend's
  ``reason`` says why (the daemon logs it at start, ``doctor`` shows it).

Preprocess follows DA3's own: resize to the core's (h, w) — area-averaging when
shrinking, bicubic when enlarging — then ImageNet mean/std. Postprocess returns depth
and confidence at the source resolution (bilinear).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Protocol, cast

from edge.errors import EdgeError, UsageError

if TYPE_CHECKING:  # the config imports CHOICES; numpy only where a backend loads
    import numpy as np

    from edge.models import Manifest

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BACKENDS = {"numpy": "edge.stages.numpy", "executorch": "edge.stages.executorch"}
CHOICES = ("auto", *BACKENDS)
ENV_STAGES = "DA3_EDGE_STAGES"


class Stages(Protocol):
    """What the pipeline needs from a backend."""

    name: str
    reason: str  # why this backend runs (auto's choice, or asked for by name)

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
    """The backend named by ``name``, else ``$DA3_EDGE_STAGES``, else ``auto``."""
    chosen = name or os.environ.get(ENV_STAGES) or "auto"
    if chosen not in CHOICES:
        raise UsageError(f"unknown stages backend {chosen!r} (choose from {', '.join(CHOICES)})")
    if chosen == "auto":
        return choose(**options)
    module = importlib.import_module(BACKENDS[chosen])
    backend: Stages = module.open_stages(**options)
    backend.reason = "asked for by name"
    return backend


def choose(**options: object) -> Stages:
    """``auto``: the ExecuTorch stages if the runner loads and the model folder's stage
    programs (``models.STAGE_KINDS``) are there, open and are this version's, else numpy;
    why, in the backend's ``reason`` (the daemon logs it once it has started)."""
    manifest = cast("Manifest | None", options.get("manifest"))
    backend: Stages
    if manifest is None:
        why = "no model directory to take the programs from"
    elif not manifest.stage_programs():
        why = f"{manifest.directory} has no stage programs (exported with --no-stages)"
    else:
        try:
            backend = importlib.import_module(BACKENDS["executorch"]).open_checked(**options)
        except EdgeError as exc:
            why = str(exc)
        else:
            backend.reason = (
                "auto: da3-edge's ExecuTorch runner and the model's programs are installed"
            )
            return backend
    backend = importlib.import_module(BACKENDS["numpy"]).open_stages()
    backend.reason = f"auto: {why}"
    return backend
