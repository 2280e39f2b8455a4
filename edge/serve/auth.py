"""Who may ask: loopback by default, credentials for anything else.

``credentials`` reads the token and ``user:password`` files named in ``[serve]``
(``edge.credentials``: owned by the user serve runs as, readable by no one else; the
password plain or as ``edge.passwords``' salted hash); the
config's rules refuse a non-loopback address without them. ``Guard`` is the ASGI
middleware: with credentials configured every request needs one of them (bearer
token or HTTP basic), on any address; comparisons are constant-time.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge.config import ServeConfig
from edge.credentials import check_token, read_secret
from edge.errors import ConfigError
from edge.passwords import Verifier

Scope = dict[str, Any]


@dataclass(frozen=True)
class Credentials:
    token: bytes | None = None
    basic: bytes | None = None  # b"user:password", or b"user:scrypt$..." (edge.passwords)
    verifier: Verifier | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.basic is not None and self.verifier is None:
            object.__setattr__(self, "verifier", Verifier(self.basic))

    def __bool__(self) -> bool:
        return self.token is not None or self.basic is not None

    def quick(self, header: bytes | None) -> bool | None:
        """Whether ``header`` passes, when that is cheap to tell; None when a hashed
        password's KDF must run first (``allows``, off the event loop)."""
        if not self:
            return True
        if not header:
            return False
        scheme, _, value = header.partition(b" ")
        scheme = scheme.lower()
        if scheme == b"bearer" and self.token is not None:
            return hmac.compare_digest(value.strip(), self.token)
        if scheme == b"basic" and self.verifier is not None:
            try:
                given = base64.b64decode(value.strip(), validate=True)
            except ValueError:
                return False
            return self.verifier.known(given)
        return False

    def allows(self, header: bytes | None) -> bool:
        quick = self.quick(header)
        if quick is not None:
            return quick
        assert header is not None and self.verifier is not None
        return self.verifier.check(base64.b64decode(header.partition(b" ")[2].strip()))


def credentials(serve: ServeConfig) -> Credentials:
    return Credentials(
        token=_token(serve.token_file) if serve.token_file else None,
        basic=_basic(serve.basic_auth_file) if serve.basic_auth_file else None,
    )


def _token(path: str) -> bytes:
    token = read_secret(path, "serve.token_file")
    check_token(token, path, "serve.token_file")
    return token


def _basic(path: str) -> bytes:
    secret = read_secret(path, "serve.basic_auth_file")
    user, colon, password = secret.partition(b":")
    if not colon or not user or not password:
        raise ConfigError(
            f"serve.basic_auth_file: {path} must hold user:password, neither of them empty"
        )
    return secret


class Backoff:
    """Failed logins per client address: each failure doubles the wait before that
    client's next answer (``first`` s, twice that, ... ``cap`` s at most), a success
    clears it. At most ``size`` addresses are remembered (the longest idle go first), so
    a scan from many addresses cannot grow serve's memory."""

    def __init__(
        self,
        *,
        first: float = 0.5,
        cap: float = 8.0,
        size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first, self.cap, self.size, self.clock = first, cap, size, clock
        self._clients: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds this client must wait before its request is looked at."""
        failures, until = self._clients.get(client, (0, 0.0))
        return max(0.0, until - self.clock()) if failures else 0.0

    def failed(self, client: str) -> None:
        failures = self._clients.pop(client, (0, 0.0))[0] + 1
        delay = min(self.first * 2 ** (failures - 1), self.cap)
        self._clients[client] = (failures, self.clock() + delay)
        while len(self._clients) > self.size:
            self._clients.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


class Guard:
    """ASGI middleware: 401 unless the request carries the configured credentials; a
    client whose credentials failed waits longer at each failure (``Backoff``)."""

    def __init__(self, app: Any, creds: Credentials, backoff: Backoff | None = None) -> None:
        self.app = app
        self.creds = creds
        self.backoff = backoff or Backoff()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.creds:
            client = str((scope.get("client") or ("?",))[0])
            wait = self.backoff.wait(client)
            if wait > 0:
                await asyncio.sleep(wait)
            header = dict(scope.get("headers", ())).get(b"authorization")
            ok = self.creds.quick(header)
            if ok is None:  # a hashed password's KDF: tens of ms, not on the event loop
                ok = await asyncio.to_thread(self.creds.allows, header)
            if ok:
                self.backoff.succeeded(client)
            else:
                if header:  # a browser's first request carries none: not a failed login
                    self.backoff.failed(client)
                headers = [(b"content-type", b"text/plain; charset=utf-8")]
                if self.creds.basic is not None:
                    headers.append((b"www-authenticate", b'Basic realm="da3-edge"'))
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": b"credentials required\n"})
                return
        await self.app(scope, receive, send)
