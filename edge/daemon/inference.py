"""The inference thread: mailbox -> pipeline -> results, keeping the cores busy.

While a core computes frame N (in its worker process), this thread preprocesses
frame N+1, and postprocesses N while the core runs N+1 (``Pipeline.prepare / submit
/ collect / finish``). With one worker (``model.workers``), frame N+1 is taken from
the mailbox only shortly before the core may finish N, so it is as fresh as the overlap
allows: once N has computed for the fastest of the core's recent runs less the slowest
of the recent preprocessings, so that a core run faster than usual (they vary by
several %) does not wait for its next image. When no frame comes by then, N is
finished alone.
With several, a new frame goes to an idle worker as soon as it comes; once all are
busy, the oldest frame in flight is handled as with one. Results leave in capture
order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from edge import thermal
from edge.camera import Frame
from edge.daemon.capture import Mailbox
from edge.depth import DepthFrame
from edge.errors import EdgeError
from edge.pipeline import Job, Pipeline

log = logging.getLogger("edge.daemon")
STAGES = ("preprocess", "core", "postprocess")
IDLE_CORE_S = 60.0  # a core unused this long is closed (Pipeline.close_idle)
SPACED_WAIT_S = 1.0  # the longest wait for the thermal spacing before a heartbeat
NOT_YET = -1  # _next_frame's worker while the spacing has nothing to be done yet


@dataclass(frozen=True)
class Result:
    """A finished frame on its way to the writer."""

    depth: DepthFrame
    frame: Frame
    workers: int


class Results:
    """Inference -> writer: at most ``maxsize`` results. ``put`` never blocks: when
    the writer is behind, the oldest waiting result makes room (and is counted)."""

    def __init__(self, maxsize: int = 2) -> None:
        self._queue: queue.Queue[Result] = queue.Queue(maxsize)

    def put(self, item: Result) -> int:
        """Queue ``item``; the number of older results dropped for it."""
        dropped = 0
        while True:
            try:
                self._queue.put_nowait(item)
                return dropped
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    dropped += 1
                except queue.Empty:
                    pass

    def get(self, timeout: float) -> Result | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    @property
    def holding(self) -> int:
        return self._queue.qsize()


@dataclass
class InferenceCounters:
    holding: int = 0  # frames taken from the mailbox, not yet handed on or failed
    dropped_write: int = 0  # results dropped because the writer fell behind
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    last_error: str | None = None

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())


@dataclass
class InFlight:
    """A frame submitted to a core: which worker's, and the earliest it may be back."""

    job: Job
    frame: Frame
    worker: int
    done_at: float


