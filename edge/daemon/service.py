"""``Daemon``: wires capture, inference and writing, and runs the main thread.

The main thread handles signals (SIGTERM/SIGINT: stop; SIGHUP: reload the config),
writes ``status.json`` and the sd_notify STATUS line, and pings systemd's watchdog
while every thread makes progress. A thread counts as stuck when its heartbeat is
older than ``daemon.stuck_after``; waiting out a camera backoff beats the heart, so
a daemon patiently waiting for its camera is never restarted, while a hung driver
call is.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from edge import config as config_mod
from edge.camera import Streams
from edge.daemon import status
from edge.daemon.capture import Capture, Mailbox
from edge.daemon.inference import Inference, Results
from edge.daemon.writer import Writer, iso
from edge.errors import CameraWedged, EdgeError, first_line
from edge.follow import refuse_unsafe
from edge.pipeline import Pipeline, PipelineSpec
from edge.store import FrameStore, Persistence, default_store_dir
from edge.systemd import Notifier

log = logging.getLogger("edge.daemon")
EXIT_THREAD_DIED = 70  # EX_SOFTWARE: under systemd, Restart=on-failure starts it again


def load_pipeline(model: config_mod.ModelConfig) -> Pipeline:
    """The daemon's pipeline for ``model``, its cores checked before any frame."""
    spec = PipelineSpec(
        model.dir or None,
        precision=model.precision,
        stages=model.stages,
        size=model.size or None,
        threads=model.threads or None,
        weight_cache=model.weight_cache or None,
        core_process=True,  # keeps the GIL free for capture and writing
        workers=model.workers,
    )
    pipeline = Pipeline.load(spec)
    try:
        # Refuse to start on a missing or tampered model, not at the first frame.
        for artifact in pipeline.artifacts:
            pipeline.manifest.verify(artifact)
    except BaseException:
        pipeline.close()  # its core processes and programs, not left to a failed reload
        raise
    log.info("stages: %s (%s)", pipeline.stages.name, pipeline.stages.reason)
    return pipeline


def camera_streams(config: config_mod.Config, pipeline: Pipeline) -> Streams:
    """What the pipeline needs of the camera: a picture scaled down to the input of the
    core it chooses for the camera's size (that core's long side) when the camera's is
    larger, and the full one too only when an output shows the picture itself ("rgb"
    in store.formats) at the camera's size (store.size = "camera"; at the core's, the
    small picture is as large as the outputs)."""
    cam = config.camera
    core = camera_core(config.camera, pipeline)
    long_side = max(core) if core else 0
    full = "rgb" in config.store.formats and config.store.size == "camera"
    return Streams.for_core(cam.width, cam.height, long_side, full=full)


def camera_core(cam: config_mod.CameraConfig, pipeline: Pipeline) -> tuple[int, int] | None:
    """The core shape the camera's picture runs at (None: no core for it, with
    --strict-shape: each frame says so)."""
    try:
        return pipeline.choose((cam.height, cam.width))[1]
    except EdgeError:
        return None


def make_store(store: config_mod.StoreConfig) -> FrameStore:
    return FrameStore(
        Path(store.dir) if store.dir else default_store_dir(),
        keep_frames=store.keep_frames,
        max_bytes=store.max_bytes,
        formats=store.formats,
        preview_max_side=store.preview_max_side,
        persist_dir=Path(store.persist_dir) if store.persist_dir else None,
        persist_every=store.persist_every,
        persist_keep=store.persist_keep,
    )


