"""A reload (SIGHUP), on the main thread: the config read again and what changed
applied. Writes the daemon's ``config``, ``store``, ``state`` and ``streams`` (the main
thread's, see ``Daemon``); the threads get theirs through their own ``offer`` and
``reconfigure``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from edge import config as config_mod
from edge.daemon import status
from edge.daemon.parts import camera_streams, make_store
from edge.daemon.writer import iso
from edge.errors import OutputError, first_line
from edge.store.trust import refuse_unsafe

if TYPE_CHECKING:
    from edge.camera import Streams
    from edge.pipeline import Pipeline
    from edge.systemd import Notifier

log = logging.getLogger("edge.daemon")


class Reloading(status.Reporting, Protocol):
    """What a reload reads and writes of the daemon (``Daemon``), besides its status."""

    overrides: config_mod.Overrides
    streams: Streams
    notifier: Notifier
    open_pipeline: Callable[[config_mod.ModelConfig], Pipeline]

    def write_status(self) -> None: ...

    def meanwhile(self, work: Callable[[], Pipeline]) -> Pipeline: ...


def reload(d: Reloading) -> None:
    """Re-read the config and apply what changed. A part that fails keeps what
    runs (the config, the model, the store), logged in one line and reported in
    status.json's ``reload``: a reload never ends the daemon."""
    d.state = "reloading"
    d.notifier.reloading()
    d.write_status()
    errors: list[str] = []
    new = _reread(d, errors)
    old = d.config
    pipeline = d.inference.pipeline
    if new.model != old.model:
        try:
            candidate = d.meanwhile(lambda: d.open_pipeline(new.model))
        except Exception as exc:  # an unreadable folder is an OSError
            errors.append(f"model: {first_line(exc)}")
            log.error("reload: keeping the running model: %s", first_line(exc))
            new = replace(new, model=old.model)
        else:
            pipeline = candidate
            d.inference.offer(pipeline)  # adopted between frames
    if new.store != old.store:
        new = _switch_store(d, new, old, errors)
    if (new.store, new.camera.source, new.depth) != (old.store, old.camera.source, old.depth):
        d.writer.reconfigure(d.store, new.camera.source, new.depth.steady)
    streams = camera_streams(new, pipeline)
    if new.camera != old.camera or streams != d.streams:
        d.capture.reconfigure(new.camera, streams)
        d.streams = streams
    if new is not old and not errors:
        log.info("reload: config %s applied", d.config.path or "(defaults)")
    d.config = new
    d.last_reload = {
        "ok": not errors,
        "at": iso(time.time()),
        "error": "; ".join(errors) or None,
    }
    d.state = "running"
    d.write_status()
    d.notifier.ready(status.text(d))


def _reread(d: Reloading, errors: list[str]) -> config_mod.Config:
    """The config file again, with the flags over it; the running one if it fails."""
    path = d.config.path
    try:
        new = config_mod.load(path) if path else d.config
        return config_mod.with_overrides(new, d.overrides)
    except Exception as exc:  # whatever the file holds, keep running
        errors.append(f"config: {first_line(exc)}")
        log.error("reload: keeping the running config: %s", first_line(exc))
        return d.config


def _switch_store(
    d: Reloading, new: config_mod.Config, old: config_mod.Config, errors: list[str]
) -> config_mod.Config:
    """Write to ``new``'s store from the next frame, checked as at start and written to
    first (a store the daemon cannot write is refused); the old store's status.json says
    where the frames went. On refusal, keep the old."""
    try:
        store = make_store(new.store)
        if store.root != d.store.root:
            refuse_unsafe(store.root)
            try:  # made, indexed, and written to before the frames go there
                store.prepare()
                store.probe()
            except OSError as exc:
                raise OutputError(
                    f"{store.root}: cannot write there ({exc.strerror or exc})"
                ) from None
    except Exception as exc:  # an unsafe, unusable or unwritable directory
        errors.append(f"store: {first_line(exc)}")
        log.error("reload: keeping the running store: %s", first_line(exc))
        return replace(new, store=old.store)
    if store.root != d.store.root:
        d.state = f"moved to {store.root}"
        d.write_status()
        d.state = "reloading"
    d.store = store
    d.inference.at_core = new.store.size == "core"  # from the next frame
    return new
