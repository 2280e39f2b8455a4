"""Following a frame store as the daemon publishes: inotify, not polling.

The daemon publishes a frame by renaming a new ``latest`` symlink over the old one,
and ``status.json`` by renaming a new file over it (edge/store/ring.py,
edge/daemon/status.py); both are an ``IN_MOVED_TO`` in the store's root. ``Follower``
watches the root for them and says which of the two changed. A root that does not
exist yet (the daemon not started) or goes away (a store on /run made anew) is
looked for again every ``retry`` seconds, and reported as a change of both.

Linux's inotify is reached through libc (ctypes; no dependency). Where there is no
inotify (macOS, for development) it falls back to comparing ``latest``'s target and
``status.json``'s identity every ``retry`` seconds, and says so in ``mode``.

``Follower`` is for one thread at a time: ``wait`` blocks; an asyncio caller
(``da3-edge serve``) registers ``fileno()`` with its loop and calls ``read()``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import time
from pathlib import Path

from edge.closing import Closing
from edge.store import layout

IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_IGNORED = 0x8000
IN_Q_OVERFLOW = 0x4000
_MASK = IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
WATCHED = frozenset({layout.LATEST, layout.STATUS})


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
