"""The LiteRT core: one DA3-small ``.tflite`` model run through XNNPACK.

``Core`` takes a normalised (1, 3, h, w) float32 image and returns relative depth and
confidence, each (h, w) float32. It owns one ``CompiledModel`` and its buffers, is a
context manager, and raises typed errors: ``ModelNotFound`` for a missing file,
``ModelCorrupt`` for a file LiteRT cannot load, ``ShapeError`` for a wrong input.

``CoreSpec`` is the one description of a core (what ``Core`` opens, and all that a
worker process receives); ``CoreLike`` is the interface that ``Core``,
``edge.coreproc.ProcessCore`` and ``edge.fakecore.FakeCore`` share.

``ai_edge_litert`` is imported when a Core is opened, not when this module is.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge import platform, trace, weightcache
from edge.closing import Closing
from edge.errors import EdgeError, ModelCorrupt, ModelNotFound, ShapeError, first_line
from edge.litert import compile_model, native_error, require_litert_cpu
from edge.native import captured_stderr as _native_stderr
from edge.native import release_mapped_file

log = logging.getLogger(__name__)


def check_input(image: np.ndarray, input_shape: tuple[int, int, int, int]) -> None:
    """A core's input must be float32 of exactly its (1, 3, h, w): ``ShapeError`` if not."""
    if image.shape != input_shape:
        raise ShapeError(
            f"input shape {tuple(image.shape)} does not match the model's {input_shape}"
        )
    if image.dtype != np.float32:
        raise ShapeError(f"input dtype {image.dtype} is not float32")


@dataclass(frozen=True)
class CoreSpec:
    """How to open one core. Frozen: a core, its worker process and a status report
    all see the same description."""

    path: Path
    threads: int | None = None  # None: platform.default_threads()
    fp16_arithmetic: bool | None = None  # None: the policy for ``precision`` (platform)
    weight_cache: Path | None = None  # XNNPACK packed-weight cache directory (weightcache)
    model_sha256: str | None = None  # the manifest's, for the cache's key
    precision: str | None = None  # the model's (fp32/fp16/int8), from the manifest
    shape: tuple[int, int] | None = None  # (h, w) the manifest promises; checked at open
    release_file_pages: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        cache = self.weight_cache
        object.__setattr__(self, "weight_cache", Path(cache) if cache else None)
        if self.shape is not None:
            object.__setattr__(self, "shape", (int(self.shape[0]), int(self.shape[1])))

    @classmethod
    def of(cls, spec: CoreSpec | str | os.PathLike[str], **options: Any) -> CoreSpec:
        """``spec`` itself, or a spec for the model file ``spec`` with ``options``."""
        if isinstance(spec, CoreSpec):
            if options:
                raise TypeError("options go into the CoreSpec, not beside it")
            return spec
        return cls(Path(spec), **options)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["weight_cache"] = str(self.weight_cache) if self.weight_cache else None
        data["shape"] = list(self.shape) if self.shape else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CoreSpec:
        shape = data.get("shape")
        return cls(**{**data, "shape": tuple(shape) if shape else None})


