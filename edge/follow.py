"""Following a frame store as the daemon publishes: inotify, not polling.

The daemon publishes a frame by renaming a new ``latest`` symlink over the old one,
and ``status.json`` by renaming a new file over it (edge/store.py,
edge/daemon/status.py); both are an ``IN_MOVED_TO`` in the store's root. ``Follower``
watches the root for them and says which of the two changed. A root that does not
exist yet (the daemon not started) or goes away (a store on /run made anew) is
looked for again every ``retry`` seconds, and reported as a change of both.

Linux's inotify is reached through libc (ctypes; no dependency). Where there is no
inotify (macOS, for development) it falls back to comparing ``latest``'s target and
``status.json``'s identity every ``retry`` seconds, and says so in ``mode``.

``Follower`` is for one thread at a time: ``wait`` blocks; an asyncio caller
(``da3-edge serve``) registers ``fileno()`` with its loop and calls ``read()``.

What a reader takes from the store it checks first, because serve and publish hand it on
(to any HTTP client, to the broker): ``latest`` must point exactly at
``frames/<10 digits>``, and every file is opened from the store's own directory, one
name at a time, never through a symbolic link, and must be a regular file. The store's
directory itself must not be a link, must be this user's, root's, or another user's
shared through that user's own group (the daemon's ``da3-edge:da3-edge``) when this
user is in it, and writable by no one but its owner (``check_root``): otherwise another
local user could put frames, or links to the service user's files, where serve would
hand them out. A group that is not its owner's own (``users``, say) grants nothing:
any member could have made the store.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import json
import os
import re
import select
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge import layout
from edge.closing import Closing
from edge.errors import UnsafeStore

IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_IGNORED = 0x8000
IN_Q_OVERFLOW = 0x4000
_MASK = IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
WATCHED = frozenset({layout.LATEST, layout.STATUS})


@dataclass(frozen=True)
class Published:
    """The frame ``latest`` points at: its store sequence number and directory."""

    seq: int
    path: Path


_TARGET = re.compile(rf"{layout.FRAMES}/([0-9]{{10}})")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted where a file should be must not block the open.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def check_root(root: Path, st: os.stat_result | None = None) -> None:
    """UnsafeStore unless ``root`` (lstat'ed, or ``st``) is a directory that no one but
    its owner can write to, and whose owner is this user or root, or another user whose
    own group it is in and this user is too (serve and publish run as users of their own
    in the daemon's group, which reads the daemon's store; under their units' private
    user namespace the daemon is unmapped, and the group is their own primary one); one
    line each, saying what to do."""
    st = os.lstat(root) if st is None else st
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeStore(f"store {root} is a symbolic link: give the directory it points to")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeStore(f"store {root} is not a directory")
    ours = st.st_uid in (os.geteuid(), 0)
    if not ours and st.st_gid not in (os.getegid(), *os.getgroups()):
        raise UnsafeStore(
            f"store {root} belongs to uid {st.st_uid} and gid {st.st_gid}, neither this user "
            f"(uid {os.geteuid()}) nor one of its groups: use a store of your own"
        )
    if not ours and not _own_group(st.st_uid, st.st_gid) and not _unmapped_in_mine(st):
        raise UnsafeStore(
            f"store {root} belongs to uid {st.st_uid} through gid {st.st_gid}, a group that "
            "is not that user's own (any member could have made it): use a store of your "
            "own, or one shared through its owner's own group (as da3-edge:da3-edge)"
        )
    if st.st_mode & 0o022:
        raise UnsafeStore(
            f"store {root} can be written by group or others (mode {st.st_mode & 0o777:o}): "
            f"chmod go-w {root}"
        )


@functools.lru_cache(maxsize=16)
def _own_group(uid: int, gid: int) -> bool:
    """``gid`` is user ``uid``'s own: its primary group, of the same name (a user private
    group, as adduser makes: joining it is a grant by root, not a shared membership).
    Kept per pair: readers check the store at every file they open, and only root
    changes the accounts."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(uid)
        return user.pw_gid == gid and grp.getgrgid(gid).gr_name == user.pw_name
    except KeyError:
        return False


def _unmapped_in_mine(st: os.stat_result) -> bool:
    """An owner this process's user namespace does not map (it shows as the overflow
    uid), through this process's own primary group: the daemon's store as serve and
    publish see it under their units' ``PrivateUsers=yes``, which map only root and
    their own user and group (da3-edge, the daemon's group, is their primary group)."""
    return st.st_uid == _overflow_uid() and st.st_gid == os.getegid()


@functools.lru_cache(maxsize=1)
def _overflow_uid() -> int:
    """The uid an unmapped owner shows as (Linux: /proc/sys/kernel/overflowuid)."""
    try:
        return int(Path("/proc/sys/kernel/overflowuid").read_text())
    except (OSError, ValueError):
        return 65534


def refuse_unsafe(root: Path) -> None:
    """At start: a store that exists must pass ``check_root`` (one that does not yet is
    made by the daemon, in a place only its user can write: ``layout.default_store_dir``)."""
    if os.path.lexists(root):
        check_root(root)


def open_in(root: Path, *names: str) -> int:
    """A read-only fd of ``root/names...``: the root checked (``check_root``), each name
    opened from the directory before it without following a link, the last a regular
    file. OSError (UnsafeStore is one) when any of that fails."""
    fd = os.open(root, _DIR)
    try:
        check_root(root, os.fstat(fd))
        for name in names[:-1]:
            inner = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
        file = os.open(names[-1], _FILE, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file).st_mode):
        os.close(file)
        raise OSError(errno.EINVAL, "not a regular file", str(root.joinpath(*names)))
    return file


