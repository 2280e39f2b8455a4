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
newest ``keep_frames`` frames and at most ``max_bytes``: the oldest are deleted before a
new frame is renamed into place, so ``frames/`` never lists more (one frame too large for
``max_bytes`` on its own, or ``keep_frames = 1``, still keeps the newest; ``latest``
always points at a frame that is there).

Optional persistence copies the newest frame to ``persist_dir`` at most once every
``persist_every`` seconds (durably: fsync), keeping ``persist_keep``: the RAM-backed
ring takes the write load, the SD card sees a trickle.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from edge import atomic, frames, layout
from edge.depth import DepthFrame
from edge.follow import check_root, read_store_id
from edge.layout import FRAMES, LATEST, STORE_ID
from edge.layout import default_store_dir as default_store_dir  # re-exported


def _dir_bytes(path: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path):
            with contextlib.suppress(FileNotFoundError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


class FrameStore:
    def __init__(
        self,
        root: Path,
        *,
        keep_frames: int = 100,
        max_bytes: int = 256 << 20,
        formats: tuple[str, ...] = frames.DEFAULT_FORMATS,
        preview_max_side: int = 0,
        persist_dir: Path | None = None,
        persist_every: float = 60.0,
        persist_keep: int = 100,
    ) -> None:
        self.root = Path(root)
        self.frames_dir = self.root / FRAMES
        self.keep_frames = keep_frames
        self.max_bytes = max_bytes
        self.formats = tuple(dict.fromkeys((*formats, "json")))  # json is the record
        self.preview_max_side = preview_max_side
        self.persist_dir = persist_dir
        self.persist_every = persist_every
        self.persist_keep = persist_keep
        self._sizes: dict[int, int] = {}
        self._next_seq = 0
        self._last_persist = float("-inf")
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
        self._next_seq = max(self._sizes, default=-1) + 1
        for stale in self.root.glob(f".{LATEST}.*"):
            stale.unlink(missing_ok=True)
        self.instance = self._instance_id()
        if self.persist_dir is not None:
            self.persist_dir.mkdir(parents=True, exist_ok=True)
        self.ready = True

    def _instance_id(self) -> str:
        """This store's id (``store-id``, made at its first prepare): a store on /run is
        made anew at boot and its frame numbers start again at 0; the id says which
        store a number belongs to (serve's ETags)."""
        path = self.root / STORE_ID
        text = read_store_id(self.root)
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

    def write(self, frame: DepthFrame, record: dict[str, Any]) -> Path:
        """Publish one frame; returns its directory. OSError leaves nothing behind."""
        if not self.ready:
            self.prepare()
        seq = self._next_seq
        name = f"{seq:010d}"
        tmp = self.frames_dir / f".tmp-{name}"
        final = self.frames_dir / name
        try:
            tmp.mkdir()
            # The JSON is snap's sidecar (summary, versions, random-init warning) plus
            # the daemon's record and the store sequence.
            blobs = frames.render(
                frame,
                self.formats,
                {**record, "store_seq": seq},
                preview_max_side=self.preview_max_side,
            )
            size = 0
            for fmt, data in blobs.items():
                with open(layout.frame_file(tmp, fmt), "wb") as fh:
                    atomic.put(fh, data)
                    size += fh.tell()
            # Room first, then publish: frames/ never lists more than the ring holds,
            # not even for the instant between this frame's rename and a prune.
            self._prune(incoming=size)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._next_seq = seq + 1
        self._sizes[seq] = size
        self._point_latest(name)
        return final

    def _point_latest(self, name: str) -> None:
        link = self.root / LATEST
        tmp = self.root / f".{LATEST}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(f"{FRAMES}/{name}", tmp)
        os.replace(tmp, link)

    def _prune(self, incoming: int) -> None:
        """Delete the oldest frames until one more of ``incoming`` bytes fits the ring."""
        while self._sizes and (
            len(self._sizes) + 1 > self.keep_frames or self.bytes + incoming > self.max_bytes
        ):
            if len(self._sizes) == 1:
                break  # never delete the frame `latest` points at
            oldest = min(self._sizes)
            # Rename first so a reader listing frames/ never sees a half-deleted frame.
            doomed = self.frames_dir / f".tmp-del-{oldest:010d}"
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.frames_dir / f"{oldest:010d}", doomed)
            shutil.rmtree(doomed, ignore_errors=True)
            del self._sizes[oldest]

    def maybe_persist(self, frame_dir: Path, now: float | None = None) -> Path | None:
        """Copy ``frame_dir`` to persistent storage if it is time; None otherwise."""
        if self.persist_dir is None:
            return None
        now = time.monotonic() if now is None else now
        if now - self._last_persist < self.persist_every:
            return None
        target = self.persist_dir / frame_dir.name
        tmp = self.persist_dir / f".tmp-{frame_dir.name}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for src in frame_dir.iterdir():
                atomic.write_bytes(tmp / src.name, src.read_bytes(), durable=True)
            os.rename(tmp, target)
            atomic.fsync_dir(self.persist_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._last_persist = now
        kept = sorted(p for p in self.persist_dir.iterdir() if p.name.isdigit())
        for old in kept[: max(0, len(kept) - self.persist_keep)]:
            shutil.rmtree(old, ignore_errors=True)
        return target
