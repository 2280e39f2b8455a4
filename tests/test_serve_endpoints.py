"""serve's endpoints one at a time: each handler called with Starlette's own Request
on a store written by hand, no server, no daemon (tests/test_serve.py runs the real
process; tests/test_serve_hostile.py the hostile clients)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import plyfile
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from edge import frames
from edge.config import ServeConfig
from edge.fov import FieldOfView
from edge.serve import app as served_app
from edge.version import version
from scripts.support.scene import WALL_Z, angle, plane_normal
from scripts.support.store import STORE_ID, board_store, store

Handler = Callable[[Request], Awaitable[Response]]


def app_over(root: Path, **serve: Any) -> Starlette:
    return served_app.make_app(root, ServeConfig(**serve), status_every=1.0)


def request(app: Starlette, path: str, query: str = "", **headers: str) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
        "app": app,
        "client": ("127.0.0.1", 50000),
    }
    return Request(scope)


def handler(app: Starlette, path: str) -> Handler:
    """The endpoint the app routes ``path`` to (so a route table that lost one fails)."""
    endpoint: Handler = next(
        r.endpoint for r in app.routes if isinstance(r, Route) and r.path == path
    )
    return endpoint


async def sent(response: Response) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body as an ASGI server would send them."""
    messages: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    await response({"type": "http", "method": "GET"}, receive, send)
    start = messages[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in messages[1:])


def answer(
    app: Starlette, path: str, query: str = "", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    async def call() -> tuple[int, dict[str, str], bytes]:
        return await sent(await handler(app, path)(request(app, path, query, **headers)))

    return asyncio.run(call())


def test_latest_json_is_the_newest_record_and_304_when_unchanged(tmp_path: Path) -> None:
    app = app_over(store(tmp_path, seq=7))
    code, headers, body = answer(app, "/latest.json")
    assert code == 200 and json.loads(body)["store_seq"] == 7
    assert headers["x-frame-seq"] == "7" and STORE_ID in headers["etag"]
    assert answer(app, "/latest.json", if_none_match=headers["etag"])[0] == 304


def test_latest_file_sends_the_file_whole_and_gives_its_slot_back(tmp_path: Path) -> None:
    app = app_over(store(tmp_path), downloads=1)
    for _ in range(2):  # the only slot is back after each download
        code, headers, body = answer(app, "/latest.npz")
        assert (code, body, headers["content-length"]) == (200, b"NPZ", "3")
    code, _, body = answer(app, "/latest.png")
    assert code == 503 and body == b"this store does not write png (store.formats)\n"


def test_latest_jpg_says_which_view_it_cannot_make(tmp_path: Path) -> None:
    app = app_over(store(tmp_path))  # a record and an npz: no preview, no scene
    code, _, body = answer(app, "/latest.jpg")
    assert (
        code == 503 and b"no depth view of the newest frame (store.formats needs preview)" in body
    )
    code, _, body = answer(app, "/latest.jpg", "view=thermal")
    assert code == 400 and body.startswith(b"view must be one of depth")


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/latest.json", b"no frame in the store yet"),
        ("/stream.mjpg", b"no frame in the store yet"),
        ("/api/status", b"no status.json in"),
        ("/healthz", b"daemon not running: no status.json"),
    ],
)
def test_an_empty_store_is_a_503_that_says_why(tmp_path: Path, path: str, says: bytes) -> None:
    (tmp_path / "store" / "frames").mkdir(parents=True)
    code, headers, body = answer(app_over(tmp_path / "store"), path)
    assert code == 503 and says in body and headers["cache-control"] == "no-store", body


def test_status_and_health_read_the_daemons_status(tmp_path: Path) -> None:
    root = store(tmp_path)
    (root / "status.json").write_text(json.dumps({"state": "stopping", "updated_at_unix": 0}))
    code, headers, body = answer(app_over(root), "/api/status")
    assert code == 200 and json.loads(body)["state"] == "stopping" and "x-server-time" in headers
    assert answer(app_over(root), "/healthz")[:3:2] == (503, b"daemon stopping\n")


def test_the_page_and_the_metrics(tmp_path: Path) -> None:
    app = app_over(store(tmp_path))
    code, headers, body = answer(app, "/")
    assert code == 200 and b"<html" in body and "script-src" in headers["content-security-policy"]
    code, headers, body = answer(app, "/metrics")
    assert code == 200 and headers["content-type"].startswith("text/plain")
    assert f'version="{version()}"}} 1.0'.encode() in body  # da3edge_build_info


