"""Whether a store can be trusted, and opening its files without being led elsewhere.

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

import errno
import functools
import os
import stat
from pathlib import Path

from edge.errors import UnsafeStore
from edge.store import layout

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


def store_to_read(given: str | None, configured: str) -> Path:
    """The store a consumer (serve, publish) reads: ``given`` (--store), else
    ``configured`` (store.dir), else the daemon's default; UnsafeStore, in one line,
    when one that exists cannot be trusted."""
    root = Path(given or configured or layout.default_store_dir())
    refuse_unsafe(root)
    return root


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


def read_store_id(root: Path) -> str | None:
    """The store's id (``store-id``: 16 hex digits, one line), or None when it is not
    there or not that (it goes into HTTP headers and event streams as it is)."""
    raw = read_in(root, layout.STORE_ID)
    text = raw.decode("ascii", "replace").strip() if raw is not None else ""
    return text if layout.STORE_ID_FORMAT.fullmatch(text) else None