class Inference:
    """The inference thread (``run``).

    Owns, written by its thread only: ``pipeline`` (the one in use), ``pending`` (the
    frames in flight, oldest first), ``counters`` and the recent stage times. Set by the
    main thread, read between frames: ``at_core`` (store.size) and ``duty`` (the thermal
    controller's: core runs spaced so that frames come at that share of their unspaced
    rate). The
    main thread hands a reloaded pipeline over with ``offer`` (a locked slot); this
    thread adopts it between frames, after finishing what the old one is computing.
    ``close`` is for after the thread has ended.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        mailbox: Mailbox,
        results: Results,
        stop: threading.Event,
        beat: Callable[[], None],
        *,
        at_core: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.at_core = at_core  # the outputs at the core's resolution (store.size)
        self.mailbox = mailbox
        self.results = results
        self.stop = stop
        self.beat = beat
        self.counters = InferenceCounters()
        self.pending: deque[InFlight] = deque()
        self._core_s = Recent()  # the core's and preprocessing's times, for the wake
        self._prep_s = Recent()
        self._offered: Pipeline | None = None
        self._offer_lock = threading.Lock()
        self._last_log = 0.0
        self.idle_core_s = IDLE_CORE_S
        self._next_sweep = 0.0
        self.duty = 1.0  # the thermal controller's (set by the main thread): 1, no spacing
        self._last_submit = 0.0
        self._period = Recent()  # from one core run's start to the next's, unspaced
        self._unspaced_before = True  # the last submit was made at duty 1

    # -- the main thread's side ------------------------------------------------------
    def offer(self, pipeline: Pipeline) -> None:
        """Switch to ``pipeline`` between frames (one not yet adopted is closed)."""
        with self._offer_lock:
            unused, self._offered = self._offered, pipeline
        if unused is not None:
            unused.close()

    def close(self) -> None:
        """Close the pipelines (once ``run`` has returned)."""
        self.pipeline.close()
        with self._offer_lock:
            unused, self._offered = self._offered, None
        if unused is not None:
            unused.close()

    # -- the thread ------------------------------------------------------------------
    def run(self) -> None:
        while not self.stop.is_set():
            self.beat()
            if self._offered is not None:
                self._adopt()
            frame, worker = self._next_frame()
            self.beat()
            if worker == NOT_YET:
                self._sweep()
                continue
            job = self._prepare(frame, worker) if frame is not None else None
            # The oldest frame is due (no new one came in time), or its core is needed.
            oldest = self.pending[0] if self.pending else None
            done: InFlight | None = None
            if oldest is not None and (job is None or worker == oldest.worker):
                self.pending.popleft()
                done = oldest if self._collect(oldest) else None
                if done is not None:  # before the submit below sets its wake by it
                    self._core_s.add(done.job.timings["core"] / 1000)
            if job is not None and frame is not None:
                self._submit(job, frame, worker)
            if done is not None:
                self._finish(done)
            self._sweep()

    def _sweep(self) -> None:
        """Close the cores no frame has used for ``idle_core_s`` (a camera that changed
        its aspect ratio), every so often."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(self.idle_core_s / 2, 10.0)
        keep = [item.job.core for item in self.pending]
        unused_s = max(self.idle_core_s, 2 * self.spacing())  # spaced frames still use it
        closed = self.pipeline.close_idle(unused_s, keep=keep)
        if closed:
            log.info("closed the core(s) for %s: unused for %.0f s", ", ".join(closed), unused_s)

    def _next_frame(self) -> tuple[Frame | None, int]:
        """Wait for a frame as the policy says; it and the worker it is for. While the
        thermal spacing says not yet: (None, NOT_YET) after a wait of at most
        SPACED_WAIT_S (the thread beats meanwhile), or (None, the oldest frame's
        worker) when that frame's core is done first, for it to be finished."""
        busy = {item.worker for item in self.pending}
        idle = [w for w in range(self.pipeline.workers) if w not in busy]
        # The earliest time to take the next frame, for its core run to start no sooner
        # than the spacing after the last one's (the past when there is no spacing).
        due = self._last_submit + self.spacing() - self._prep_s.high()
        now = time.monotonic()
        oldest = self.pending[0] if self.pending else None
        if due > now and (oldest is None or idle or due > oldest.done_at):
            done_at = oldest.done_at if oldest is not None else due
            self.stop.wait(min(max(0.0, min(due, done_at) - now), SPACED_WAIT_S))
            now = time.monotonic()
            if now < due:  # still spaced: finish the oldest frame if its core is done
                if oldest is not None and (now >= oldest.done_at or not idle):
                    return None, oldest.worker
                return None, NOT_YET
        if oldest is None:
            frame = self.mailbox.take(0.25)
        else:
            if not idle:
                wake = max(oldest.done_at - self._prep_s.high(), due)
                if wake > time.monotonic():
                    self.stop.wait(wake - time.monotonic())
            frame = self.mailbox.take(max(0.0, oldest.done_at - time.monotonic()))
        if frame is not None:
            self.counters.holding += 1
        return frame, idle[0] if idle else self.pending[0].worker

    def _prepare(self, frame: Frame, worker: int) -> Job | None:
        t0 = time.monotonic()
        try:
            return self.pipeline.prepare(
                frame.rgb,
                name=f"frame-{frame.seq}",
                worker=worker,
                keep_rgb=True,
                size=frame.camera_size,
            )
        except EdgeError as exc:
            self._failed("preprocess", frame, exc)
            return None
        finally:
            self._prep_s.add(time.monotonic() - t0)

    def spacing(self) -> float:
        """The thermal controller's least time between two core runs' starts (0: none):
        the daemon's own recent period over the duty, so that the frame rate, and the
        CPU's work with it, is that share of what it was unspaced (before any period is
        known, the core's time shared among the workers)."""
        if self.duty >= 1.0:
            return 0.0
        # The mean: with several workers runs start in bursts (two at once, then a wait)
        period = self._period.mean() or self._core_s.low() / max(1, self.pipeline.workers)
        return thermal.interval(self.duty, period)

    def _submit(self, job: Job, frame: Frame, worker: int) -> None:
        try:
            self.pipeline.submit(job)
        except EdgeError as exc:
            self._failed("core", frame, exc)
            return
        now = time.monotonic()
        unspaced = self.duty >= 1.0
        if unspaced and self._unspaced_before and self._last_submit:  # the pace, unspaced
            self._period.add(now - self._last_submit)
        self._last_submit, self._unspaced_before = now, unspaced
        self.pending.append(InFlight(job, frame, worker, time.monotonic() + self._core_s.low()))

    def _collect(self, item: InFlight, pipeline: Pipeline | None = None) -> bool:
        try:
            (pipeline or self.pipeline).collect(item.job)
            return True
        except EdgeError as exc:
            self._failed("core", item.frame, exc)
            return False

    def _finish(self, item: InFlight, pipeline: Pipeline | None = None) -> None:
        """Postprocess a collected frame and hand it to the writer."""
        used = pipeline or self.pipeline
        try:
            depth = used.finish(item.job, at_core=self.at_core)
        except EdgeError as exc:
            self._failed("postprocess", item.frame, exc)
            return
        depth.rgb = item.frame.scene  # the full picture for the "rgb" output, when made
        self.counters.dropped_write += self.results.put(Result(depth, item.frame, used.workers))
        self.counters.holding -= 1

    def _failed(self, stage: str, frame: Frame, exc: EdgeError) -> None:
        counters = self.counters
        counters.holding -= 1
        counters.failed[stage] += 1
        counters.last_error = f"{stage}: {exc}"
        now = time.monotonic()
        if now - self._last_log > 10 or counters.failed_total <= 3:
            log.error(
                "inference failed on frame %d (%s; %d failed so far): %s",
                frame.seq,
                stage,
                counters.failed_total,
                exc,
            )
            self._last_log = now

    def _adopt(self) -> None:
        """Switch to the offered pipeline, after finishing the frames the old one is
        computing (they keep their capture order)."""
        with self._offer_lock:
            new, self._offered = self._offered, None
        if new is None:
            return
        old = self.pipeline
        while self.pending:
            item = self.pending.popleft()
            if self._collect(item, old):
                self._finish(item, old)
        old.close()
        self.pipeline = new
        # Another size or precision runs at another pace: the old times would wake early.
        self._core_s, self._prep_s, self._period = Recent(), Recent(), Recent()


class Recent:
    """The last ``n`` samples of a time: their fastest and slowest (0 before any)."""

    def __init__(self, n: int = 8) -> None:
        self._samples: deque[float] = deque(maxlen=n)

    def add(self, seconds: float) -> None:
        self._samples.append(seconds)

    def low(self) -> float:
        return min(self._samples, default=0.0)

    def high(self) -> float:
        return max(self._samples, default=0.0)

    def mean(self) -> float:
        return sum(self._samples) / len(self._samples) if self._samples else 0.0
