"""Secrets in files: a token, a password, ``user:password``.

A secret file must be a regular file (not a link) owned by the user the service runs
as, readable by no one else (mode 0600 or stricter); anything else is refused with one
line that names the config key, the file and the fix. Root could read any file, so the
check is on the owner and mode bits themselves, not on whether the read succeeds.
"""

from __future__ import annotations

import os
import stat

from edge.errors import ConfigError


def read_secret(path: str, key: str) -> bytes:
    """The first line of ``path``, which only its owner (this user) may read; ConfigError
    naming ``key`` (the config key that named the file) and the fix if not."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{key}: {path} is not a regular file")
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
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    line = data.decode("utf-8", "replace").strip().splitlines()
    secret = line[0].strip() if line else ""
    if not secret:
        raise ConfigError(f"{key}: {path} is empty")
    return secret.encode()
