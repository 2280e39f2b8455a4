"""``da3-edge record``: the store's frames into an MCAP file on Foxglove's schemas.

MCAP is the log format of ROS 2 bags and Foxglove; Foxglove's SDK (``foxglove-sdk``,
the ``robots`` extra) writes it, its messages protobuf-encoded on Foxglove's own
schemas, in zstd or lz4 chunks. A recording holds, for each frame, on topics under
``/da3``:

- ``/da3/depth``: ``foxglove.RawImage``, ``32FC1``, the frame's relative depth as the
  store keeps it (larger = farther, on an arbitrary scale of its own: not metres; REP
  118's 32FC1 is metres, so every channel's metadata says ``depth_scale: relative``);
- ``/da3/confidence``: ``foxglove.RawImage``, ``32FC1``, DA3's confidence;
- ``/da3/scene``: ``foxglove.CompressedImage``, the camera's picture (JPEG) when the
  store keeps it (``"rgb"`` in ``store.formats``), else ``/da3/preview``, the depth's
  colour preview (PNG);
- ``/da3/calibration``: ``foxglove.CameraCalibration`` from the frame's field of view
  (a pinhole in the depth map's pixels); ``/da3/points``: ``foxglove.PointCloud``, the
  frame's points (x, y, z float32 and their colour), DA3's confidence cut, at most a
  million. Without a field of view neither: the metadata says why.

Each message's time is the frame's capture (``t_capture``). The file's metadata record
``da3-edge`` says the version, the model and whether its weights were random
(``random_init``: then nothing in it is a real model's depth). Frames are read from
the store as any consumer reads them (``edge.store.read``), never the model.
``edge.record_ros2`` writes the same frames as ROS 2's messages (``--ros2``).
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge import frames, geometry
from edge.errors import EdgeError, OutputError
from edge.fov import FieldOfView
from edge.store import layout
from edge.store.follow import Follower
from edge.store.read import frame_names, latest, read_record, source_size
from edge.store.trust import open_in, read_in
from edge.version import version

FRAME_ID = "da3_camera"  # the camera's optical frame: x right, y down, z forward
RELATIVE = {
    "depth_scale": "relative",
    "depth_note": "DA3 relative depth: larger is farther, an arbitrary scale per frame, not metres",
}
COMPRESSIONS = ("zstd", "lz4", "none")


@dataclass
class Recorded:
    """What a recording wrote."""

    frames: int = 0
    skipped: int = 0  # frames pruned or unreadable before they were read
    clouds: int = 0
    random_init: bool = False
    why_no_cloud: str = ""

    def metadata(self, **extra: str) -> dict[str, str]:
        """The file's ``da3-edge`` metadata record: version, weights, frames, scale."""
        return {
            "version": version(),
            "random_init": "true" if self.random_init else "false",
            "frames": str(self.frames),
            **extra,
            **RELATIVE,
            **({"no_point_cloud": self.why_no_cloud} if self.why_no_cloud else {}),
        }


def needs_sdk() -> Any:
    """Foxglove's SDK, or EdgeError saying how to get it."""
    try:
        import foxglove
    except ImportError:
        raise EdgeError(
            "recording needs Foxglove's SDK: pip install 'da3-edge[robots]' (or uv pip "
            "install foxglove-sdk)"
        ) from None
    return foxglove


class Frames:
    """What a recording takes of each frame (``add``), whatever it is encoded as: the
    messages themselves are its subclass's (``image``, ``picture``, ``calibration``,
    ``points``)."""

    def __init__(self) -> None:
        self.recorded = Recorded()

    def add(self, root: Path, seq: int) -> bool:
        """Frame ``seq`` of the store at ``root``; False when it is gone or unreadable."""
        frame = read_frame(root, seq)
        if frame is None:
            self.recorded.skipped += 1
            return False
        at = frame.t_capture
        for name, values in (("depth", frame.depth), ("confidence", frame.conf)):
            self.image(name, np.ascontiguousarray(values, "<f4"), at)
        if frame.picture is not None:
            topic = "scene" if frame.picture_format == "jpeg" else "preview"
            self.picture(topic, frame.picture, frame.picture_format, at)
        self.recorded.random_init |= frame.random_init
        if frame.fov.degrees is None:
            self.recorded.why_no_cloud = frame.fov.source
        else:
            h, w = frame.depth.shape
            k = geometry.Intrinsics.of(frame.fov.degrees, (h, w), frame.source_size)
            self.calibration(k, (h, w), at)
            colours = frame.colours()
            self.points(
                geometry.cloud_of(frame.depth, frame.conf, colours, frame.fov, frame.source_size),
                at,
            )
            self.recorded.clouds += 1
        self.recorded.frames += 1
        return True

    def image(self, name: str, values: np.ndarray, at: float) -> None:
        """A float32 map (little-endian, C order) as a 32FC1 image on /da3/NAME."""
        raise NotImplementedError

    def picture(self, name: str, data: bytes, kind: str, at: float) -> None:
        """A JPEG or PNG (``kind``) on /da3/NAME."""
        raise NotImplementedError

    def calibration(self, k: geometry.Intrinsics, shape: tuple[int, int], at: float) -> None:
        """The pinhole ``k`` of a ``shape`` (h, w) map on /da3/calibration."""
        raise NotImplementedError

    def points(self, cloud: geometry.Cloud, at: float) -> None:
        """The frame's points on /da3/points."""
        raise NotImplementedError

    def close(self) -> Recorded:
        """A file's end written (a live logger has none)."""
        return self.recorded


