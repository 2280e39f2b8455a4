"""Who may ask: loopback by default, credentials for anything else.

``credentials`` reads the token and ``user:password`` files named in ``[serve]``
(``edge.credentials``: owned by the user serve runs as, readable by no one else). ``check_bind``
refuses a non-loopback address without credentials. ``Guard`` is the ASGI
middleware: with credentials configured every request needs one of them (bearer
token or HTTP basic), on any address; comparisons are constant-time.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from edge.config import ServeConfig
from edge.credentials import read_secret
from edge.errors import ConfigError

Scope = dict[str, Any]


@dataclass(frozen=True)
class Credentials:
    token: bytes | None = None
    basic: bytes | None = None  # b"user:password"

    def __bool__(self) -> bool:
        return self.token is not None or self.basic is not None

    def allows(self, header: bytes | None) -> bool:
        if not self:
            return True
        if not header:
            return False
        scheme, _, value = header.partition(b" ")
        scheme = scheme.lower()
        if scheme == b"bearer" and self.token is not None:
            return hmac.compare_digest(value.strip(), self.token)
        if scheme == b"basic" and self.basic is not None:
            try:
                given = base64.b64decode(value.strip(), validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, self.basic)
        return False


def credentials(serve: ServeConfig) -> Credentials:
    return Credentials(
        token=read_secret(serve.token_file, "serve.token_file") if serve.token_file else None,
        basic=_basic(serve.basic_auth_file) if serve.basic_auth_file else None,
    )


def _basic(path: str) -> bytes:
    secret = read_secret(path, "serve.basic_auth_file")
    if b":" not in secret:
        raise ConfigError(f"serve.basic_auth_file: {path} must hold user:password")
    return secret


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_bind(host: str, creds: Credentials) -> None:
    if not is_loopback(host) and not creds:
        raise ConfigError(
            f"serve: refusing to listen on {host} without credentials; set serve.token_file "
            "or serve.basic_auth_file (a file only you can read), or use 127.0.0.1"
        )


class Guard:
    """ASGI middleware: 401 unless the request carries the configured credentials."""

    def __init__(self, app: Any, creds: Credentials) -> None:
        self.app = app
        self.creds = creds

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.creds:
            header = dict(scope.get("headers", ())).get(b"authorization")
            if not self.creds.allows(header):
                headers = [(b"content-type", b"text/plain; charset=utf-8")]
                if self.creds.basic is not None:
                    headers.append((b"www-authenticate", b'Basic realm="da3-edge"'))
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": b"credentials required\n"})
                return
        await self.app(scope, receive, send)
