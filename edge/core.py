"""The LiteRT core: one DA3-small ``.tflite`` model run through XNNPACK.

``Core`` takes a normalised (1, 3, h, w) float32 image and returns relative depth and
confidence, each (h, w) float32. It owns one ``CompiledModel`` and its buffers, is a
context manager, and raises typed errors: ``ModelNotFound`` for a missing file,
``ModelCorrupt`` for a file LiteRT cannot load, ``ShapeError`` for a wrong input.

``ai_edge_litert`` is imported when a Core is opened, not when this module is.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge import platform
from edge.closing import Closing
from edge.errors import EdgeError, ModelCorrupt, ModelNotFound, ShapeError, first_line
from edge.native import captured_stderr as _native_stderr
from edge.native import release_mapped_file

log = logging.getLogger(__name__)


def _native_error(text: str) -> str:
    """The most telling line of LiteRT's own output, for an error message."""
    lines = [ln.strip() for ln in text.splitlines() if "ERROR" in ln and "plugin" not in ln.lower()]
    return lines[-1] if lines else ""


def require_litert_cpu() -> None:
    """``EdgeError`` when LiteRT would kill the process on this CPU (platform.litert_blocker)."""
    blocker = platform.litert_blocker()
    if blocker:
        raise EdgeError(f"cannot run LiteRT here: {blocker}")


def check_input(image: np.ndarray, input_shape: tuple[int, int, int, int]) -> None:
    """A core's input must be float32 of exactly its (1, 3, h, w): ``ShapeError`` if not."""
    if image.shape != input_shape:
        raise ShapeError(
            f"input shape {tuple(image.shape)} does not match the model's {input_shape}"
        )
    if image.dtype != np.float32:
        raise ShapeError(f"input dtype {image.dtype} is not float32")


class Core(Closing):
    """A loaded LiteRT depth model with fixed input shape."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        fp16_arithmetic: bool | None = None,
        weight_cache: str | os.PathLike[str] | None = None,
        release_file_pages: bool = True,
        precision: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.release_file_pages = release_file_pages
        self.released_bytes = 0
        if not self.path.is_file():
            raise ModelNotFound(f"{self.path}: no such model file")
        self.threads = threads if threads else platform.default_threads()
        # The model's precision (fp32/fp16/int8) decides the fp16 default: see
        # platform.fp16_arithmetic.
        self.fp16_arithmetic = platform.fp16_arithmetic(fp16_arithmetic, precision=precision)
        self.weight_cache = Path(weight_cache) if weight_cache else None
        if self.weight_cache is not None and self.fp16_arithmetic:
            # LiteRT 2.3.0's XNNPACK aborts the whole process (SIGABRT, "An invalid pack
            # identifier was created") when a weight cache meets FORCE_FP16: seen on
            # x86_64 and on Cortex-A76 (the aarch64 lane). tests/test_core.py keeps a
            # canary that tells when a LiteRT release stops doing it.
            log.warning(
                "weight cache %s not used: LiteRT crashes when it meets fp16 arithmetic",
                self.weight_cache,
            )
            self.weight_cache = None
        self._model: Any = None
        self._first_run = True
        self._queued: np.ndarray | None = None
        self.last_ms = 0.0  # the last run's time in LiteRT
        self._open()

    def _open(self) -> None:
        require_litert_cpu()
        try:
            import ai_edge_litert
            from ai_edge_litert.compiled_model import CompiledModel
            from ai_edge_litert.environment import Environment, EnvironmentOptions
            from ai_edge_litert.hardware_accelerator import HardwareAccelerator
            from ai_edge_litert.options import CpuOptions, Options
        except ImportError as exc:  # pragma: no cover - a broken install
            raise EdgeError(
                f"cannot import ai_edge_litert ({exc}); reinstall da3-edge's dependencies"
            ) from exc
        # None keeps LiteRT's default XNNPACK flags. An explicit 0 would also switch off
        # the signed/unsigned int8 paths (QS8/QU8): measured, the int8 model then ran
        # 4.6x slower (1.05 s vs 0.23 s at 378x504). So fp16 arithmetic is asked for
        # on top of those two, never instead of them.
        flags = platform.XNNPACK_FLAGS_FP16 if self.fp16_arithmetic else None
        cache = ""
        if self.weight_cache is not None:
            cache = str(self.weight_cache_file(flags))
        options = Options(
            hardware_accelerators=HardwareAccelerator.CPU,
            cpu_options=CpuOptions(
                num_threads=self.threads, xnnpack_flags=flags, xnnpack_weight_cache_path=cache
            ),
        )
        native: list[str] = []
        try:
            with _native_stderr(native):
                runtime = os.path.dirname(os.path.abspath(ai_edge_litert.__file__))
                environment = Environment.create(options=EnvironmentOptions(runtime_path=runtime))
                try:
                    model = CompiledModel.from_file(
                        str(self.path), options=options, environment=environment
                    )
                except BaseException:
                    environment.close()
                    raise
        except Exception as exc:  # LiteRT raises RuntimeError/ValueError with C++ text
            detail = _native_error("".join(native)) or first_line(exc)
            raise ModelCorrupt(f"{self.path}: LiteRT cannot load it ({detail})") from None
        try:
            signatures = model.get_signature_list()
            self._signature = next(iter(signatures))
            self._sig_index = model.get_signature_index(self._signature)
            inputs = model.get_input_tensor_details(self._signature)
            outputs = model.get_output_tensor_details(self._signature)
        except Exception as exc:
            raise ModelCorrupt(f"{self.path}: not a depth model ({first_line(exc)})") from None
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
        self._model = model
        self._inputs = model.create_input_buffers(self._sig_index)
        self._outputs = model.create_output_buffers(self._sig_index)
        self._out_sizes = [int(np.prod(d["shape"])) for d in outputs.values()]
        if self.release_file_pages:
            # XNNPACK has packed the weights: the file's pages are dead weight in RSS
            # (fp16 model: 283 -> 236 MiB right after open; outputs bit-identical).
            self.released_bytes = release_mapped_file(self.path)

    def weight_cache_file(self, flags: int | None) -> Path:
        """XNNPACK's packed-weight cache for this model file and these flags.

        XNNPACK takes a file, not a directory; the name carries the model's name,
        size and mtime and the delegate flags (fp16 arithmetic packs differently), so
        a re-exported model or a policy change never reads a stale cache.
        """
        assert self.weight_cache is not None
        self.weight_cache.mkdir(parents=True, exist_ok=True)
        st = self.path.stat()
        tag = f"f{flags}" if flags is not None else "default"
        return self.weight_cache / f"{self.path.stem}.{st.st_size}-{st.st_mtime_ns}.{tag}.xnnpack"

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