class Daemon:
    """The main thread's side: signals, reload, status and the watchdog.

    Owns, written by the main thread only: ``config``, ``store`` (the one status.json
    goes to; the writer gets each new one through ``Writer.reconfigure``), ``state``
    and the notifier. Each of ``capture``, ``inference`` and ``writer`` owns what its
    docstring says; ``heartbeats`` has one key per thread, written by that thread.
    """

    def __init__(
        self,
        config: config_mod.Config,
        notifier: Notifier | None = None,
        *,
        max_frames: int = 0,
        overrides: config_mod.Overrides | None = None,
        open_pipeline: Callable[[config_mod.ModelConfig], Pipeline] = load_pipeline,
    ) -> None:
        self.config = config
        self.overrides = overrides or config_mod.Overrides()
        self.notifier = notifier or Notifier.from_env()
        self.open_pipeline = open_pipeline
        self.state = "starting"
        self.stop_event = threading.Event()
        self._stop_signalled = self._reload_signalled = False  # set by the signal handler
        self.died: dict[str, str] = {}  # thread name -> why, set by the dying thread
        self.last_reload: dict[str, Any] | None = None
        self.heartbeats: dict[str, float] = {}
        self.mailbox = Mailbox()
        self.results = Results(maxsize=2)
        self.store = make_store(config.store)
        refuse_unsafe(self.store.root)  # before minutes of model loading, in one line
        pipeline = open_pipeline(config.model)
        self.streams = camera_streams(config, pipeline)
        self.capture = Capture(
            config.camera, self.mailbox, self.stop_event, self._beater("capture"),
            streams=self.streams,
        )  # fmt: skip
        self.inference = Inference(
            pipeline, self.mailbox, self.results, self.stop_event, self._beater("infer"),
            at_core=config.store.size == "core",
        )  # fmt: skip
        self.writer = Writer(
            self.store, config.camera.source, self.results, self.stop_event,
            self._beater("write"), max_frames=max_frames,
            dropped_stale=lambda: self.capture.counters.dropped_stale,
        )  # fmt: skip
        self.status_file = status.StatusFile()
        self._threads: list[threading.Thread] = []
        self._stuck_reported: set[str] = set()
        self._next_ping = self._next_status = 0.0  # the main loop's (_tick)
        self._written_states: tuple[object, ...] = ()

    def _beater(self, name: str) -> Callable[[], None]:
        def beat() -> None:
            self.heartbeats[name] = time.monotonic()

        return beat

    # -- status ---------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        return status.counters(
            self.capture, self.mailbox, self.inference, self.results, self.writer
        )

    def status_text(self) -> str:
        c, window = self.counters(), self.writer.window.summary()
        lat = window["latency_ms"]["p50"] or 0.0
        return (
            f"fps {window['fps']:.2f}, latency p50 {lat:.0f} ms, captured {c['captured']}, "
            f"written {c['written']}, dropped {c['dropped_stale'] + c['dropped_write']}, "
            f"failed {c['failed_inference']}, "
            f"frozen {c['frozen']}, reopens {c['reopens']}, "
            f"errors camera {c['camera_errors']} / write {c['failed_write']}, "
            f"camera {_said(self.capture.state)}, store {_said(self.writer.state)}"
        )

    def status_document(self) -> dict[str, Any]:
        pipeline, config = self.inference.pipeline, self.config
        cores = pipeline.artifacts
        camera_state, camera_reason = self.capture.state
        store_state, store_reason = self.writer.state
        return {
            "state": self.state,
            "config": {"path": config.path, "digest": status.config_digest(config)},
            "model": {
                "dir": str(pipeline.manifest.directory),
                "model": pipeline.manifest.model,
                "precision": pipeline.precision,
                "stages": pipeline.stages.name,
                "workers": pipeline.workers,
                "size": pipeline.size,
                "shape": camera_core(config.camera, pipeline),
                "shapes": [list(s) for s in pipeline.shapes],
                "weights": sorted({a.weights for a in cores}),
                "random_init": any(a.random_init for a in cores),
            },
            "camera": {
                "source": config.camera.source,
                "state": camera_state,
                "reason": camera_reason,
                "controls": self.capture.controls(),
            },
            "store": {
                "dir": str(self.store.root),
                "id": self.store.instance,
                "state": store_state,
                "reason": store_reason,
                "cap_bytes": self.store.cap,
            },
            "persist": _persist_status(self.store.persist),
            "counters": self.counters(),
            "window": self.writer.window.summary(),
            "reload": self.last_reload,
        }

    def _states(self) -> tuple[object, ...]:
        return (self.state, self.capture.state, self.writer.state)

    def write_status(self) -> None:
        self.status_file.write(self.store.root, self.status_document())

    # -- signals and reload ----------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Flags only: the handler runs on the main thread between any two bytecodes,
        # maybe while it holds an Event's lock, so taking one here could deadlock it.
        # The wakeup fd (see ``run``) ends the main loop's wait.
        if signum == signal.SIGHUP:
            self._reload_signalled = True
        else:
            self._stop_signalled = True

    def reload(self) -> None:
        """Re-read the config and apply what changed. A part that fails keeps what
        runs (the config, the model, the store), logged in one line and reported in
        status.json's ``reload``: a reload never ends the daemon."""
        self.state = "reloading"
        self.notifier.reloading()
        self.write_status()
        errors: list[str] = []
        new = self._reread(errors)
        old = self.config
        pipeline = self.inference.pipeline
        if new.model != old.model:
            try:
                candidate = self._meanwhile(lambda: self.open_pipeline(new.model))
            except Exception as exc:  # an unreadable folder is an OSError
                errors.append(f"model: {first_line(exc)}")
                log.error("reload: keeping the running model: %s", first_line(exc))
                new = replace(new, model=old.model)
            else:
                pipeline = candidate
                self.inference.offer(pipeline)  # adopted between frames
        if new.store != old.store:
            new = self._switch_store(new, old, errors)
        if new.store != old.store or new.camera.source != old.camera.source:
            self.writer.reconfigure(self.store, new.camera.source)
        streams = camera_streams(new, pipeline)
        if new.camera != old.camera or streams != self.streams:
            self.capture.reconfigure(new.camera, streams)
            self.streams = streams
        if new is not old and not errors:
            log.info("reload: config %s applied", self.config.path or "(defaults)")
        self.config = new
        self.last_reload = {
            "ok": not errors,
            "at": iso(time.time()),
            "error": "; ".join(errors) or None,
        }
        self.state = "running"
        self.write_status()
        self.notifier.ready(self.status_text())

    def _reread(self, errors: list[str]) -> config_mod.Config:
        """The config file again, with the flags over it; the running one if it fails."""
        path = self.config.path
        try:
            new = config_mod.load(path) if path else self.config
            return config_mod.with_overrides(new, self.overrides)
        except Exception as exc:  # whatever the file holds, keep running
            errors.append(f"config: {first_line(exc)}")
            log.error("reload: keeping the running config: %s", first_line(exc))
            return self.config

    def _switch_store(
        self, new: config_mod.Config, old: config_mod.Config, errors: list[str]
    ) -> config_mod.Config:
        """Write to ``new``'s store from the next frame, checked as at start; the old
        store's status.json says where the frames went. On refusal, keep the old."""
        try:
            store = make_store(new.store)
            if store.root != self.store.root:
                refuse_unsafe(store.root)
        except Exception as exc:  # an unsafe or unusable directory
            errors.append(f"store: {first_line(exc)}")
            log.error("reload: keeping the running store: %s", first_line(exc))
            return replace(new, store=old.store)
        if store.root != self.store.root:
            self.state = f"moved to {store.root}"
            self.write_status()
            self.state = "reloading"
        self.store = store
        self.inference.at_core = new.store.size == "core"  # from the next frame
        return new

    # -- running ---------------------------------------------------------------------
    def run(self) -> int:
        faulthandler.enable()
        wake_r, wake_w = socket.socketpair()
        for end in (wake_r, wake_w):
            end.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        previous = {
            sig: signal.signal(sig, self._on_signal)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            self.writer.prepare()
            status.StatusFile.sweep(self.store.root)
            for name, target in (
                ("capture", self.capture.run),
                ("infer", self.inference.run),
                ("write", self.writer.run),
            ):
                self.heartbeats[name] = time.monotonic()
                thread = threading.Thread(
                    target=self._guarded, args=(name, target), name=name, daemon=True
                )
                thread.start()
                self._threads.append(thread)
            self.state = "running"
            self.notifier.ready(self.status_text())
            log.info("running: store %s, source %s", self.store.root, self.config.camera.source)
            return self._main_loop(wake_r)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_fd)
            wake_r.close()
            wake_w.close()

    def _guarded(self, name: str, target: Callable[[], None]) -> None:
        """A thread's loop; an error none of its handling expected ends the daemon
        (a half-working daemon that no one restarts is worse than a restart)."""
        try:
            target()
        except BaseException as exc:
            if isinstance(exc, CameraWedged):  # expected, and said in one line
                log.critical("%s: exiting, so that a new process gets the camera back", exc)
            else:
                log.critical("thread %s died", name, exc_info=True)
            self.died.setdefault(name, first_line(exc))
            self.stop_event.set()

    def stuck_threads(self) -> list[str]:
        now = time.monotonic()
        limit = self.config.daemon.stuck_after
        return [n for n, t in self.heartbeats.items() if now - t > limit]

    def _main_loop(self, wake: socket.socket) -> int:
        while not self.stop_event.is_set():
            select.select([wake], [], [], 0.2)
            with contextlib.suppress(OSError):
                wake.recv(4096)  # the signals' wakeup bytes
            if self._stop_signalled:
                self.stop_event.set()
                break
            self._ended_early()
            if self._reload_signalled and not self.stop_event.is_set():
                self._reload_signalled = False
                self.reload()
            self._tick()
        return self._stop()

    def _tick(self) -> None:
        """The watchdog while every thread makes progress, STATUS and status.json when
        due or when a state changed."""
        now = time.monotonic()
        stuck = self.stuck_threads()
        for name in stuck:
            if name not in self._stuck_reported:
                log.error(
                    "thread %s made no progress for %.0f s: no more watchdog pings",
                    name, self.config.daemon.stuck_after,
                )  # fmt: skip
                self._stuck_reported.add(name)
        interval = self.notifier.watchdog_interval
        if interval is not None and not stuck and now >= self._next_ping:
            self.notifier.watchdog()
            self._next_ping = now + interval
        if now >= self._next_status:
            text = self.status_text() + (f", STUCK: {', '.join(stuck)}" if stuck else "")
            self.notifier.status(text)
            log.info("%s", text)
            self._next_status = now + self.config.daemon.status_every
            self._written_states = ()  # write the file now too
        if self._states() != self._written_states:
            self._written_states = self._states()
            self.write_status()

    def _meanwhile(self, work: Callable[[], Pipeline]) -> Pipeline:
        """``work`` (a model's load: minutes of hashing on an SD card) on a thread of its
        own while this one goes on ticking: the other threads keep writing frames with
        the running model, so the watchdog is still fed. A stop asked meanwhile
        abandons the load (the process is ending) with ReloadAbandoned."""
        box: list[Pipeline | BaseException] = []

        def run() -> None:
            try:
                box.append(work())
            except BaseException as exc:
                box.append(exc)

        loader = threading.Thread(target=run, name="reload", daemon=True)
        loader.start()
        while loader.is_alive():
            loader.join(0.2)
            if self._stop_signalled:
                raise ReloadAbandoned("a stop was asked while the model loaded")
            self._tick()
        (result,) = box
        if isinstance(result, BaseException):
            raise result
        return result

    def _ended_early(self) -> None:
        """A thread that returned while the daemon runs has died too (it owns a loop)."""
        for thread in self._threads:
            if not thread.is_alive() and not self.stop_event.is_set():
                self.died.setdefault(thread.name, "ended")
                log.critical("thread %s ended while the daemon runs", thread.name)
                self.stop_event.set()

    def _stop(self) -> int:
        self._ended_early()
        self.state = "stopping"
        self.notifier.stopping("stopping")
        log.info("stopping: %s", self.status_text())
        deadline = time.monotonic() + 3.0
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("threads still busy at exit: %s", ", ".join(alive))
        self.state = "stopped" if not alive else f"stopped with {', '.join(alive)} still busy"
        if self.died:
            name, why = next(iter(self.died.items()))
            self.state = f"failed: thread {name} died: {why}"
            self.notifier.status(self.state)
        self.write_status()
        if "infer" not in alive:  # a wedged inference may hold the model; exit anyway
            self.inference.close()
        return EXIT_THREAD_DIED if self.died else 0


class ReloadAbandoned(Exception):
    """A reload's model load left unfinished: the daemon is stopping."""


def _persist_status(persist: Persistence | None) -> dict[str, Any] | None:
    if persist is None:
        return None
    state, reason = persist.state
    return {
        "dir": str(persist.directory),
        "state": state,
        "reason": reason,
        "copied": persist.copied,
        "failed": persist.failed,
    }


def _said(state: tuple[str, str | None]) -> str:
    """A (state, reason) pair as the STATUS line says it: "ok", "reconnecting in 2.0 s
    (...)", "not writing: No space left on device"."""
    name, reason = state
    if not reason:
        return name
    return f"{name}{': ' if name == 'not writing' else ' '}{reason}"