class Logger(Frames):
    """Frames as Foxglove messages on ``context``'s channels (``add``): what a
    recording writes and what ``da3-edge foxglove`` sends live."""

    def __init__(self, context: Any) -> None:
        from foxglove import channels

        super().__init__()
        self.context = context
        self._make = {
            "depth": channels.RawImageChannel,
            "confidence": channels.RawImageChannel,
            "scene": channels.CompressedImageChannel,
            "preview": channels.CompressedImageChannel,
            "calibration": channels.CameraCalibrationChannel,
            "points": channels.PointCloudChannel,
        }
        self._channels: dict[str, Any] = {}

    def advertise(self) -> None:
        """Every channel made now, before its first message (a live server shows
        them all to a client that connects)."""
        for name in self._make:
            self.channel(name)

    def channel(self, name: str) -> Any:
        """The channel ``/da3/NAME``, made (and advertised) the first time."""
        if name not in self._channels:
            make = self._make[name]
            self._channels[name] = make(f"/da3/{name}", metadata=RELATIVE, context=self.context)
        return self._channels[name]

    def image(self, name: str, values: np.ndarray, at: float) -> None:
        from foxglove import messages as m

        h, w = values.shape
        image = m.RawImage(
            timestamp=m.Timestamp.from_epoch_secs(at),
            frame_id=FRAME_ID,
            width=w,
            height=h,
            encoding="32FC1",
            step=4 * w,
            data=values.tobytes(),
        )
        self.channel(name).log(image, log_time=int(at * 1e9))

    def picture(self, name: str, data: bytes, kind: str, at: float) -> None:
        from foxglove import messages as m

        stamp = m.Timestamp.from_epoch_secs(at)
        picture = m.CompressedImage(timestamp=stamp, frame_id=FRAME_ID, data=data, format=kind)
        self.channel(name).log(picture, log_time=int(at * 1e9))

    def calibration(self, k: geometry.Intrinsics, shape: tuple[int, int], at: float) -> None:
        from foxglove import messages as m

        h, w = shape
        calibration = m.CameraCalibration(
            timestamp=m.Timestamp.from_epoch_secs(at),
            frame_id=FRAME_ID,
            width=w,
            height=h,
            distortion_model="",
            D=[],
            K=[k.fx, 0, k.cx, 0, k.fy, k.cy, 0, 0, 1],
            R=[1, 0, 0, 0, 1, 0, 0, 0, 1],
            P=[k.fx, 0, k.cx, 0, 0, k.fy, k.cy, 0, 0, 0, 1, 0],
        )
        self.channel("calibration").log(calibration, log_time=int(at * 1e9))

    def points(self, cloud: geometry.Cloud, at: float) -> None:
        from foxglove import messages as m

        stamp = m.Timestamp.from_epoch_secs(at)
        self.channel("points").log(point_cloud(cloud, stamp), log_time=int(at * 1e9))


class Recorder(Logger):
    """An MCAP file being written, a frame at a time (``add``); ``close`` finishes it."""

    def __init__(self, out: Path, compression: str = "zstd") -> None:
        foxglove = needs_sdk()
        from foxglove import mcap as fmcap

        kinds = {"zstd": fmcap.MCAPCompression.Zstd, "lz4": fmcap.MCAPCompression.Lz4}
        options = fmcap.MCAPWriteOptions(compression=kinds.get(compression), profile="")
        context = foxglove.Context()
        try:
            self.writer = foxglove.open_mcap(out, context=context, writer_options=options)
        except Exception as exc:  # the SDK's own error type for a file that exists
            raise OutputError(f"{out}: cannot write the recording ({exc})") from None
        super().__init__(context)

    def close(self) -> Recorded:
        """Finish the file: its metadata, summary and footer."""
        self.writer.write_metadata("da3-edge", self.recorded.metadata())
        self.writer.close()
        return self.recorded


def point_cloud(cloud: geometry.Cloud, stamp: Any) -> Any:
    """``cloud`` as a ``foxglove.PointCloud``: x, y, z float32 and r, g, b, a uint8."""
    from foxglove import messages as m

    f32, u8 = m.PackedElementFieldNumericType.Float32, m.PackedElementFieldNumericType.Uint8
    names = [("x", 0, f32), ("y", 4, f32), ("z", 8, f32)]
    names += [("red", 12, u8), ("green", 13, u8), ("blue", 14, u8), ("alpha", 15, u8)]
    fields = [m.PackedElementField(name=n, offset=o, type=t) for n, o, t in names]
    packed = np.empty(cloud.count, [("xyz", "<f4", 3), ("rgba", "u1", 4)])
    packed["xyz"] = cloud.points
    packed["rgba"][:, :3] = cloud.colours
    packed["rgba"][:, 3] = 255
    return m.PointCloud(
        timestamp=stamp,
        frame_id=FRAME_ID,
        point_stride=16,
        fields=fields,
        data=packed.tobytes(),
    )


