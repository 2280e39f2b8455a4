"""USB/UVC (and Mac) cameras through OpenCV's VideoCapture.

OpenCV is optional: ``pip install opencv-python-headless`` (or Pi OS's
``python3-opencv``). ``read`` runs the blocking grab in the caller's thread; OpenCV
has no per-read timeout, so a camera that stops delivering is caught by the daemon's
stall watchdog, not here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edge.camera.base import Frame, SourceBase
from edge.errors import CameraError


class OpenCVSource(SourceBase):
    name = "opencv"

    def __init__(self, index: int = 0, *, width: int, height: int, timeout: float) -> None:
        self.index = index
        self.width, self.height = width, height
        self.timeout = timeout
        self._cap: Any = None
        self._seq = 0

    def open(self) -> None:
        try:
            import cv2
        except ImportError:
            raise CameraError(
                "the opencv source needs OpenCV: pip install opencv-python-headless "
                "(or apt install python3-opencv with a --system-site-packages venv)"
            ) from None
        cap = cv2.VideoCapture(self.index)
        if not cap.isOpened():
            cap.release()
            devices = sorted(str(p) for p in Path("/dev").glob("video[0-9]*"))
            here = f" (video devices here: {', '.join(devices)})" if devices else ""
            raise CameraError(f"opencv: cannot open camera {self.index}{here}")
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # freshest frame, not a queue
        self._cap = cap

    def read(self, timeout: float) -> Frame:
        if self._cap is None:
            raise CameraError("opencv: not open")
        ok, bgr = self._cap.read()
        if not ok or bgr is None:
            raise CameraError(f"opencv: camera {self.index} returned no frame")
        now = time.time()
        frame = Frame(bgr[:, :, ::-1].copy(), self._seq, now, time.monotonic(), sensor_ts=None)
        self._seq += 1
        return frame

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
