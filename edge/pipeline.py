"""``Pipeline``: an image in, a ``DepthFrame`` out.

decode -> preprocess (stages backend) -> core (LiteRT, one model per input shape)
-> postprocess (back to the source size). The core shape comes from DA3's rule
(``models.da3_shape``); when that exact shape was not exported, the exported shape
with the nearest aspect ratio is used (the image is resized to it, not cropped) and
both are recorded in the frame. ``strict_shape=True`` refuses instead.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge import images, stages
from edge.closing import Closing
from edge.core import Core, require_litert_cpu
from edge.coreproc import ProcessCore
from edge.errors import ModelNotFound, ShapeError
from edge.models import Artifact, Manifest, da3_shape, resolve_models_dir


@dataclass
class DepthFrame:
    """Relative depth and confidence for one image, at the image's displayed size.

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
    _depth_range: tuple[float, float] | None = field(default=None, repr=False, compare=False)

    @property
    def resized_to_nearest(self) -> bool:
        return self.shape_used != self.shape_wanted

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
            "source_mode": self.source_mode,
            "exif_transposed": self.exif_transposed,
            "shape_wanted": list(self.shape_wanted),
            "shape_used": list(self.shape_used),
            "resized_to_nearest_shape": self.resized_to_nearest,
            "depth": {
                "kind": "relative (larger = farther, arbitrary scale; not metres)",
                "min": lo,
                "max": hi,
            },
            "conf": {"min": float(c.min()), "max": float(c.max())},
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }


@dataclass
class Job:
    """One image on its way through the pipeline (see ``Pipeline.prepare``)."""

    still: images.Still
    wanted: tuple[int, int]
    used: tuple[int, int]
    core: Core | ProcessCore
    artifact: Artifact
    x: np.ndarray | None  # the preprocessed input, until submitted
    timings: dict[str, float]
    raw: tuple[np.ndarray, np.ndarray] | None = None  # the core's depth and confidence


def nearest_shape(wanted: tuple[int, int], available: list[tuple[int, int]]) -> tuple[int, int]:
    """The available shape closest in aspect ratio (then in size) to ``wanted``."""
    if not available:
        raise ModelNotFound("no core models to choose from")
    ratio = math.log(wanted[1] / wanted[0])

    def key(shape: tuple[int, int]) -> tuple[float, float]:
        return (
            abs(math.log(shape[1] / shape[0]) - ratio),
            abs(shape[0] * shape[1] - wanted[0] * wanted[1]),
        )

    return min(available, key=key)


