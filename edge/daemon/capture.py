"""The capture thread: camera -> the newest-frame mailbox.

``Capture`` opens the camera (capped exponential backoff on failure), reads frames
and puts each new one into a one-slot ``Mailbox``; an unconsumed frame that gets
replaced is counted as dropped (the newest frame wins; nothing queues without
bound). A frame repeating the previous one's sensor timestamp is not new; no new
frame for ``camera.stall_after`` seconds means a frozen camera, which is reopened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from edge.camera import CameraError, Frame, Source, Streams, open_source
from edge.camera.base import CLOSE_GRACE, Controls
from edge.config import CameraConfig
from edge.errors import CameraWedged
from edge.fov import configured

log = logging.getLogger("edge.daemon")


class Mailbox:
    """One slot: ``put`` replaces what is there (returns True if that was unread)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._item: Frame | None = None

    def put(self, item: Frame) -> bool:
        with self._cond:
            replaced = self._item is not None
            self._item = item
            self._cond.notify()
            return replaced

    def take(self, timeout: float) -> Frame | None:
        with self._cond:
            if self._item is None:
                self._cond.wait(timeout)
            item, self._item = self._item, None
            return item

    @property
    def holding(self) -> int:
        """1 while a frame waits to be taken, else 0."""
        return int(self._item is not None)


@dataclass
class CaptureCounters:
    captured: int = 0  # new frames put into the mailbox
    dropped_stale: int = 0  # frames replaced in the mailbox before inference took them
    frozen: int = 0  # reads that returned the previous frame again
    camera_errors: int = 0
    reopens: int = 0


class Capture:
    """The camera thread (``run``).

    Owns, written by its thread only: the open ``Source`` (``source``: the main thread
    reads its ``applied`` controls for status.json), ``counters`` and ``state`` (a
    ``(state, reason)`` pair: "starting", "opening", "ok", "reconnecting", "stopped";
    the reason says why). The main thread only calls ``reconfigure``,
    which hands a new camera config over through ``_wanted`` (written by the main
    thread only); the capture thread switches to it between reads.
    """

    def __init__(
        self,
        config: CameraConfig,
        mailbox: Mailbox,
        stop: threading.Event,
        beat: Callable[[], None],
        streams: Streams | None = None,
    ) -> None:
        self.mailbox = mailbox
        self.stop = stop
        self.beat = beat
        self.counters = CaptureCounters()
        self.state: tuple[str, str | None] = ("starting", None)
        self._wanted: tuple[int, CameraConfig, Streams] = (0, config, streams or Streams())
        self._config = config
        self._generation = 0
        self.source: Source | None = None
        self._refused: list[str] = []

    def controls(self) -> dict[str, object]:
        """What the camera does of its controls, as the open source read it back."""
        source = self.source
        return source.applied if source is not None else {}

    def reconfigure(self, config: CameraConfig, streams: Streams | None = None) -> None:
        """Main thread: use ``config`` (and ``streams``) from the next read on (a new
        source)."""
        generation, _, current = self._wanted
        self._wanted = (generation + 1, config, streams or current)

    def _changed(self) -> bool:
        return self._wanted[0] != self._generation

    def _sleep(self, seconds: float) -> bool:
        """Sleep in slices, beating; False if asked to stop."""
        end = time.monotonic() + seconds
        while not self.stop.is_set():
            self.beat()
            left = end - time.monotonic()
            if left <= 0:
                return True
            self.stop.wait(min(left, 0.25))
        return False

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.state = ("stopped", None)

    def _run(self) -> None:
        backoff = self._config.backoff_min
        attempt = 0
        source: Source | None = None
        while not self.stop.is_set():
            self.beat()
            if source is None or self._changed():
                # One source object per configuration: it is closed and reopened on
                # faults (a fresh driver session each time), replaced on reload.
                self._generation, self._config, streams = self._wanted
                source = self.source = _source_of(self._config, streams)
            try:
                self.state = (
                    "opening",
                    source.name + (f" (attempt {attempt + 1})" if attempt else ""),
                )
                source.open()
            except CameraError as exc:
                attempt += 1
                self.counters.camera_errors += 1
                self.state = ("reconnecting", f"in {backoff:.1f} s (attempt {attempt}: {exc})")
                log.warning("camera: %s; retrying in %.1f s", exc, backoff)
                if not self._sleep(backoff):
                    return
                backoff = min(backoff * 2, self._config.backoff_max)
                continue
            if attempt:
                self.counters.reopens += 1
            log.info("camera: %s open", source.name)
            if source.refused != self._refused:  # once, not at every reconnect
                self._refused = source.refused
                for line in self._refused:
                    log.warning("camera: %s", line)
            self.state = ("ok", None)
            try:
                reason, delivered = self._read_until_fault(source)
            finally:
                self._close(source)
            if reason is None:
                return  # stopping
            if reason == "reload" or delivered >= 3:
                # A camera that worked for a while starts the backoff afresh.
                backoff, attempt = self._config.backoff_min, 0
            if reason == "reload":
                continue
            attempt += 1
            self.state = ("reconnecting", f"in {backoff:.1f} s ({reason})")
            log.warning("camera: %s; reopening in %.1f s", reason, backoff)
            if not self._sleep(backoff):
                return
            backoff = min(backoff * 2, self._config.backoff_max)

    def _close(self, source: Source) -> None:
        """Close ``source`` within its read timeout and CLOSE_GRACE, or raise
        CameraWedged: a driver stuck in its close keeps the camera from any reopen, and
        a thread waiting on it forever would beat no heart; ending the daemon lets
        systemd start a process that gets the camera back."""
        closer = threading.Thread(target=source.close, name="camera-close", daemon=True)
        closer.start()
        bound = self._config.timeout + CLOSE_GRACE
        closer.join(bound)
        if closer.is_alive():
            raise CameraWedged(f"camera: {source.name} did not close within {bound:g} s")

    def _read_until_fault(self, source: Source) -> tuple[str | None, int]:
        """Read until stop (None), reload ("reload"), an error or a stall (a reason);
        also return how many new frames came since the open."""
        cfg, counters = self._config, self.counters
        given = configured(cfg.hfov, "config camera.hfov")  # stamped over the source's
        last_ts: float | None = None
        last_new = time.monotonic()
        delivered = 0
        while not self.stop.is_set():
            self.beat()
            if self._changed():
                return "reload", delivered
            try:
                frame = source.read(cfg.timeout)
            except CameraError as exc:
                counters.camera_errors += 1
                return f"error: {exc}", delivered
            self.beat()
            ts = frame.sensor_ts
            if ts is not None and ts == last_ts:
                counters.frozen += 1
                if time.monotonic() - last_new > cfg.stall_after:
                    return f"stalled: no new frame for {cfg.stall_after:g} s", delivered
                continue
            if given is not None:
                frame = replace(frame, fov=given)
            last_ts = ts
            last_new = time.monotonic()
            delivered += 1
            counters.captured += 1
            if self.mailbox.put(frame):
                counters.dropped_stale += 1
            if self.state[0] != "ok":
                self.state = ("ok", None)
        return None, delivered


def _source_of(cfg: CameraConfig, streams: Streams) -> Source:
    """The (unopened) source ``cfg`` names, with its controls and ``streams``."""
    controls = Controls(cfg.hflip, cfg.vflip, cfg.af, cfg.lens_position, cfg.fps)
    return open_source(
        cfg.source,
        width=cfg.width,
        height=cfg.height,
        timeout=cfg.timeout,
        controls=controls,
        streams=streams,
    )
