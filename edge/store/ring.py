"""The frame store: a bounded ring of complete frame directories, and ``latest``.

Layout under the store root::

    frames/0000000042/        one directory per frame, named by store sequence
        frame.depth.png       \\
        frame.npz              | as `snap` writes them
        frame.preview.png      |
        frame.json            /  plus seq, timestamps, latency, provenance
    latest -> frames/0000000042

A frame is written into ``frames/.tmp-<seq>/`` and renamed into place when complete,
then ``latest`` is replaced by renaming a new symlink over it: a reader that follows
``latest`` or lists ``frames/`` never sees a partial frame, and a SIGKILL at any point
leaves at most a ``.tmp-*`` directory, removed at the next start. The ring keeps the
newest ``keep_frames`` frames and at most ``cap`` bytes: the oldest are deleted before a
new frame is renamed into place, so ``frames/`` never lists more (one frame too large for
the cap on its own, or ``keep_frames = 1``, still keeps the newest; ``latest`` always
points at a frame that is there).

The cap is ``max_bytes``, bounded by ``FS_SHARE`` of the filesystem the store is on:
``/run`` is a tmpfs sized from RAM (100-200 MB on a 1 GB Pi 5), shared with the rest of
the system. When the filesystem fills anyway (someone else's files), the oldest frames
are pruned, never ``latest``, the write is tried once more, and the cap shrinks to the
room found; it grows back, up to the fitted cap, as room comes back.

Optional persistence (``Persistence``) copies the newest frame to ``persist_dir`` at
most once every ``persist_every`` seconds (durably: flushed), keeping ``persist_keep``,
in a thread of its own: the RAM-backed ring takes the write load, the SD card sees a
trickle, and its stalls never reach the ring.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from edge import atomic, frames
from edge.config import StoreConfig
from edge.depth import DepthFrame
from edge.steady import Alignment
from edge.store import layout
from edge.store.layout import FRAMES, LATEST, STORE_ID
from edge.store.trust import check_root, read_store_id

log = logging.getLogger("edge.store")
FS_SHARE = 0.5  # of the filesystem's size, at most, for the ring
RECENT = 8  # frames whose largest size is the estimate of the next one's
BLOCK = 4096  # a filesystem block: a file's tail takes a whole one


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _free(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize


def _dir_bytes(path: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path):
            with contextlib.suppress(FileNotFoundError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


class FrameStore:
    def __init__(self, root: Path, config: StoreConfig) -> None:
        """The ring at ``root`` as the config's [store] section says (its ``dir`` is
        the caller's to resolve: ``root``)."""
        self.root = Path(root)
        self.frames_dir = self.root / FRAMES
        self.keep_frames = config.keep_frames
        self.max_bytes = max_bytes = config.max_bytes
        self.formats = tuple(dict.fromkeys((*config.formats, "json")))  # json is the record
        self.preview_max_side = config.preview_max_side
        self.persist = (
            Persistence(Path(config.persist_dir), config.persist_every, config.persist_keep)
            if config.persist_dir
            else None
        )
        self.fitted = self.cap = max_bytes  # the ring's byte bounds (see prepare)
        self._sizes: dict[int, int] = {}
        self._next_seq = 0
        self.ready = False
        self.instance = ""  # the store-id, once prepared

    def prepare(self) -> None:
        """Create the directories, drop leftovers of interrupted writes, index the
        ring. Raises OSError (read-only, no space); the daemon retries later; and
        UnsafeStore for a root that is a link, someone else's, or writable by others."""
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        check_root(self.root)
        self.frames_dir.mkdir(exist_ok=True)
        for entry in os.scandir(self.frames_dir):
            if entry.name.startswith(".tmp-"):
                shutil.rmtree(entry.path, ignore_errors=True)
        self._sizes = {}
        for entry in os.scandir(self.frames_dir):
            if entry.is_dir(follow_symlinks=False) and entry.name.isdigit():
                self._sizes[int(entry.name)] = _dir_bytes(Path(entry.path))
        # Never back within a run (frames/ removed under it: the writer prepares again).
        self._next_seq = max(max(self._sizes, default=-1) + 1, self._next_seq)
        for stale in self.root.glob(f".{LATEST}.*"):
            stale.unlink(missing_ok=True)
        self.instance = self._instance_id(anew=self._next_seq == 0)
        self.fitted = self.cap = self._fitted_cap()
        self.ready = True

    def probe(self) -> None:
        """Write and remove a file in the frames folder: OSError when this process
        cannot write there (a read-only mount, another owner, no space)."""
        path = self.frames_dir / f".tmp-probe-{os.getpid()}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, b"\0")
        finally:
            os.close(fd)
            os.unlink(path)

    def _fitted_cap(self) -> int:
        """``max_bytes``, or ``FS_SHARE`` of the filesystem's size where that is less."""
        fs = os.statvfs(self.root)
        share = int(fs.f_blocks * fs.f_frsize * FS_SHARE)
        if share >= self.max_bytes:
            return self.max_bytes
        if share == self.fitted:
            return share  # said at the first prepare; the writer prepares again after faults
        log.info(
            "store: %s is on a filesystem of %s: the ring keeps at most %s (%d%% of it), "
            "not store.max_bytes %s",
            self.root,
            _mib(fs.f_blocks * fs.f_frsize),
            _mib(share),
            FS_SHARE * 100,
            _mib(self.max_bytes),
        )
        return share

    def _instance_id(self, anew: bool) -> str:
        """This store's id (``store-id``): a store on /run is made anew at boot and its
        frame numbers start again at 0; the id says which store a number belongs to
        (serve's ETags). Made at the first prepare, and again whenever numbering starts
        at 0 (no frames: a frames/ removed while the daemon was stopped)."""
        path = self.root / STORE_ID
        text = None if anew else read_store_id(self.root)
        if text is not None:
            return text
        text = secrets.token_hex(8)
        atomic.write_bytes(path, (text + "\n").encode(), durable=False)
        return text

    @property
    def count(self) -> int:
        return len(self._sizes)

    @property
    def bytes(self) -> int:
        return sum(self._sizes.values())

    def write(
        self, frame: DepthFrame, record: dict[str, Any], steady: Alignment | None = None
    ) -> Path:
        """Publish one frame (its preview on ``steady``'s range when given); returns its
        directory. OSError leaves nothing behind."""
        if not self.ready:
            self.prepare()
        seq = self._next_seq
        # The JSON is snap's sidecar (summary, versions, random-init warning) plus
        # the daemon's record and the store sequence.
        blobs = frames.render(
            frame,
            self.formats,
            {**record, "store_seq": seq},
            preview_max_side=self.preview_max_side,
            steady=steady,
        )
        # The npz streams into its file: the recent frames' sizes are the estimate of
        # this one's (the largest: they vary with what the camera sees), with a block
        # a file and one for the folder, which the filesystem counts and st_size not.
        recent = [self._sizes[n] for n in sorted(self._sizes)[-RECENT:]]  # prepare: any order
        estimate = max(recent, default=0) + BLOCK * (len(blobs) + 1)
        try:
            final, size = self._put(seq, blobs, estimate)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self._make_room(estimate):
                raise
            final, size = self._put(seq, blobs, estimate)
        self._next_seq = seq + 1
        self._sizes[seq] = size
        self._point_latest(final.name)
        return final

    def _put(self, seq: int, blobs: dict[str, atomic.Data], estimate: int) -> tuple[Path, int]:
        """The frame's files under ``.tmp-SEQ``, renamed into place once the ring has
        room: ``frames/`` never lists more than the ring holds, not even for the instant
        between a rename and a prune. Returns the directory and its bytes."""
        name = layout.frame_name(seq)
        tmp = self.frames_dir / f".tmp-{name}"
        final = self.frames_dir / name
        try:
            self._prune(incoming=estimate)  # before writing: the room is the filesystem's
            tmp.mkdir()
            size = 0
            for fmt, data in blobs.items():
                with open(layout.frame_file(tmp, fmt), "wb") as fh:
                    atomic.put(fh, data)
                    size += fh.tell()
            self._prune(incoming=size)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final, size

    def _make_room(self, incoming: int) -> bool:
        """A write met a full filesystem: prune the oldest frames (never ``latest``),
        one at least (the frame did not fit, whatever ``incoming`` said), until
        ``incoming`` bytes are free, and keep the ring within that room. False when
        nothing could be pruned."""
        pruned = 0
        while len(self._sizes) > 1 and (not pruned or _free(self.root) < incoming):
            self._drop(min(self._sizes))
            pruned += 1
        if not pruned:
            return False
        cap = self.bytes + min(_free(self.root), incoming)
        if cap < self.cap:
            log.warning(
                "store: %s is full: pruned %d frame(s); the ring keeps at most %s until "
                "the store is prepared again",
                self.root,
                pruned,
                _mib(cap),
            )
            self.cap = cap
        return True

    def _point_latest(self, name: str) -> None:
        link = self.root / LATEST
        tmp = self.root / f".{LATEST}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(f"{FRAMES}/{name}", tmp)
        os.replace(tmp, link)

    def _prune(self, incoming: int) -> None:
        """Delete the oldest frames until one more of ``incoming`` bytes fits the ring."""
        if self.cap < self.fitted:  # shrunk by a full filesystem: grow into the room back
            room = self.bytes + _free(self.root) - incoming
            self.cap = min(self.fitted, max(self.cap, room))
        while self._sizes and (
            len(self._sizes) + 1 > self.keep_frames or self.bytes + incoming > self.cap
        ):
            if len(self._sizes) == 1:
                break  # never delete the frame `latest` points at
            self._drop(min(self._sizes))

    def _drop(self, seq: int) -> None:
        # Rename first so a reader listing frames/ never sees a half-deleted frame.
        doomed = self.frames_dir / f".tmp-del-{layout.frame_name(seq)}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.frames_dir / layout.frame_name(seq), doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        del self._sizes[seq]


