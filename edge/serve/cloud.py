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
from pathlib import Path
from typing import Any

from edge.fov import FieldOfView
from edge.serve.hub import Newest
from edge.store.read import frame_names, read_record
from edge.store.trust import read_in


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
    """Frame ``seq``'s point cloud as PLY; Refused saying why there is none."""
    fov = FieldOfView.from_record(record.get("field_of_view"))
    if fov.degrees is None:
        raise Refused(
            f"frame {seq} has no field of view ({fov.source.removeprefix('none: ')}): "
            "set camera.hfov in the daemon's config"
        )
    raw = read_in(root, *frame_names(seq, "npz"))
    if raw is None:
        if read_record(root, seq) is None:
            raise Refused(f"frame {seq} was pruned meanwhile", gone=True)
        raise Refused('a point cloud needs the depth: "npz" in store.formats')
    depth, conf = _arrays(raw, seq)
    scene = read_in(root, *frame_names(seq, "rgb"))
    return _ply(depth, conf, _decoded(scene), fov, record)


def _arrays(raw: bytes, seq: int) -> tuple[Any, Any]:
    import numpy as np

    try:
        with np.load(io.BytesIO(raw)) as npz:
            depth, conf = npz["depth"], npz["conf"]
    except (OSError, ValueError, KeyError) as exc:
        raise Refused(f"frame {seq}'s npz cannot be read ({exc})") from None
    if depth.ndim != 2 or depth.shape != conf.shape:
        raise Refused(f"frame {seq}'s npz holds depth {depth.shape} and conf {conf.shape}")
    return depth, conf


def _decoded(jpeg: bytes | None) -> Any:
    """The scene's pixels (H, W, 3) uint8, or None without a readable one."""
    if jpeg is None:
        return None
    import numpy as np
    from PIL import Image

    try:
        with Image.open(io.BytesIO(jpeg)) as image:
            return np.asarray(image.convert("RGB"))
    except (OSError, ValueError):
        return None


def _ply(depth: Any, conf: Any, scene: Any, fov: FieldOfView, record: dict[str, Any]) -> bytes:
    from edge import frames

    size = record.get("source_size")
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(n, int) for n in size)):
        size = list(depth.shape)
    flagged = record.get("random_init") is not False  # unless the record says real weights
    data, _ = frames.point_cloud(depth, conf, scene, fov, (size[0], size[1]), random_init=flagged)
    return data
