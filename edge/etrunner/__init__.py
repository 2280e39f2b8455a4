"""The ExecuTorch runtime without torch: da3-edge's runner over the wheel's C++ libraries.

ExecuTorch's Python bindings link libtorch; its C++ runtime does not. ``da3-edge
install-executorch`` (``edge.etrunner.install``) takes the pinned ``executorch`` wheel,
hash-checked, keeps only its runtime libraries, and builds ``runner.cpp`` against them
with the system C++ compiler, into one versioned directory per environment::

    <sys.prefix>/share/da3-edge/executorch-<version>/
        runtime.json     what was built: executorch version, platform, wheel and
                         runner-source digests, compiler
        runner.so        the C ABI (ctypes; no CPython API, so any Python version)
        executorch/lib/  libexecutorch, the optimized kernels, XNNPACK, thread pool

Outside the package set uv manages, so ``uv sync`` (which removes whatever its lock does
not name) leaves it alone; ``$DA3_EDGE_EXECUTORCH`` names another directory. Nothing here
imports torch or the ``executorch`` Python package. docs/explanation/executorch-runner.md
says why it is built this way.

:class:`Program` wraps one ``.pte``: inputs are numpy buffers passed in place, outputs
are copies, or (``copy=False``) views of the program's memory valid until its next run.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import ModelCorrupt, StagesUnavailable
from edge.native import captured_stderr

log = logging.getLogger(__name__)
EXECUTORCH_VERSION = "1.5.1"
ABI = 3  # runner.cpp's kAbi
ENV_RUNTIME = "DA3_EDGE_EXECUTORCH"
INSTALL_STEP = "run `da3-edge install-executorch` (no torch needed), or use --stages numpy"
MAX_RANK = 8
DTYPES: dict[int, np.dtype[Any]] = {
    0: np.dtype(np.float32),
    1: np.dtype(np.uint8),
    2: np.dtype(np.int32),
    3: np.dtype(np.int64),
    4: np.dtype(np.float16),
}
CODES = {dtype: code for code, dtype in DTYPES.items()}


def default_dir(prefix: str | os.PathLike[str] | None = None) -> Path:
    """Where ``install-executorch`` puts the runtime for the Python at ``prefix``."""
    base = Path(prefix if prefix is not None else sys.prefix)
    return base / "share" / "da3-edge" / f"executorch-{EXECUTORCH_VERSION}"


def runtime_dir() -> Path:
    env = os.environ.get(ENV_RUNTIME)
    return Path(env) if env else default_dir()


def runner_source() -> bytes:
    return resources.files("edge.etrunner").joinpath("runner.cpp").read_bytes()


def source_digest() -> str:
    return hashlib.sha256(runner_source()).hexdigest()


def failure_note(directory: Path) -> Path:
    """Where ``install-executorch`` leaves why its last attempt at ``directory`` failed
    (beside it: a failed build leaves no directory), for ``doctor`` to show."""
    return directory.with_name(f"{directory.name}.failed")


def read_record(directory: Path) -> dict[str, Any]:
    """The directory's runtime.json, or StagesUnavailable saying what is wrong."""
    record_path = directory / "runtime.json"
    try:
        record: dict[str, Any] = json.loads(record_path.read_text())
    except FileNotFoundError:
        try:
            why = failure_note(directory).read_text().strip()
        except OSError:
            why = ""
        if why:
            raise StagesUnavailable(
                f"the executorch stages need da3-edge's ExecuTorch runner; the last "
                f"`da3-edge install-executorch` failed ({why}): fix that and {INSTALL_STEP}"
            ) from None
        raise StagesUnavailable(
            f"the executorch stages need da3-edge's ExecuTorch runner, not installed in "
            f"{directory}: {INSTALL_STEP}"
        ) from None
    except (OSError, ValueError) as exc:
        raise StagesUnavailable(f"{record_path}: unreadable ({exc}): {INSTALL_STEP}") from None
    return record


def check_record(record: dict[str, Any], directory: Path) -> None:
    """Refuse a runner built for another executorch, ABI or runner source."""
    built = record.get("executorch")
    if built != EXECUTORCH_VERSION:
        raise StagesUnavailable(
            f"{directory}: the ExecuTorch runner was built for executorch {built}, this "
            f"da3-edge needs {EXECUTORCH_VERSION}: {INSTALL_STEP}"
        )
    if record.get("abi") != ABI or record.get("runner_sha256") != source_digest():
        raise StagesUnavailable(
            f"{directory}: the ExecuTorch runner was built from another da3-edge's source: "
            f"{INSTALL_STEP}"
        )