class CoreLike(Protocol):
    """What the pipeline needs from a core. ``run`` = ``submit`` + ``collect``; a
    core computing in another process returns from ``submit`` at once."""

    spec: CoreSpec
    input_shape: tuple[int, int, int, int]
    threads: int
    fp16_arithmetic: bool
    last_ms: float  # the last image's time in the core itself

    @property
    def shape(self) -> tuple[int, int]: ...

    def run(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def submit(self, image: np.ndarray) -> None: ...

    def collect(self) -> tuple[np.ndarray, np.ndarray]: ...

    def close(self) -> None: ...


class Halves(Closing):
    """A core whose own steps are ``submit`` and ``collect`` (a worker process, a
    fake): ``run`` and ``shape`` follow from them."""

    input_shape: tuple[int, int, int, int]

    @property
    def shape(self) -> tuple[int, int]:
        """The (height, width) this model takes."""
        return self.input_shape[2], self.input_shape[3]

    def run(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Depth and confidence for one normalised (1, 3, h, w) float32 image."""
        self.submit(image)
        return self.collect()

    def submit(self, image: np.ndarray) -> None:
        raise NotImplementedError

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def check_spec_shape(spec: CoreSpec, input_shape: tuple[int, ...]) -> None:
    """``ModelCorrupt`` when a model's input is not the shape its manifest promises."""
    if spec.shape is not None and tuple(input_shape[2:]) != spec.shape:
        h, w = spec.shape
        raise ModelCorrupt(
            f"{spec.path}: takes {input_shape[2]}x{input_shape[3]}, the manifest says {h}x{w}"
        )


class Core(Closing):
    """A loaded LiteRT depth model with fixed input shape.

    ``Core(spec)``, or ``Core(path, **options)`` with ``CoreSpec``'s fields."""

    def __init__(self, spec: CoreSpec | str | os.PathLike[str], **options: Any) -> None:
        self.spec = spec = CoreSpec.of(spec, **options)
        self.path = spec.path
        self.release_file_pages = spec.release_file_pages
        self.released_bytes = 0
        if not self.path.is_file():
            raise ModelNotFound(f"{self.path}: no such model file")
        self.threads = spec.threads if spec.threads else platform.default_threads()
        # The model's precision (fp32/fp16/int8) decides the fp16 default: see
        # platform.fp16_arithmetic.
        self.fp16_arithmetic = platform.fp16_arithmetic(
            spec.fp16_arithmetic, precision=spec.precision
        )
        self.weight_cache = spec.weight_cache
        if self.weight_cache is not None and self.fp16_arithmetic:
            # LiteRT 2.3.0's XNNPACK aborts the whole process (SIGABRT, "An invalid pack
            # identifier was created") when a weight cache meets FORCE_FP16: seen on
            # x86_64 and on Cortex-A76 (the aarch64 lane). tests/test_core.py keeps a
            # canary that tells when a LiteRT release stops doing it.
            log.info(
                "weight cache %s not used: LiteRT crashes when it meets fp16 arithmetic",
                self.weight_cache,
            )
            self.weight_cache = None
        self.weight_cache_file: Path | None = None  # the file used, if any
        self.weight_cache_built = False  # built by this open (a first run)
        self._model: Any = None
        self._first_run = True
        self._queued: np.ndarray | None = None
        self.last_ms = 0.0  # the last run's time in LiteRT
        self._open()

    def _open(self) -> None:
        require_litert_cpu()
        trace.mark("core: open")
        try:
            import ai_edge_litert.compiled_model  # noqa: F401 - litert.compile_model's imports
        except ImportError as exc:  # pragma: no cover - a broken install
            raise EdgeError(
                f"cannot import ai_edge_litert ({exc}); reinstall da3-edge's dependencies"
            ) from exc
        trace.mark("core: litert imported")
        # None keeps LiteRT's default XNNPACK flags. An explicit 0 would also switch off
        # the signed/unsigned int8 paths (QS8/QU8): measured, the int8 model then ran
        # 4.6x slower (1.05 s vs 0.23 s at 378x504). So fp16 arithmetic is asked for
        # on top of those two, never instead of them.
        flags = platform.XNNPACK_FLAGS_FP16 if self.fp16_arithmetic else None
        native: list[str] = []
        try:
            with _native_stderr(native):
                model = compile_model(str(self.path), self.threads, flags, self._cache(flags))
        except Exception as exc:  # LiteRT raises RuntimeError/ValueError with C++ text
            detail = native_error("".join(native)) or first_line(exc)
            raise ModelCorrupt(f"{self.path}: LiteRT cannot load it ({detail})") from None
        inputs, outputs = self._signature_of(model)
        if len(inputs) != 1 or len(outputs) != 2:
            raise ModelCorrupt(
                f"{self.path}: expected 1 input and 2 outputs, "
                f"found {len(inputs)} and {len(outputs)}"
            )
        (in_detail,) = inputs.values()
        shape = tuple(int(v) for v in in_detail["shape"])
        if len(shape) != 4 or shape[:2] != (1, 3):
            raise ModelCorrupt(f"{self.path}: input shape {shape} is not (1, 3, H, W)")
        self.input_shape: tuple[int, int, int, int] = (shape[0], shape[1], shape[2], shape[3])
        try:
            check_spec_shape(self.spec, shape)
        except ModelCorrupt:
            with _native_stderr([]):
                environment = model.environment
                model.close()
                environment.close()
            raise
        trace.mark("core: model compiled")
        self._model = model
        self._inputs = model.create_input_buffers(self._sig_index)
        self._outputs = model.create_output_buffers(self._sig_index)
        self._out_sizes = [int(np.prod(d["shape"])) for d in outputs.values()]
        if self.release_file_pages:
            # XNNPACK has packed the weights: the file's pages are dead weight in RSS
            # (fp16 model: 283 -> 236 MiB right after open; outputs bit-identical).
            self.released_bytes = release_mapped_file(self.path)
        trace.mark("core: ready")

    def _cache(self, flags: int | None) -> str:
        """XNNPACK's weight cache file for this model and these flags ("" for none)."""
        if self.weight_cache is None:
            return ""
        found, self.weight_cache_built = weightcache.path_for(
            self.weight_cache, self.path, self.spec.model_sha256, flags, self.threads
        )
        self.weight_cache_file = found
        trace.mark("core: weight cache")
        return str(found) if found else ""

    def _signature_of(self, model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The model's first signature's input and output tensor details."""
        try:
            signatures = model.get_signature_list()
            self._signature = next(iter(signatures))
            self._sig_index = model.get_signature_index(self._signature)
            inputs = model.get_input_tensor_details(self._signature)
            outputs = model.get_output_tensor_details(self._signature)
        except Exception as exc:
            raise ModelCorrupt(f"{self.path}: not a depth model ({first_line(exc)})") from None
        return inputs, outputs

    @property
    def shape(self) -> tuple[int, int]:
        """The (height, width) this model takes."""
        return self.input_shape[2], self.input_shape[3]

    def submit(self, image: np.ndarray) -> None:
        """``run`` in two halves, as ``ProcessCore`` has them: here ``submit`` only
        checks and keeps the image, ``collect`` computes."""
        self._check(image)
        self._queued = image

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        image, self._queued = self._queued, None
        if image is None:
            raise EdgeError("nothing was submitted to this Core")
        return self.run(image)

    def _check(self, image: np.ndarray) -> None:
        if self._model is None:
            raise EdgeError("this Core is closed")
        check_input(image, self.input_shape)

    def run(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Depth and confidence for one normalised (1, 3, h, w) float32 image."""
        self._check(image)
        t0 = time.perf_counter()
        if self._first_run:
            # The first write/run sets up another LiteRT environment, chattily.
            with _native_stderr([]):
                self._invoke(image)
            self._first_run = False
        else:
            self._invoke(image)
        h, w = self.shape
        depth = self._outputs[0].read(self._out_sizes[0], np.float32).reshape(h, w)
        conf = self._outputs[1].read(self._out_sizes[1], np.float32).reshape(h, w)
        self.last_ms = (time.perf_counter() - t0) * 1000
        return depth, conf

    def _invoke(self, image: np.ndarray) -> None:
        self._inputs[0].write(np.ascontiguousarray(image))
        self._model.run_by_index(self._sig_index, self._inputs, self._outputs)

    def close(self) -> None:
        for buffer in [*getattr(self, "_inputs", []), *getattr(self, "_outputs", [])]:
            buffer.destroy()
        self._inputs, self._outputs = [], []
        if self._model is not None:
            environment = self._model.environment
            with _native_stderr([]):
                self._model.close()
                environment.close()
        self._model = None
