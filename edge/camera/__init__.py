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

import math

from edge.camera.base import Controls, Frame, Source, Streams
from edge.errors import CameraError, CameraTimeout, UsageError


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


def _source(spec: str, width: int, height: int, timeout: float) -> Source:
    kind, _, rest = spec.partition(":")
    if kind == "fake":
        from edge.camera.fake import FakeCamera

        return FakeCamera(rest, width=width, height=height)
    if kind == "replay":
        from edge.camera.replay import ReplaySource

        if not rest:
            raise UsageError("replay needs a path: replay:PATH[@FPS][:once]")
        once = rest.endswith(":once")
        if once:
            rest = rest[: -len(":once")]
        path, _, fps_text = rest.rpartition("@") if "@" in rest else (rest, "", "")
        try:
            fps = float(fps_text) if fps_text else 5.0
        except ValueError:
            raise UsageError(f"replay fps {fps_text!r} is not a number") from None
        if not 0 < fps < math.inf:  # nan fails this too
            raise UsageError("replay fps must be a positive number")
        return ReplaySource(path, fps=fps, loop=not once)
    if kind == "opencv":
        from edge.camera.opencv import OpenCVSource

        return OpenCVSource(_index(kind, rest), width=width, height=height, timeout=timeout)
    if kind == "picamera2":
        from edge.camera.picamera2 import Picamera2Source

        return Picamera2Source(
            index=_index(kind, rest), width=width, height=height, timeout=timeout
        )
    raise UsageError(
        f"unknown source {spec!r} (use picamera2[:INDEX], opencv[:INDEX], "
        "replay:PATH[@FPS][:once] or fake[:SCRIPT])"
    )


def _index(kind: str, text: str) -> int:
    """The camera number after ``KIND:`` (0 when none), or UsageError."""
    if not text:
        return 0
    if not text.isdigit():
        raise UsageError(f"{kind} camera index {text!r} is not a number (0, 1, ...)")
    return int(text)


__all__ = [
    "CameraError",
    "CameraTimeout",
    "Controls",
    "Frame",
    "Source",
    "Streams",
    "open_source",
]