class Runtime:
    """The loaded runner (one per process: ExecuTorch's thread pool is process-wide)."""

    _lock = threading.Lock()
    _loaded: Runtime | None = None

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.record = read_record(directory)
        check_record(self.record, directory)
        path = directory / "runner.so"
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise StagesUnavailable(f"{path}: cannot load it ({exc}): {INSTALL_STEP}") from None
        self._declare(lib)
        if lib.da3et_abi() != ABI or lib.da3et_executorch_version().decode() != EXECUTORCH_VERSION:
            raise StagesUnavailable(
                f"{path}: not the runner runtime.json describes: {INSTALL_STEP}"
            )
        self.lib = lib
        self.open_programs = 0

    @staticmethod
    def _declare(lib: ctypes.CDLL) -> None:
        c_int, vp, i64p = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
        ip = ctypes.POINTER(c_int)
        lib.da3et_error.restype = ctypes.c_char_p
        lib.da3et_executorch_version.restype = ctypes.c_char_p
        lib.da3et_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
        lib.da3et_close.argtypes = [vp]
        lib.da3et_close.restype = None
        lib.da3et_arity.argtypes = [vp, ip, ip]
        lib.da3et_tensor_meta.argtypes = [vp, c_int, c_int, ip, ip, i64p]
        lib.da3et_run.argtypes = [vp, c_int, ctypes.POINTER(vp), ip, ip, i64p]
        lib.da3et_output.argtypes = [vp, c_int, ctypes.POINTER(vp), ip, ip, i64p]
        lib.da3et_set_threads.argtypes = [c_int]
        lib.da3et_planned_bytes.argtypes = [vp, i64p]
        lib.da3et_release.argtypes = [vp]

    @classmethod
    def get(cls, threads: int | None = None) -> Runtime:
        with cls._lock:
            if cls._loaded is None or cls._loaded.directory != runtime_dir():
                cls._loaded = cls(runtime_dir())
            runtime = cls._loaded
        if threads and threads != runtime.threads:
            if runtime.open_programs:
                # A reload that changes the thread count while the old stages still
                # run: the pool stays as it is (stage programs are small), said once.
                log.warning(
                    "ExecuTorch stages keep %d threads (programs are open; %d asked for)",
                    runtime.threads,
                    threads,
                )
            else:
                runtime.set_threads(threads)
        return runtime

    def error(self) -> str:
        text: bytes = self.lib.da3et_error()
        return text.decode("utf-8", "replace")

    @property
    def threads(self) -> int:
        with captured_stderr([]):
            return int(self.lib.da3et_threads())

    def set_threads(self, threads: int) -> None:
        """Size the thread pool: only before the first program opens (XNNPACK keeps a
        pointer to it; resizing under an open program crashed the process)."""
        if threads == self.threads:
            return
        if self.open_programs:
            raise StagesUnavailable(
                f"the ExecuTorch thread pool already runs {self.threads} threads for an open "
                f"program; cannot change it to {threads} in this process"
            )
        with captured_stderr([]):  # the pool's first use probes the CPU, aloud
            rc = self.lib.da3et_set_threads(int(threads))
        if rc != 0:
            raise StagesUnavailable(f"ExecuTorch thread pool: {self.error()}")


@dataclass(frozen=True)
class TensorMeta:
    dtype: np.dtype[Any] | None  # None: a dtype the runner does not pass
    shape: tuple[int, ...]  # as exported; dynamic dimensions at their upper bound


