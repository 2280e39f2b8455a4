"""Passwords made on one machine and checked on another, stored only as a salted hash.

``da3-edge card --view lan`` makes the page's password on the owner's laptop, prints it
once, and puts only ``user:scrypt$N$r$p$SALT$HASH`` on the card; serve's
``basic_auth_file`` takes that form beside plain ``user:password``. scrypt (RFC 7914,
in hashlib) with N=2^14, r=8, p=1: 16 MiB and tens of milliseconds a check, so a stolen
card's file is slow to guess from, while serve checks each distinct credential once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SCHEME = "scrypt"
N, R, P = 1 << 14, 8, 1
SALT_BYTES = 16
KEY_BYTES = 32
PASSWORD_BITS = 144  # made passwords: 24 URL-safe characters


def new_password() -> str:
    return secrets.token_urlsafe(PASSWORD_BITS // 8)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hashed(password: str, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$SALT$HASH`` of ``password`` (a new random salt unless given)."""
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    key = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, dklen=KEY_BYTES)
    return f"{SCHEME}${N}${R}${P}${_b64(salt)}${_b64(key)}"


def is_hashed(secret: bytes) -> bool:
    return secret.startswith(f"{SCHEME}$".encode())


def matches(password: bytes, stored: bytes) -> bool:
    """``password`` against a ``hashed`` form (False for a malformed one)."""
    try:
        scheme, n, r, p, salt, key = stored.decode().split("$")
        want = _unb64(key)
        if scheme != SCHEME or not 1 < int(n) <= 1 << 20 or not 0 < int(r) * int(p) <= 64:
            return False
        got = hashlib.scrypt(
            password,
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
            maxmem=256 << 20,
        )
    except (ValueError, UnicodeDecodeError):
        return False
    return hmac.compare_digest(got, want)


class Verifier:
    """``user:password`` pairs against one ``user:secret``, the secret plain or
    ``hashed`` (serve remembers the pairs that passed: the KDF runs once per credential,
    not once per request)."""

    def __init__(self, line: bytes) -> None:
        self.user, _, self.secret = line.partition(b":")
        self.hashed = is_hashed(self.secret)

    def check(self, given: bytes) -> bool:
        if not self.hashed:
            return hmac.compare_digest(given, self.user + b":" + self.secret)
        user, colon, password = given.partition(b":")
        ok = bool(colon) and hmac.compare_digest(user, self.user)
        return matches(password, self.secret) and ok  # the KDF runs whatever the user
