"""A picture's horizontal field of view, and where it came from: in order, the config
(``camera.hfov``, snap's ``--hfov``), the camera model picamera2 reports (``CAMERA_HFOV``:
the Raspberry Pi modules' published fields of view, narrowed by the sensor crop in
use), a still's EXIF 35 mm-equivalent focal length; otherwise none, and why.

Free of numpy: the config and serve know fields of view without loading array code
(``edge.geometry`` turns one into intrinsics and points).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

HFOV_RANGE = (1.0, 179.0)  # degrees a field of view may take: beyond, a tangent explodes

# Horizontal fields of view across the whole sensor, in degrees, as Raspberry Pi
# publishes them for its camera modules (raspberrypi.com/documentation/accessories/
# camera.html), keyed by the sensor name picamera2 reports as ``Model`` (a NoIR module
# reports the same sensor with "_noir"). The HQ (imx477) and Global Shutter (imx296)
# cameras take interchangeable lenses: no entry, camera.hfov says.
CAMERA_HFOV = {
    "ov5647": 53.5,  # Camera Module 1
    "imx219": 62.2,  # Camera Module 2
    "imx708": 66.0,  # Camera Module 3
    "imx708_wide": 102.0,  # Camera Module 3 Wide
}
LENS_CAMERAS = {"imx477": "the HQ Camera", "imx296": "the Global Shutter Camera"}

# The diagonal of a 36 x 24 mm frame: what an EXIF 35 mm-equivalent focal length is
# measured against (CIPA DC-008, FocalLengthIn35mmFilm).
FILM_DIAGONAL_MM = math.hypot(36.0, 24.0)


@dataclass(frozen=True)
class FieldOfView:
    """A frame's horizontal field of view (``degrees``, across the picture's width), and
    where it came from; ``degrees`` None: not known, and ``source`` says why."""

    degrees: float | None
    source: str

    def record(self) -> dict[str, object]:
        """As the frame's JSON has it (``field_of_view``)."""
        return {"horizontal_degrees": self.degrees, "source": self.source}

    @classmethod
    def from_record(cls, record: object) -> FieldOfView:
        """From a frame's JSON (``field_of_view``); unknown when absent or malformed."""
        if isinstance(record, dict):
            degrees, source = record.get("horizontal_degrees"), record.get("source")
            if isinstance(degrees, bool) or not isinstance(degrees, (int, float)):
                degrees = None
            if degrees is not None and in_range(float(degrees)):
                return cls(float(degrees), str(source))
            if isinstance(source, str):
                return cls(None, source)
        return cls(None, "none: the frame's record has no field of view")


def in_range(degrees: float) -> bool:
    return math.isfinite(degrees) and HFOV_RANGE[0] <= degrees <= HFOV_RANGE[1]


def configured(degrees: float, where: str) -> FieldOfView | None:
    """The field of view a user gave (``where``: the key or flag), None when 0 (not given)."""
    return FieldOfView(float(degrees), where) if degrees else None


@functools.lru_cache(maxsize=8)  # per frame on picamera2: the same few crops
def of_camera(model: str, active_width: int = 0, crop_width: int = 0) -> FieldOfView:
    """The field of view of a Raspberry Pi camera module by the sensor picamera2 names,
    narrowed to the sensor crop in use (libcamera's ScalerCrop, ``crop_width`` of the
    ``active_width`` pixels; 0 when not known: the whole width)."""
    sensor = model.removesuffix("_noir")
    if sensor in LENS_CAMERAS:
        return FieldOfView(
            None,
            f"none: {LENS_CAMERAS[sensor]} ({model}) takes interchangeable lenses; "
            "set camera.hfov to the lens's horizontal field of view",
        )
    full = CAMERA_HFOV.get(sensor)
    if full is None:
        return FieldOfView(
            None, f"none: no published field of view for camera {model!r}; set camera.hfov"
        )
    if 0 < crop_width < active_width:
        fraction = crop_width / active_width
        degrees = math.degrees(2 * math.atan(math.tan(math.radians(full) / 2) * fraction))
        return FieldOfView(
            round(degrees, 3),
            f"camera {model}: published {full:g} degrees, the sensor crop "
            f"{crop_width} of {active_width} pixels wide",
        )
    return FieldOfView(full, f"camera {model}: published {full:g} degrees")


def of_exif(focal_35mm: float | None, size: tuple[int, int]) -> FieldOfView | None:
    """The field of view of a photo (``size``: (H, W) as displayed) from its EXIF 35 mm
    equivalent focal length: the equivalent frame's diagonal spread over the photo's
    aspect (a 3:2 photo is 36 mm wide). None without one."""
    if not focal_35mm or focal_35mm <= 0:
        return None
    h, w = size
    width_mm = FILM_DIAGONAL_MM * w / math.hypot(w, h)
    degrees = math.degrees(2 * math.atan(width_mm / (2 * focal_35mm)))
    if not in_range(degrees):
        return None
    return FieldOfView(round(degrees, 3), f"EXIF: {focal_35mm:g} mm (35 mm equivalent)")


def choose(*candidates: FieldOfView | None, none: str) -> FieldOfView:
    """The first candidate with degrees, else one that says why there is none: the
    first candidate's own reason, else ``none``."""
    for candidate in candidates:
        if candidate is not None and candidate.degrees is not None:
            return candidate
    for candidate in candidates:
        if candidate is not None:
            return candidate
    return FieldOfView(None, f"none: {none}")
