"""``da3-edge record --ros2``: the same channels as ROS 2's own messages, CDR-encoded,
so that ``ros2 bag play`` (with rosbag2's MCAP storage) replays a recording where ROS 2
exists; MCAP's pure-Python writer and ROS 2 encoder (``mcap-ros2-support``, the
``robots`` extra) write it.

- ``/da3/depth``, ``/da3/confidence``: ``sensor_msgs/msg/Image``, ``32FC1``. REP 118
  reads a 32FC1 depth image as metres; this one is DA3's relative depth (larger =
  farther, an arbitrary scale per frame), which the file's metadata record says;
- ``/da3/scene`` (JPEG) or ``/da3/preview`` (PNG): ``sensor_msgs/msg/CompressedImage``;
- ``/da3/calibration``: ``sensor_msgs/msg/CameraInfo``, the pinhole of the depth map;
- ``/da3/points``: ``sensor_msgs/msg/PointCloud2``: x, y, z FLOAT32 and ``rgb``, PCL's
  packing (a FLOAT32 field holding 0x00RRGGBB), 16 bytes a point, one row.

Every header's ``frame_id`` is the camera's optical frame (``edge.record.FRAME_ID``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge import geometry
from edge.errors import EdgeError, OutputError
from edge.record import FRAME_ID, Frames, Recorded

# ROS 2's message definitions, as rosbag2 stores them: the type, then each type it
# uses after a line of "=" and "MSG: package/Type".
_RULE = "=" * 80 + "\n"
_TIME = "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
_HEADER = "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n"
_COMMON = _RULE + _HEADER + _RULE + _TIME
DEFINITIONS = {
    "sensor_msgs/msg/Image": "std_msgs/Header header\nuint32 height\nuint32 width\n"
    "string encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data\n" + _COMMON,
    "sensor_msgs/msg/CompressedImage": "std_msgs/Header header\nstring format\nuint8[] data\n"
    + _COMMON,
    "sensor_msgs/msg/CameraInfo": "std_msgs/Header header\nuint32 height\nuint32 width\n"
    "string distortion_model\nfloat64[] d\nfloat64[9] k\nfloat64[9] r\nfloat64[12] p\n"
    "uint32 binning_x\nuint32 binning_y\nsensor_msgs/RegionOfInterest roi\n"
    + _COMMON
    + _RULE
    + "MSG: sensor_msgs/RegionOfInterest\nuint32 x_offset\nuint32 y_offset\n"
    "uint32 height\nuint32 width\nbool do_rectify\n",
    "sensor_msgs/msg/PointCloud2": "std_msgs/Header header\nuint32 height\nuint32 width\n"
    "sensor_msgs/PointField[] fields\nbool is_bigendian\nuint32 point_step\n"
    "uint32 row_step\nuint8[] data\nbool is_dense\n"
    + _COMMON
    + _RULE
    + "MSG: sensor_msgs/PointField\nuint8 INT8=1\nuint8 UINT8=2\nuint8 INT16=3\n"
    "uint8 UINT16=4\nuint8 INT32=5\nuint8 UINT32=6\nuint8 FLOAT32=7\nuint8 FLOAT64=8\n"
    "string name\nuint32 offset\nuint8 datatype\nuint32 count\n",
}
FLOAT32 = 7  # sensor_msgs/PointField's datatype


def needs_writer() -> Any:
    """mcap-ros2-support's writer, or EdgeError saying how to get it."""
    try:
        from mcap_ros2 import writer
    except ImportError:
        raise EdgeError(
            "recording ROS 2 messages needs mcap-ros2-support: pip install "
            "'da3-edge[robots]' (or uv pip install mcap-ros2-support)"
        ) from None
    return writer


def header(at: float) -> dict[str, Any]:
    ns = round(at * 1e9)
    return {"stamp": {"sec": ns // 10**9, "nanosec": ns % 10**9}, "frame_id": FRAME_ID}


class Ros2Recorder(Frames):
    """An MCAP file of ROS 2 messages being written, a frame at a time (``add``);
    ``close`` finishes it."""

    def __init__(self, out: Path, compression: str = "zstd") -> None:
        writer = needs_writer()
        from mcap.writer import CompressionType

        super().__init__()
        kinds = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4}
        try:
            self.file = out.open("xb")
        except OSError as exc:
            raise OutputError(f"{out}: cannot write the recording ({exc.strerror})") from None
        self.writer = writer.Writer(
            self.file, compression=kinds.get(compression, CompressionType.NONE)
        )
        self.schemas = {
            name: self.writer.register_msgdef(name, text) for name, text in DEFINITIONS.items()
        }

    def _write(self, topic: str, kind: str, message: dict[str, Any], at: float) -> None:
        self.writer.write_message(
            f"/da3/{topic}", self.schemas[f"sensor_msgs/msg/{kind}"], message, int(at * 1e9)
        )

    def image(self, name: str, values: np.ndarray, at: float) -> None:
        h, w = values.shape
        message = {
            "header": header(at),
            "height": h,
            "width": w,
            "encoding": "32FC1",
            "is_bigendian": 0,
            "step": 4 * w,
            "data": values.tobytes(),
        }
        self._write(name, "Image", message, at)

    def picture(self, name: str, data: bytes, kind: str, at: float) -> None:
        self._write(
            name, "CompressedImage", {"header": header(at), "format": kind, "data": data}, at
        )

    def calibration(self, k: geometry.Intrinsics, shape: tuple[int, int], at: float) -> None:
        h, w = shape
        message = {
            "header": header(at),
            "height": h,
            "width": w,
            "distortion_model": "plumb_bob",
            "d": [0.0] * 5,
            "k": [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0],
            "r": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            "p": [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
            "binning_x": 0,
            "binning_y": 0,
            "roi": {"x_offset": 0, "y_offset": 0, "height": 0, "width": 0, "do_rectify": False},
        }
        self._write("calibration", "CameraInfo", message, at)

    def points(self, cloud: geometry.Cloud, at: float) -> None:
        packed = np.empty(cloud.count, [("xyz", "<f4", 3), ("rgb", "<u4")])
        packed["xyz"] = cloud.points
        r, g, b = (cloud.colours[:, i].astype(np.uint32) for i in range(3))
        packed["rgb"] = (r << 16) | (g << 8) | b
        fields = [
            {"name": n, "offset": o, "datatype": FLOAT32, "count": 1}
            for n, o in (("x", 0), ("y", 4), ("z", 8), ("rgb", 12))
        ]
        message = {
            "header": header(at),
            "height": 1,
            "width": cloud.count,
            "fields": fields,
            "is_bigendian": False,
            "point_step": 16,
            "row_step": 16 * cloud.count,
            "data": packed.tobytes(),
            "is_dense": True,
        }
        self._write("points", "PointCloud2", message, at)

    def close(self) -> Recorded:
        """Finish the file: its metadata, summary and footer."""
        encoding = "ros2 (sensor_msgs, CDR)"
        self.writer.add_metadata("da3-edge", self.recorded.metadata(encoding=encoding))
        try:
            self.writer.finish()
        finally:
            self.file.close()
        return self.recorded
