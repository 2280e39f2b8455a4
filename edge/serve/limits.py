"""serve under hostile clients: bounds on connections, on time, and on who is asked.

uvicorn's h11 protocol waits as long as a client likes for a request's headers, and for
a client that stops reading: a thousand half-open connections used up serve's files,
and a client that never read kept a pruned frame file open. ``protocol`` gives uvicorn a
subclass that bounds both, per connection:

- **headers**: a connection that has not sent a whole request line and headers within
  ``header_timeout`` seconds (from its start, or since its last response) is closed;
- **connections**: at ``connections`` open ones, a new connection closes the one that
  has waited longest for its headers (a slow client gives way to a quick one); with
  none waiting (all busy streaming), the new one is refused;
- **sending**: when a client stops reading and the send buffer stays full for
  ``send_timeout`` seconds, the connection is dropped (its response, and the file it was
  sending, with it).

``HostCheck`` answers 421, without content, to a request whose ``Host`` is not one of
this machine's names while serve listens on loopback: a web page elsewhere that makes
its own name resolve to 127.0.0.1 (DNS rebinding) cannot read the store through the
browser of someone on this machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, ClassVar

from uvicorn.protocols.http.h11_impl import H11Protocol

from edge.config import ServeConfig

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


class Bounded(H11Protocol):
    """uvicorn's h11 protocol within serve's limits; ``protocol`` makes one per config."""

    serve: ClassVar[ServeConfig]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._waiting_since = self.loop.time()
        if len(self.connections) >= self.serve.connections:
            waiting = [
                c
                for c in self.connections
                if isinstance(c, Bounded) and c._header_timer is not None
            ]
            if not waiting:
                self.transport = transport  # connection_lost closes it
                transport.abort()
                return
            min(waiting, key=lambda c: c._waiting_since)._expire()
        super().connection_made(transport)
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._waiting_since = self.loop.time()
            self._header_timer = self.loop.call_later(self.serve.header_timeout, self._expire)

    def _disarm(self) -> None:
        for timer in (self._header_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._send_timer = None

    def _expire(self) -> None:
        """Drop the connection now (its own timer ran out, or a new one needs room);
        no longer waiting, so no one picks it again before it is gone."""
        self._disarm()
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        busy = self.cycle is not None and not self.cycle.response_complete
        if busy and self._header_timer is not None:
            self._header_timer.cancel()  # the request is in: its headers came in time
            self._header_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request at once
        idle = self.cycle is None or self.cycle.response_complete
        if idle and not self.transport.is_closing():
            self._arm_header_timer()  # keep-alive: the next request's headers, in time

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.serve.send_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol(serve: ServeConfig) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``serve``'s limits (connections, header_timeout,
    send_timeout; pass as ``uvicorn.Config(http=...)``)."""
    return type("Bounded", (Bounded,), {"serve": serve})


class HostCheck:
    """ASGI middleware: 421 unless the ``Host`` header names this machine (loopback
    binds only; a request without one, not from a browser, passes)."""

    def __init__(self, app: Any, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(n.lower() for n in names) | LOOPBACK_NAMES

    def allowed(self, host: bytes | None) -> bool:
        if host is None:
            return True
        text = host.decode("latin-1").strip().lower()
        if text.startswith("["):  # [::1]:8000
            name = text.split("]")[0] + "]"
        else:
            name = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
        return name in self.names

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.allowed(dict(scope["headers"]).get(b"host")):
            await send({"type": "http.response.start", "status": 421, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)
