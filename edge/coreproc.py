"""The LiteRT core in a worker process, for the camera daemon.

LiteRT's Python binding holds the GIL for a whole inference: measured, another Python
thread ran at 2% of its speed during a 378x504 run. In the daemon that starved the
writer thread, which needs the GIL to render and write a frame: with the core in the
daemon's own process, writing one 1200x1600 frame took ~1.5 s instead of ~0.2 s, and
all but one in six inferences were computed only to be dropped.

``ProcessCore`` has ``Core``'s interface (``CoreLike``) and runs a ``Core`` in a child
interpreter (``python -m edge.coreproc``), which receives the ``CoreSpec`` as JSON.
Images and answers go through one shared memory block (a memfd, or an unlinked temporary
file where there is none, e.g. macOS; the child sizes it once the model is loaded): the
parent copies the normalised image in, the child copies depth and confidence back. The
pipes carry only small messages. (Through the pipes themselves, 3.8 MB a frame took ~60
round trips through 64 KB pipe buffers, each needing the GIL: the core then sat idle for
a few ms a frame while the writer thread held it.) While the parent waits it holds no
GIL, so capture and writing go on. ``run`` comes in two halves, ``submit`` (returns at
once) and ``collect`` (waits for the answer), so the daemon can pre- and postprocess
other frames meanwhile.

The child exits when its stdin closes (the parent closed it, or died); a child that
dies is restarted at the next frame. Native log lines go to the shared stderr, as
in-process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import signal
import struct
import subprocess
import sys
from typing import IO, Any, NoReturn

import numpy as np

from edge import errors
from edge.core import Core, CoreSpec, Halves, check_input
from edge.errors import EdgeError

log = logging.getLogger(__name__)
# Parent -> worker: one byte per image ("the image is in the shared memory").
# Worker -> parent: status and a double: 0 and the ms in LiteRT (the answer is in the
# shared memory), or 1 and the length of an error message that follows.
_GO = b"g"
_REPLY = struct.Struct("<Bd")
_ERRORS = {"ModelNotFound": errors.ModelNotFound, "ModelCorrupt": errors.ModelCorrupt}


class ProcessCore(Halves):
    """A ``Core`` run by a worker process: same constructor arguments, same ``run``."""

    def __init__(self, spec: CoreSpec | str | os.PathLike[str], **options: Any) -> None:
        self.spec = CoreSpec.of(spec, **options)
        self.path = self.spec.path
        self._proc: subprocess.Popen[bytes] | None = None
        self._shared: _Shared | None = None
        self._closed = False
        self._in_flight = False
        self.last_ms = 0.0  # the worker's time in LiteRT for the last image
        self._start()

    def _start(self) -> None:
        fd = _shared_fd()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "edge.coreproc"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
                pass_fds=(fd,),
            )
            assert proc.stdin is not None and proc.stdout is not None
            try:
                message = {"spec": self.spec.to_json(), "shared_fd": fd}
                proc.stdin.write(json.dumps(message).encode() + b"\n")
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
            shape = tuple(reply["input_shape"])
            try:
                shared = _Shared(fd, shape)
            except (OSError, ValueError) as exc:
                proc.kill()
                _reap(proc)
                raise EdgeError(f"cannot map the core process's memory ({exc})") from None
        finally:
            os.close(fd)  # both mappings keep the memory
        self._proc = proc
        if self._shared is not None:
            self._shared.close()  # a dead worker's
        self._shared = shared
        self.input_shape: tuple[int, int, int, int] = shape
        self.threads: int = reply["threads"]
        self.fp16_arithmetic: bool = reply["fp16_arithmetic"]
        self.released_bytes: int = reply["released_bytes"]
        self.pid = proc.pid

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
        proc, shared = self._proc, self._shared
        assert proc is not None and proc.stdin is not None and shared is not None
        shared.image[...] = image
        try:
            proc.stdin.write(_GO)
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
        try:
            header = _read_exactly(proc.stdout, _REPLY.size)
            status, value = _REPLY.unpack(header)
            if status != 0:
                raise EdgeError(_read_error(proc.stdout, int(value)))
        except (OSError, EOFError) as exc:
            self._died(exc)
        self.last_ms = value
        assert self._shared is not None
        # Copies: the next image's answer lands in the same memory.
        return self._shared.depth.copy(), self._shared.conf.copy()

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
        if self._shared is not None:
            self._shared.close()
            self._shared = None


class _Shared:
    """The worker's input image and its two outputs, in memory both processes map."""

    def __init__(self, fd: int, input_shape: tuple[int, ...]) -> None:
        h, w = input_shape[2], input_shape[3]
        n_in = int(np.prod(input_shape))
        size = (n_in + 2 * h * w) * 4
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, size)
        floats = np.frombuffer(self._map, dtype=np.float32)
        self.image = floats[:n_in].reshape(input_shape)
        self.depth = floats[n_in : n_in + h * w].reshape(h, w)
        self.conf = floats[n_in + h * w :].reshape(h, w)

    def close(self) -> None:
        del self.image, self.depth, self.conf  # views must go before the mapping
        self._map.close()


