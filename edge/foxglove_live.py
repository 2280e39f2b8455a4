"""``da3-edge foxglove``: the store's frames live in the Foxglove app, over Foxglove's
WebSocket protocol, on the channels and schemas a recording has (``edge.record``).

A companion like serve and publish: it reads the store as any consumer does, loads no
model and never slows the daemon (it only reads files the daemon has published). While
no client subscribes to a channel it reads nothing; a slow client gets the newest
messages and loses the older ones: each client's queue holds ``BACKLOG`` messages (a
frame is up to six), the SDK drops the oldest beyond that. The protocol has no login,
so it listens on loopback only: another machine reaches it through an SSH tunnel.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge.errors import UsageError
from edge.record import Logger, Recorded, frames_to_record, needs_sdk
from edge.store.follow import Follower

BACKLOG = 12  # messages queued per client: two frames; older ones are dropped


def check_host(host: str, port: int) -> str:
    """``host`` when it is a loopback address; UsageError naming the way round (a
    tunnel to ``port``; 0, a port the system picks, is printed once listening)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        n, which = (port, "") if port else ("N", " with N the port it prints")
        raise UsageError(
            f"--host {host}: the Foxglove WebSocket protocol has no login, so da3-edge "
            "foxglove listens on loopback only; from another machine, tunnel it: "
            f"ssh -L {n}:127.0.0.1:{n} PI{which}, then ws://127.0.0.1:{n}"
        )
    return host


class Subscriptions:
    """How many subscriptions clients hold (the SDK's ServerListener)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def on_subscribe(self, client: Any, channel: Any) -> None:
        with self._lock:
            self.count += 1

    def on_unsubscribe(self, client: Any, channel: Any) -> None:
        with self._lock:
            self.count = max(0, self.count - 1)


def serve(
    root: Path,
    host: str,
    port: int,
    stop: threading.Event,
    ready: Callable[[int], None] = lambda _: None,
) -> Recorded:
    """Serve the store at ``root`` until ``stop``: every channel advertised at once,
    each new frame the daemon publishes logged while any client subscribes. ``ready``
    gets the port listened on (``port`` 0: one the system picks)."""
    foxglove = needs_sdk()
    context = foxglove.Context()
    logger = Logger(context)
    logger.advertise()
    subscriptions = Subscriptions()
    try:
        server = foxglove.start_server(
            name="da3-edge",
            host=check_host(host, port),
            port=port,
            context=context,
            server_listener=subscriptions,
            message_backlog_size=BACKLOG,
        )
    except RuntimeError as exc:  # the SDK's error for a port it cannot bind
        raise UsageError(f"--port {port}: cannot listen there ({exc})") from None
    follower = Follower(root)
    try:
        ready(server.port)
        for seq in frames_to_record(root, follower, stop, existing=False):
            if subscriptions.count:
                logger.add(root, seq)
    finally:
        follower.close()
        server.stop()
    return logger.recorded
