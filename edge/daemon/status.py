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
from typing import TYPE_CHECKING, Any

from edge import atomic, layout, platform
from edge.config import Config
from edge.daemon.writer import iso

if TYPE_CHECKING:
    from edge.daemon.capture import Capture, Mailbox
    from edge.daemon.inference import Inference, Results
    from edge.daemon.writer import Writer

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
