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
from types import FrameType
from typing import Any

from edge import config as config_mod
from edge import thermal
from edge.daemon import reload, status
from edge.daemon.capture import Capture, Mailbox
from edge.daemon.inference import Inference, Results
from edge.daemon.parts import camera_streams, load_pipeline, make_store
from edge.daemon.writer import Writer
from edge.errors import CameraWedged, first_line
from edge.pipeline import Pipeline
from edge.store.trust import refuse_unsafe
from edge.systemd import Notifier

log = logging.getLogger("edge.daemon")
EXIT_THREAD_DIED = 70  # EX_SOFTWARE: under systemd, Restart=on-failure starts it again


def _hold(signum: int, handler: Any) -> Any:
    """``signum`` to ``handler`` (None: left as it is), on the main thread only (Python's
    rule); the handler it had."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signum, handler)


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
        self.overrides = overrides or {}
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
        # A SIGHUP while the model loads (minutes on a Pi) is a reload once running, not
        # the end of the daemon (the signal's default action); run() takes it from here.
        self._hup_before = _hold(signal.SIGHUP, self._on_signal)
        try:
            pipeline = open_pipeline(config.model)
        except BaseException:
            _hold(signal.SIGHUP, self._hup_before)
            raise
        self.streams = camera_streams(config, pipeline)
        mailbox, results, stop = self.mailbox, self.results, self.stop_event
        self.capture = Capture(
            config.camera, mailbox, stop, self._beater("capture"), streams=self.streams
        )
        at_core = config.store.size == "core"
        self.inference = Inference(
            pipeline, mailbox, results, stop, self._beater("infer"), at_core=at_core
        )
        self.writer = Writer(
            self.store,
            config.camera.source,
            results,
            stop,
            self._beater("write"),
            max_frames=max_frames,
            dropped_stale=lambda: self.capture.counters.dropped_stale,
            steady=config.depth.steady,
        )
        self.status_file = status.StatusFile()
        self._threads: list[threading.Thread] = []
        self._stuck_reported: set[str] = set()
        self._next_ping = self._next_status = 0.0  # the main loop's (_tick)
        self._written_states: tuple[object, ...] = ()
        self.cooling = thermal.Cooling(thermal.sensor_path())

    def _beater(self, name: str) -> Callable[[], None]:
        def beat() -> None:
            self.heartbeats[name] = time.monotonic()

        return beat

    # -- status ---------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        return status.counters(
            self.capture, self.mailbox, self.inference, self.results, self.writer
        )

    def _states(self) -> tuple[object, ...]:
        return (self.state, self.capture.state, self.writer.state, self.cooling.spaced)

    def thermal_record(self) -> dict[str, Any]:
        return self.cooling.record(self.config.daemon.thermal_target, self.inference.spacing())

    def write_status(self) -> None:
        self.status_file.write(self.store.root, status.document(self))

    # -- signals and reload ----------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Flags only: the handler runs on the main thread between any two bytecodes,
        # maybe while it holds an Event's lock, so taking one here could deadlock it.
        # The wakeup fd (see ``run``) ends the main loop's wait.
        if signum == signal.SIGHUP:
            self._reload_signalled = True
        else:
            self._stop_signalled = True

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
            self.notifier.ready(status.text(self))
            log.info("running: store %s, source %s", self.store.root, self.config.camera.source)
            return self._main_loop(wake_r)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            _hold(signal.SIGHUP, self._hup_before)
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
                reload.reload(self)
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
                    name,
                    self.config.daemon.stuck_after,
                )
                self._stuck_reported.add(name)
        duty = self.cooling.step(now, self.config.daemon.thermal_target)
        if duty is not None:
            self.inference.duty = duty
        interval = self.notifier.watchdog_interval
        if interval is not None and not stuck and now >= self._next_ping:
            self.notifier.watchdog()
            self._next_ping = now + interval
        if now >= self._next_status:
            text = status.text(self) + (f", STUCK: {', '.join(stuck)}" if stuck else "")
            self.notifier.status(text)
            log.info("%s", text)
            self._next_status = now + self.config.daemon.status_every
            self._written_states = ()  # write the file now too
        if self._states() != self._written_states:
            self._written_states = self._states()
            self.write_status()

    def meanwhile(self, work: Callable[[], Pipeline]) -> Pipeline:
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
        log.info("stopping: %s", status.text(self))
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