def read_in(root: Path, *names: str) -> bytes | None:
    """The bytes of ``root/names...`` as ``open_in`` opens it; None if that fails."""
    try:
        fd = open_in(root, *names)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def frame_names(seq: int, fmt: str) -> tuple[str, str, str]:
    """The names from a store's root to a frame's file of format ``fmt``."""
    return layout.FRAMES, f"{seq:010d}", layout.frame_file(Path(), fmt).name


def latest(root: Path) -> Published | None:
    """What ``root``/latest points at now (None: no frame yet, not a store, or a
    ``latest`` that points anywhere but ``frames/<10 digits>``)."""
    try:
        target = os.readlink(root / layout.LATEST)
    except OSError:
        return None
    found = _TARGET.fullmatch(target)
    if found is None:
        return None
    return Published(int(found.group(1)), root / layout.FRAMES / found.group(1))


def published_since(root: Path, before: int | None, newest: Published) -> list[Published]:
    """The frames published after frame ``before`` up to ``newest``, in order: two
    renames of ``latest`` between two looks at it are two frames (the ones still in
    the ring, at most 16 before ``newest``). Without ``before``, or when the numbers
    started again (a store made anew), ``newest`` only."""
    if before is None or newest.seq <= before:
        return [newest]
    between = []
    for seq in range(max(before + 1, newest.seq - 16), newest.seq):
        path = root / layout.FRAMES / f"{seq:010d}"
        if path.is_dir():
            between.append(Published(seq, path))
    return [*between, newest]


def read_json(root: Path, *names: str) -> dict[str, Any] | None:
    """A JSON object from a store's file the daemon renames into place (``read_in``);
    None if it is not there (yet, or pruned), not safe to read, or not an object."""
    raw = read_in(root, *names)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_record(root: Path, seq: int) -> dict[str, Any] | None:
    """A frame's record (frame.json), as ``read_json`` reads it."""
    return read_json(root, *frame_names(seq, "json"))


def read_store_id(root: Path) -> str | None:
    """The store's id (``store-id``: 16 hex digits, one line), or None when it is not
    there or not that (it goes into HTTP headers and event streams as it is)."""
    raw = read_in(root, layout.STORE_ID)
    text = raw.decode("ascii", "replace").strip() if raw is not None else ""
    return text if layout.STORE_ID_FORMAT.fullmatch(text) else None


class _Inotify:
    """The three libc calls, and the fd."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.fd = fd

    def add(self, path: Path) -> int:
        wd = int(self._add(self.fd, os.fsencode(path), _MASK))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
        return wd

    def events(self) -> list[tuple[int, int, str]]:
        """(wd, mask, name) of what is queued; [] when nothing is."""
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return []
        out, at = [], 0
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
            at += _EVENT.size
            name = data[at : at + length].rstrip(b"\0").decode(errors="replace")
            at += length
            out.append((wd, mask, name))
        return out

    def close(self) -> None:
        os.close(self.fd)


class Follower(Closing):
    """Which of ``latest`` and ``status.json`` changed in a store, as they change."""

    def __init__(self, root: Path, *, retry: float = 1.0) -> None:
        self.root = root
        self.retry = retry
        self._inotify: _Inotify | None = None
        try:
            self._inotify = _Inotify()
            self.mode = "inotify"
        except (OSError, AttributeError):  # no inotify: not Linux
            self.mode = "polling"
        self._wd: int | None = None
        self._next_try = 0.0
        self._seen = self._identity()
        self._watch()

    def fileno(self) -> int | None:
        """The inotify fd to wait on (None when polling)."""
        return self._inotify.fd if self._inotify is not None else None

    def _watch(self) -> bool:
        """Watch the root if not yet (True when watched)."""
        if self._inotify is None or self._wd is not None:
            return self._wd is not None
        now = time.monotonic()
        if now < self._next_try:
            return False
        try:
            self._wd = self._inotify.add(self.root)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                raise
            self._next_try = now + self.retry
            return False
        return True

    def _identity(self) -> tuple[str | None, tuple[int, int] | None]:
        try:
            target: str | None = os.readlink(self.root / layout.LATEST)
        except OSError:
            target = None
        try:
            st = os.stat(self.root / layout.STATUS)
            status: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except OSError:
            status = None
        return target, status

    def read(self) -> set[str]:
        """What changed since the last call, without waiting."""
        if self._inotify is None:
            return self._poll()
        changed: set[str] = set()
        was_watched = self._wd is not None
        for wd, mask, name in self._inotify.events():
            if mask & IN_Q_OVERFLOW:
                changed |= WATCHED
            elif wd == self._wd and mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                self._wd = None  # the root went: look for it again
                changed |= WATCHED
            elif name in WATCHED and mask & (IN_MOVED_TO | IN_CREATE):
                changed.add(name)
        if not was_watched and self._watch():
            changed |= WATCHED  # the root appeared: whatever is there is new
        return changed

    def _poll(self) -> set[str]:
        now = self._identity()
        names = (layout.LATEST, layout.STATUS)
        changed = {n for n, a, b in zip(names, now, self._seen, strict=True) if a != b}
        self._seen = now
        return changed

    def wait(self, timeout: float | None = None) -> set[str]:
        """Block until ``latest`` or ``status.json`` changes (or ``timeout``); what did."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            changed = self.read()
            if changed:
                return changed
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return set()
            if self._inotify is None or self._wd is None:
                time.sleep(min(self.retry, left) if left is not None else self.retry)
                continue
            select.select([self._inotify.fd], [], [], left)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
