"""The writer thread: results -> the frame store.

Each result becomes one frame directory with its record (capture and write times,
latency, provenance). Disk full or a read-only store: the frame is skipped, counted
and reported, and writing resumes when it works again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edge.daemon.inference import Result, Results
from edge.stats import nearest_rank
from edge.steady import Steady
from edge.store.ring import FrameStore

log = logging.getLogger("edge.daemon")


@dataclass
class WriterCounters:
    written: int = 0
    failed: int = 0  # results the store could not take (disk full, read-only, ...)
    holding: int = 0  # 1 while a result is being written


class Window:
    """Recent writes (monotonic time, latency ms): frames/s and latency percentiles
    over the last ``seconds``. Appended by the writer, read by the main thread."""

    def __init__(self, seconds: float = 30.0, most: int = 512) -> None:
        self.seconds = seconds
        self._items: deque[tuple[float, float]] = deque(maxlen=most)
        self._lock = threading.Lock()

    def add(self, t: float, latency_ms: float) -> None:
        with self._lock:
            self._items.append((t, latency_ms))

    def summary(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        with self._lock:
            items = [item for item in self._items if now - item[0] <= self.seconds]
        fps = 0.0
        if len(items) >= 2 and items[-1][0] > items[0][0]:
            fps = (len(items) - 1) / (items[-1][0] - items[0][0])
        latencies = [latency for _, latency in items]
        return {
            "seconds": self.seconds,
            "frames": len(items),
            "fps": round(fps, 3),
            "latency_ms": {
                f"p{q}": round(nearest_rank(latencies, q), 1) if latencies else None
                for q in (50, 90, 99)
            },
        }


class Writer:
    """The writer thread (``run``).

    Owns, written by its thread only: the store in use, ``counters``, ``window``,
    ``state`` (``(state, reason)``: "starting", "ok", "not writing") and ``steady`` (the
    alignment of the frames' depth, ``edge.steady``, or None when depth.steady is off).
    The main thread hands a reloaded store, the camera SPEC recorded in each frame and
    depth.steady over with ``reconfigure``, through ``_wanted`` (written by the main
    thread only); a new one starts the alignment again.
    """

    def __init__(
        self,
        store: FrameStore,
        source: str,
        results: Results,
        stop: threading.Event,
        beat: Callable[[], None],
        *,
        dropped_stale: Callable[[], int],
        max_frames: int = 0,
        steady: bool = False,
    ) -> None:
        self.store = store
        self.source = source
        self.results = results
        self.stop = stop
        self.beat = beat
        self.dropped_stale = dropped_stale
        self.max_frames = max_frames
        self.counters = WriterCounters()
        self.window = Window()
        self.state: tuple[str, str | None] = ("starting", None)
        self._wanted: tuple[FrameStore, str, bool] = (store, source, steady)
        self.steady = Steady() if steady else None
        self._last_error_log = 0.0

    def reconfigure(self, store: FrameStore, source: str, steady: bool) -> None:
        """Main thread: write to ``store`` (recording ``source``; aligning the frames'
        depth when ``steady``) from the next frame."""
        self._wanted = (store, source, steady)

    def prepare(self) -> None:
        """Get the store ready before the thread starts (retried at each write)."""
        try:
            self.store.prepare()
            self.state = ("ok", None)
        except OSError as exc:
            self.state = ("not writing", str(exc.strerror or exc))
            log.error("store: %s unusable (%s); will retry", self.store.root, exc.strerror or exc)

    def run(self) -> None:
        while not self.stop.is_set():
            self.beat()
            item = self.results.get(timeout=0.25)
            if item is None:
                continue
            self.beat()
            self.counters.holding = 1
            self._adopt()
            try:
                self._write(item)
            finally:
                self.counters.holding = 0
            if self.max_frames and self.counters.written >= self.max_frames:
                self.stop.set()

    def _adopt(self) -> None:
        """What the main thread handed over, between frames."""
        store, source, steady = self._wanted
        if store is not self.store:
            self.state = ("starting", None)
            if self.store.persist is not None and self.store.persist is not store.persist:
                self.store.persist.close()
        if (store, source, steady) != (self.store, self.source, self.steady is not None):
            self.steady = Steady() if steady else None  # another scene: align afresh
        self.store, self.source = store, source

    def _write(self, item: Result) -> None:
        frame = item.frame
        t_written_wall = time.time()
        # The record cannot hold its own write's end: it says capture to the write's
        # start; the window below takes capture to published.
        latency_ms = (time.monotonic() - frame.t_mono) * 1000
        record = {
            "camera_seq": frame.seq,
            "t_capture": frame.t_capture,
            "t_capture_iso": iso(frame.t_capture),
            "t_written": t_written_wall,
            "t_written_iso": iso(t_written_wall),
            "latency_ms": round(latency_ms, 3),
            "source": self.source,
            "workers": item.workers,
            "dropped_stale_total": self.dropped_stale(),
        }
        item.depth.fov = frame.fov  # the record says where it came from, or why none
        aligned = None
        if self.steady is not None:
            t0 = time.perf_counter()
            aligned = self.steady.step(item.depth.depth, item.depth.conf)
            record["steady"] = {
                **aligned.record(),
                "ms": round((time.perf_counter() - t0) * 1e3, 3),
            }
        store = self.store
        try:
            path = store.write(item.depth, record, aligned)
        except OSError as exc:
            self.counters.failed += 1
            store.ready = False  # re-prepare next time: the mount may come back
            self.state = ("not writing", str(exc.strerror or exc))
            now = time.monotonic()
            if now - self._last_error_log > 10:
                log.error(
                    "store: cannot write %s (%s); skipping frames until it can",
                    store.root,
                    exc.strerror or exc,
                )
                self._last_error_log = now
            return
        if self.state[0] != "ok":
            log.info("store: writing to %s", store.root)
        self.state = ("ok", None)
        self.counters.written += 1
        now = time.monotonic()
        self.window.add(now, (now - frame.t_mono) * 1000)
        if store.persist is not None:
            store.persist.offer(path)  # copied in its own thread; its failures its own


def iso(t: float) -> str:
    """Wall-clock seconds as ISO 8601 UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"
