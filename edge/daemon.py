"""The camera daemon: capture -> infer -> write, continuously, surviving faults.

Three worker threads and the main thread:

- **capture** opens the camera (capped exponential backoff on failure), reads frames
  and puts the newest into a one-slot mailbox; an unconsumed frame that gets replaced
  is counted as dropped (the newest frame wins; nothing queues without bound). A
  frame repeating the previous one's sensor timestamp is not new; no new frame for
  ``camera.stall_after`` seconds means a frozen camera, which is reopened.
- **infer** takes the newest frame and runs the Pipeline, keeping the core busy:
  the next frame is preprocessed while the core computes this one (``infer_loop``).
- **write** publishes results to the FrameStore (a two-slot queue from infer; when the
  store is slower, the oldest waiting result is dropped and counted). Disk full or a
  read-only store: the frame is skipped, counted and reported, and writing resumes
  when it works again.
- **main** handles signals (SIGTERM/SIGINT: stop; SIGHUP: reload the config), sends
  STATUS, and pings systemd's watchdog while every thread makes progress. A thread
  counts as stuck when its heartbeat is older than ``daemon.stuck_after``; waiting
  out a camera backoff beats the heart, so a daemon patiently waiting for its camera
  is never restarted, while a hung driver call is.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import queue
import signal
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from edge import config as config_mod
from edge.camera import CameraError, Frame, Source, open_source
from edge.errors import ConfigError, EdgeError
from edge.pipeline import DepthFrame, Job, Pipeline
from edge.store import FrameStore, default_store_dir
from edge.systemd import Notifier

log = logging.getLogger("edge.daemon")


@dataclass
class Stats:
    captured: int = 0
    written: int = 0
    dropped_stale: int = 0  # frames replaced in the mailbox before inference took them
    dropped_write: int = 0  # results dropped because the store fell behind
    frozen: int = 0  # reads that returned the previous frame again
    camera_errors: int = 0
    write_errors: int = 0
    reopens: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=50))
    written_at: deque[float] = field(default_factory=lambda: deque(maxlen=50))


@dataclass
class _InFlight:
    """A frame submitted to a core: which worker's, and when it is expected back."""

    job: Job
    frame: Frame
    worker: int
    done_at: float


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


