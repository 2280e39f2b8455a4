"""Files that appear whole or not at all.

A reader (a person, a robot following ``latest``, a crash-restarted daemon) sees the
old file or the new one, never half of one: write to a temporary name in the same
directory, fsync, rename over the target, fsync the directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

# What a file is written from: its bytes, or a function that writes them to the open
# file (a 15 MB npz goes from numpy to the file without an in-memory copy).
Data = bytes | memoryview | Callable[[BinaryIO], object]


def put(fh: BinaryIO, data: Data) -> None:
    """Write ``data`` (bytes, or a writer function) to the open file ``fh``."""
    if callable(data):
        data(fh)
    else:
        fh.write(data)


def write_bytes(
    path: str | os.PathLike[str],
    data: Data,
    *,
    durable: bool = True,
    like: os.stat_result | None = None,
) -> None:
    """Atomically replace ``path`` with ``data`` (bytes, or a writer function).

    ``durable`` also fsyncs the file and its directory so the rename survives a power
    cut (what an SD card on a Pi needs); tmpfs targets can skip it. ``like``: the new
    file takes that stat's mode, owner and group (the file it replaces, edited in place).
    """
    path = Path(path)
    # Not mkstemp: its 0600 would stick to the renamed file; 0666 & ~umask is what a
    # plain open() would give.
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            if like is not None:
                os.fchown(fh.fileno(), like.st_uid, like.st_gid)
                os.fchmod(fh.fileno(), stat.S_IMODE(like.st_mode))
            put(fh, data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    if os.name == "nt":  # Windows opens no directory to fsync; NTFS journals the rename
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