class Pipeline(Closing):
    """Loaded models and stages; call it with an image to get a ``DepthFrame``."""

    def __init__(
        self,
        manifest: Manifest,
        precision: str,
        backend: stages.Stages,
        *,
        threads: int | None = None,
        strict_shape: bool = False,
        fp16_arithmetic: bool | None = None,
        weight_cache: str | os.PathLike[str] | None = None,
        max_pixels: int = images.MAX_PIXELS,
        core_process: bool = False,
        workers: int = 1,
    ) -> None:
        self.manifest = manifest
        # The daemon runs the core in a worker process (edge/coreproc.py): LiteRT holds
        # the GIL for a whole inference, which would stall capture and writing.
        self.core_process = core_process
        # Several workers (each its own process and interpreter) compute different
        # images at once; ``threads`` is then per worker (see worker_threads).
        if workers < 1 or (workers > 1 and not core_process):
            raise ValueError("workers must be 1, or more with core_process")
        self.workers = workers
        self.precision = precision
        self.stages = backend
        self.threads = threads
        self.strict_shape = strict_shape
        self.fp16_arithmetic = fp16_arithmetic
        self.weight_cache = weight_cache
        self.max_pixels = max_pixels
        self._artifacts = {a.shape: a for a in manifest.cores() if a.precision == precision}
        if not self._artifacts:
            have = sorted({a.precision for a in manifest.cores()})
            raise ModelNotFound(
                f"{manifest.directory}: no {precision} models (have: {', '.join(have) or 'none'}); "
                f"export them with `da3-edge export --precision {precision}` or pick --precision"
            )
        self._cores: dict[tuple[tuple[int, int], int], Core | ProcessCore] = {}

    @classmethod
    def load(
        cls,
        model_dir: str | os.PathLike[str] | None = None,
        precision: str = "fp16",
        stages: str | None = "numpy",
        threads: int | None = None,
        *,
        strict_shape: bool = False,
        fp16_arithmetic: bool | None = None,
        weight_cache: str | os.PathLike[str] | None = None,
        max_pixels: int = images.MAX_PIXELS,
        core_process: bool = False,
        workers: int = 1,
    ) -> Pipeline:
        """Open the model directory (argument, ``$DA3_EDGE_MODELS``, XDG default)."""
        from edge import stages as stages_mod

        require_litert_cpu()  # say it once, before any image or camera

        manifest = Manifest.load(resolve_models_dir(model_dir))
        backend = stages_mod.load(stages, manifest=manifest, threads=threads)
        try:
            return cls(
                manifest,
                precision,
                backend,
                threads=threads,
                strict_shape=strict_shape,
                fp16_arithmetic=fp16_arithmetic,
                weight_cache=weight_cache,
                max_pixels=max_pixels,
                core_process=core_process,
                workers=workers,
            )
        except BaseException:
            backend.close()
            raise

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return sorted(self._artifacts)

    def choose(self, size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """(wanted, used) core shapes for an image of ``size`` (H, W)."""
        wanted = da3_shape(*size)
        if wanted in self._artifacts:
            return wanted, wanted
        if self.strict_shape:
            have = ", ".join(f"{h}x{w}" for h, w in self.shapes)
            raise ShapeError(
                f"no {self.precision} model for {wanted[0]}x{wanted[1]} (have {have}); "
                "export it with --shape, or drop --strict-shape to use the nearest aspect ratio"
            )
        return wanted, nearest_shape(wanted, self.shapes)

    def core(self, shape: tuple[int, int], worker: int = 0) -> tuple[Core | ProcessCore, Artifact]:
        """The core for ``shape`` (worker ``worker`` of ``workers``), opened on first use."""
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} of {self.workers}")
        artifact = self._artifacts[shape]
        key = (shape, worker)
        if key not in self._cores:
            path = self.manifest.verify(artifact)
            kind = ProcessCore if self.core_process else Core
            self._cores[key] = kind(
                path,
                threads=self.worker_threads(),
                fp16_arithmetic=self.fp16_arithmetic,
                weight_cache=self.weight_cache,
                precision=artifact.precision,
            )
        return self._cores[key], artifact

    def worker_threads(self) -> int | None:
        """Each core's threads: as given, else the platform's default shared among the
        workers (None: the core's own default, for one worker)."""
        if self.threads or self.workers == 1:
            return self.threads
        from edge import platform

        return max(1, platform.default_threads() // self.workers)

    def __call__(self, image: Any, name: str | None = None) -> DepthFrame:
        return self.run(image, name)

    def run(self, image: Any, name: str | None = None, decode_ms: float = 0.0) -> DepthFrame:
        """One image (decoded unless a ``Still``, whose ``decode_ms`` the caller may
        give) through preprocess, core and postprocess."""
        job = self.prepare(image, name, decode_ms)
        self.submit(job)
        return self.finish(job)

    # One image is prepare -> submit -> collect -> finish. Split like this, a caller
    # with the core in a worker process (the daemon) preprocesses the next image while
    # the core computes this one, and postprocesses this one while the core computes
    # the next: the core waits for neither.
    def prepare(
        self, image: Any, name: str | None = None, decode_ms: float = 0.0, worker: int = 0
    ) -> Job:
        """Decode (unless given a ``Still``), choose the core (of ``worker``), preprocess."""
        t0 = time.perf_counter()
        if isinstance(image, images.Still):
            still = image
        else:
            still = images.load(image, name=name, max_pixels=self.max_pixels)
            decode_ms = (time.perf_counter() - t0) * 1000
        wanted, used = self.choose(still.size)
        core, artifact = self.core(used, worker)
        t1 = time.perf_counter()
        x = self.stages.preprocess(still.rgb, used)
        t2 = time.perf_counter()
        return Job(
            still, wanted, used, core, artifact, x,
            {"decode": decode_ms, "preprocess": (t2 - t1) * 1000},
        )  # fmt: skip

    def submit(self, job: Job) -> None:
        """Hand the preprocessed image to its core (returns at once for a ProcessCore)."""
        if job.x is None:
            raise ValueError("this job was submitted already")
        job.core.submit(job.x)
        job.x = None

    def collect(self, job: Job) -> None:
        """Wait for the core's answer to ``job``."""
        job.raw = job.core.collect()
        job.timings["core"] = job.core.last_ms

    def finish(self, job: Job) -> DepthFrame:
        """Postprocess to the image's size (collecting first if not done yet)."""
        if job.raw is None:
            self.collect(job)
        assert job.raw is not None
        still, artifact = job.still, job.artifact
        t3 = time.perf_counter()
        depth, conf = self.stages.postprocess(*job.raw, still.size)
        job.raw = None
        job.timings["postprocess"] = (time.perf_counter() - t3) * 1000
        return DepthFrame(
            depth=depth,
            conf=conf,
            name=still.name,
            source_size=still.size,
            shape_wanted=job.wanted,
            shape_used=job.used,
            precision=self.precision,
            stages=self.stages.name,
            model=self.manifest.model,
            weights=artifact.weights,
            random_init=artifact.random_init,
            artifact=artifact.file,
            timings_ms=job.timings,
            source_mode=still.mode,
            exif_transposed=still.exif_transposed,
            threads=job.core.threads,
            fp16_arithmetic=job.core.fp16_arithmetic,
        )

    def close(self) -> None:
        for core in self._cores.values():
            core.close()
        self._cores.clear()
        self.stages.close()