class Daemon:
    def __init__(
        self,
        config: config_mod.Config,
        notifier: Notifier | None = None,
        *,
        max_frames: int = 0,
        flag_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.flag_overrides = flag_overrides or {}
        self.notifier = notifier or Notifier.from_env()
        self.max_frames = max_frames
        self.stats = Stats()
        self.stop_event = threading.Event()
        self.reload_requested = threading.Event()
        self.mailbox = Mailbox()
        self.results: queue.Queue[tuple[DepthFrame, Frame]] = queue.Queue(maxsize=2)
        self.heartbeats: dict[str, float] = {}
        self.camera_state = "starting"
        self.store_state = "starting"
        self._camera_generation = 0  # bumped on reload when the camera config changes
        self.pipeline = self._load_pipeline(config)
        self._next_pipeline: Pipeline | None = None  # loaded by a reload, not yet in use
        self._swap_lock = threading.Lock()
        self.store = self._make_store(config)
        self._threads: list[threading.Thread] = []
        self._stuck_reported: set[str] = set()

    # -- construction -------------------------------------------------------------
    @staticmethod
    def _load_pipeline(config: config_mod.Config) -> Pipeline:
        m = config.model
        pipeline = Pipeline.load(
            m.dir or None,
            precision=m.precision,
            stages=m.stages,
            threads=m.threads or None,
            weight_cache=m.weight_cache or None,
            core_process=True,  # keeps the GIL free for capture and writing
            workers=m.workers,
        )
        # Refuse to start on a missing or tampered model, not at the first frame.
        for artifact in pipeline.manifest.cores():
            if artifact.precision == m.precision:
                pipeline.manifest.verify(artifact)
        return pipeline

    @staticmethod
    def _make_store(config: config_mod.Config) -> FrameStore:
        s = config.store
        return FrameStore(
            Path(s.dir) if s.dir else default_store_dir(),
            keep_frames=s.keep_frames,
            max_bytes=s.max_bytes,
            formats=s.formats,
            preview_max_side=s.preview_max_side,
            persist_dir=Path(s.persist_dir) if s.persist_dir else None,
            persist_every=s.persist_every,
            persist_keep=s.persist_keep,
        )

    def beat(self, name: str) -> None:
        self.heartbeats[name] = time.monotonic()

    # -- capture --------------------------------------------------------------------
    def _sleep(self, seconds: float, name: str) -> bool:
        """Sleep in slices, beating; False if asked to stop."""
        end = time.monotonic() + seconds
        while not self.stop_event.is_set():
            self.beat(name)
            left = end - time.monotonic()
            if left <= 0:
                return True
            self.stop_event.wait(min(left, 0.25))
        return False

    def capture_loop(self) -> None:
        backoff = self.config.camera.backoff_min
        attempt = 0
        source: Source | None = None
        generation = -1
        while not self.stop_event.is_set():
            self.beat("capture")
            cam_cfg = self.config.camera
            if source is None or generation != self._camera_generation:
                # One source object per configuration: it is closed and reopened on
                # faults (a fresh driver session each time), replaced on reload.
                generation = self._camera_generation
                source = open_source(
                    cam_cfg.source,
                    width=cam_cfg.width,
                    height=cam_cfg.height,
                    timeout=cam_cfg.timeout,
                )
            try:
                self.camera_state = f"opening {source.name}" + (
                    f" (attempt {attempt + 1})" if attempt else ""
                )
                source.open()
            except CameraError as exc:
                attempt += 1
                self.stats.camera_errors += 1
                self.camera_state = f"reconnecting in {backoff:.1f} s (attempt {attempt}: {exc})"
                log.warning("camera: %s; retrying in %.1f s", exc, backoff)
                if not self._sleep(backoff, "capture"):
                    return
                backoff = min(backoff * 2, cam_cfg.backoff_max)
                continue
            if attempt:
                self.stats.reopens += 1
            log.info("camera: %s open", source.name)
            self.camera_state = "ok"
            try:
                reason, delivered = self._read_until_fault(source, generation)
            finally:
                source.close()
            if reason is None:
                return  # stopping
            if reason == "reload" or delivered >= 3:
                # A camera that worked for a while starts the backoff afresh.
                backoff, attempt = self.config.camera.backoff_min, 0
            if reason == "reload":
                continue
            attempt += 1
            self.camera_state = f"reconnecting in {backoff:.1f} s ({reason})"
            log.warning("camera: %s; reopening in %.1f s", reason, backoff)
            if not self._sleep(backoff, "capture"):
                return
            backoff = min(backoff * 2, self.config.camera.backoff_max)

    def _read_until_fault(self, source: Source, generation: int) -> tuple[str | None, int]:
        """Read until stop (None), reload ("reload"), an error or a stall (a reason);
        also return how many new frames came since the open."""
        cam_cfg = self.config.camera
        last_ts: float | None = None
        last_new = time.monotonic()
        delivered = 0
        while not self.stop_event.is_set():
            self.beat("capture")
            if generation != self._camera_generation:
                return "reload", delivered
            try:
                frame = source.read(cam_cfg.timeout)
            except CameraError as exc:
                self.stats.camera_errors += 1
                return f"error: {exc}", delivered
            self.beat("capture")
            ts = frame.sensor_ts
            if ts is not None and ts == last_ts:
                self.stats.frozen += 1
                if time.monotonic() - last_new > cam_cfg.stall_after:
                    return f"stalled: no new frame for {cam_cfg.stall_after:g} s", delivered
                continue
            last_ts = ts
            last_new = time.monotonic()
            delivered += 1
            self.stats.captured += 1
            if self.mailbox.put(frame):
                self.stats.dropped_stale += 1
            self.camera_state = "ok"
        return None, delivered

    # -- inference ------------------------------------------------------------------
    def infer_loop(self) -> None:
        """Keep the cores busy: while a core computes frame N (in its worker process),
        this thread preprocesses frame N+1, and postprocesses N while the core runs N+1.

        With one worker (``model.workers``), frame N+1 is taken from the mailbox only
        shortly before the core is expected to finish N (the core's and preprocessing's
        recent times say when), so it is as fresh as the overlap allows; when no frame
        comes by then, N is finished alone. With several, a new frame goes to an idle
        worker as soon as it comes; once all are busy, the oldest frame in flight is
        handled as with one.
        """
        pending: deque[_InFlight] = deque()  # oldest first
        core_s = prep_s = 0.0  # recent times, for the expectations
        while not self.stop_event.is_set():
            self.beat("infer")
            if self._next_pipeline is not None and self._adopt_next_pipeline(pending):
                pending.clear()
            pipeline = self.pipeline
            busy = {item.worker for item in pending}
            idle = [w for w in range(pipeline.workers) if w not in busy]
            oldest = pending[0] if pending else None
            if oldest is None:
                frame = self.mailbox.take(0.25)
            else:
                if not idle:
                    wake = oldest.done_at - prep_s
                    if wake > time.monotonic():
                        self.stop_event.wait(wake - time.monotonic())
                frame = self.mailbox.take(max(0.0, oldest.done_at - time.monotonic()))
            self.beat("infer")
            worker = idle[0] if idle else pending[0].worker  # none idle: one is in flight
            job: Job | None = None
            if frame is not None:
                t0 = time.monotonic()
                try:
                    job = pipeline.prepare(frame.rgb, name=f"frame-{frame.seq}", worker=worker)
                except EdgeError as exc:
                    log.error("inference failed on frame %d: %s", frame.seq, exc)
                prep_s = _ema(prep_s, time.monotonic() - t0)
            # The oldest frame is due (no new one came in time), or its core is needed.
            done: _InFlight | None = None
            if oldest is not None and (job is None or not idle):
                pending.popleft()
                if self._collect(pipeline, oldest):
                    done = oldest
            if job is not None and frame is not None:
                try:
                    pipeline.submit(job)
                    pending.append(_InFlight(job, frame, worker, time.monotonic() + core_s))
                except EdgeError as exc:
                    log.error("inference failed on frame %d: %s", frame.seq, exc)
            if done is not None:
                self._finish(pipeline, done)
                core_s = _ema(core_s, done.job.timings["core"] / 1000)

    def _collect(self, pipeline: Pipeline, item: _InFlight) -> bool:
        try:
            pipeline.collect(item.job)
            return True
        except EdgeError as exc:
            log.error("inference failed on frame %d: %s", item.frame.seq, exc)
            return False

    def _finish(self, pipeline: Pipeline, item: _InFlight) -> None:
        """Postprocess a collected frame and hand it to the writer."""
        job, frame = item.job, item.frame
        try:
            result = pipeline.finish(job)
        except EdgeError as exc:
            log.error("inference failed on frame %d: %s", frame.seq, exc)
            return
        while True:
            try:
                self.results.put_nowait((result, frame))
                break
            except queue.Full:
                try:
                    self.results.get_nowait()
                    self.stats.dropped_write += 1
                except queue.Empty:
                    pass

    def _adopt_next_pipeline(self, pending: deque[_InFlight]) -> bool:
        """Switch to the pipeline a reload loaded, after finishing the frames the old
        one is computing; True when switched (``pending`` is done with)."""
        with self._swap_lock:
            new, self._next_pipeline = self._next_pipeline, None
        if new is None:
            return False
        for item in pending:
            if self._collect(self.pipeline, item):
                self._finish(self.pipeline, item)
        self.pipeline.close()
        self.pipeline = new
        return True

    # -- writing --------------------------------------------------------------------
    def write_loop(self) -> None:
        last_error_log = 0.0
        while not self.stop_event.is_set():
            self.beat("write")
            try:
                result, frame = self.results.get(timeout=0.25)
            except queue.Empty:
                continue
            self.beat("write")
            t_written_wall = time.time()
            latency_ms = (time.monotonic() - frame.t_mono) * 1000
            record = {
                "camera_seq": frame.seq,
                "t_capture": frame.t_capture,
                "t_capture_iso": _iso(frame.t_capture),
                "t_written": t_written_wall,
                "t_written_iso": _iso(t_written_wall),
                "latency_ms": round(latency_ms, 3),
                "source": self.config.camera.source,
                "workers": self.pipeline.workers,
                "dropped_stale_total": self.stats.dropped_stale,
            }
            try:
                path = self.store.write(result, record)
                self.store.maybe_persist(path)
            except OSError as exc:
                self.stats.write_errors += 1
                self.store.ready = False  # re-prepare next time: the mount may come back
                self.store_state = f"not writing: {exc.strerror or exc}"
                now = time.monotonic()
                if now - last_error_log > 10:
                    log.error(
                        "store: cannot write %s (%s); skipping frames until it can",
                        self.store.root,
                        exc.strerror or exc,
                    )
                    last_error_log = now
                continue
            if self.store_state != "ok":
                log.info("store: writing to %s", self.store.root)
            self.store_state = "ok"
            self.stats.written += 1
            self.stats.latencies_ms.append(latency_ms)
            self.stats.written_at.append(time.monotonic())
            if self.max_frames and self.stats.written >= self.max_frames:
                self.stop_event.set()

    # -- main thread ----------------------------------------------------------------
    def status_text(self) -> str:
        s = self.stats
        times = list(s.written_at)
        fps = (
            (len(times) - 1) / (times[-1] - times[0])
            if len(times) >= 2 and times[-1] > times[0]
            else 0.0
        )
        lat = statistics.median(s.latencies_ms) if s.latencies_ms else 0.0
        return (
            f"fps {fps:.2f}, latency p50 {lat:.0f} ms, captured {s.captured}, "
            f"written {s.written}, dropped {s.dropped_stale + s.dropped_write}, "
            f"frozen {s.frozen}, reopens {s.reopens}, "
            f"errors camera {s.camera_errors} / write {s.write_errors}, "
            f"camera {self.camera_state}, store {self.store_state}"
        )

    def stuck_threads(self) -> list[str]:
        now = time.monotonic()
        limit = self.config.daemon.stuck_after
        return [n for n, t in self.heartbeats.items() if now - t > limit]

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self.reload_requested.set()
        else:
            self.stop_event.set()

    def reload(self) -> None:
        path = self.config.path
        self.notifier.reloading()
        try:
            new = config_mod.load(path) if path else self.config
            new = config_mod.with_overrides(new, **self.flag_overrides)
        except ConfigError as exc:
            log.error("reload: keeping the running config: %s", exc)
            self.notifier.ready(self.status_text())
            return
        old = self.config
        if new.model != old.model:
            try:
                pipeline = self._load_pipeline(new)
            except EdgeError as exc:
                log.error("reload: keeping the running model: %s", exc)
                new = config_mod.Config(new.camera, old.model, new.store, new.daemon, new.path)
            else:
                # The infer thread switches over between frames (_adopt_next_pipeline).
                with self._swap_lock:
                    unused, self._next_pipeline = self._next_pipeline, pipeline
                if unused is not None:
                    unused.close()
        if new.store != old.store:
            self.store = self._make_store(new)
            self.store_state = "starting"
        self.config = new
        if new.camera != old.camera:
            self._camera_generation += 1
        log.info("reload: config %s applied", path or "(defaults)")
        self.notifier.ready(self.status_text())

    def run(self) -> int:
        faulthandler.enable()
        previous = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            try:
                self.store.prepare()
                self.store_state = "ok"
            except OSError as exc:
                self.store_state = f"not writing: {exc.strerror or exc}"
                log.error(
                    "store: %s unusable (%s); will retry", self.store.root, exc.strerror or exc
                )
            for name, target in (
                ("capture", self.capture_loop),
                ("infer", self.infer_loop),
                ("write", self.write_loop),
            ):
                self.beat(name)
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)
            self.notifier.ready(self.status_text())
            log.info("running: store %s, source %s", self.store.root, self.config.camera.source)
            return self._main_loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _main_loop(self) -> int:
        interval = self.notifier.watchdog_interval
        next_status = 0.0
        next_ping = 0.0
        while not self.stop_event.is_set():
            self.stop_event.wait(0.2)
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self.reload()
            now = time.monotonic()
            stuck = self.stuck_threads()
            for name in stuck:
                if name not in self._stuck_reported:
                    log.error(
                        "thread %s made no progress for %.0f s: no more watchdog pings",
                        name,
                        self.config.daemon.stuck_after,
                    )
                    self._stuck_reported.add(name)
            if interval is not None and not stuck and now >= next_ping:
                self.notifier.watchdog()
                next_ping = now + interval
            if now >= next_status:
                text = self.status_text() + (f", STUCK: {', '.join(stuck)}" if stuck else "")
                self.notifier.status(text)
                log.info("%s", text)
                next_status = now + self.config.daemon.status_every
        self.notifier.stopping("stopping")
        log.info("stopping: %s", self.status_text())
        deadline = time.monotonic() + 3.0
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("threads still busy at exit: %s", ", ".join(alive))
        if "infer" not in alive:  # a wedged inference may hold the model; exit anyway
            self.pipeline.close()
            if self._next_pipeline is not None:
                self._next_pipeline.close()
        return 0


def _ema(previous: float, sample: float, weight: float = 0.25) -> float:
    return sample if previous == 0.0 else previous + weight * (sample - previous)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"


def setup_logging() -> None:
    level = logging.DEBUG if os.environ.get("DEBUG") == "1" else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
