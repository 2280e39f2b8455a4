"""What a frame can be written as: the output formats and each one's file suffix.

A leaf (it imports nothing): the config names them in its choices, snap and the store
write them, and the store's readers find them, without loading one another.
"""

from __future__ import annotations

# The depth (16-bit PNG, npz with confidence, colour preview), the record, and the scene
# the depth came from (the camera frame as JPEG, at the outputs' size). All but the scene
# by default (DEFAULT_FORMATS).
FORMATS = ("png", "npz", "preview", "json", "rgb")
DEFAULT_FORMATS = ("png", "npz", "preview", "json")
# Each format's file suffix after the stem.
SUFFIXES = {
    "png": ".depth.png",
    "npz": ".npz",
    "preview": ".preview.png",
    "json": ".json",
    "rgb": ".rgb.jpg",
    "ply": ".ply",  # a point cloud: snap --ply writes one; serve makes /latest.ply itself
}