def _shared_fd() -> int:
    """An anonymous file to share: a memfd (Linux), else an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        # Close-on-exec like every fd Python makes: only the worker gets it (pass_fds).
        return os.memfd_create("da3-edge-core", os.MFD_CLOEXEC)
    import tempfile

    with tempfile.TemporaryFile() as fh:
        return os.dup(fh.fileno())


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


def _read_error(stream: IO[bytes], n: int) -> str:
    text = _read_exactly(stream, n).decode("utf-8", "replace")
    return text or "the core process failed"


def _serve() -> int:
    # The protocol owns the real stdout; anything native code prints to fd 1 goes to
    # stderr instead of corrupting it. Ctrl-C in a terminal is the parent's to handle,
    # and so is systemd's stop: it sends SIGTERM to every process of the unit at once
    # (KillMode=control-group), and a worker dying of it mid-frame would count that
    # frame as a failed inference at every stop. The parent closes the pipes (the
    # worker then exits) and kills it if it does not (close_worker); a parent gone for
    # good is EOF on stdin.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    message: dict[str, Any] = json.loads(stdin.readline())
    shared_fd: int = message["shared_fd"]
    try:
        core = Core(CoreSpec.from_json(message["spec"]))
    except EdgeError as exc:
        _send_line(out, {"error": str(exc), "type": type(exc).__name__})
        return 1
    try:
        shared = _Shared(shared_fd, core.input_shape)
    except (OSError, ValueError) as exc:
        core.close()
        _send_line(
            out, {"error": f"cannot share memory with the parent ({exc})", "type": "EdgeError"}
        )
        return 1
    os.close(shared_fd)
    _send_line(
        out,
        {
            "input_shape": list(core.input_shape),
            "threads": core.threads,
            "fp16_arithmetic": core.fp16_arithmetic,
            "released_bytes": core.released_bytes,
        },
    )
    with core:
        return _answer(core, shared, stdin, out)


def _answer(core: Core, shared: _Shared, stdin: IO[bytes], out: IO[bytes]) -> int:
    try:
        return _serve_images(core, shared, stdin, out)
    except (BrokenPipeError, EOFError):
        # The parent went away (closed while an image was in flight): what the reply
        # left in the buffer goes nowhere, not into the closed pipe again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
        return 0


def _send_line(out: IO[bytes], message: dict[str, Any]) -> None:
    """One JSON line to the parent: the load reply, or why loading failed."""
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def _serve_images(core: Core, shared: _Shared, stdin: IO[bytes], out: IO[bytes]) -> int:
    while True:
        go = stdin.read(len(_GO))
        if go != _GO:
            return 0 if not go else 2  # the parent closed the pipe: done
        try:
            depth, conf = core.run(shared.image)
        except EdgeError as exc:
            message = str(exc).encode()
            out.write(_REPLY.pack(1, len(message)) + message)
            out.flush()
            continue
        shared.depth[...] = depth
        shared.conf[...] = conf
        out.write(_REPLY.pack(0, core.last_ms))
        out.flush()


if __name__ == "__main__":
    sys.exit(_serve())
