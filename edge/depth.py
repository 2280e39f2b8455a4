"""``DepthFrame``: what the pipeline makes of one image, and what writers and the store take.

Its own module so that consumers of results (``edge.frames``, ``edge.store.ring``, the
daemon's writer) do not import their producer: importing it loads numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge.fov import FieldOfView, choose, of_exif
from edge.models import size_of

NO_FIELD_OF_VIEW = (
    "no field of view given (camera.hfov, snap --hfov) and none known for the source "
    "(a Raspberry Pi camera module, or a photo's EXIF 35 mm focal length)"
)


@dataclass
class DepthFrame:
    """Relative depth and confidence for one image, at the image's displayed size (or,
    for the daemon's ``store.size = "core"``, at the core's: ``output_size``).

    ``depth`` is DA3's relative depth: larger = farther, on an arbitrary per-image
    scale; not metres. ``conf`` is DA3's confidence (>= 1, larger = surer).
    """

    depth: np.ndarray  # (H, W) float32
    conf: np.ndarray  # (H, W) float32
    name: str
    source_size: tuple[int, int]  # (H, W) as displayed
    shape_wanted: tuple[int, int]  # DA3's rule for this image
    shape_used: tuple[int, int]  # the exported model that ran
    precision: str
    stages: str
    model: str
    weights: str  # "sha256:..." of the weights, or "random-init:SEED"
    random_init: bool
    artifact: str  # the .tflite file name
    timings_ms: dict[str, float] = field(default_factory=dict)
    source_mode: str = "RGB"
    exif_transposed: bool = False
    threads: int = 0  # the core's CPU threads
    fp16_arithmetic: bool = False  # XNNPACK computed in fp16 (FORCE_FP16), not fp32
    focal_35mm: float | None = None  # the still's EXIF 35 mm-equivalent focal length
    # What the caller knows of the field of view (a flag, the config, the camera); the
    # photo's EXIF when None (field_of_view).
    fov: FieldOfView | None = None
    # The image the depth was made from (HxWx3 uint8, the caller's array, not a copy):
    # for the "rgb" output, the scene beside the depth.
    rgb: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Pixels of the core's maps that were NaN or infinite (replaced: edge.pipeline.finite_maps).
    non_finite: int = 0
    _depth_range: tuple[float, float] | None = field(default=None, repr=False, compare=False)

    @property
    def output_size(self) -> tuple[int, int]:
        """(H, W) of ``depth`` and ``conf``."""
        return (int(self.depth.shape[0]), int(self.depth.shape[1]))

    @property
    def resized_to_nearest(self) -> bool:
        return self.shape_used != self.shape_wanted

    def field_of_view(self) -> FieldOfView:
        """The picture's horizontal field of view: ``fov``, else from the EXIF focal
        length, else none, saying why."""
        exif = of_exif(self.focal_35mm, self.source_size)
        return choose(self.fov, exif, none=NO_FIELD_OF_VIEW)

    def depth_range(self) -> tuple[float, float]:
        """(min, max) of ``depth``, computed once: the summary and the inverse-depth
        images both need it (a 1200x1600 map is 7.7 MB to read each time)."""
        if self._depth_range is None:
            self._depth_range = (float(self.depth.min()), float(self.depth.max()))
        return self._depth_range

    def summary(self) -> dict[str, Any]:
        """Everything but the arrays, JSON-ready."""
        lo, hi = self.depth_range()
        c = self.conf
        return {
            "name": self.name,
            "model": self.model,
            "weights": self.weights,
            "random_init": self.random_init,
            "precision": self.precision,
            "stages": self.stages,
            "artifact": self.artifact,
            "threads": self.threads,
            "fp16_arithmetic": self.fp16_arithmetic,
            "source_size": list(self.source_size),
            "output_size": list(self.output_size),  # the maps' (H, W): the source's or the core's
            "source_mode": self.source_mode,
            "exif_transposed": self.exif_transposed,
            "size": size_of(self.shape_used),  # the core's long side (--size)
            "shape_wanted": list(self.shape_wanted),
            "shape_used": list(self.shape_used),
            "resized_to_nearest_shape": self.resized_to_nearest,
            "depth": {
                "kind": "relative (larger = farther, arbitrary scale; not metres)",
                "min": lo,
                "max": hi,
            },
            "conf": {"min": float(c.min()), "max": float(c.max())},
            "non_finite_pixels": self.non_finite,
            "field_of_view": self.field_of_view().record(),
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }
