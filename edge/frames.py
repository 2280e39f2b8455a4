"""Writing a ``DepthFrame``: 16-bit PNG, npz, colour preview, JSON sidecar.

Every file is written atomically (temp + fsync + rename): a crash leaves the previous
file or none, never a partial one.

- ``<stem>.depth.png``: 16-bit greyscale, *inverse* depth min-max normalised per
  image, so larger = nearer, 0..65535. For viewing and for tools that want
  disparity-like maps; not comparable across images.
- ``<stem>.npz``: ``depth`` (relative depth, larger = farther) and ``conf``, float32,
  at the photo's displayed size.
- ``<stem>.preview.png``: inverse depth through the inferno colormap (near = warm),
  8-bit indexed colour: the 256 colours in the PNG's palette, one byte per pixel.
- ``<stem>.json``: the frame's summary (model, weights, random-init flag, precision,
  shapes, stages, min/max, ms per stage, the field of view and where it came from,
  versions).
- ``<stem>.ply`` (snap --ply): the point cloud, binary PLY (``edge.geometry``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import platform
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from edge import __version__, atomic, geometry
from edge.depth import DepthFrame
from edge.fov import FieldOfView
from edge.outputs import DEFAULT_FORMATS as DEFAULT_FORMATS  # re-exported
from edge.outputs import FORMATS as FORMATS  # re-exported: callers say frames.FORMATS
from edge.outputs import SUFFIXES as SUFFIXES
from edge.steady import Alignment

# Inferno as a degree-6 polynomial per channel (Matt Zucker's fit of matplotlib's map).
_INFERNO = np.array(
    [
        [0.0002189403691192265, 0.001651004631001012, -0.01948089843709184],
        [0.1065134194856116, 0.5639564367884091, 3.932712388889277],
        [11.60249308247187, -3.972853965665698, -15.9423941062914],
        [-41.70399613139459, 17.43639888205313, 44.35414519872813],
        [77.162935699427, -33.40235894210092, -81.80730925738993],
        [-71.31942824499214, 32.62606426397723, 73.20951985803202],
        [25.13112622477341, -12.24266895238567, -23.07032500287172],
    ]
)


def _colormap_lut() -> np.ndarray:
    t = np.linspace(0.0, 1.0, 256)[:, None]
    rgb = np.zeros((256, 3))
    for coeff in _INFERNO[::-1]:
        rgb = rgb * t + coeff
    return np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8)


COLORMAP = _colormap_lut()
_PLTE = COLORMAP.tobytes()  # the preview's palette: index i is COLORMAP[i]


# zlib level 1 for the preview (measured with Pillow on a 1200x1600 map: 43 ms instead
# of 83 ms at level 6); the 16-bit depth map is stored uncompressed (depth_png). A
# camera daemon writes several frames a second into RAM; speed wins.
PNG_LEVEL = 1


def inverse_normalised(
    depth: np.ndarray, depth_range: tuple[float, float] | None = None
) -> np.ndarray:
    """1 / depth scaled to 0..1 per image (1 = nearest), float32. A flat map gives zeros.

    ``depth_range`` is depth's (min, max) when already known: 1/x rounded to float32
    is monotonic, so the inverse map's extremes are the reciprocals of depth's, and
    two passes over the map are saved.
    """
    eps = np.float32(1e-12)
    inv: np.ndarray = np.maximum(depth, eps, dtype=np.float32)
    np.reciprocal(inv, out=inv)
    if depth_range is None:
        lo, hi = float(inv.min()), float(inv.max())
    else:
        lo = float(np.reciprocal(np.maximum(np.float32(depth_range[1]), eps)))
        hi = float(np.reciprocal(np.maximum(np.float32(depth_range[0]), eps)))
    if not np.isfinite(lo) or not np.isfinite(hi) or hi <= lo:
        return np.zeros(depth.shape, dtype=np.float32)
    inv -= np.float32(lo)
    inv *= np.float32(1.0 / (hi - lo))
    return inv


def inverse_in_range(depth: np.ndarray, scale: float, low: float, high: float) -> np.ndarray:
    """1 / (scale * depth) placed in [low, high] as 0..1 (clipped), float32: a preview's
    colours on a range that holds from frame to frame (``edge.steady``)."""
    eps = np.float32(1e-12)
    inv: np.ndarray = np.maximum(depth, eps, dtype=np.float32)
    inv *= np.float32(scale)
    np.reciprocal(inv, out=inv)
    inv -= np.float32(low)
    inv *= np.float32(1.0 / max(high - low, 1e-12))
    np.clip(inv, 0.0, 1.0, out=inv)
    return inv


def _png_file(
    rows: np.ndarray,
    width: int,
    depth: int,
    colour: int,
    *,
    level: int,
    strategy: int = zlib.Z_DEFAULT_STRATEGY,
    plte: bytes | None = None,
) -> bytes:
    """The PNG around filtered ``rows`` (each row: filter byte, then the pixels);
    ``plte`` is the palette of an indexed-colour image (colour type 3).

    The writers filter their rows themselves rather than leave it to Pillow, whose
    encoder tries every PNG filter on every row: measured at 1200x1600, 16-bit depth
    89 -> 27 ms (now stored, ~4 ms) and the preview 83 -> 31 ms (now indexed, 18 ms).
    zlib also lets go of the GIL while it compresses, so the daemon's writer does not
    hold up inference. Any PNG reader reads them (the tests decode them with Pillow).
    """

    def chunk(kind: bytes, data: bytes) -> list[bytes]:
        crc = zlib.crc32(data, zlib.crc32(kind))  # no kind + data copy of a 4 MB IDAT
        return [struct.pack(">I", len(data)), kind, data, struct.pack(">I", crc)]

    header = struct.pack(">IIBBBBB", width, rows.shape[0], depth, colour, 0, 0, 0)
    if strategy == zlib.Z_DEFAULT_STRATEGY:
        idat = zlib.compress(rows.data, level)  # one buffer: no join of a 4 MB IDAT
    else:
        packer = zlib.compressobj(level, zlib.DEFLATED, 15, 8, strategy)
        idat = packer.compress(rows.data) + packer.flush()
    palette = [] if plte is None else chunk(b"PLTE", plte)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            *chunk(b"IHDR", header),
            *palette,
            *chunk(b"IDAT", idat),
            *chunk(b"IEND", b""),
        ]
    )


def depth_png(depth: np.ndarray, inv: np.ndarray | None = None) -> bytes:
    """16-bit inverse depth, stored uncompressed: the low bytes of a 16-bit map are
    noise to zlib. Measured at 1200x1600: 3.8 MB instead of 3.2 MB, 28 ms less.
    The 16-bit big-endian values are rounded straight into the PNG's rows (one pass
    instead of four: 8.7 -> ~4 ms for the file)."""
    inv = inverse_normalised(depth) if inv is None else inv
    h, w = inv.shape
    rows = np.empty((h, 2 * w + 1), dtype=np.uint8)
    rows[:, 0] = 0  # filter None
    scaled = np.multiply(inv, np.float32(65535.0))
    np.rint(scaled, out=scaled)
    np.copyto(rows[:, 1:].view(">u2"), scaled, casting="unsafe")
    return _png_file(rows, w, 16, 0, level=0)


def preview_png(depth: np.ndarray, inv: np.ndarray | None = None, max_side: int = 0) -> bytes:
    """Inverse depth through the colormap; box-averaged down to ``max_side`` (0: as is).

    An indexed-colour PNG with the colormap as its palette: the index map is what gets
    filtered and compressed, one byte a pixel instead of three. Measured on a
    1200x1600 map: 42 -> 18 ms at full size, 6.1 -> 2.3 ms at 640, files 3x smaller;
    decoded to RGB it is the same image as the colormap applied to the indices."""
    inv = inverse_normalised(depth) if inv is None else inv
    if max_side and max(inv.shape) > max_side:
        inv = _box_shrink(inv, -(-max(inv.shape) // max_side))
    index = np.rint(inv * np.float32(255.0)).astype(np.uint8)
    h, w = index.shape
    rows = np.empty((h, w + 1), dtype=np.uint8)
    # Filter Up with zlib's run-length strategy, as measured for the RGB preview
    # before: on a smooth map the row differences are mostly zeros.
    rows[:, 0] = 2
    rows[0, 1:] = index[0]
    np.subtract(index[1:], index[:-1], out=rows[1:, 1:])  # wraps mod 256
    return _png_file(rows, w, 8, 3, level=PNG_LEVEL, strategy=zlib.Z_RLE, plte=_PLTE)


def _box_shrink(array: np.ndarray, k: int) -> np.ndarray:
    """Mean of each k x k block (the ragged edge rows and columns are dropped)."""
    h, w = (array.shape[0] // k) * k, (array.shape[1] // k) * k
    # k*k strided adds, not blocks.mean(axis=(1, 3)): 0.7 instead of 8 ms at 1200x1600.
    out = np.zeros((h // k, w // k), dtype=np.float32)
    for i in range(k):
        for j in range(k):
            out += array[i:h:k, j:w:k]
    out *= np.float32(1.0 / (k * k))
    return out


def npz_writer(frame: DepthFrame) -> Callable[[BinaryIO], None]:
    """Writes the npz (``depth``, ``conf``: float32 .npy members, stored) straight into
    an open file from the arrays' own memory: at 1200x1600 it is 15 MB, and rendering
    it into memory first cost 18 ms of CPU; np.savez into the file 7.6 ms, because it
    still copies each array to bytes once more. ``np.load`` reads it as any npz."""
    arrays = {
        "depth": np.ascontiguousarray(frame.depth, dtype=np.float32),
        "conf": np.ascontiguousarray(frame.conf, dtype=np.float32),
    }

    def write(fh: BinaryIO) -> None:
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as archive:
            for name, array in arrays.items():
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(
                    header, np.lib.format.header_data_from_array_1_0(array)
                )
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                with archive.open(info, "w", force_zip64=True) as member:
                    member.write(header.getvalue())
                    member.write(array.data.cast("B"))

    return write


def versions() -> dict[str, str]:
    """The versions of what made the frame (this process's: looked up once)."""
    return dict(_versions())


@functools.cache
def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"da3-edge": __version__, "python": platform.python_version()}
    for dist in ("ai-edge-litert", "numpy", "pillow"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def sidecar(frame: DepthFrame, extra: dict[str, Any] | None = None) -> bytes:
    data = frame.summary()
    data["versions"] = versions()
    if frame.random_init:
        data["warning"] = "made with random-init weights: NOT a real model's depth"
    if extra:
        data.update(extra)
    return (json.dumps(finite(data), indent=2, allow_nan=False) + "\n").encode()


def finite(value: Any) -> Any:
    """``value`` as strict JSON takes it: a NaN or infinite float anywhere in it is null
    (browsers' JSON.parse, and Starlette's JSONResponse, refuse NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def render(
    frame: DepthFrame,
    formats: Iterable[str],
    extra: dict[str, Any] | None = None,
    *,
    preview_max_side: int = 0,
    steady: Alignment | None = None,
) -> dict[str, atomic.Data]:
    """The bytes of each requested output, keyed by format. A point cloud ("ply") is
    made first, so that the JSON can say what is in it (``point_cloud``). ``steady``:
    the preview coloured on its range (the 16-bit PNG stays the frame's own)."""
    formats = list(formats)
    extra = dict(extra or {})
    cloud = b""
    if "ply" in formats:
        cloud, made = point_cloud(
            frame.depth,
            frame.conf,
            frame.rgb,
            frame.field_of_view(),
            frame.source_size,
            random_init=frame.random_init,
        )
        extra["point_cloud"] = {
            "points": made.count,
            "step": made.step,
            "conf_threshold": round(made.conf_threshold, 6),
        }
    inv = shown = None  # the inverse depth of the PNG, and of the preview
    if "png" in formats or ("preview" in formats and steady is None):
        inv = shown = inverse_normalised(frame.depth, frame.depth_range())
    if steady is not None and "preview" in formats:
        shown = inverse_in_range(frame.depth, steady.scale, steady.low, steady.high)
    makers: dict[str, Callable[[], atomic.Data]] = {
        "png": lambda: depth_png(frame.depth, inv),
        "npz": lambda: npz_writer(frame),
        "preview": lambda: preview_png(frame.depth, shown, preview_max_side),
        "json": lambda: sidecar(frame, extra),
        "rgb": lambda: rgb_jpeg(frame),
        "ply": lambda: cloud,
    }
    return {fmt: makers[fmt]() for fmt in formats}


def point_cloud(
    depth: np.ndarray,
    conf: np.ndarray,
    rgb: np.ndarray | None,
    fov: FieldOfView,
    source_size: tuple[int, int],
    *,
    random_init: bool,
    shape: tuple[int, int] | None = None,
) -> tuple[bytes, geometry.Cloud]:
    """The PLY of a depth map and the cloud in it, coloured by the picture (``rgb``,
    any size) or, without one, by the preview's colours; ValueError when ``fov`` has no
    degrees. With ``shape``, ``depth`` and ``conf`` are only the grid of a map of that
    shape (every ``geometry.step_for(shape)``-th pixel, both ways)."""
    if shape is None:
        shape = (int(depth.shape[0]), int(depth.shape[1]))
        step = geometry.step_for(shape)
        depth, conf = depth[::step, ::step], conf[::step, ::step]
    colours = rgb if rgb is not None else preview_colours(depth)
    made = geometry.cloud_of_grid(depth, conf, shape, colours, fov, source_size)
    comments = geometry.ply_comments(
        fov, random_init=random_init, conf_threshold=made.conf_threshold
    )
    return geometry.ply(made, comments), made


def preview_colours(depth: np.ndarray) -> np.ndarray:
    """Each pixel's colour in a preview of ``depth`` on its own range (H, W, 3) uint8."""
    levels = np.rint(inverse_normalised(depth) * 255).astype(np.uint8)
    shown: np.ndarray = COLORMAP[levels]
    return shown


RGB_QUALITY = 85


def rgb_jpeg(frame: DepthFrame) -> bytes:
    """The scene the depth came from, as JPEG at the depth's size (the outputs' size)."""
    if frame.rgb is None:
        raise ValueError(f"{frame.name}: no camera image kept to write as rgb")
    from PIL import Image

    image = Image.fromarray(frame.rgb)
    h, w = frame.depth.shape
    if image.size != (w, h):
        image = image.resize((w, h), Image.Resampling.BILINEAR, reducing_gap=2.0)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=RGB_QUALITY)
    return out.getvalue()


def write(
    frame: DepthFrame,
    directory: Path,
    stem: str,
    formats: Iterable[str],
    extra: dict[str, Any] | None = None,
    *,
    durable: bool = True,
) -> list[Path]:
    """Render, then write each file atomically; if a write fails, remove the files
    of this frame already written. Rendering happens first (all but the npz, which
    numpy writes into its file) so a frame that cannot be rendered leaves nothing
    behind."""
    blobs = render(frame, formats, extra)
    written: list[Path] = []
    try:
        for fmt, data in blobs.items():
            path = directory / f"{stem}{SUFFIXES[fmt]}"
            atomic.write_bytes(path, data, durable=durable)
            written.append(path)
    except BaseException:
        # All of a frame's files or none: a disk that filled up halfway through
        # must not leave a depth map without its sidecar.
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    return written
