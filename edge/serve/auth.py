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
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from edge.config import ServeConfig
from edge.credentials import check_strength, read_secret
from edge.errors import ConfigError
from edge.passwords import Verifier, is_hashed

Scope = dict[str, Any]
PASSED = 64  # Authorization headers remembered as good (a browser sends one on each request)


@dataclass(frozen=True)
class Credentials:
    """The token and the ``user:password`` (plain, or ``edge.passwords``' hash) serve
    takes. ``allows`` checks an Authorization header in full and remembers the ones that
    passed (a digest of each, at most PASSED); ``quick`` tells those apart at no cost."""

    token: bytes | None = None
    basic: bytes | None = None  # b"user:password", or b"user:scrypt$..." (edge.passwords)
    verifier: Verifier | None = field(default=None, compare=False, repr=False)
    passed: OrderedDict[bytes, None] = field(default_factory=OrderedDict, compare=False, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.basic is not None and self.verifier is None:
            object.__setattr__(self, "verifier", Verifier(self.basic))

    def __bool__(self) -> bool:
        return self.token is not None or self.basic is not None

    def quick(self, header: bytes | None) -> bool | None:
        """True for no credentials configured or a header that passed before, False for
        none given; None: ``allows`` must check it."""
        if not self:
            return True
        if not header:
            return False
        with self.lock:
            return True if hashlib.sha256(header).digest() in self.passed else None

    def allows(self, header: bytes | None) -> bool:
        """The full check (a hashed password's KDF: tens of ms, off the event loop)."""
        quick = self.quick(header)
        if quick is not None:
            return quick
        assert header is not None
        scheme, _, value = header.partition(b" ")
        scheme = scheme.lower()
        ok = False
        if scheme == b"bearer" and self.token is not None:
            ok = hmac.compare_digest(value.strip(), self.token)
        elif scheme == b"basic" and self.verifier is not None:
            try:
                ok = self.verifier.check(base64.b64decode(value.strip(), validate=True))
            except ValueError:
                ok = False
        if ok:
            with self.lock:
                self.passed[hashlib.sha256(header).digest()] = None
                while len(self.passed) > PASSED:
                    self.passed.popitem(last=False)
        return ok


def credentials(serve: ServeConfig) -> Credentials:
    return Credentials(
        token=_token(serve.token_file) if serve.token_file else None,
        basic=_basic(serve.basic_auth_file) if serve.basic_auth_file else None,
    )


def _token(path: str) -> bytes:
    token = read_secret(path, "serve.token_file")
    check_strength(token, path, "serve.token_file", "token")
    return token


def _basic(path: str) -> bytes:
    secret = read_secret(path, "serve.basic_auth_file")
    user, colon, password = secret.partition(b":")
    if not colon or not user or not password:
        raise ConfigError(
            f"serve.basic_auth_file: {path} must hold user:password, neither of them empty"
        )
    if not is_hashed(password):  # a hash was made from a password of 144 random bits
        check_strength(password, path, "serve.basic_auth_file", "password")
    return secret


class Backoff:
    """Failed logins per client address: each failure doubles the wait before that
    client's next answer (``first`` s, twice that, ... ``cap`` s at most), a success
    clears it. At most ``size`` addresses are remembered, so a scan from many addresses
    cannot grow serve's memory; a new address finds no room (``room``: Guard answers it
    429 unchecked) while every remembered one is in penalty or just out of it."""

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

    def room(self) -> bool:
        """Whether a new address can be remembered: addresses whose last penalty ended
        more than ``cap`` s ago are forgotten first; one still in penalty never is, so
        rotating through many addresses cannot wipe a penalty (the new ones wait)."""
        now = self.clock()
        while self._clients:
            oldest = next(iter(self._clients))
            if self._clients[oldest][1] + self.cap > now:
                break
            del self._clients[oldest]
        return len(self._clients) < self.size

    def knows(self, client: str) -> bool:
        return client in self._clients

    def wait(self, client: str) -> float:
        """Seconds this client must wait before its request is looked at."""
        failures, until = self._clients.get(client, (0, 0.0))
        return max(0.0, until - self.clock()) if failures else 0.0

    def failed(self, client: str) -> None:
        failures = self._clients.pop(client, (0, 0.0))[0] + 1
        delay = min(self.first * 2 ** (failures - 1), self.cap)
        self._clients[client] = (failures, self.clock() + delay)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


KDF_SLOTS = 2  # password checks at once, over all clients: CPU and memory bounded


class Guard:
    """ASGI middleware: 401 unless the request carries the configured credentials.

    A header that passed before goes through at once. Any other is checked before any
    delay of its own: a right one is never held up by another address's failures; a
    wrong one is answered only after its address's penalty (``Backoff``: 0.5 s, doubling,
    8 s at most). An address has one check (with its penalty) running at a time and one
    more waiting its turn; beyond those, its new credentials get 429 unchecked, so
    guesses in parallel gain nothing, while a login from an address another client
    shares (an SSH tunnel, local users on 127.0.0.1) waits out that client's penalty
    instead of being refused.
    """

    def __init__(self, app: Any, creds: Credentials, backoff: Backoff | None = None) -> None:
        self.app = app
        self.creds = creds
        self.backoff = backoff or Backoff()
        self.checking: dict[
            str, asyncio.Event
        ] = {}  # address -> set when its check and penalty end
        self.waiting: set[str] = set()  # addresses with a credential waiting for that
        self.hashing = 0  # checks running now, over all addresses (at most KDF_SLOTS)
        # The checks' own threads: a hashed password's KDF (16 MiB, tens of ms) never
        # queues file sends, which use the default pool.
        self.pool = ThreadPoolExecutor(KDF_SLOTS, thread_name_prefix="serve-kdf")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.creds:
            header = dict(scope.get("headers", ())).get(b"authorization")
            ok = self.creds.quick(header)
            if ok is None:
                client = str((scope.get("client") or ("?",))[0])
                if client in self.waiting:
                    await self._refuse(send, 429, b"one login at a time\n", self.backoff.cap)
                    return
                if client in self.checking:  # its turn after that check and its penalty
                    self.waiting.add(client)
                    try:
                        await self.checking[client].wait()
                    finally:
                        self.waiting.discard(client)
                if self.hashing >= KDF_SLOTS or not (
                    self.backoff.knows(client) or self.backoff.room()
                ):
                    await self._refuse(send, 429, b"busy with other logins\n", 1)
                    return
                ok = await self._check(client, header)
            if not ok:
                await self._refuse(send, 401, b"credentials required\n")
                return
        await self.app(scope, receive, send)

    async def _check(self, client: str, header: bytes | None) -> bool:
        self.checking[client] = asyncio.Event()
        self.hashing += 1
        try:
            try:
                loop = asyncio.get_running_loop()
                ok = await loop.run_in_executor(self.pool, self.creds.allows, header)
            finally:
                self.hashing -= 1
            if ok:
                self.backoff.succeeded(client)
            else:
                self.backoff.failed(client)
                await asyncio.sleep(self.backoff.wait(client))
            return ok
        finally:
            self.checking.pop(client).set()

    async def _refuse(self, send: Any, status: int, body: bytes, retry: float = 0) -> None:
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if status == 401 and self.creds.basic is not None:
            headers.append((b"www-authenticate", b'Basic realm="da3-edge"'))
        if retry:
            headers.append((b"retry-after", str(int(retry)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
