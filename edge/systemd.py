"""Tell systemd how the daemon is doing: an in-tree sd_notify(3) client.

Under ``Type=notify`` systemd hands the service the address of a datagram socket in
``NOTIFY_SOCKET`` and waits for ``READY=1`` before it calls the unit started; with
``WatchdogSec=`` it also sets ``WATCHDOG_USEC`` and restarts the service when the
``WATCHDOG=1`` pings stop. The protocol is one ``AF_UNIX`` datagram of newline-separated
``KEY=value`` lines, small enough to speak directly rather than pull in libsystemd or
a Python binding that a Pi image may not have.

Outside systemd (a terminal, the tests, macOS) ``NOTIFY_SOCKET`` is unset and every
call is a no-op that returns False, so the daemon calls the same methods everywhere.
Sending never raises: a lost status line must not take the camera loop down with it;
failures are logged at debug level and reported through the return value.

Like libsystemd, the socket is blocking and unconnected: each message is addressed
with ``sendto``, so a systemd that re-executed itself (``systemctl daemon-reexec``)
and re-created its socket is still reached. The environment is read once, by
:meth:`Notifier.from_env`, and left as it is; ``NotifyAccess=main`` in the unit makes
systemd ignore anything a child process that inherited it might send.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)

__all__ = ["Notifier"]


class Notifier:
    """A handle on systemd's notification socket; inert when there is none.

    ``address`` is ``NOTIFY_SOCKET`` as systemd writes it: an absolute path, or
    ``@name`` for a socket in the abstract namespace. ``watchdog_usec`` is the
    watchdog timeout in microseconds, or None when no watchdog applies to this
    process. Most code wants :meth:`from_env` rather than this constructor.
    """

    def __init__(self, address: str | None = None, watchdog_usec: int | None = None) -> None:
        self._address = address or None
        self._watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._sock: socket.socket | None = None
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """The notifier systemd configured for this process (``os.environ`` by default).

        ``WATCHDOG_USEC`` counts only if ``WATCHDOG_PID`` is unset or names this
        process, the rule sd_watchdog_enabled(3) follows: a child that inherited the
        variables is not the one systemd is watching.
        """
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        return cls(address, _watchdog_usec(env))

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a notification socket."""
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between :meth:`watchdog` pings: half the timeout, as systemd advises.

        None when there is no watchdog (no ``WatchdogSec=``, or not our PID).
        """
        if self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 1e6 / 2

    def notify(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines as one datagram; True if it was sent.

        Values are sent as text (a bool as 1 or 0); a newline inside one would start a
        new field, so newlines are replaced with spaces. No fields, nothing sent.
        """
        if self._address is None or not fields:
            return False
        lines = [f"{key}={_one_line(value)}" for key, value in fields.items()]
        message = "\n".join(lines).encode("utf-8")
        address = self._address
        if address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace: a leading NUL byte
        elif not address.startswith("/"):
            log.debug("sd_notify: unsupported NOTIFY_SOCKET %r", self._address)
            return False
        try:
            sock = self._socket()
            if sock is None:
                log.debug("sd_notify: notifier is closed, not sending %r", message)
                return False
            sock.sendto(message, address)
        except OSError as exc:
            log.debug("sd_notify to %r failed: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Startup is complete: systemd marks the unit active and starts its dependents."""
        if status is None:
            return self.notify(READY=1)
        return self.notify(READY=1, STATUS=status)

    def status(self, text: str) -> bool:
        """A one-line state shown by ``systemctl status``."""
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        """Ping the watchdog; call at least every :attr:`watchdog_interval` seconds.

        systemd ignores the ping when the unit has no watchdog, so it is sent whenever
        the notifier is enabled.
        """
        return self.notify(WATCHDOG=1)

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown has begun."""
        if status is None:
            return self.notify(STOPPING=1)
        return self.notify(STOPPING=1, STATUS=status)

    def reloading(self) -> bool:
        """A configuration reload has begun; send :meth:`ready` when it is done.

        ``MONOTONIC_USEC`` is what ``Type=notify-reload`` (systemd 253+) requires to
        match the message to its SIGHUP; older systemd ignores the field.
        """
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify(RELOADING=1, MONOTONIC_USEC=now_usec)

    def close(self) -> None:
        """Release the socket; later messages are not sent and return False."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _socket(self) -> socket.socket | None:
        """The sending socket, created on first use (None after :meth:`close`)."""
        with self._lock:
            if self._closed:
                return None
            if self._sock is None:
                # SOCK_CLOEXEC is Linux-only; Python makes sockets non-inheritable anyway.
                kind = socket.SOCK_DGRAM | getattr(socket, "SOCK_CLOEXEC", 0)
                self._sock = socket.socket(socket.AF_UNIX, kind)
            return self._sock


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid is not None:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec if usec > 0 else None


def _one_line(value: str | int) -> str:
    if isinstance(value, bool):
        value = int(value)
    return str(value).replace("\n", " ")