def test_events_and_streams_take_a_slot_each_and_refuse_beyond_them(tmp_path: Path) -> None:
    app = app_over(store(tmp_path), clients=1)

    async def call() -> tuple[Response, Response]:
        first = await handler(app, "/events")(request(app, "/events"))
        second = await handler(app, "/events")(request(app, "/events"))
        return first, second

    first, second = asyncio.run(call())
    assert first.media_type == "text/event-stream"
    assert second.status_code == 503
    assert asyncio.run(sent(second))[2] == (
        b"too many clients (serve.clients = 1: at most 1 from one address)\n"
    )


def scene_store(tmp_path: Path, seen: FieldOfView, formats: tuple[str, ...]) -> Path:
    root = tmp_path / "store"
    board_store(root, seen, formats)
    return root


def test_latest_ply_is_the_newest_frame_in_3d(tmp_path: Path) -> None:
    """The cloud serve makes of the newest frame, read by plyfile: a point per pixel
    (all equally sure), the scene's colours, the board planar at 30 degrees; made once
    for every client asking for that frame."""
    app = app_over(
        scene_store(tmp_path, FieldOfView(66.0, "config camera.hfov"), ("npz", "json", "rgb"))
    )
    code, headers, body = answer(app, "/latest.ply")
    assert code == 200 and headers["x-frame-seq"] == "0", body[:200]
    ply = plyfile.PlyData.read(io.BytesIO(body))
    vertex = ply["vertex"]
    points = np.stack([vertex["x"], vertex["y"], vertex["z"]], axis=1)
    board = points[:, 2] < WALL_Z - 0.5
    green = (np.abs(vertex["green"].astype(int) - 200) < 30) & (vertex["red"] < 90)
    assert vertex.count == 120 * 160 and 0 < board.sum() < vertex.count
    assert (green == board).mean() > 0.97  # the scene's JPEG blurs the board's edges
    tilt = angle(plane_normal(points[board])[0], np.array([0.0, 0.0, 1.0]))
    print(f"/latest.ply: {vertex.count} points, the board at {tilt:.4f} degrees")
    assert abs(tilt - 30.0) < 0.05
    assert any("66 degrees (config camera.hfov)" in c for c in ply.comments)
    assert any("random-init" in c for c in ply.comments)
    assert answer(app, "/latest.ply")[2] == body
    assert answer(app, "/latest.ply", if_none_match=headers["etag"])[0] == 304


def test_latest_ply_of_a_12_mp_frame_fits_serves_memory(tmp_path: Path) -> None:
    """A frame at a 12 MP camera's own size (store.size = "camera", 4608x2592, its
    scene kept): the cloud is a million points at most, and making it must not hold the
    whole map, its npz's bytes and the decoded scene at once (316 MiB at its peak, over
    serve's MemoryMax=256M). Measured as the peak RSS (VmHWM, which an exec starts
    afresh, unlike ru_maxrss) a fresh process adds making it."""
    import subprocess
    import sys

    from edge.config import StoreConfig
    from edge.store.ring import FrameStore
    from scripts.support.scene import board_and_wall
    from scripts.support.store import depth_frame

    size = (2592, 4608)
    scene = board_and_wall(size, 66.0, tilt=30.0)
    frame = depth_frame(0, (14, 14))
    frame.depth, frame.conf = scene.depth, np.full(size, 2.0, np.float32)
    frame.source_size, frame.rgb = size, scene.rgb
    frame.fov = FieldOfView(66.0, "config camera.hfov")
    store = FrameStore(tmp_path / "store", StoreConfig(formats=("npz", "rgb", "json")))
    store.write(frame, {"t_written": 0.0})
    del scene, frame
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from edge.serve import cloud\n"
        "from edge.store.read import read_record\n"
        "import numpy, PIL.Image, plyfile, io\n"
        "root = Path(sys.argv[1]); record = read_record(root, 0)\n"
        "def hwm():\n"
        "    status = Path('/proc/self/status').read_text().splitlines()\n"
        "    return next(int(x.split()[1]) for x in status if x.startswith('VmHWM'))\n"
        "before = hwm()\n"
        "data = cloud.make(root, 0, record)\n"
        "after = hwm()\n"
        "n = plyfile.PlyData.read(io.BytesIO(data))['vertex'].count\n"
        "print(json.dumps({'added_mib': (after - before) / 1024, 'points': n}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(store.root)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got = json.loads(out.stdout)
    print(f"/latest.ply of 4608x2592: {got['points']} points, +{got['added_mib']:.0f} MiB peak")
    assert 700_000 < got["points"] <= 1_000_000
    # serve itself with numpy and Pillow loaded: ~46 MiB; +62 MiB here (2026-12-07).
    assert got["added_mib"] < 96


