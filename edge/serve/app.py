"""serve's HTTP surface: read-only, over the files in the store (docs/reference/serve.md).

No endpoint writes anything and no path comes from the request: each route names
one file of the newest frame or the store. A frame pruned while it is being sent
stays readable (it was opened first); one pruned before that is resolved again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from edge.config import ServeConfig
from edge.errors import UnsafeStore
from edge.serve.cloud import Clouds, Refused
from edge.serve.hub import VIEWS, Hub, Newest, Subscriber
from edge.serve.metrics import Metrics
from edge.store import layout
from edge.store.read import frame_names, read_record
from edge.store.trust import check_root, open_in

NO_STORE = {"Cache-Control": "no-store"}
BOUNDARY = b"da3edgeframe"
PAGE = resources.files("edge").joinpath("data/live.html").read_text()
CSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'"
CHUNK = 256 * 1024
FILES = {  # route -> (format, media type)
    "/latest.png": ("png", "image/png"),
    "/latest.npz": ("npz", "application/octet-stream"),
    "/latest.preview.png": ("preview", "image/png"),
    "/latest.rgb.jpg": ("rgb", "image/jpeg"),
}


def _unavailable(reason: str) -> PlainTextResponse:
    return PlainTextResponse(reason + "\n", 503, headers={**NO_STORE, "Retry-After": "1"})


def _not_modified(request: Request, newest: Newest) -> bool:
    given = request.headers.get("if-none-match", "")
    return newest.etag in (tag.strip() for tag in given.split(","))


def _view(request: Request) -> str | Response:
    """``?view=`` (depth when absent), or the 400 that says which there are."""
    view = request.query_params.get("view", "depth")
    if view in VIEWS:
        return view
    return PlainTextResponse(f"view must be one of {', '.join(VIEWS)}\n", 400, headers=NO_STORE)


def _no_jpeg(view: str) -> Response:
    needs = "preview" if view == "depth" else "rgb" if view == "rgb" else "preview and rgb"
    return _unavailable(f"no {view} view of the newest frame (store.formats needs {needs})")


def _headers(newest: Newest) -> dict[str, str]:
    return {**NO_STORE, "ETag": newest.etag, "X-Frame-Seq": str(newest.seq)}


class _OpenFile(Response):
    """An open frame file sent whole, then closed and its download slot given back,
    however the send ends: a client that is gone before the first byte as well (a
    generator never started would keep both)."""

    def __init__(
        self, fd: int, sending: asyncio.Semaphore, media_type: str, headers: dict[str, str]
    ) -> None:
        super().__init__(media_type=media_type, headers=headers)
        self.fd, self.sending = fd, sending

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if scope["method"] != "HEAD":
                while chunk := await asyncio.to_thread(os.read, self.fd, CHUNK):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            os.close(self.fd)
            self.sending.release()


@dataclass(frozen=True)
class Served:
    """What the endpoints share: on the app's state (``request.app.state.served``)."""

    root: Path
    hub: Hub
    metrics: Metrics
    config: ServeConfig
    status_every: float  # the daemon's, for how old a status may be
    sending: asyncio.Semaphore  # file downloads at once (serve.downloads): each holds a file
    clouds: Clouds  # /latest.ply: the newest frame's point cloud, made once


def make_app(root: Path, config: ServeConfig, *, status_every: float) -> Starlette:
    """The app over the store at ``root``; see the module docstring."""
    hub = Hub(root, config.clients)
    sending = asyncio.Semaphore(config.downloads)
    served = Served(root, hub, Metrics(hub), config, status_every, sending, Clouds(root))
    app = Starlette(routes=ROUTES, lifespan=_lifespan)
    app.state.served = served
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    hub = app.state.served.hub
    await hub.start()
    try:
        yield
    finally:
        await hub.stop()


def _served(request: Request) -> Served:
    served: Served = request.app.state.served
    return served


def newest_or_503(served: Served) -> Newest | Response:
    """The newest frame, or the 503 that says why there is none."""
    newest = served.hub.read_newest()
    if newest is not None:
        return newest
    root = served.root
    if not root.is_dir():
        return _unavailable(f"no store at {root}")
    try:
        check_root(root)
    except UnsafeStore as exc:
        return _unavailable(str(exc))
    if os.path.lexists(root / layout.LATEST):
        return _unavailable("the newest frame is gone (the store is being pruned or made anew)")
    return _unavailable("no frame in the store yet")


