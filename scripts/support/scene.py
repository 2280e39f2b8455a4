"""Synthetic scenes of known geometry, ray-cast here without ``edge.geometry``: a
board at a known angle in front of a wall, as a depth map a camera of known field of
view would see (z-depth, pixel centres, the principal point at the picture's centre)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

WALL_Z = 6.0  # the wall: the plane z = WALL_Z, facing the camera
BOARD_CENTRE = np.array([0.0, 0.0, 3.0])
BOARD_HALF = (1.2, 0.9)  # half its width and height, in the scene's units
BOARD_RGB, WALL_RGB = (40, 200, 90), (150, 150, 160)


@dataclass(frozen=True)
class Scene:
    depth: np.ndarray  # (H, W) float32, z-depth
    rgb: np.ndarray  # (H, W, 3) uint8: the board green, the wall grey
    board: np.ndarray  # (H, W) bool: the pixels that see the board
    board_normal: np.ndarray  # unit normal of the board's plane, towards the camera


def rays(size: tuple[int, int], hfov: float) -> np.ndarray:
    """(H, W, 3): each pixel centre's ray with z = 1, square pixels."""
    h, w = size
    f = w / 2 / math.tan(math.radians(hfov) / 2)
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    return np.stack([(u + 0.5 - w / 2) / f, (v + 0.5 - h / 2) / f, np.ones((h, w))], axis=-1)


def board_and_wall(size: tuple[int, int], hfov: float, tilt: float) -> Scene:
    """A board turned ``tilt`` degrees about the vertical axis, in front of a wall."""
    r = rays(size, hfov)
    t = math.radians(tilt)
    normal = np.array([math.sin(t), 0.0, -math.cos(t)])  # towards the camera
    across, up = np.array([math.cos(t), 0.0, math.sin(t)]), np.array([0.0, 1.0, 0.0])
    z_board = (normal @ BOARD_CENTRE) / (r @ normal)  # a ray's z where it meets the plane
    local = r * z_board[..., None] - BOARD_CENTRE
    board = (
        (z_board > 0)
        & (np.abs(local @ across) <= BOARD_HALF[0])
        & (np.abs(local @ up) <= BOARD_HALF[1])
    )
    depth = np.where(board, z_board, WALL_Z).astype(np.float32)
    rgb = np.where(board[..., None], BOARD_RGB, WALL_RGB).astype(np.uint8)
    return Scene(depth, rgb, board, normal)


def floor(size: tuple[int, int], hfov: float, pitch: float) -> np.ndarray:
    """The z-depth of a floor seen from 4 units away along the optical axis, the camera
    pitched ``pitch`` degrees down to it: farther at the top of the picture."""
    r = rays(size, hfov)
    p = math.radians(pitch)
    normal = np.array([0.0, -math.sin(p), -math.cos(p)])
    depth: np.ndarray = ((normal @ np.array([0.0, 0.0, 4.0])) / (r @ normal)).astype(np.float32)
    return depth


def plane_normal(points: np.ndarray) -> tuple[np.ndarray, float]:
    """The least-squares plane through ``points`` (N, 3): its unit normal and the RMS
    distance of the points from it."""
    centred = points.astype(np.float64) - points.mean(axis=0)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    return vt[2], float(singular[2] / math.sqrt(len(points)))


def angle(a: np.ndarray, b: np.ndarray) -> float:
    """Degrees between two lines (a normal and its opposite are the same plane)."""
    cos = abs(float(a @ b)) / (float(np.linalg.norm(a)) * float(np.linalg.norm(b)))
    return math.degrees(math.acos(min(1.0, cos)))
