"""``status.json``: the daemon's state, for people and programs (docs/reference/store.md).

Written by the main thread only, into the store root, atomically (a reader sees the
old file or the new one), every ``daemon.status_every`` seconds and whenever the
daemon's, the camera's or the store's state changes; a last time at exit with state
"stopped". The counters account for every captured frame::

    captured = written + dropped_stale + dropped_write + failed_inference
               + failed_write + in_flight

While running the parts are read from their threads without a lock, so an instant
may show a frame between two of them; the file written at exit, after the threads
have stopped, is exact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edge import atomic, platform
from edge.config import Config
from edge.daemon.parts import camera_core
from edge.daemon.writer import iso
from edge.store import layout

if TYPE_CHECKING:
    from edge.daemon.capture import Capture, Mailbox
    from edge.daemon.inference import Inference, Results
    from edge.daemon.writer import Writer
    from edge.store.ring import FrameStore, Persistence

log = logging.getLogger("edge.daemon")
FORMAT = 1
NAME = layout.STATUS


def config_digest(config: Config) -> str:
    """A short hash of the effective config (file plus flags), to tell runs apart."""
    data = asdict(config)
    data.pop("path", None)
    text = json.dumps(data, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def counters(
    capture: Capture, mailbox: Mailbox, inference: Inference, results: Results, writer: Writer
) -> dict[str, Any]:
    """Where every captured frame went, or is."""
    cap, inf, wri = capture.counters, inference.counters, writer.counters
    in_flight = {
        "mailbox": mailbox.holding,
        "inference": inf.holding,
        "write_queue": results.holding,
        "writing": wri.holding,
    }
    return {
        "captured": cap.captured,
        "written": wri.written,
        "dropped_stale": cap.dropped_stale,
        "dropped_write": inf.dropped_write,
        "failed_inference": inf.failed_total,
        "failed_inference_by_stage": dict(inf.failed),
        "failed_inference_last": inf.last_error,
        "failed_write": wri.failed,
        "in_flight": sum(in_flight.values()),
        "in_flight_by_stage": in_flight,
        "frozen": cap.frozen,
        "camera_errors": cap.camera_errors,
        "reopens": cap.reopens,
    }


class StatusFile:
    """Writes ``status.json`` into whichever store root it is given."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self._failing: str | None = None

    def write(self, root: Path, document: dict[str, Any]) -> bool:
        """Replace ``root``/status.json; False (logged once per reason) if it cannot."""
        now = time.time()
        doc = {
            "format": FORMAT,
            "pid": os.getpid(),
            "started_at": iso(self.started_at),
            "updated_at": iso(now),
            "updated_at_unix": round(now, 3),
            **document,
            "system": platform.health(),
        }
        try:
            atomic.write_bytes(
                root / NAME, (json.dumps(doc, indent=1) + "\n").encode(), durable=False
            )
        except OSError as exc:
            reason = str(exc.strerror or exc)
            if reason != self._failing:
                log.warning("status: cannot write %s (%s)", root / NAME, reason)
                self._failing = reason
            return False
        self._failing = None
        return True

    @staticmethod
    def sweep(root: Path) -> None:
        """Drop temporary files an interrupted write left (a SIGKILL mid-write)."""
        with contextlib.suppress(OSError):
            for leftover in root.glob(f".{NAME}.*.tmp"):
                leftover.unlink(missing_ok=True)


class Reporting(Protocol):
    """What status.json and the STATUS line read of the daemon (``Daemon``)."""

    state: str
    config: Config
    store: FrameStore
    capture: Capture
    inference: Inference
    writer: Writer
    last_reload: dict[str, Any] | None

    def counters(self) -> dict[str, Any]: ...

    def thermal_record(self) -> dict[str, Any]: ...


def text(d: Reporting) -> str:
    """The one line sd_notify's STATUS and the log say of the daemon."""
    c, window = d.counters(), d.writer.window.summary()
    lat = window["latency_ms"]["p50"] or 0.0
    spacing = d.inference.spacing()
    return (
        f"fps {window['fps']:.2f}, latency p50 {lat:.0f} ms, captured {c['captured']}, "
        f"written {c['written']}, dropped {c['dropped_stale'] + c['dropped_write']}, "
        f"failed {c['failed_inference']}, "
        f"frozen {c['frozen']}, reopens {c['reopens']}, "
        f"errors camera {c['camera_errors']} / write {c['failed_write']}, "
        f"camera {said(d.capture.state)}, store {said(d.writer.state)}"
        + (f", spaced for heat: a core run every {spacing:.2f} s" if spacing else "")
    )


def document(d: Reporting) -> dict[str, Any]:
    """status.json's content but for what ``StatusFile.write`` adds."""
    pipeline, config = d.inference.pipeline, d.config
    cores = pipeline.artifacts
    camera_state, camera_reason = d.capture.state
    store_state, store_reason = d.writer.state
    return {
        "state": d.state,
        "config": {"path": config.path, "digest": config_digest(config)},
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
            "controls": d.capture.controls(),
        },
        "store": {
            "dir": str(d.store.root),
            "id": d.store.instance,
            "state": store_state,
            "reason": store_reason,
            "cap_bytes": d.store.cap,
        },
        "persist": _persist(d.store.persist),
        "counters": d.counters(),
        "window": d.writer.window.summary(),
        "reload": d.last_reload,
        "thermal": d.thermal_record(),
    }


def _persist(persist: Persistence | None) -> dict[str, Any] | None:
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


def said(state: tuple[str, str | None]) -> str:
    """A (state, reason) pair as the STATUS line says it: "ok", "reconnecting in 2.0 s
    (...)", "not writing: No space left on device"."""
    name, reason = state
    if not reason:
        return name
    return f"{name}{': ' if name == 'not writing' else ' '}{reason}"