def frame_or_answer(request: Request) -> Newest | Response:
    """The newest frame, or the answer instead of it: 503 (none), 304 (unchanged)."""
    newest = newest_or_503(_served(request))
    if isinstance(newest, Newest) and _not_modified(request, newest):
        return Response(status_code=304, headers=_headers(newest))
    return newest


async def latest_json(request: Request) -> Response:
    newest = frame_or_answer(request)
    if isinstance(newest, Response):
        return newest
    return JSONResponse(newest.record, headers=_headers(newest))


def _downloads_full(served: Served) -> Response | None:
    """The 503 when serve.downloads are all taken, else None."""
    if not served.sending.locked():
        return None
    downloads = served.config.downloads
    return _unavailable(f"too many downloads at once (serve.downloads = {downloads})")


async def latest_file(request: Request) -> Response:
    served = _served(request)
    fmt, media = FILES[request.url.path]
    for _ in range(3):
        newest = frame_or_answer(request)
        if isinstance(newest, Response):
            return newest
        if (full := _downloads_full(served)) is not None:
            return full
        try:
            fd = open_in(served.root, *frame_names(newest.seq, fmt))
        except FileNotFoundError:
            if read_record(served.root, newest.seq) is None:
                continue  # pruned meanwhile: the next newest
            return _unavailable(f"this store does not write {fmt} (store.formats)")
        except OSError as exc:  # a link, a FIFO, a directory: never followed or served
            return _unavailable(f"frame {newest.seq}'s {fmt} is not a plain file ({exc})")
        size = os.fstat(fd).st_size
        headers = {**_headers(newest), "Content-Length": str(size)}
        await served.sending.acquire()
        return _OpenFile(fd, served.sending, media, headers)
    return _unavailable("frames are being pruned faster than they can be read")


async def latest_ply(request: Request) -> Response:
    """The newest frame as a point cloud (edge.serve.cloud), made on request: 404 with
    the reason when it has no field of view or the store keeps no depth."""
    served = _served(request)
    for _ in range(3):
        newest = frame_or_answer(request)
        if isinstance(newest, Response):
            return newest
        if (full := _downloads_full(served)) is not None:
            return full
        try:
            async with served.sending:
                data = await served.clouds.ply(newest)
        except Refused as exc:
            if exc.gone:
                continue
            return PlainTextResponse(f"{exc}\n", 404, headers=_headers(newest))
        return Response(data, media_type="application/octet-stream", headers=_headers(newest))
    return _unavailable("frames are being pruned faster than they can be read")


async def latest_jpg(request: Request) -> Response:
    view = _view(request)
    if isinstance(view, Response):
        return view
    newest = frame_or_answer(request)
    if isinstance(newest, Response):
        return newest
    data = await _served(request).hub.jpeg(newest, view)
    if data is None:
        return _no_jpeg(view)
    return Response(data, media_type="image/jpeg", headers=_headers(newest))


def _peer(request: Request) -> str:
    """The client's address, as the slots count it."""
    return str((request.client.host if request.client else "") or "?")


async def stream_mjpg(request: Request) -> Response:
    view = _view(request)
    if isinstance(view, Response):
        return view
    hub = _served(request).hub
    first = newest_or_503(_served(request))  # nothing to show yet: say why, as elsewhere
    if isinstance(first, Response):
        return first
    if await hub.jpeg(first, view) is None:
        return _no_jpeg(view)
    sub = hub.subscribe("stream", _peer(request))
    if sub is None:
        return _unavailable(
            f"too many streams (serve.clients = {hub.clients}: at most {hub.per_address} from "
            "one address, a quarter kept for events)"
        )
    media = f"multipart/x-mixed-replace; boundary={BOUNDARY.decode()}"
    return StreamingResponse(_parts(hub, sub, first, view), media_type=media, headers=NO_STORE)


async def _parts(hub: Hub, sub: Subscriber, first: Newest, view: str) -> AsyncIterator[bytes]:
    """The MJPEG stream's parts. Each is followed by the next boundary at once: a
    browser shows a part when it sees the boundary after it, not when the next frame
    comes."""
    try:
        yield b"--" + BOUNDARY + b"\r\n"
        item: Newest | None = first
        while True:
            data = await hub.jpeg(item, view) if item is not None else None
            if data is not None:
                head = f"Content-Type: image/jpeg\r\nContent-Length: {len(data)}\r\n\r\n"
                yield head.encode() + data + b"\r\n--" + BOUNDARY + b"\r\n"
            item = await sub.queue.get()
            while not sub.queue.empty():  # behind: only the newest is worth sending
                item = sub.queue.get_nowait()
            if item is None:
                return  # dropped, or serve is stopping
    finally:
        hub.unsubscribe(sub)


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE, headers={**NO_STORE, "Content-Security-Policy": CSP})


