"""``Pipeline``: an image in, a ``DepthFrame`` out.

decode -> preprocess (stages backend) -> core (LiteRT, one model per input shape)
-> postprocess (back to the source size). A pipeline runs the cores of one size (their
long side: DA3's 504 by default, smaller for speed). The core shape comes from DA3's
rule at that size (``models.da3_shape``); when that exact shape was not exported, the
shape of that size with the nearest aspect ratio is used (the image is resized to it,
not cropped) and both are recorded in the frame. ``strict_shape=True`` refuses instead.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge import images, stages, trace
from edge.closing import Closing
from edge.config import Config, where
from edge.core import Core, CoreLike, CoreSpec
from edge.coreproc import ProcessCore
from edge.depth import DepthFrame
from edge.errors import ConfigError, EdgeError, ModelNotFound, ShapeError, first_line
from edge.litert import require_litert_cpu
from edge.models import (
    LONGEST_SIDE,
    Artifact,
    Manifest,
    da3_shape,
    resolve_models_dir,
    size_of,
)

_PIXEL = np.zeros((1, 1, 3), dtype=np.uint8)  # what a Job's still keeps of its pixels


@dataclass
class Job:
    """One image on its way through the pipeline (see ``Pipeline.prepare``)."""

    still: images.Still
    wanted: tuple[int, int]
    used: tuple[int, int]
    core: CoreLike
    artifact: Artifact
    x: np.ndarray | None  # the preprocessed input, until submitted
    timings: dict[str, float]
    raw: tuple[np.ndarray, np.ndarray] | None = None  # the core's depth and confidence
    rgb: np.ndarray | None = None  # the pixels, kept for the "rgb" output when asked
    size: tuple[int, int] | None = None  # (H, W) of the outputs, when not the image's


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


def make_command(args: str, precision: str) -> str:
    """The command that makes models: the build (no torch) for what it offers, the
    export for int8."""
    if precision == "int8":
        return f"da3-edge export {args}"
    return f"da3-edge models build --weights hub {args}" + (
        "" if "--precision" in args else f" --precision {precision}"
    )


def pick_size(manifest: Manifest, precision: str, asked: int | None) -> int:
    """The size a pipeline runs: ``asked``; unasked, DA3's 504 when exported, else the
    folder's only size. A size not there is an error naming the export command, never
    another size."""
    have = manifest.sizes(precision)
    if not have:
        there = sorted({a.precision for a in manifest.cores()})
        raise ModelNotFound(
            f"{manifest.directory}: no {precision} models "
            f"(have: {', '.join(there) or 'none'}); make them with "
            f"`{make_command(f'--precision {precision}', precision)}` or pick --precision"
        )
    listed = ", ".join(map(str, have))
    if asked is None:
        if LONGEST_SIDE in have or len(have) == 1:
            return LONGEST_SIDE if LONGEST_SIDE in have else have[0]
        raise ModelNotFound(
            f"{manifest.directory}: {precision} models of sizes {listed}, none of "
            f"{LONGEST_SIDE}: choose one with --size (config model.size)"
        )
    if asked not in have:
        raise ModelNotFound(
            f"{manifest.directory}: no {precision} models of size {asked} (have {listed}); "
            f"make them with `{make_command(f'--size {asked}', precision)}`"
        )
    return asked


@dataclass(frozen=True)
class PipelineSpec:
    """How to open a pipeline: the model directory and how to run its models."""

    models: str | os.PathLike[str] | None = None  # else $DA3_EDGE_MODELS, else XDG
    precision: str = "fp16"
    stages: str | None = None  # a stages.CHOICES name; None: $DA3_EDGE_STAGES, else auto
    threads: int | None = None  # per core; None: the platform's, shared among workers
    strict_shape: bool = False  # refuse an image whose DA3 shape was not exported
    fp16_arithmetic: bool | None = None  # None: the platform policy (CoreSpec)
    # XNNPACK's packed-weight cache (edge.weightcache): "auto" is the user's cache
    # directory, "off" (or None) none, anything else a directory.
    weight_cache: str | os.PathLike[str] | None = "auto"
    max_pixels: int = images.MAX_PIXELS
    # The daemon runs the core in a worker process (edge/coreproc.py): LiteRT holds
    # the GIL for a whole inference, which would stall capture and writing.
    core_process: bool = False
    # Several workers (each its own process and interpreter) compute different
    # images at once; ``threads`` is then per worker (see Pipeline.worker_threads).
    workers: int = 1
    size: int | None = None  # the cores' long side (pick_size); None: 504 or the only one

    def __post_init__(self) -> None:
        if self.workers < 1 or (self.workers > 1 and not self.core_process):
            raise ValueError("workers must be 1, or more with core_process")


OpenCore = Callable[[CoreSpec], CoreLike]


def weight_cache_dir(value: str | os.PathLike[str] | None) -> Path | None:
    """A ``weight_cache`` setting ("auto", "off"/None/"", or a directory) -> directory."""
    if value is None or str(value) in ("", "off"):
        return None
    if str(value) == "auto":
        from edge import weightcache

        return weightcache.default_dir()
    return Path(value)


def finite_maps(depth: np.ndarray, conf: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The core's maps with no NaN or infinity, and how many pixels had one. A core whose
    arithmetic overflowed (fp16, a bad model) must not put NaN into the resize, the PNGs,
    the steady view's scale, the point cloud's cut-off or a record: such a pixel becomes
    the farthest finite depth with confidence 1 (none). Four reductions of the core-size
    maps find that there is nothing to do (0.1 ms at 378x504)."""
    extremes = (depth.min(), depth.max(), conf.min(), conf.max())
    if all(np.isfinite(x) for x in extremes):
        return depth, conf, 0
    ok_depth = np.isfinite(depth)
    ok = ok_depth & np.isfinite(conf)
    far = float(depth[ok_depth].max()) if ok_depth.any() else 1.0
    depth = np.where(ok_depth, depth, np.float32(far)).astype(np.float32)
    conf = np.where(ok, conf, np.float32(1.0)).astype(np.float32)
    return depth, conf, int(ok.size - np.count_nonzero(ok))