class Program:
    """One ``.pte`` program's ``forward``, memory-mapped."""

    def __init__(self, path: str | os.PathLike[str], runtime: Runtime | None = None) -> None:
        self.path = Path(path)
        self.runtime = runtime or Runtime.get()
        lib = self.runtime.lib
        handle = ctypes.c_void_p()
        with captured_stderr([]):  # the runner's own error text is what is reported
            rc = lib.da3et_open(str(self.path).encode(), ctypes.byref(handle))
        if rc != 0:
            raise ModelCorrupt(f"{self.path}: ExecuTorch cannot load it ({self.runtime.error()})")
        self._handle: int | None = handle.value
        self.runtime.open_programs += 1
        self._warm = False
        n_in, n_out = ctypes.c_int(), ctypes.c_int()
        self._check(lib.da3et_arity(self._handle, ctypes.byref(n_in), ctypes.byref(n_out)))
        planned = ctypes.c_int64()
        self._check(lib.da3et_planned_bytes(self._handle, ctypes.byref(planned)))
        self.planned_bytes = planned.value  # ExecuTorch's planned intermediates
        self.inputs = [self._meta(0, i) for i in range(n_in.value)]
        self.outputs = [self._meta(1, i) for i in range(n_out.value)]
        # Reused argument arrays: a run allocates nothing on the Python side.
        count = len(self.inputs)
        self._data = (ctypes.c_void_p * max(1, count))()
        self._dtypes = (ctypes.c_int * max(1, count))()
        self._ranks = (ctypes.c_int * max(1, count))()
        self._sizes = (ctypes.c_int64 * (MAX_RANK * max(1, count)))()

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise ModelCorrupt(f"{self.path}: {self.runtime.error()}")

    def _meta(self, is_output: int, index: int) -> TensorMeta:
        dtype, rank, sizes = ctypes.c_int(), ctypes.c_int(), (ctypes.c_int64 * MAX_RANK)()
        self._check(
            self.runtime.lib.da3et_tensor_meta(
                self._handle, is_output, index, ctypes.byref(dtype), ctypes.byref(rank), sizes
            )
        )
        return TensorMeta(DTYPES.get(dtype.value), tuple(sizes[: rank.value]))

    def run(self, arrays: Sequence[np.ndarray], *, copy: bool = True) -> list[np.ndarray]:
        """``forward`` on C-contiguous arrays of the program's dtypes and ranks (passed
        in place). The outputs are copies; with ``copy=False``, views of the program's
        memory, valid only until its next run or ``close`` (reading one later reads
        freed memory)."""
        if self._handle is None:
            raise ModelCorrupt(f"{self.path}: program closed")
        if len(arrays) != len(self.inputs):
            raise ValueError(f"{self.path.name} takes {len(self.inputs)} inputs, not {len(arrays)}")
        for i, (array, meta) in enumerate(zip(arrays, self.inputs, strict=True)):
            if array.dtype != meta.dtype or array.ndim != len(meta.shape):
                raise ValueError(
                    f"{self.path.name} input {i}: wants {meta.dtype} of rank {len(meta.shape)}, "
                    f"got {array.dtype} {array.shape}"
                )
            if not array.flags.c_contiguous:
                raise ValueError(f"{self.path.name} input {i}: not C-contiguous")
            self._data[i] = array.ctypes.data
            self._dtypes[i] = CODES[array.dtype]
            self._ranks[i] = array.ndim
            for d, n in enumerate(array.shape):
                self._sizes[i * MAX_RANK + d] = n
        lib = self.runtime.lib
        args = (self._handle, len(arrays), self._data, self._dtypes, self._ranks, self._sizes)
        if self._warm:
            rc = lib.da3et_run(*args)
        else:  # XNNPACK's cpuinfo probe talks on first use
            with captured_stderr([]):
                rc = lib.da3et_run(*args)
            self._warm = True
        if rc != 0:
            raise ModelCorrupt(f"{self.path}: {self.runtime.error()}")
        outputs = [self._output(i) for i in range(len(self.outputs))]
        return [o.copy() for o in outputs] if copy else outputs

    def _output(self, index: int) -> np.ndarray:
        ptr, dtype, rank = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
        sizes = (ctypes.c_int64 * MAX_RANK)()
        lib = self.runtime.lib
        self._check(
            lib.da3et_output(
                self._handle,
                index,
                ctypes.byref(ptr),
                ctypes.byref(dtype),
                ctypes.byref(rank),
                sizes,
            )
        )
        np_dtype = DTYPES.get(dtype.value)
        if np_dtype is None or not ptr.value:
            raise ModelCorrupt(f"{self.path}: output {index} has an unsupported type")
        shape = tuple(sizes[: rank.value])
        count = int(np.prod(shape)) if shape else 1
        buffer = (ctypes.c_char * (count * np_dtype.itemsize)).from_address(ptr.value)
        view: np.ndarray = np.frombuffer(memoryview(buffer), dtype=np_dtype, count=count)
        return view.reshape(shape)

    def release(self) -> None:
        """Return the planned memory's pages to the kernel until the next run (views
        from ``run(copy=False)`` read zeros after this)."""
        if self._handle is not None:
            self._check(self.runtime.lib.da3et_release(self._handle))

    def close(self) -> None:
        if self._handle is not None:
            self.runtime.lib.da3et_close(self._handle)
            self._handle = None
            self.runtime.open_programs -= 1

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: ctypes may be gone
            self.close()


def status() -> tuple[bool, str]:
    """(usable, one line) for ``doctor``: the runner loads and matches this da3-edge."""
    directory = runtime_dir()
    try:
        runtime = Runtime.get()
    except StagesUnavailable as exc:
        return False, str(exc)
    record = runtime.record
    return True, (
        f"runner for executorch {record['executorch']} ({record['platform']}, "
        f"{record['compiler']}) in {directory}"
    )
