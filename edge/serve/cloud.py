"""``/latest.ply``: the newest frame as a point cloud, made on request from its files.

serve loads no model and, until a point cloud is asked for, no numpy: the cloud is
made from the frame's npz (depth, confidence), its record (the field of view and where
it came from) and, when the store keeps it, the scene (``frame.rgb.jpg``) for colours;
without the scene the points take the preview's colours. One frame's cloud is kept:
every client asking for the same frame gets the bytes made once.
"""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, BinaryIO

from edge.fov import FieldOfView
from edge.serve.hub import Newest
from edge.store.read import frame_names, read_record, source_size
from edge.store.trust import open_in, read_in

MAX_PIXELS = 100_000_000  # a map no camera makes (the largest Pi camera: 64 MP)
MAX_SIDE = 32_768  # nor a side (a row is read whole: at most 128 kB)
# What a damaged or hostile npz raises: a cut, bad deflate, another compression, a
# password, a header that is no array's.
UNREADABLE: tuple[type[Exception], ...] = (OSError, ValueError, KeyError, EOFError)
UNREADABLE += (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError)


class Refused(Exception):
    """No cloud for this frame, and why (``gone``: pruned meanwhile, worth asking again)."""

    def __init__(self, reason: str, *, gone: bool = False) -> None:
        super().__init__(reason)
        self.gone = gone


class Clouds:
    """The newest frame's PLY, made once whoever asks (in a thread: a 1280x720 frame
    takes tens of ms of numpy)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._kept: tuple[str, bytes] | None = None  # (etag, PLY)
        self._lock = asyncio.Lock()

    async def ply(self, newest: Newest) -> bytes:
        """The frame's PLY; Refused saying why there is none."""
        async with self._lock:
            if self._kept is not None and self._kept[0] == newest.etag:
                return self._kept[1]
            data = await asyncio.to_thread(make, self.root, newest.seq, newest.record)
            self._kept = (newest.etag, data)
            return data


def make(root: Path, seq: int, record: dict[str, Any]) -> bytes:
    """Frame ``seq``'s point cloud as PLY; Refused saying why there is none.

    Only the cloud's grid of the maps is read (every ``geometry.step_for``-th row of the
    npz, a few rows at a time) and the scene is decoded near that size: a 12 MP frame's
    cloud costs serve tens of MiB, not the whole maps, their file and the picture."""
    fov = FieldOfView.from_record(record.get("field_of_view"))
    if fov.degrees is None:
        raise Refused(
            f"frame {seq} has no field of view ({fov.source.removeprefix('none: ')}): "
            "set camera.hfov in the daemon's config"
        )
    try:
        fd = open_in(root, *frame_names(seq, "npz"))
    except OSError:
        if read_record(root, seq) is None:
            raise Refused(f"frame {seq} was pruned meanwhile", gone=True) from None
        raise Refused('a point cloud needs the depth: "npz" in store.formats') from None
    with os.fdopen(fd, "rb") as npz:
        depth, conf, shape = _grid(npz, seq)
    scene = read_in(root, *frame_names(seq, "rgb"))
    return _ply(depth, conf, shape, _decoded(scene, depth.shape), fov, record)


def _grid(npz: BinaryIO, seq: int) -> tuple[Any, Any, tuple[int, int]]:
    """The cloud's grid of the frame's depth and confidence, and the maps' shape."""
    try:
        with zipfile.ZipFile(npz) as archive:
            depth, shape = _rows(archive, "depth", None)
            conf, _ = _rows(archive, "conf", shape)
    except UNREADABLE as exc:
        raise Refused(f"frame {seq}'s npz cannot be read ({exc})") from None
    return depth, conf, shape


def _rows(
    archive: zipfile.ZipFile, name: str, shape: tuple[int, int] | None
) -> tuple[Any, tuple[int, int]]:
    """Every ``step_for``-th pixel, both ways, of the 2-D float32 ``name`` in the npz
    (of ``shape``, when the other map said it), read a step of rows at a time."""
    import numpy as np

    from edge.geometry import step_for

    with archive.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        found, fortran, dtype = read_header(member)
        if len(found) != 2 or fortran or dtype != np.dtype("<f4"):
            raise ValueError(f"{name} is {dtype} {found}, not a float32 map")
        if shape is not None and found != shape:
            raise ValueError(f"depth {shape} and conf {found}")
        h, w = found
        if not (h and w):
            raise ValueError(f"{name} is empty ({h}x{w})")
        if h * w > MAX_PIXELS or max(h, w) > MAX_SIDE:  # deflate can claim gigabytes
            raise ValueError(f"{name} is {h}x{w}, larger than any camera's picture")
        step = step_for((h, w))
        grid = np.empty((-(-h // step), -(-w // step)), np.float32)
        block = step * w * 4
        for n in range(grid.shape[0]):
            row = member.read(w * 4)
            if len(row) < w * 4:
                raise EOFError(f"{name} ends at row {n * step} of {h}")
            grid[n] = np.frombuffer(row, "<f4", count=w)[::step]
            _skip(member, min(block, (h - n * step) * w * 4) - w * 4)
    return grid, (h, w)


def _decoded(jpeg: bytes | None, near: tuple[int, int]) -> Any:
    """The scene's pixels (H, W, 3) uint8, decoded at no less than ``near`` (H, W)
    where JPEG's scaled decoding allows (1/2, 1/4, 1/8), or None without a readable one."""
    if jpeg is None:
        return None
    import numpy as np
    from PIL import Image

    try:
        with Image.open(io.BytesIO(jpeg)) as image:
            image.draft("RGB", (near[1], near[0]))
            return np.asarray(image.convert("RGB"))
    except (OSError, ValueError):
        return None


def _ply(
    depth: Any,
    conf: Any,
    shape: tuple[int, int],
    scene: Any,
    fov: FieldOfView,
    record: dict[str, Any],
) -> bytes:
    from edge import frames

    flagged = record.get("random_init") is not False  # unless the record says real weights
    size = source_size(record, shape)
    data, _ = frames.point_cloud(depth, conf, scene, fov, size, random_init=flagged, shape=shape)
    return data


def _skip(member: IO[bytes], n: int) -> None:
    """Read past ``n`` bytes of ``member``, a bounded piece at a time."""
    while n > 0:
        got = member.read(min(n, 1 << 20))
        if not got:
            raise EOFError("the map ends early")
        n -= len(got)