async def metrics_text(request: Request) -> Response:
    registry = _served(request).metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def api_status(request: Request) -> Response:
    served = _served(request)
    status = served.hub.status()
    if status is None:
        return _unavailable(f"no {layout.STATUS} in {served.root}: the daemon has not run here")
    # The page's clock may not be this machine's: it reads frame ages against this.
    return JSONResponse(status, headers={**NO_STORE, "X-Server-Time": f"{time.time():.3f}"})


async def healthz(request: Request) -> Response:
    served = _served(request)
    healthy, reason = health(
        served.hub, max_age=served.config.max_age, status_every=served.status_every
    )
    return PlainTextResponse(reason + "\n", 200 if healthy else 503, headers=NO_STORE)


async def events(request: Request) -> Response:
    hub = _served(request).hub
    sub = hub.subscribe("events", _peer(request))
    if sub is None:
        return _unavailable(
            f"too many clients (serve.clients = {hub.clients}: at most {hub.per_address_any} "
            "from one address)"
        )
    headers = {**NO_STORE, "X-Accel-Buffering": "no"}
    return StreamingResponse(_events(hub, sub), media_type="text/event-stream", headers=headers)


async def _events(hub: Hub, sub: Subscriber) -> AsyncIterator[bytes]:
    """Server-sent events: one per frame, a comment every 15 s to keep proxies open."""
    try:
        yield b"retry: 2000\n\n"
        while True:
            try:
                item = await asyncio.wait_for(sub.queue.get(), 15.0)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if item is None:
                return  # dropped: too slow, or serve is stopping
            data = json.dumps(item.record, separators=(",", ":"))
            event_id = item.etag.strip('"')
            yield f"id: {event_id}\nevent: frame\ndata: {data}\n\n".encode()
    finally:
        hub.unsubscribe(sub)


ROUTES = [
    Route("/", page),
    Route("/stream.mjpg", stream_mjpg),
    Route("/metrics", metrics_text),
    Route("/latest.json", latest_json),
    Route("/latest.jpg", latest_jpg),
    *(Route(path, latest_file) for path in FILES),
    Route("/latest.ply", latest_ply),
    Route("/api/status", api_status),
    Route("/healthz", healthz),
    Route("/events", events),
]


FUTURE_S = 2.0  # a stamp further ahead than this is no proof of freshness


def health(hub: Hub, *, max_age: float, status_every: float) -> tuple[bool, str]:
    """(healthy, why): the daemon running, reporting, and its newest frame fresh."""
    status = hub.status()
    if status is None:
        return False, f"daemon not running: no {layout.STATUS} in {hub.root}"
    state = status.get("state")
    if state not in ("running", "reloading"):  # a reload keeps the running model writing
        return False, f"daemon {state}"
    updated = status.get("updated_at_unix")
    stale_after = 3 * status_every + 2
    now = time.time()
    if not isinstance(updated, (int, float)) or not -FUTURE_S <= now - updated <= stale_after:
        return False, f"daemon not reporting: {layout.STATUS} older than {stale_after:g} s"
    newest = hub.read_newest()
    written = newest.record.get("t_written") if newest is not None else None
    if isinstance(written, (int, float)) and now - written < -FUTURE_S:
        return False, f"newest frame stamped {written - now:.0f} s in the future: a clock moved"
    if not isinstance(written, (int, float)) or now - written > max_age:
        age = "no frame yet" if written is None else f"newest frame {now - written:.1f} s old"
        cam, store = status.get("camera", {}), status.get("store", {})
        return False, (
            f"{age} (serve.max_age {max_age:g} s); camera {_said(cam)}, store {_said(store)}"
        )
    assert newest is not None
    during = "; reloading" if state == "reloading" else ""
    return True, f"ok: frame {newest.seq}, {now - written:.1f} s old{during}"


def _said(part: Any) -> str:
    if not isinstance(part, dict):
        return "unknown"
    reason = part.get("reason")
    return f"{part.get('state')}" + (f" ({reason})" if reason else "")
