"""The Raspberry Pi camera through picamera2 (libcamera).

picamera2 comes from Raspberry Pi OS's apt repository (``python3-picamera2``), so the
venv needs ``--system-site-packages``; ``scripts/install-pi.sh`` sets that up.

Fresh frames come from ``capture_request(wait=timeout)``, and every request is
``release()``-d, or libcamera runs out of buffers. A bad ribbon cable shows up as
"Dequeue timer ... expired" and then a timeout here; ``stop()`` can then block, so
closing happens with a bound and the daemon's watchdog covers the rest.

The source asks for RGB888 but reads back what libcamera negotiated after
``configure`` (libcamera's virtual camera, for one, gives NV12 whatever is asked) and
converts it with ``edge.camera.formats``, or fails in one line naming the format.
When the pipeline wants a smaller picture (``Streams.small``) a second stream the ISP
scales (``lores``) is what gets converted, and the full one only when ``Streams.full``.
``camera.fps`` is asked of the sensor and held here too: a frame that comes sooner is
dropped before it is converted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from edge.camera.base import CLOSE_GRACE, Frame, SourceBase
from edge.camera.formats import to_rgb_for, yuv_encoding
from edge.errors import CameraError, CameraTimeout, CameraWedged
from edge.fov import FieldOfView, of_camera


class Picamera2Source(SourceBase):
    name = "picamera2"

    def __init__(self, *, index: int = 0, width: int, height: int, timeout: float) -> None:
        self.index = index
        self.width, self.height = width, height
        self._applied: dict[str, object] = {}
        self._refused: list[str] = []
        self._interval: float | None = None  # seconds between the sensor's frames
        self._last_ns: int | None = None
        self._kept_interval: float | None = None  # seconds between frames read() returns
        self._kept_ns: int | None = None
        self._dropped = 0
        self.timeout = timeout
        self._cam: Any = None
        self._seq = 0
        self._to_rgb: Callable[[np.ndarray], np.ndarray] = lambda a: a
        self._small_to_rgb: Callable[[np.ndarray], np.ndarray] | None = None
        self._size = (height, width)
        self._sensor: tuple[str, int] = ("unknown", 0)  # picamera2's Model, active width

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
        cam = None
        try:
            check_index(self.index, Picamera2.global_camera_info())
            cam = Picamera2(self.index)
            transform, controls = self._ask(cam.camera_controls)
            self._configure(cam, transform, controls)
            self._sensor = sensor(getattr(cam, "camera_properties", {}))
            cam.start()
        except Exception as exc:  # libcamera raises RuntimeError/IndexError when absent
            if cam is not None:  # opened, then configure or start failed: let it go, or
                with contextlib.suppress(Exception):  # every reconnect after finds the
                    cam.close()  # camera still acquired
            if isinstance(exc, CameraError):
                raise
            raise CameraError(f"picamera2: cannot start the camera ({exc})") from None
        self._cam = cam

    def _configure(self, cam: Any, transform: Any, controls: dict[str, Any]) -> None:
        """The main stream at the camera size and, when the pipeline wants a smaller
        picture, a second one the ISP scales to it (picamera2's lores: YUV420, free of
        CPU); what libcamera negotiated read back, which need not be what was asked
        (its virtual camera gives NV12 whatever the request)."""
        from libcamera import ColorSpace

        main = {"size": (self.width, self.height), "format": "RGB888"}
        small = self.streams.small
        lores = None
        if small is not None and small[0] < self.width and small[1] < self.height:
            lores = {"size": small, "format": "YUV420"}
        # sYCC (JPEG's full-range BT.601) for any YUV stream, rather than picamera2's
        # video default (Rec709, limited range); what libcamera chose is read back.
        common = {
            "transform": transform,
            "controls": controls,
            "buffer_count": 4,
            "colour_space": ColorSpace.Sycc(),
        }
        try:
            cam.configure(cam.create_video_configuration(main=main, lores=lores, **common))
        except Exception as exc:
            if lores is None:
                raise
            self._refused.append(
                f"picamera2: no scaled second stream ({exc}): the pipeline takes the full picture"
            )
            lores = None
            cam.configure(cam.create_video_configuration(main=main, **common))
        configured = cam.camera_configuration()
        colour = yuv_encoding(configured.get("colour_space"))
        got = configured["main"]
        self._size = (int(got["size"][1]), int(got["size"][0]))
        self._to_rgb = to_rgb_for(str(got["format"]), tuple(got["size"]), colour)
        self._small_to_rgb = None
        if lores is not None and configured.get("lores"):
            got = configured["lores"]
            self._small_to_rgb = to_rgb_for(str(got["format"]), tuple(got["size"]), colour)
            self._applied["small_stream"] = f"{got['size'][0]}x{got['size'][1]}"
        self._read_back_transform(configured.get("transform"))

    @property
    def applied(self) -> dict[str, object]:
        return dict(self._applied)

    @property
    def refused(self) -> list[str]:
        return list(self._refused)

    def _ask(self, supported: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """libcamera's Transform and the controls for ``self.controls``, the ones this
        camera has (``supported``: picamera2's ``camera_controls``); one ``refused``
        line for each it lacks."""
        from libcamera import Transform
        from libcamera import controls as lc

        c = self.controls
        self._applied, self._refused = {}, []
        self._interval = self._last_ns = self._kept_interval = self._kept_ns = None
        self._dropped = 0
        wanted: dict[str, tuple[str, Any]] = {}  # libcamera control -> (config key, value)
        if c.fps > 0:
            frame_us = round(1_000_000 / c.fps)
            wanted["FrameDurationLimits"] = ("fps", (frame_us, frame_us))
        if c.af:
            mode = lc.AfModeEnum
            af = {"continuous": mode.Continuous, "auto": mode.Auto}.get(c.af, mode.Manual)
            wanted["AfMode"] = ("af", af)
        if c.lens_position >= 0 or c.af in ("manual", "off"):
            # Manual focus (or none): the lens where asked, else at infinity (0 dioptres).
            wanted["LensPosition"] = ("lens_position", max(c.lens_position, 0.0))
        controls = {}
        for name, (key, value) in wanted.items():
            if name in supported:
                controls[name] = value
                self._applied[key] = getattr(c, key)
            elif key == "fps":  # read() holds the cap whatever the sensor does
                self._applied[key] = c.fps
                self._refused.append(
                    f"picamera2: this camera has no {name} control (camera.fps): the sensor "
                    "runs at its own rate and frames beyond the cap are dropped"
                )
            else:
                self._refused.append(
                    f"picamera2: this camera has no {name} control (camera.{key}): not applied"
                )
        return Transform(hflip=int(c.hflip), vflip=int(c.vflip)), controls

    def _read_back(self, metadata: dict[str, Any], sensor_ns: int | None) -> None:
        """The rate the sensor runs at (its FrameDuration, else the spacing of its
        timestamps, smoothed) and where the lens is, from each frame's metadata."""
        if "FrameDuration" in metadata:
            self._interval = metadata["FrameDuration"] / 1e6
        elif sensor_ns is not None and self._last_ns is not None and sensor_ns > self._last_ns:
            self._interval = _smoothed(self._interval, (sensor_ns - self._last_ns) / 1e9)
        self._last_ns = sensor_ns
        if self._interval:
            self._applied["sensor_rate"] = round(1 / self._interval, 2)
        if "LensPosition" in metadata:
            self._applied["lens_position_now"] = round(float(metadata["LensPosition"]), 3)

    def _keep(self, sensor_ns: int | None) -> bool:
        """Whether the frame taken at ``sensor_ns`` is within ``camera.fps``. A sensor
        can take FrameDurationLimits and run faster (libcamera's virtual camera does),
        so the cap is held here too: a frame sooner than 1/fps after the last one kept
        is dropped, before any pixel is converted. 2% of slack lets a sensor running
        at the cap through with its timestamps' jitter."""
        now = time.monotonic_ns() if sensor_ns is None else sensor_ns
        fps = self.controls.fps
        if fps > 0 and self._kept_ns is not None and 0 <= now - self._kept_ns < 0.98e9 / fps:
            self._dropped += 1
            self._applied["dropped_for_fps"] = self._dropped
            return False
        if self._kept_ns is not None and now > self._kept_ns:
            self._kept_interval = _smoothed(self._kept_interval, (now - self._kept_ns) / 1e9)
            self._applied["frame_rate"] = round(1 / self._kept_interval, 2)
        self._kept_ns = now
        return True

    def _read_back_transform(self, transform: Any) -> None:
        """What libcamera configured of hflip/vflip (it may refuse a flip)."""
        for key in ("hflip", "vflip"):
            if not getattr(self.controls, key):
                continue
            done = bool(getattr(transform, key, False))
            self._applied[key] = done
            if not done:
                self._refused.append(
                    f"picamera2: this camera cannot {key} (camera.{key}): not applied"
                )

    def read(self, timeout: float) -> Frame:
        if self._cam is None:
            raise CameraError("picamera2: not open")
        deadline = time.monotonic() + timeout
        full = None
        while True:
            request = self._request(deadline - time.monotonic(), timeout)
            try:
                metadata = request.get_metadata()
                sensor_ns = metadata.get("SensorTimestamp")
                self._read_back(metadata, sensor_ns)
                if self._keep(sensor_ns):
                    if self._small_to_rgb is None:
                        rgb = self._to_rgb(request.make_array("main"))
                    else:
                        rgb = self._small_to_rgb(request.make_array("lores"))
                        if self.streams.full:  # an output wants the full picture
                            full = self._to_rgb(request.make_array("main"))
                    break
            finally:
                request.release()
        frame = Frame(
            rgb,
            self._seq,
            time.time(),
            time.monotonic(),
            sensor_ts=None if sensor_ns is None else sensor_ns / 1e9,
            camera_size=self._size if self._small_to_rgb is not None else None,
            full=full,
            fov=field_of_view(self._sensor, metadata.get("ScalerCrop")),
        )
        self._seq += 1
        return frame

    def _request(self, left: float, timeout: float) -> Any:
        """The camera's next completed request, within ``left`` seconds of ``read``'s
        ``timeout``."""
        if left <= 0:
            raise CameraTimeout(f"picamera2: no frame within {timeout:g} s")
        try:
            return self._cam.capture_request(wait=left)
        except TimeoutError:
            raise CameraTimeout(f"picamera2: no frame within {timeout:g} s") from None
        except Exception as exc:
            raise CameraError(f"picamera2: capture failed ({exc})") from None

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
        closer.join(self.timeout + CLOSE_GRACE)  # a wedged stop() must not wedge the daemon
        if closer.is_alive():
            raise CameraWedged(
                f"picamera2: stop() did not return within {self.timeout + CLOSE_GRACE:g} s"
            )


def check_index(index: int, cameras: list[dict[str, Any]]) -> None:
    """CameraError naming the cameras libcamera reports when ``index`` is not one."""
    if index < len(cameras):
        return
    found = ", ".join(
        f"{c.get('Num', n)}: {c.get('Model', 'unknown')}" for n, c in enumerate(cameras)
    )
    raise CameraError(
        f"picamera2: no camera {index}; libcamera reports "
        f"{found or 'none'} (`rpicam-hello --list-cameras`; a camera connected or "
        "reseated since boot needs a reboot)"
    )


def sensor(properties: dict[str, Any]) -> tuple[str, int]:
    """The sensor's name (``Model``) and its active width in pixels (0: not reported, or
    in a shape not known here: the field of view is then not narrowed by the crop),
    from picamera2's ``camera_properties``."""
    try:
        areas = properties.get("PixelArrayActiveAreas") or [()]
        width = int(areas[0][2]) if len(areas[0]) == 4 else 0
        width = width or int((properties.get("PixelArraySize") or (0,))[0])
    except (TypeError, ValueError, IndexError):
        width = 0
    return str(properties.get("Model", "unknown")), width


def field_of_view(sensor: tuple[str, int], crop: Any) -> FieldOfView:
    """The field of view of ``sensor`` (``sensor()``) through ``crop`` (libcamera's
    ScalerCrop: x, y, width, height in the sensor's active area; None: the whole)."""
    width = int(crop[2]) if isinstance(crop, (tuple, list)) and len(crop) == 4 else 0
    return of_camera(sensor[0], sensor[1], width)


def _smoothed(previous: float | None, step: float) -> float:
    return step if previous is None else 0.8 * previous + 0.2 * step