class Pipeline(Closing):
    """Loaded models and stages; call it with an image to get a ``DepthFrame``."""

    def __init__(
        self,
        manifest: Manifest,
        backend: stages.Stages,
        spec: PipelineSpec,
        *,
        open_core: OpenCore | None = None,
    ) -> None:
        self.manifest = manifest
        self.spec = spec
        self.stages = backend
        self.precision = spec.precision
        self.workers = spec.workers
        # Cores are opened on first use, each from a CoreSpec: in this process, in a
        # worker process, or (tests) as a FakeCore.
        self._open_core: OpenCore = open_core or (ProcessCore if spec.core_process else Core)
        self.size = pick_size(manifest, spec.precision, spec.size)
        self._artifacts = {
            a.shape: a
            for a in manifest.cores()
            if a.precision == spec.precision and size_of(a.shape) == self.size
        }
        self._cores: dict[tuple[tuple[int, int], int], CoreLike] = {}
        self._used: dict[tuple[tuple[int, int], int], float] = {}  # monotonic, by core()

    @classmethod
    def load(
        cls, spec: PipelineSpec | None = None, *, open_core: OpenCore | None = None
    ) -> Pipeline:
        """Open the model directory (``spec.models``, ``$DA3_EDGE_MODELS``, XDG default)."""
        from edge import stages as stages_mod

        spec = spec or PipelineSpec()
        if open_core is None:
            require_litert_cpu()  # say it once, before any image or camera
        manifest = Manifest.load(resolve_models_dir(spec.models))
        pick_size(manifest, spec.precision, spec.size)  # a size not there: refused first
        # With the core in worker processes (the daemon) the stages run while it
        # computes, on the same cores: one thread, as the numpy stages have. A second
        # one stalls every small parallel step of the ExecuTorch stages on a busy core.
        threads = 1 if spec.core_process else spec.threads
        backend = stages_mod.load(spec.stages, manifest=manifest, threads=threads)
        try:
            return cls(manifest, backend, spec, open_core=open_core)
        except BaseException:
            backend.close()
            raise

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The core shapes this pipeline runs (its precision, its size)."""
        return sorted(self._artifacts)

    @property
    def artifacts(self) -> list[Artifact]:
        return [self._artifacts[shape] for shape in self.shapes]

    def choose(self, size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """(wanted, used) core shapes for an image of ``size`` (H, W)."""
        wanted = da3_shape(*size, self.size)
        if wanted in self._artifacts:
            return wanted, wanted
        if self.spec.strict_shape:
            have = ", ".join(f"{h}x{w}" for h, w in self.shapes)
            raise ShapeError(
                f"no {self.precision} model for {wanted[0]}x{wanted[1]} (have {have}); "
                "export it with --shape, or drop --strict-shape to use the nearest aspect ratio"
            )
        return wanted, nearest_shape(wanted, self.shapes)

    def core(self, shape: tuple[int, int], worker: int = 0) -> tuple[CoreLike, Artifact]:
        """The core for ``shape`` (worker ``worker`` of ``workers``), opened on first use."""
        if not 0 <= worker < self.workers:
            raise ValueError(f"worker {worker} of {self.workers}")
        artifact = self._artifacts[shape]
        key = (shape, worker)
        if key not in self._cores:
            self._cores[key] = self._open_core(self.core_spec(artifact))
        self._used[key] = time.monotonic()
        return self._cores[key], artifact

    def close_idle(self, seconds: float, keep: Collection[CoreLike] = ()) -> list[str]:
        """Close the cores not used for ``seconds``, but those in ``keep``; their shapes
        (``HxW``). A camera that changed its aspect ratio would otherwise leave its old
        core resident: a worker process of ~250 MB under the unit's MemoryMax."""
        now, closed = time.monotonic(), []
        for key, core in list(self._cores.items()):
            if any(core is k for k in keep) or now - self._used.get(key, now) < seconds:
                continue
            del self._cores[key]
            self._used.pop(key, None)
            core.close()
            closed.append("x".join(map(str, key[0])))
        return closed

    def core_spec(self, artifact: Artifact) -> CoreSpec:
        """The CoreSpec for one of the manifest's cores (size and hash checked)."""
        return CoreSpec(
            self.manifest.verify(artifact),
            threads=self.worker_threads(),
            fp16_arithmetic=self.spec.fp16_arithmetic,
            weight_cache=weight_cache_dir(self.spec.weight_cache),
            model_sha256=artifact.sha256,
            precision=artifact.precision,
            shape=artifact.shape,
        )

    def worker_threads(self) -> int | None:
        """Each core's threads: as given, else the platform's default shared among the
        workers (None: the core's own default, for one worker)."""
        if self.spec.threads or self.workers == 1:
            return self.spec.threads
        from edge import platform

        return max(1, platform.default_threads() // self.workers)

    def __call__(self, image: Any, name: str | None = None) -> DepthFrame:
        return self.run(image, name)

    def run(
        self,
        image: Any,
        name: str | None = None,
        decode_ms: float = 0.0,
        *,
        last: bool = False,
        keep_rgb: bool = False,
    ) -> DepthFrame:
        """One image (decoded unless a ``Still``, whose ``decode_ms`` the caller may
        give) through preprocess, core and postprocess. ``last``: no image follows, so
        the core is closed as soon as it has answered, and its memory (packed weights,
        activations: ~200 MiB for fp16 here) is freed before postprocessing and writing
        add theirs; the pipeline opens it again if asked. ``keep_rgb``: the frame keeps
        the pixels (``DepthFrame.rgb``) for the "rgb" output."""
        job = self.prepare(image, name, decode_ms, keep_rgb=keep_rgb)
        self.submit(job)
        if last:
            self.collect(job)
            self._close_core(job.core)
        return self.finish(job)

    def _close_core(self, core: CoreLike) -> None:
        for key, open_core in list(self._cores.items()):
            if open_core is core:
                del self._cores[key]
        core.close()

    # One image is prepare -> submit -> collect -> finish. Split like this, a caller
    # with the core in a worker process (the daemon) preprocesses the next image while
    # the core computes this one, and postprocesses this one while the core computes
    # the next: the core waits for neither.
    def prepare(
        self,
        image: Any,
        name: str | None = None,
        decode_ms: float = 0.0,
        worker: int = 0,
        *,
        keep_rgb: bool = False,
        size: tuple[int, int] | None = None,
    ) -> Job:
        """Decode (unless given a ``Still``), choose the core (of ``worker``), preprocess;
        ``keep_rgb``: keep the pixels for the frame (``DepthFrame.rgb``); ``size``: the
        picture's own (H, W) when ``image`` is a smaller copy of it (a camera's scaled
        stream): the shape is chosen for it, and the outputs are made at it."""
        t0 = time.perf_counter()
        if isinstance(image, images.Still):
            still = image
        else:
            still = images.load(image, name=name, max_pixels=self.spec.max_pixels)
            decode_ms = (time.perf_counter() - t0) * 1000
            trace.mark("decoded")
        wanted, used = self.choose(size or still.size)
        core, artifact = self.core(used, worker)
        t1 = time.perf_counter()
        x = self.stages.preprocess(still.rgb, used)
        t2 = time.perf_counter()
        # Unless the "rgb" output wants them, the pixels are not needed past here: keep a
        # stand-in of their shape that holds no memory, so a decoded still (5.8 MB at
        # 1200x1600) is not resident through the core's peak. (A camera frame's pixels
        # stay with the frame that owns them: keeping them costs the daemon nothing.)
        rgb = still.rgb if keep_rgb else None
        still = dataclasses.replace(still, rgb=np.broadcast_to(_PIXEL, still.rgb.shape))
        trace.mark("preprocessed")
        timings = {"decode": decode_ms, "preprocess": (t2 - t1) * 1000}
        return Job(still, wanted, used, core, artifact, x, timings, rgb=rgb, size=size)

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
        trace.mark("core run")

    def finish(self, job: Job, *, at_core: bool = False) -> DepthFrame:
        """Postprocess to the image's size (collecting first if not done yet);
        ``at_core``: keep the core's own resolution (the daemon's ``store.size = "core"``)."""
        if job.raw is None:
            self.collect(job)
        assert job.raw is not None
        still, artifact = job.still, job.artifact
        t3 = time.perf_counter()
        size = job.size or still.size
        raw_depth, raw_conf, non_finite = finite_maps(*job.raw)
        if at_core:  # copies: a worker process's answer lives in memory it reuses
            depth, conf = (np.array(a, dtype=np.float32) for a in (raw_depth, raw_conf))
        else:
            depth, conf = self.stages.postprocess(raw_depth, raw_conf, size)
        job.raw = None
        job.timings["postprocess"] = (time.perf_counter() - t3) * 1000
        trace.mark("postprocessed")
        return DepthFrame(
            depth=depth,
            conf=conf,
            name=still.name,
            source_size=size,
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
            focal_35mm=still.focal_35mm,
            threads=job.core.threads,
            fp16_arithmetic=job.core.fp16_arithmetic,
            rgb=job.rgb,
            non_finite=non_finite,
        )

    def close(self) -> None:
        for core in self._cores.values():
            core.close()
        self._cores.clear()
        self.stages.close()


def check_models(config: Config, text: str, directory: str | os.PathLike[str] | None) -> None:
    """The models ``config`` asks for (``model.precision``, ``model.size``) are in
    ``directory`` (None: the user's default, edge.models.resolve_models_dir): what the
    daemon checks at its start, for ``config check``/``set`` and ``card`` to say first.
    ConfigError naming ``model.size`` (or ``model.dir``) in ``text``, the config's."""
    model = config.model
    try:
        manifest = Manifest.load(resolve_models_dir(directory))
        pick_size(manifest, model.precision, model.size or None)
    except (EdgeError, OSError) as exc:
        key = "size" if model.size else "dir"
        why = first_line(exc) if isinstance(exc, EdgeError) else f"cannot read the models ({exc})"
        raise ConfigError(f"{where(config.path, text, 'model', key)}: {why}") from None
