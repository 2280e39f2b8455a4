"""Secrets in files: a token, a password, ``user:password``, a TLS private key.

A secret file must be a regular file (not a link, not a FIFO: it is opened without
blocking) owned by the user the service runs as, readable by no one else (mode 0600 or
stricter); anything else is refused with one line that names the config key, the file
and the fix. Root could read any file, so the check is on the owner and mode bits
themselves, not on whether the read succeeds.
"""

from __future__ import annotations

import math
import os
import stat
import string

from edge.errors import ConfigError

MAX_BYTES = 64 * 1024  # a PEM key with its chain fits; a secret is never bigger
SECRET_BITS = 128  # every credential: a token, a password


def read_once(path: str | os.PathLike[str], key: str) -> tuple[bytes, os.stat_result]:
    """``path``'s bytes (MAX_BYTES at most), opened without following a link, and the
    stat of what was read; ConfigError naming ``key`` (the config key that named the
    file) when it cannot be read or is not a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{key}: {path} is not a regular file")
        return os.read(fd, MAX_BYTES), st
    finally:
        os.close(fd)


def read_secret_file(path: str, key: str) -> bytes:
    """The whole of ``path``, which only its owner (this user) may read; ConfigError
    naming ``key`` and the fix if not."""
    data, st = read_once(path, key)
    if st.st_uid != os.geteuid():
        raise ConfigError(
            f"{key}: {path} belongs to uid {st.st_uid}, not to the user this runs as "
            f"(uid {os.geteuid()}); chown it"
        )
    if st.st_mode & 0o077:
        raise ConfigError(
            f"{key}: {path} can be read by others (mode {stat.S_IMODE(st.st_mode):o});"
            f" chmod 600 {path}"
        )
    return data


def read_secret(path: str, key: str) -> bytes:
    """The first line of a secret file (``read_secret_file``); ConfigError if empty."""
    data = read_secret_file(path, key)
    line = data.decode("utf-8", "replace").strip().splitlines()
    secret = line[0].strip() if line else ""
    if not secret:
        raise ConfigError(f"{key}: {path} is empty")
    return secret.encode()


def strength_bits(secret: str) -> float:
    """An upper bound of a secret's entropy: the bits of the smallest alphabet of common
    classes (digits, lower, upper, other) its characters come from, for each character
    that neither repeats the one before nor follows it in sequence (``aaaa``, ``abcd``,
    ``4321`` add a bit each). A random 16-byte token in hex or base64 is over 128; a
    word with digits, or 43 times the same letter, is not."""
    pool = 0
    for chars in (string.digits, string.ascii_lowercase, string.ascii_uppercase):
        if any(c in chars for c in secret):
            pool += len(chars)
    if any(not c.isascii() or not c.isalnum() for c in secret):
        pool += 33  # punctuation, space, anything else
    if not pool:
        return 0.0
    bits, previous = 0.0, None
    for c in secret:
        step = None if previous is None else ord(c) - ord(previous)
        bits += 1.0 if step in (-1, 0, 1) else math.log2(pool)
        previous = c
    return bits


def check_strength(secret: bytes, path: str, key: str, what: str) -> None:
    """ConfigError unless ``secret`` could hold at least SECRET_BITS of randomness: the
    one rule for every credential serve takes (tokens and passwords)."""
    bits = strength_bits(secret.decode("utf-8", "replace"))
    if bits < SECRET_BITS:
        raise ConfigError(
            f"{key}: the {what} in {path} is too weak to be guessed safely (at most "
            f"{bits:.0f} bits, {SECRET_BITS} needed); make one with "
            "`python3 -c 'import secrets; print(secrets.token_urlsafe(24))'`"
        )
