"""A camera that does what a script says: the fake that ships with the kit.

``fake`` alone gives synthetic frames forever at ``fps`` (default 10): a smooth,
moving pattern, different every frame. ``fake:SCRIPT`` plays a comma-separated script
first, then carries on with good frames. Each step is one of:

=================  ==========================================================
``ok[*N]``         N good frames (default 1)
``error[*N]``      N reads that raise ``CameraError`` (a lost camera)
``timeout[*N]``    N reads that wait the read timeout, then raise ``CameraTimeout``
``hang:SECONDS``   one read that blocks for SECONDS, ignoring the timeout (a hung
                   driver: only a watchdog notices)
``freeze[*N]``     N reads that return the previous frame again, same pixels and
                   same timestamp (a frozen sensor)
``openfail[*N]``   the next N ``open()`` calls fail (camera unplugged)
``fps:RATE``       frames per second from here on
``end``            every later read raises ``CameraError`` (camera gone for good)
``wedge``          one read that fails, and the close after it never returns (a
                   driver stuck in ``stop()``: only a new process gets it back)
``crash``          one read that raises ``RuntimeError``, which no camera error
                   handling catches (a bug: the capture thread dies, and the
                   daemon with it, so that systemd restarts it)
=================  ==========================================================

Example: ``fake:ok*20,error*3,ok*10,hang:60`` — twenty frames, three errors, ten
frames, then a hang of a minute. Steps are consumed by reads (``openfail`` by opens).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from edge.camera.base import Frame, SourceBase
from edge.errors import CameraError, CameraTimeout
from edge.sources import STEPS, Step, parse_script

__all__ = ["STEPS", "FakeCamera", "Step", "parse_script"]


class FakeCamera(SourceBase):
    """Synthetic frames with scripted faults. Thread-safe enough for one reader."""

    name = "fake"

    def __init__(
        self, script: str = "", *, width: int = 320, height: int = 240, fps: float = 10.0
    ) -> None:
        self.steps = parse_script(script)
        self.width, self.height = width, height
        self.fps = fps
        self.is_open = False
        self.opens = 0
        self._seq = 0
        self._last: Frame | None = None
        self._next_due = 0.0
        self._pending_openfails = 0
        self._gone = False
        self._wedged = False
        self._lock = threading.Lock()
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        self._xx, self._yy = xx / max(width, 1), yy / max(height, 1)

    def _take(self, kinds: tuple[str, ...]) -> Step | None:
        """Consume one unit of the first step if it is of one of ``kinds``."""
        while (
            self.steps
            and self.steps[0].kind in ("fps", "openfail")
            and self.steps[0].kind not in kinds
        ):
            step = self.steps.pop(0)
            if step.kind == "fps":
                self.fps = step.value
            else:
                self._pending_openfails += step.count
        if not self.steps or self.steps[0].kind not in kinds:
            return None
        step = self.steps[0]
        step.count -= 1
        if step.count <= 0:
            self.steps.pop(0)
        return Step(step.kind, 1, step.value)

    def open(self) -> None:
        with self._lock:
            self._take(())  # apply leading fps/openfail steps
            self.opens += 1
            if self._pending_openfails:
                self._pending_openfails -= 1
                raise CameraError("fake camera: open failed (scripted)")
            self.is_open = True
            self._next_due = time.monotonic()

    def _frame(self) -> Frame:
        t = self._seq / 10.0
        r = 127 + 120 * np.sin(6.0 * self._xx + t)
        g = 127 + 120 * np.sin(5.0 * self._yy - 0.7 * t)
        b = 127 + 120 * np.cos(4.0 * (self._xx + self._yy) + 0.3 * t)
        rgb = np.stack([r, g, b], axis=2).astype(np.uint8)
        now = time.time()
        frame = Frame(rgb, self._seq, now, time.monotonic(), sensor_ts=now)
        self._seq += 1
        return frame

    def read(self, timeout: float) -> Frame:
        if not self.is_open:
            raise CameraError("fake camera: not open")
        step = self._take(("ok", "error", "timeout", "hang", "freeze", "end", "crash", "wedge"))
        kind = "end" if self._gone else (step.kind if step else "ok")
        if kind == "end":
            self._gone = True
            raise CameraError("fake camera: gone (scripted end)")
        if kind == "error":
            raise CameraError("fake camera: read failed (scripted)")
        if kind == "crash":
            raise RuntimeError("fake camera: crashed (scripted)")
        if kind == "wedge":
            self._wedged = True
            raise CameraError("fake camera: read failed, and it will not close (scripted)")
        if kind == "timeout":
            time.sleep(timeout)
            raise CameraTimeout(f"fake camera: no frame within {timeout:g} s (scripted)")
        if kind == "hang":
            time.sleep(step.value if step else 0)
            raise CameraTimeout("fake camera: came back from a hang (scripted)")
        # Pace like a real sensor.
        delay = self._next_due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._next_due = max(self._next_due + 1.0 / self.fps, time.monotonic())
        if kind == "freeze" and self._last is not None:
            return self._last
        self._last = self._frame()
        return self._last

    def close(self) -> None:
        if self._wedged:
            threading.Event().wait()  # never returns, as a wedged driver's stop()
        self.is_open = False
