"""Camera sources behind one small protocol, each a context manager.

``open_source(spec)`` turns a SPEC string into a source:

- ``picamera2[:INDEX]`` — the Raspberry Pi camera (libcamera via picamera2, from apt);
  INDEX is libcamera's camera number (a Pi 5 has two connectors; default 0);
- ``opencv[:INDEX]`` — a USB/UVC or Mac camera through OpenCV (default index 0);
- ``replay:PATH[@FPS][:once]`` — images from a directory (sorted) or a video file,
  at FPS (default 5), looping unless ``:once``;
- ``fake[:SCRIPT]`` — synthetic frames with scriptable faults (see ``edge.camera.fake``).

picamera2 and OpenCV are imported only by their own source, and a missing one is a
one-line error saying what to install.
"""

from __future__ import annotations

from edge import sources
from edge.camera.base import Controls, Frame, Source, Streams
from edge.errors import CameraError, CameraTimeout


def open_source(
    spec: str,
    *,
    width: int,
    height: int,
    timeout: float,
    controls: Controls | None = None,
    streams: Streams | None = None,
) -> Source:
    """A (not yet opened) source for SPEC, to apply ``controls`` and deliver ``streams``
    when it opens; raises UsageError for a bad SPEC. The size and the timeout are the
    config's camera.width, height and timeout (fake and replay take what they need)."""
    source = _source(spec, width, height, timeout)
    source.controls = controls or Controls()
    source.streams = streams or Streams()
    return source


def _source(text: str, width: int, height: int, timeout: float) -> Source:
    spec = sources.parse(text)
    if spec.kind == "fake":
        from edge.camera.fake import FakeCamera

        return FakeCamera(spec.script, width=width, height=height)
    if spec.kind == "replay":
        from edge.camera.replay import ReplaySource

        return ReplaySource(spec.path, fps=spec.fps, loop=spec.loop)
    if spec.kind == "opencv":
        from edge.camera.opencv import OpenCVSource

        return OpenCVSource(spec.index, width=width, height=height, timeout=timeout)
    from edge.camera.picamera2 import Picamera2Source

    return Picamera2Source(index=spec.index, width=width, height=height, timeout=timeout)


__all__ = [
    "CameraError",
    "CameraTimeout",
    "Controls",
    "Frame",
    "Source",
    "Streams",
    "open_source",
]