@dataclass
class Frame:
    """What a recording takes of one stored frame."""

    depth: np.ndarray
    conf: np.ndarray
    t_capture: float
    fov: FieldOfView
    source_size: tuple[int, int]
    picture: bytes | None  # none when the store keeps neither
    picture_format: str  # "jpeg" (the scene) or "png" (the preview)
    random_init: bool

    def colours(self) -> np.ndarray:
        """The points' colours: the scene's pixels, else the preview's colours."""
        from PIL import Image

        if self.picture is not None and self.picture_format == "jpeg":
            with Image.open(io.BytesIO(self.picture)) as image:
                step = geometry.step_for(self.depth.shape)  # the cloud's grid: no finer
                image.draft("RGB", (self.depth.shape[1] // step, self.depth.shape[0] // step))
                return np.asarray(image.convert("RGB"))
        return frames.preview_colours(self.depth)


def read_frame(root: Path, seq: int) -> Frame | None:
    """Frame ``seq``'s maps, record and picture; None when any is gone (pruned) or does
    not read as the daemon writes it."""
    record = read_record(root, seq)
    picture, kind = read_in(root, *frame_names(seq, "rgb")), "jpeg"
    if picture is None:
        picture, kind = read_in(root, *frame_names(seq, "preview")), "png"
    if record is None:
        return None
    try:  # from the file: a 12 MP frame's maps are 95 MB without its bytes beside them
        with os.fdopen(open_in(root, *frame_names(seq, "npz")), "rb") as fh, np.load(fh) as npz:
            depth, conf = npz["depth"], npz["conf"]
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if depth.ndim != 2 or depth.shape != conf.shape or depth.dtype != np.float32:
        return None
    t = record.get("t_capture")
    return Frame(
        depth,
        conf,
        float(t) if isinstance(t, (int, float)) else time.time(),
        FieldOfView.from_record(record.get("field_of_view")),
        source_size(record, depth.shape),
        picture,
        kind,
        record.get("random_init") is not False,
    )


def stored(root: Path) -> list[int]:
    """The numbers of the frames in the store now, oldest first."""
    try:
        names = [p.name for p in (root / layout.FRAMES).iterdir()]
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) == 10)


def frames_to_record(
    root: Path, follower: Follower, stop: threading.Event, existing: bool
) -> Iterator[int]:
    """The frames to record, in order, until ``stop``: those in the store now (with
    ``existing``), then each one the daemon publishes. ``follower`` watches from before
    the store is listed, and the new frames are listed again once the stored ones are
    done, so none published meanwhile is missed (the ring keeps them a while)."""
    seen = None if existing else getattr(latest(root), "seq", None)
    if existing:
        for seq in stored(root):
            if stop.is_set():
                return
            yield seq
            seen = seq
    while not stop.is_set():
        newest = latest(root)
        if newest is not None and seen is not None and newest.seq < seen:
            seen = None  # the store was made anew (a reboot's /run): its numbers restart
        newer = [n for n in stored(root) if seen is None or n > seen]
        for seq in newer:
            if stop.is_set():
                return
            yield seq
            seen = seq
        follower.wait(0.5)  # a publish (or a look again every half second)


def record(
    root: Path,
    recorder: Frames,
    *,
    count: int = 0,
    seconds: float = 0.0,
    existing: bool = False,
    progress: Callable[[Recorded], None] = lambda _: None,
) -> Recorded:
    """Record the store at ``root`` with ``recorder`` (a ``Recorder``, or
    ``edge.record_ros2.Ros2Recorder``): the frames in it now (``existing``), then the
    new ones as they come, until ``count`` frames (0: no bound), ``seconds`` (0: no
    bound) or SIGINT/SIGTERM; the file is finished whichever ends it (a second signal
    while it is being finished does not cut it short)."""
    stop = threading.Event()
    handlers = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    timer = threading.Timer(seconds, stop.set) if seconds else None
    if timer is not None:
        timer.daemon = True  # never keeps the process alive after an error
    follower: Follower | None = None
    try:
        follower = Follower(root)  # inotify may be out of watches: the file still ends
        if timer is not None:
            timer.start()
        for seq in frames_to_record(root, follower, stop, existing):
            recorder.add(root, seq)
            progress(recorder.recorded)
            if count and recorder.recorded.frames >= count:
                break
    finally:
        try:
            if follower is not None:
                follower.close()
            if timer is not None:
                timer.cancel()
            done = recorder.close()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    return done
