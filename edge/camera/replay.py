"""Replay a directory of images (sorted by name) or a video file as a camera.

Frames come at ``fps``; ``loop`` starts over at the end, otherwise the end is a
``CameraError`` (the daemon then backs off and reopens, i.e. replays again after
the backoff: use ``:once`` with care). Images are decoded with ``edge.images``
(EXIF orientation applied), so a replay of phone photos matches ``snap``. Video
needs OpenCV.

Decoded images are kept (read-only) while they fit in ``CACHE_BYTES``: a camera hands
over decoded frames, and a replay that re-decoded a 1200x1600 JPEG for every frame
would spend CPU (~15 ms a frame) a real camera does not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edge import images
from edge.camera.base import Frame, SourceBase
from edge.errors import CameraError, EdgeError

CACHE_BYTES = 64 * 1024 * 1024


class ReplaySource(SourceBase):
    name = "replay"

    def __init__(self, path: str | Path, *, fps: float = 5.0, loop: bool = True) -> None:
        self.path = Path(path)
        self.fps = fps
        self.loop = loop
        self._files: list[Path] = []
        self._video: Any = None
        self._index = 0
        self._seq = 0
        self._next_due = 0.0
        self._decoded: dict[Path, Any] = {}
        self._decoded_bytes = 0
        self.is_open = False

    def open(self) -> None:
        self._decoded.clear()  # a reopen reads the files again
        self._decoded_bytes = 0
        if self.path.is_dir():
            self._files = sorted(
                p
                for p in self.path.iterdir()
                if p.is_file() and p.suffix.lower() in images.IMAGE_SUFFIXES
            )
            if not self._files:
                raise CameraError(f"replay: no images in {self.path}")
        elif self.path.is_file():
            try:
                import cv2
            except ImportError:
                raise CameraError(
                    f"replay: {self.path} is a video; reading video needs OpenCV "
                    "(pip install opencv-python-headless), or replay a directory of images"
                ) from None
            self._video = cv2.VideoCapture(str(self.path))
            if not self._video.isOpened():
                raise CameraError(f"replay: OpenCV cannot open {self.path}")
        else:
            raise CameraError(f"replay: {self.path} does not exist")
        self._index = 0
        self._next_due = time.monotonic()
        self.is_open = True

    def _next_rgb(self) -> Any:
        if self._video is not None:
            ok, bgr = self._video.read()
            if not ok:
                if not self.loop:
                    raise CameraError("replay: end of video")
                self._video.set(1, 0)  # CAP_PROP_POS_FRAMES
                ok, bgr = self._video.read()
                if not ok:
                    raise CameraError(f"replay: cannot read {self.path}")
            return bgr[:, :, ::-1].copy()
        if self._index >= len(self._files):
            if not self.loop:
                raise CameraError("replay: end of images")
            self._index = 0
        path = self._files[self._index]
        self._index += 1
        cached = self._decoded.get(path)
        if cached is not None:
            return cached
        try:
            rgb = images.load(path).rgb
        except EdgeError as exc:
            raise CameraError(f"replay: {exc}") from None
        if self._decoded_bytes + rgb.nbytes <= CACHE_BYTES:
            rgb.flags.writeable = False  # shared by every replay of this image
            self._decoded[path] = rgb
            self._decoded_bytes += rgb.nbytes
        return rgb

    def read(self, timeout: float) -> Frame:
        if not self.is_open:
            raise CameraError("replay: not open")
        delay = self._next_due - time.monotonic()
        if delay > 0:
            time.sleep(min(delay, timeout))
        self._next_due = max(self._next_due + 1.0 / self.fps, time.monotonic())
        rgb = self._next_rgb()
        now = time.time()
        frame = Frame(rgb, self._seq, now, time.monotonic(), sensor_ts=now)
        self._seq += 1
        return frame

    def close(self) -> None:
        if self._video is not None:
            self._video.release()
            self._video = None
        self.is_open = False
