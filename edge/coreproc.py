"""The LiteRT core in a worker process, for the camera daemon.

LiteRT's Python binding holds the GIL for a whole inference: measured, another Python
thread ran at 2% of its speed during a 378x504 run. In the daemon that starved the
writer thread, which needs the GIL to render and write a frame: with the core in the
daemon's own process, writing one 1200x1600 frame took ~1.5 s instead of ~0.2 s, and
all but one in six inferences were computed only to be dropped.

``ProcessCore`` has ``Core``'s interface and runs a ``Core`` in a child interpreter
(``python -m edge.coreproc``). The parent writes the normalised image to the child's
stdin and reads depth and confidence back (2-4 MB a frame over a pipe: ~1 ms); while
it waits, it holds no GIL, so capture and writing go on. ``run`` comes in two halves,
``submit`` (returns once the worker has the image) and ``collect`` (waits for the
answer), so the daemon can pre- and postprocess other frames meanwhile. The child exits when its
stdin closes (the parent closed it, or died); a child that dies is restarted at the
next frame. Native log lines go to the shared stderr, as in-process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

from edge import errors
from edge.closing import Closing
from edge.core import Core, check_input
from edge.errors import EdgeError

log = logging.getLogger(__name__)
_LEN = struct.Struct("<Q")
_MS = struct.Struct("<d")  # after depth and conf: the worker's time in LiteRT
_ERRORS = {"ModelNotFound": errors.ModelNotFound, "ModelCorrupt": errors.ModelCorrupt}


class ProcessCore(Closing):
    """A ``Core`` run by a worker process: same constructor arguments, same ``run``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        fp16_arithmetic: bool | None = None,
        weight_cache: str | os.PathLike[str] | None = None,
        precision: str | None = None,
    ) -> None:
        self.path = Path(path)
        self._spec = {
            "path": str(self.path),
            "threads": threads,
            "fp16_arithmetic": fp16_arithmetic,
            "weight_cache": str(weight_cache) if weight_cache else None,
            "precision": precision,
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._in_flight = False
        self.last_ms = 0.0  # the worker's time in LiteRT for the last image
        self._start()

    def _start(self) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edge.coreproc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(self._spec).encode() + b"\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except OSError:
            line = b""
        if not line:
            proc.kill()
            code = _reap(proc)
            raise EdgeError(f"{self.path}: the core process exited ({code}) while loading")
        reply = json.loads(line)
        if "error" in reply:
            _reap(proc)
            raise _ERRORS.get(reply["type"], EdgeError)(reply["error"])
        self._proc = proc
        self.input_shape: tuple[int, int, int, int] = tuple(reply["input_shape"])
        self.threads: int = reply["threads"]
        self.fp16_arithmetic: bool = reply["fp16_arithmetic"]
        self.released_bytes: int = reply["released_bytes"]
        self.pid = proc.pid

    @property
    def shape(self) -> tuple[int, int]:
        return self.input_shape[2], self.input_shape[3]

    def run(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Depth and confidence for one normalised (1, 3, h, w) float32 image."""
        self.submit(image)
        return self.collect()

    def submit(self, image: np.ndarray) -> None:
        """Send one image to the worker and return at once; ``collect`` gets the
        answer. One image at a time: the daemon preprocesses the next frame while the
        worker computes this one."""
        if self._closed:
            raise EdgeError("this Core is closed")
        if self._in_flight:
            raise EdgeError("an image is already being computed; collect it first")
        check_input(image, self.input_shape)
        if self._proc is None or self._proc.poll() is not None:
            code = _reap(self._proc) if self._proc is not None else None
            self._proc = None
            log.warning("core process gone (exit %s); starting a new one", code)
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        data = np.ascontiguousarray(image).data.cast("B")
        try:
            proc.stdin.write(_LEN.pack(len(data)))
            proc.stdin.write(data)
            proc.stdin.flush()
        except OSError as exc:
            self._died(exc)
        self._in_flight = True

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        """Depth and confidence for the image ``submit`` sent (waits for them)."""
        if not self._in_flight:
            raise EdgeError("nothing was submitted to this Core")
        self._in_flight = False
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        h, w = self.shape
        out = bytearray(2 * h * w * 4 + _MS.size)
        try:
            header = _read_exactly(proc.stdout, _LEN.size)
            (n,) = _LEN.unpack(header)
            if n != len(out):
                raise EdgeError(_read_error(proc.stdout, n))
            _readinto_exactly(proc.stdout, out)
        except (OSError, EOFError) as exc:
            self._died(exc)
        (self.last_ms,) = _MS.unpack_from(out, len(out) - _MS.size)
        both = np.frombuffer(out, dtype=np.float32, count=2 * h * w).reshape(2, h, w)
        return both[0], both[1]

    def _died(self, exc: BaseException) -> NoReturn:
        proc, self._proc = self._proc, None
        self._in_flight = False
        code = None
        if proc is not None:
            proc.kill()
            code = _reap(proc)
        raise EdgeError(f"the core process died during inference (exit {code}: {exc})") from None

    def close(self) -> None:
        self._closed = True
        self._in_flight = False
        proc, self._proc = self._proc, None
        if proc is not None:
            _reap(proc)  # closing its stdin is the worker's cue to exit


def _reap(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> int:
    """Close a worker's pipes and wait for it (killing it after ``timeout``)."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError("the core process closed its output")
    return data


def _readinto_exactly(stream: IO[bytes], buf: bytearray) -> None:
    view = memoryview(buf)
    while view:
        got = stream.readinto(view)  # type: ignore[attr-defined]
        if not got:
            raise EOFError("the core process closed its output")
        view = view[got:]


def _read_error(stream: IO[bytes], n: int) -> str:
    text = _read_exactly(stream, n).decode("utf-8", "replace")
    return text or "the core process failed"


def _serve() -> int:
    # The protocol owns the real stdout; anything native code prints to fd 1 goes to
    # stderr instead of corrupting it. Ctrl-C in a terminal is the parent's to handle.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    spec: dict[str, Any] = json.loads(stdin.readline())

    try:
        core = Core(
            spec["path"],
            threads=spec["threads"],
            fp16_arithmetic=spec["fp16_arithmetic"],
            weight_cache=spec["weight_cache"],
            precision=spec["precision"],
        )
    except EdgeError as exc:
        out.write(json.dumps({"error": str(exc), "type": type(exc).__name__}).encode() + b"\n")
        out.flush()
        return 1
    reply = {
        "input_shape": list(core.input_shape),
        "threads": core.threads,
        "fp16_arithmetic": core.fp16_arithmetic,
        "released_bytes": core.released_bytes,
    }
    out.write(json.dumps(reply).encode() + b"\n")
    out.flush()
    buf = bytearray(int(np.prod(core.input_shape)) * 4)
    with core:
        try:
            return _serve_images(core, stdin, out, buf)
        except (BrokenPipeError, EOFError):
            return 0  # the parent went away (closed while an image was in flight)


def _serve_images(core: Core, stdin: IO[bytes], out: IO[bytes], buf: bytearray) -> int:
    while True:
        header = stdin.read(_LEN.size)
        if len(header) != _LEN.size:
            return 0  # the parent closed the pipe: done
        (n,) = _LEN.unpack(header)
        if n != len(buf):
            return 2
        _readinto_exactly(stdin, buf)
        x = np.frombuffer(buf, dtype=np.float32).reshape(core.input_shape)
        try:
            depth, conf = core.run(x)
        except EdgeError as exc:
            message = str(exc).encode()
            out.write(_LEN.pack(len(message)) + message)
            out.flush()
            continue
        out.write(_LEN.pack(depth.nbytes + conf.nbytes + _MS.size))
        out.write(np.ascontiguousarray(depth).data.cast("B"))
        out.write(np.ascontiguousarray(conf).data.cast("B"))
        out.write(_MS.pack(core.last_ms))
        out.flush()


if __name__ == "__main__":
    sys.exit(_serve())