class Persistence:
    """Copies of the newest frame on persistent storage (an SD card): at most one every
    ``every`` seconds, the newest ``keep`` kept.

    Apart from the ring: the copies have their own numbers, one past the highest in
    ``directory`` (the ring's restart with each new /run, so its numbers would collide
    with the copies of an earlier boot, and the new copies would be pruned as the
    oldest); a failure is its own (``failed``, ``state`` naming ``directory``), never
    the ring's, and the next try waits twice as long each time, up to 16x ``every``.

    The daemon's writer only ``offer``s a frame: its files are read then (from RAM,
    before the ring drops them) and copied by a thread of this object's own, so a card
    that stalls on a flush never holds up the ring, the live view or the watchdog;
    while a copy is under way the frames offered are passed over (one copy in memory
    at most). A copy is two flushes: its files' (one ``syncfs`` on Linux), then the
    rename's. ``maybe_copy`` does the same in the caller's thread.
    """

    def __init__(self, directory: Path, every: float, keep: int) -> None:
        self.directory = directory
        self.every = every
        self.keep = keep
        self.copied = 0
        self.failed = 0
        self.state: tuple[str, str | None] = ("starting", None)
        self._next_at = float("-inf")
        self._wait = every
        self._lock = threading.Lock()
        self._busy = False
        self._job: tuple[dict[str, bytes], float] | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def maybe_copy(self, frame_dir: Path, now: float | None = None) -> Path | None:
        """Copy ``frame_dir`` now if it is time; the copy, or None (not yet, or failed:
        counted, logged and in ``state``)."""
        now = time.monotonic() if now is None else now
        if now < self._next_at:
            return None
        try:
            files = _read_frame(frame_dir)
        except OSError:
            return None  # pruned by the ring already: the next frame will do
        return self._run(files, now)

    def offer(self, frame_dir: Path) -> bool:
        """``frame_dir`` to the copying thread if a copy is due and none is under way
        (True); never waits for the card."""
        now = time.monotonic()
        with self._lock:
            if self._busy or self._closed or now < self._next_at:
                return False
            self._busy = True
        try:
            files = _read_frame(frame_dir)
        except OSError:
            with self._lock:
                self._busy = False
            return False
        self._job = (files, now)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="persist", daemon=True)
            self._thread.start()
        self._wake.set()
        return True

    def busy(self) -> bool:
        with self._lock:
            return self._busy

    def close(self) -> None:
        """No more copies; one under way finishes in its thread (a daemon thread: it
        never holds up the process's exit, and a copy cut short is a .tmp- folder the
        next copy removes)."""
        self._closed = True
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            job, self._job = self._job, None
            if job is not None:
                self._run(*job)
                with self._lock:
                    self._busy = False
            if self._closed:
                return

    def _run(self, files: dict[str, bytes], now: float) -> Path | None:
        try:
            target = self._copy(files)
        except OSError as exc:
            self.failed += 1
            self._wait = min(self._wait * 2, 16 * self.every)
            self._next_at = now + self._wait
            self.state = ("failing", f"{self.directory}: {exc.strerror or exc}")
            log.error(
                "store: cannot persist a frame to %s (%s); next try in %.0f s",
                self.directory,
                exc.strerror or exc,
                self._wait,
            )
            return None
        if self.state[0] == "failing":
            log.info("store: persisting to %s again", self.directory)
        self.copied += 1
        self.state = ("ok", None)
        self._wait = self.every
        self._next_at = now + self.every
        return target

    def _copy(self, files: dict[str, bytes]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        listed = [p.name for p in self.directory.iterdir()]
        for stale in (n for n in listed if n.startswith(".tmp-")):  # a copy cut short
            shutil.rmtree(self.directory / stale, ignore_errors=True)
        kept = sorted(n for n in listed if layout.is_frame_name(n))
        name = layout.frame_name(int(kept[-1]) + 1 if kept else 0)
        target = self.directory / name
        tmp = self.directory / f".tmp-{name}"
        try:
            tmp.mkdir()
            for file, data in files.items():
                (tmp / file).write_bytes(data)
            flush(tmp, list(files))  # the data on the card before the name points at it
            os.rename(tmp, target)
            atomic.fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in kept[: max(0, len(kept) + 1 - self.keep)]:
            shutil.rmtree(self.directory / old, ignore_errors=True)
        return target


def _read_frame(frame_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in frame_dir.iterdir()}


def flush(directory: Path, names: list[str]) -> None:
    """The files ``names`` in ``directory`` on their device: one syncfs on Linux (the
    filesystem's whole write-back, in one call rather than one fsync a file), else an
    fsync of each and of the folder."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        syncfs = _syncfs()
        if syncfs is not None and syncfs(fd) == 0:
            return
        for name in names:
            file = os.open(directory / name, os.O_RDONLY)
            try:
                os.fsync(file)
            finally:
                os.close(file)
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """The C library's syncfs(2), or None (not Linux, or a libc without it)."""
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return cast(Callable[[int], int], function)
