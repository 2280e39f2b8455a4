"""``da3-edge serve``: a read-only companion that shows the store live over HTTP.

It reads files only (the frames and ``status.json``), so the daemon needs no
network and a crash of either never harms the other. Loopback by default; another
address needs credentials (``edge.serve.auth``). Light: no LiteRT; Pillow only once
a JPEG is asked for, numpy only once a point cloud is (``edge.serve.cloud``).
"""

from __future__ import annotations

import logging
import signal
import socket
from pathlib import Path
from typing import Any

from edge.config import Config, is_loopback, validate
from edge.errors import ConfigError
from edge.systemd import Notifier

log = logging.getLogger("edge.serve")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free one); ConfigError, one line, if not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise ConfigError(
            f"serve: cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from None
    sock.setblocking(False)
    return sock


def run(config: Config, store: Path) -> int:
    """Serve ``store`` as ``config.serve`` says until SIGTERM/SIGINT; 0 after a clean stop."""
    import uvicorn

    from edge.serve.app import make_app
    from edge.serve.auth import Guard, credentials
    from edge.serve.limits import HostCheck, protocol

    validate(config, parts=("serve",))  # beyond loopback only with credentials
    serve = config.serve
    creds = credentials(serve)
    sock = listen(serve.host, serve.port)
    host, port = sock.getsockname()[:2]
    app = make_app(store, serve, status_every=config.daemon.status_every)
    guarded: Any = Guard(app, creds)
    if is_loopback(serve.host):
        guarded = HostCheck(guarded, serve.hosts)
    # Open /events and /stream.mjpg clients get 2 s at a stop, then are closed. The
    # listen backlog is also how many connections asyncio accepts in one turn, before
    # the ones made to give way are closed: uvicorn's 2048 lets a burst run serve out of
    # a unit's 1024 files (EMFILE; accepting pauses). At ``connections``: at most twice that.
    config_ = uvicorn.Config(
        guarded,
        http=protocol(serve),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        backlog=serve.connections,
    )
    server = uvicorn.Server(config_)
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "serving %s on http://%s:%d/%s",
        store,
        shown,
        port,
        " (credentials required)" if creds else "",
    )
    Notifier.from_env().ready(f"serving {store} on {shown}:{port}")
    # uvicorn stops on SIGTERM/SIGINT, then raises the signal again under the handler
    # that was there before it: with this one that is a no-op, and serve exits 0 as
    # documented instead of dying by the signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    server.run(sockets=[sock])
    return 0