def npz_bytes(**maps: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **maps)  # type: ignore[arg-type]
    return buf.getvalue()


def test_latest_ply_says_why_there_is_none(tmp_path: Path) -> None:
    """No field of view: 404 saying to set camera.hfov; no depth kept: 404 naming
    store.formats; without the scene the points take the preview's colours."""
    unknown = FieldOfView(None, "none: no published field of view for camera 'Virtual0'")
    code, _, body = answer(
        app_over(scene_store(tmp_path / "a", unknown, ("npz", "json"))), "/latest.ply"
    )
    assert code == 404 and b"'Virtual0'" in body and b"set camera.hfov" in body
    known = FieldOfView(66.0, "config camera.hfov")
    code, _, body = answer(
        app_over(scene_store(tmp_path / "b", known, ("preview", "json"))), "/latest.ply"
    )
    assert code == 404 and b'"npz" in store.formats' in body
    code, _, body = answer(
        app_over(scene_store(tmp_path / "c", known, ("npz", "json"))), "/latest.ply"
    )
    vertex = plyfile.PlyData.read(io.BytesIO(body))["vertex"]
    colours = {tuple(c) for c in np.stack([vertex["red"], vertex["green"], vertex["blue"]], 1)}
    assert code == 200 and colours <= {tuple(c) for c in frames.COLORMAP}
    # A damaged npz (cut short; a map that is not float32) is said in one line.
    root = scene_store(tmp_path / "d", known, ("npz", "json"))
    npz = next((root / "frames").iterdir()) / "frame.npz"
    whole = npz.read_bytes()
    npz.write_bytes(whole[: len(whole) // 2])
    code, _, body = answer(app_over(root), "/latest.ply")
    assert code >= 400 and b"npz cannot be read" in body and body.count(b"\n") <= 1, body
    with np.load(io.BytesIO(whole)) as maps:
        depth, conf = maps["depth"], maps["conf"]
    for odd in (depth.astype(np.float64), np.full(depth.shape, "1.0")):  # doubles; strings
        npz.write_bytes(npz_bytes(depth=odd, conf=conf))
        code, _, body = answer(app_over(root), "/latest.ply")
        assert code >= 400 and b"not a float32 map" in body and body.count(b"\n") <= 1, body
    # An empty map is said in one line; a record's size that is no picture's (0, or
    # negative) is not used: the map's own shape is.
    with open(npz, "wb") as fh:
        np.savez(fh, depth=np.zeros((0, 0), np.float32), conf=np.zeros((0, 0), np.float32))
    code, _, body = answer(app_over(root), "/latest.ply")
    assert code >= 400 and b"empty" in body and body.count(b"\n") <= 1, body
    # Deflate that claims 1.2 GB of map (a few hundred kB would hold it all): refused on
    # its header, before a byte of the map is read.
    import zipfile

    for shape in ((15000, 20000), (1, 50_000_000)):  # too many pixels; too long a row
        header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
        header += " " * (117 - len(header)) + "\n"
        with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as bomb:
            for name in ("depth", "conf"):
                with bomb.open(f"{name}.npy", "w", force_zip64=True) as member:
                    member.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little"))
                    member.write(header.encode())
                    member.write(bytes(4 << 20))
        code, _, body = answer(app_over(root), "/latest.ply")
        assert code >= 400 and b"larger than any camera" in body, body
    npz.write_bytes(whole)
    record = npz.parent / "frame.json"
    said = json.loads(record.read_text())
    for size in ([0, 0], [-5, 7]):
        record.write_text(json.dumps({**said, "source_size": size}))
        code, _, body = answer(app_over(root), "/latest.ply")
        assert code == 200 and plyfile.PlyData.read(io.BytesIO(body))["vertex"].count > 0
