"""The store as serve sees it: the newest frame and the daemon's status, pushed.

``Hub`` runs on serve's event loop. A ``Follower`` (edge/store/follow.py) tells it when
``latest`` or ``status.json`` changes (its inotify fd is a loop reader; when
polling, a task); each new frame's record goes to every subscriber of ``/events``.
A subscriber's queue holds a few events: one that falls behind is dropped, never
allowed to grow serve's memory or slow the others. At most ``clients`` subscribers
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.store import layout
from edge.store.follow import Follower
from edge.store.read import (
    Published,
    frame_names,
    latest,
    published_since,
    read_json,
    read_record,
)
from edge.store.trust import read_in, read_store_id

log = logging.getLogger("edge.serve")
QUEUE = 4  # events a subscriber may fall behind by before it is dropped
# What a JPEG of a frame shows: the depth preview, the scene (the "rgb" output), or both
# side by side.
VIEWS = ("depth", "rgb", "side")


@dataclass(frozen=True)
class Newest:
    """The frame ``latest`` points at, with its record (frame.json)."""

    seq: int
    path: Path
    record: dict[str, Any]
    store_id: str

    @property
    def etag(self) -> str:
        return f'"{self.store_id}-{self.seq}"'


class Subscriber:
    def __init__(self, kind: str = "events", client: str = "") -> None:
        self.queue: asyncio.Queue[Newest | None] = asyncio.Queue(QUEUE)
        self.kind = kind  # "events" or "stream"
        self.client = client  # the peer's address


class Hub:
    def __init__(self, root: Path, clients: int) -> None:
        self.root = root
        self.clients = clients
        self.newest: Newest | None = None
        self.subscribers: set[Subscriber] = set()
        self.observers: list[Callable[[Newest], None]] = []  # called for every new frame
        self._jpegs: dict[tuple[str, str], bytes] = {}  # (etag, view) -> JPEG, one frame
        self._jpeg_lock = asyncio.Lock()
        self._follower: Follower | None = None
        self._poller: asyncio.Task[None] | None = None

    # -- reading the store -----------------------------------------------------------
    def read_newest(self) -> Newest | None:
        """The frame ``latest`` points at now; None if none, or pruned meanwhile."""
        for _ in range(3):  # pruned between readlink and read: resolve again
            published = latest(self.root)
            if published is None:
                return None
            record = read_record(self.root, published.seq)
            if record is not None:
                return Newest(published.seq, published.path, record, self.store_id())
        return None

    def store_id(self) -> str:
        return read_store_id(self.root) or "0"

    def status(self) -> dict[str, Any] | None:
        return read_json(self.root, layout.STATUS)

    async def jpeg(self, newest: Newest, view: str = "depth") -> bytes | None:
        """The frame as JPEG in ``view`` (VIEWS), made once whoever asks; None when the
        store does not write what the view needs (store.formats), or it was pruned."""
        async with self._jpeg_lock:
            key = (newest.etag, view)
            if key in self._jpegs:
                return self._jpegs[key]
            png = scene = None
            if view != "rgb":
                png = read_in(self.root, *frame_names(newest.seq, "preview"))
            if view != "depth":
                scene = read_in(self.root, *frame_names(newest.seq, "rgb"))
            if view == "rgb":
                data = scene
            elif view == "depth":
                data = await asyncio.to_thread(_to_jpeg, png) if png is not None else None
            elif png is not None and scene is not None:
                data = await asyncio.to_thread(_side_by_side, png, scene)
            else:
                data = None
            if data is None:
                return None
            if any(etag != newest.etag for etag, _ in self._jpegs):
                self._jpegs.clear()  # one frame's JPEGs at a time
            self._jpegs[key] = data
            return data

    # -- following -------------------------------------------------------------------
    async def start(self) -> None:
        self._follower = follower = Follower(self.root)
        self.newest = self.read_newest()
        fd = follower.fileno()
        if fd is not None:
            asyncio.get_running_loop().add_reader(fd, self._on_change)
            # The root may not exist yet: inotify cannot watch it until it does.
            self._poller = asyncio.create_task(self._retry_watch())
        else:
            self._poller = asyncio.create_task(self._poll())
        log.info("following %s (%s)", self.root, follower.mode)

    async def _retry_watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._on_change()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            self._on_change()

    def _on_change(self) -> None:
        assert self._follower is not None
        changed = self._follower.read()
        if layout.LATEST not in changed:
            return
        newest = self.read_newest()
        if newest is None or (self.newest is not None and newest.etag == self.newest.etag):
            return
        for item in self._since(self.newest, newest):
            for observe in self.observers:
                observe(item)
            for sub in list(self.subscribers):
                try:
                    sub.queue.put_nowait(item)
                except asyncio.QueueFull:
                    self._drop(sub)
        self.newest = newest

    def _since(self, before: Newest | None, newest: Newest) -> list[Newest]:
        """The frames published after ``before`` up to ``newest``, in order."""
        after = before.seq if before is not None and before.store_id == newest.store_id else None
        out = []
        for item in published_since(self.root, after, Published(newest.seq, newest.path)):
            if item.seq == newest.seq:
                out.append(newest)
            elif (record := read_record(self.root, item.seq)) is not None:
                out.append(Newest(item.seq, item.path, record, newest.store_id))
        return out

    def _drop(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        with contextlib.suppress(asyncio.QueueEmpty):
            sub.queue.get_nowait()
        sub.queue.put_nowait(None)  # wakes it to leave

    def subscribe(self, kind: str = "events", client: str = "") -> Subscriber | None:
        """A new subscriber, or None when there is no slot for it. Of the ``clients``
        slots, MJPEG streams (heavy, and any plain ``curl`` holds one) may take all but
        a quarter (kept for the page's events) and at most ``per_address`` from one
        address; one address takes at most all but a quarter of them, whatever their
        kind (``per_address_any``), so another address's page finds a slot."""
        if len(self.subscribers) >= self.clients:
            return None
        if sum(s.client == client for s in self.subscribers) >= self.per_address_any:
            return None
        if kind == "stream":
            streams = [s for s in self.subscribers if s.kind == "stream"]
            mine = sum(s.client == client for s in streams)
            if len(streams) >= self.clients - max(1, self.clients // 4) or mine >= self.per_address:
                return None
        sub = Subscriber(kind, client)
        self.subscribers.add(sub)
        return sub

    @property
    def per_address_any(self) -> int:
        """Subscriptions of any kind one address may hold: all but a quarter of the
        slots (all of one slot)."""
        return max(1, self.clients - max(1, self.clients // 4))

    @property
    def per_address(self) -> int:
        """Streams one address may hold (behind a reverse proxy every client is one)."""
        return max(2, self.clients // 4)

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        if self._follower is not None:
            fd = self._follower.fileno()
            if fd is not None:
                asyncio.get_running_loop().remove_reader(fd)
            self._follower.close()
        for sub in list(self.subscribers):
            self._drop(sub)


def _to_jpeg(png: bytes) -> bytes:
    from PIL import Image  # only once a JPEG is asked for: a few MiB

    with Image.open(io.BytesIO(png)) as image:
        out = io.BytesIO()
        image.convert("RGB").save(out, "JPEG", quality=85)
        return out.getvalue()


def _side_by_side(png: bytes, jpeg: bytes) -> bytes:
    """The scene (left) and its depth preview (right), at the preview's height."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as depth, Image.open(io.BytesIO(jpeg)) as scene:
        h = depth.height
        scene_w = max(1, round(scene.width * h / scene.height))
        both = Image.new("RGB", (scene_w + depth.width, h))
        both.paste(scene.convert("RGB").resize((scene_w, h), Image.Resampling.BILINEAR), (0, 0))
        both.paste(depth.convert("RGB"), (scene_w, 0))
    out = io.BytesIO()
    both.save(out, "JPEG", quality=85)
    return out.getvalue()


__all__ = ["VIEWS", "Hub", "Newest", "Published", "Subscriber"]
