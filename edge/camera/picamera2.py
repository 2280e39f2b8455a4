"""The Raspberry Pi camera through picamera2 (libcamera).

picamera2 comes from Raspberry Pi OS's apt repository (``python3-picamera2``), so the
venv needs ``--system-site-packages``; ``scripts/install-pi.sh`` sets that up.

Fresh frames come from ``capture_request(wait=timeout)``, and every request is
``release()``-d, or libcamera runs out of buffers. A bad ribbon cable shows up as
"Dequeue timer ... expired" and then a timeout here; ``stop()`` can then block, so
closing happens with a bound and the daemon's watchdog covers the rest.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from edge.camera.base import Frame, SourceBase
from edge.errors import CameraError, CameraTimeout


class Picamera2Source(SourceBase):
    name = "picamera2"

    def __init__(self, *, width: int = 1280, height: int = 720, timeout: float = 2.0) -> None:
        self.width, self.height = width, height
        self.timeout = timeout
        self._cam: Any = None
        self._seq = 0

    def open(self) -> None:
        try:
            from picamera2 import Picamera2
        except ImportError:
            raise CameraError(
                "the picamera2 source needs picamera2: sudo apt install python3-picamera2, "
                "and a venv made with --system-site-packages (scripts/install-pi.sh does both)"
            ) from None
        except Exception as exc:  # e.g. numpy 2 in the venv under bookworm's numpy-1 builds
            raise CameraError(
                f"picamera2 is installed but fails to import ({type(exc).__name__}: {exc}); "
                "on Raspberry Pi OS bookworm the venv needs numpy<2 "
                "(scripts/install-pi.sh pins it)"
            ) from None
        try:
            cam = Picamera2()
            config = cam.create_video_configuration(
                main={"size": (self.width, self.height), "format": "RGB888"}, buffer_count=4
            )
            cam.configure(config)
            cam.start()
        except Exception as exc:  # libcamera raises RuntimeError/IndexError when absent
            raise CameraError(f"picamera2: cannot start the camera ({exc})") from None
        self._cam = cam

    def read(self, timeout: float) -> Frame:
        if self._cam is None:
            raise CameraError("picamera2: not open")
        try:
            request = self._cam.capture_request(wait=timeout)
        except TimeoutError:
            raise CameraTimeout(f"picamera2: no frame within {timeout:g} s") from None
        except Exception as exc:
            raise CameraError(f"picamera2: capture failed ({exc})") from None
        try:
            # RGB888 in libcamera terms is BGR byte order in memory.
            bgr = request.make_array("main")
            metadata = request.get_metadata()
        finally:
            request.release()
        now = time.time()
        sensor_ns = metadata.get("SensorTimestamp")
        frame = Frame(
            bgr[:, :, ::-1].copy(),
            self._seq,
            now,
            time.monotonic(),
            sensor_ts=None if sensor_ns is None else sensor_ns / 1e9,
        )
        self._seq += 1
        return frame

    def close(self) -> None:
        cam, self._cam = self._cam, None
        if cam is None:
            return

        def stop() -> None:
            try:
                cam.stop()
                cam.close()
            except Exception:
                pass

        closer = threading.Thread(target=stop, name="picamera2-close", daemon=True)
        closer.start()
        closer.join(self.timeout + 3.0)  # a wedged stop() must not wedge the daemon
