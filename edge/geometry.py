"""From a depth map to points: the camera's intrinsics from its field of view
(``edge.fov``), back-projection, and the PLY file. A frame without a field of view
makes no point cloud.

Geometry follows DA3's own export (``depth_anything_3.utils.export.glb``): depth is
z-depth along the optical axis, a pixel goes through the inverse intrinsics and is
scaled by its depth, and pixels below a confidence threshold (DA3's rule, ``threshold``)
are left out. The points are in the camera's frame, OpenCV's axes (x right, y down, z
forward), on DA3's relative scale: not metres.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge.fov import FieldOfView

# DA3's confidence threshold for its point clouds (export_to_glb's defaults): 1.05,
# raised to the 40th percentile of the frame's confidence, lowered to its 90th.
CONF_BASE, CONF_LOW_PERCENTILE, CONF_HIGH_PERCENTILE = 1.05, 40.0, 90.0
# A point cloud's grid: every step-th pixel both ways, so that there are at most this
# many (DA3's own export caps its clouds at a million points): a 12 MP photo's cloud is
# 750,000 points (11 MB), where every pixel would be 180 MB of the core's depth
# interpolated.
CLOUD_MAX_POINTS = 1_000_000


@dataclass(frozen=True)
class Intrinsics:
    """A pinhole camera in the depth map's pixels: focal lengths and principal point
    (the picture's centre), pixel (u, v)'s centre at (u + 0.5, v + 0.5)."""

    fx: float
    fy: float
    cx: float
    cy: float

    @classmethod
    def of(
        cls, degrees: float, output_size: tuple[int, int], source_size: tuple[int, int]
    ) -> Intrinsics:
        """For a map of ``output_size`` (H, W) made from a picture of ``source_size``:
        square pixels in the picture, each axis scaled as the map was (a map at the core's
        shape may have a slightly different aspect)."""
        (oh, ow), (sh, sw) = output_size, source_size
        f_source = sw / 2 / math.tan(math.radians(degrees) / 2)
        return cls(f_source * ow / sw, f_source * oh / sh, ow / 2, oh / 2)


def threshold(conf: np.ndarray) -> float:
    """DA3's confidence threshold for a point cloud: CONF_BASE, at least the 40th
    percentile of ``conf``, at most its 90th."""
    low, high = np.percentile(conf, [CONF_LOW_PERCENTILE, CONF_HIGH_PERCENTILE])
    return float(min(max(CONF_BASE, low), high))


@dataclass(frozen=True)
class Cloud:
    """Points (N, 3) float32 in the camera's frame and their colours (N, 3) uint8."""

    points: np.ndarray
    colours: np.ndarray
    step: int  # every step-th pixel of the map, both ways
    conf_threshold: float

    @property
    def count(self) -> int:
        return int(self.points.shape[0])


def back_project(
    depth: np.ndarray, conf: np.ndarray, colours: np.ndarray, k: Intrinsics, step: int = 1
) -> Cloud:
    """Every ``step``-th pixel of ``depth`` at or above DA3's confidence threshold (and
    with a finite, positive depth) as a point, coloured by the pixel of ``colours``
    ((H', W', 3) uint8, any size: the nearest pixel to the point's) it falls in."""
    grid = (depth[::step, ::step], conf[::step, ::step])
    return project_grid(*grid, (depth.shape[0], depth.shape[1]), colours, k, step)


def project_grid(
    d: np.ndarray,
    c: np.ndarray,
    shape: tuple[int, int],
    colours: np.ndarray,
    k: Intrinsics,
    step: int,
) -> Cloud:
    """``back_project`` of a map of ``shape`` (H, W) given only its grid: ``d`` and
    ``c`` are every ``step``-th pixel of its depth and confidence, both ways (what a
    reader that never holds the whole map has)."""
    rows = np.arange(0, shape[0], step)
    cols = np.arange(0, shape[1], step)
    if d.shape != (rows.size, cols.size) or c.shape != d.shape:
        raise ValueError(f"a grid of {d.shape} is not every {step}th pixel of {shape}")
    limit = threshold(c)
    keep = (c >= limit) & np.isfinite(d) & (d > 0)
    v, u = np.nonzero(keep)
    z = d[v, u].astype(np.float32)
    x = ((cols[u] + 0.5 - k.cx) / k.fx).astype(np.float32) * z
    y = ((rows[v] + 0.5 - k.cy) / k.fy).astype(np.float32) * z
    points = np.stack([x, y, z], axis=1)
    ch, cw = colours.shape[:2]
    colour_rows = ((rows[v] + 0.5) * (ch / shape[0])).astype(np.intp)
    colour_cols = ((cols[u] + 0.5) * (cw / shape[1])).astype(np.intp)
    return Cloud(points, colours[colour_rows, colour_cols], step, limit)


def cloud_of(
    depth: np.ndarray,
    conf: np.ndarray,
    colours: np.ndarray,
    fov: FieldOfView,
    source_size: tuple[int, int],
) -> Cloud:
    """The point cloud of a depth map made from a picture of ``source_size`` (H, W)
    seen with ``fov``, on a grid of at most CLOUD_MAX_POINTS points; ValueError
    (saying why) when ``fov`` has no degrees."""
    shape = (int(depth.shape[0]), int(depth.shape[1]))
    step = step_for(shape)
    grid = (depth[::step, ::step], conf[::step, ::step])
    return cloud_of_grid(*grid, shape, colours, fov, source_size)


def cloud_of_grid(
    d: np.ndarray,
    c: np.ndarray,
    shape: tuple[int, int],
    colours: np.ndarray,
    fov: FieldOfView,
    source_size: tuple[int, int],
) -> Cloud:
    """``cloud_of`` a map of ``shape`` given only its grid (every ``step_for(shape)``-th
    pixel of its depth ``d`` and confidence ``c``, both ways)."""
    if fov.degrees is None:
        raise ValueError(f"no field of view ({fov.source})")
    k = Intrinsics.of(fov.degrees, shape, source_size)
    return project_grid(d, c, shape, colours, k, step_for(shape))


def step_for(size: tuple[int, int], most: int = CLOUD_MAX_POINTS) -> int:
    """The grid step that leaves at most ``most`` of ``size``'s pixels."""
    step = max(1, math.ceil(math.sqrt(size[0] * size[1] / most)))
    while -(-size[0] // step) * -(-size[1] // step) > most:
        step += 1
    return step


def ply(cloud: Cloud, comments: list[str]) -> bytes:
    """``cloud`` as a binary little-endian PLY: x y z (float) and red green blue
    (uchar) per vertex, ``comments`` in the header (one line each)."""
    vertex = np.dtype(
        [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    )
    body = np.empty(cloud.count, dtype=vertex)
    for axis, name in enumerate("xyz"):
        body[name] = cloud.points[:, axis]
    for channel, name in enumerate(("red", "green", "blue")):
        body[name] = cloud.colours[:, channel]
    header = ["ply", "format binary_little_endian 1.0"]
    header += [f"comment {' '.join(line.split())}" for line in comments]
    header += [f"element vertex {cloud.count}"]
    header += [f"property float {name}" for name in "xyz"]
    header += [f"property uchar {name}" for name in ("red", "green", "blue")]
    header += ["end_header"]
    head = ("\n".join(header) + "\n").encode("ascii", "replace")
    return b"".join((head, body.data))  # one copy of the body (a 12 MP frame's: 11 MB)


def ply_comments(fov: FieldOfView, *, random_init: bool, conf_threshold: float) -> list[str]:
    """What a PLY's header says of its points: scale, axes, field of view, filter."""
    lines = [
        "da3-edge point cloud: DA3 relative depth, arbitrary scale (not metres)",
        "axes: camera frame, x right, y down, z forward (OpenCV)",
        f"horizontal field of view {fov.degrees:g} degrees ({fov.source})",
        f"pixels with confidence below {conf_threshold:.4g} left out (DA3's rule)",
    ]
    if random_init:
        lines.append("made with random-init weights: NOT a real model's depth")
    return lines
