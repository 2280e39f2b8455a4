"""What every camera source provides: ``Frame`` and the ``Source`` protocol."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

import numpy as np

from edge.closing import Closing
from edge.fov import FieldOfView


@dataclass(frozen=True)
class Frame:
    """One captured image.

    ``t_capture`` is wall-clock seconds (``time.time()``) when the sensor delivered
    it, or the source's own timestamp; ``t_mono`` is ``time.monotonic()`` at the same
    moment, for latencies. ``seq`` counts frames from this source, from 0.
    """

    rgb: np.ndarray  # (H, W, 3) uint8: what the pipeline takes
    seq: int
    t_capture: float
    t_mono: float
    sensor_ts: float | None = None  # the driver's timestamp, when it has one (stall check)
    # A camera whose ISP scales a second stream down for the pipeline (picamera2's lores)
    # gives ``rgb`` at that size; then ``camera_size`` is the picture's own (H, W), and
    # ``full`` the picture at that size, converted only when an output needs it.
    camera_size: tuple[int, int] | None = None
    full: np.ndarray | None = None
    # The picture's horizontal field of view as far as the source knows it (picamera2:
    # the module's, through the sensor crop; the config's camera.hfov stamped over it).
    fov: FieldOfView | None = None

    @property
    def size(self) -> tuple[int, int]:
        """The camera's picture size (H, W): what the outputs are made at."""
        return self.camera_size or (int(self.rgb.shape[0]), int(self.rgb.shape[1]))

    @property
    def scene(self) -> np.ndarray:
        """The picture for the "rgb" output: the full one when converted, else ``rgb``."""
        return self.full if self.full is not None else self.rgb


CLOSE_GRACE = 3.0  # seconds a source's close may take past its read timeout: then wedged


@dataclass(frozen=True)
class Controls:
    """What the camera is asked to do (``[camera]``): flip, focus, a frame-rate cap.
    Empty, zero or negative means "the camera's own" (``af = ""``, ``fps = 0``,
    ``lens_position < 0``). Applied by the sources that can; the others say so once."""

    hflip: bool = False
    vflip: bool = False
    af: str = ""  # edge.config.AF_MODES, or "" for the camera's own
    lens_position: float = -1.0  # dioptres (1 / metres to the focus; 0: infinity)
    fps: float = 0.0

    def asked(self) -> dict[str, object]:
        """The controls that are set: config key -> value."""
        defaults = Controls()
        return {k: v for k, v in vars(self).items() if v != getattr(defaults, k)}


@dataclass(frozen=True)
class Streams:
    """What the pipeline needs of the camera (``edge.camera.open_source``): a picture
    ``small`` (W, H) or near it, which a camera with an ISP scales for free (None: the
    full picture), and whether an output needs the full picture too (``full``)."""

    small: tuple[int, int] | None = None
    full: bool = True

    @classmethod
    def for_core(cls, width: int, height: int, long_side: int, *, full: bool) -> Streams:
        """A camera of ``width`` x ``height`` feeding a core whose input is at most
        ``long_side`` on its long side: a small stream of that long side, the aspect
        kept and each side even (what the ISP scales to), when the camera's is larger."""
        if not long_side or max(width, height) <= long_side:
            return cls(None, full)
        scale = long_side / max(width, height)
        return cls((2 * round(width * scale / 2), 2 * round(height * scale / 2)), full)


class Source(Protocol):
    """A camera. ``open`` may raise ``CameraError``; ``read`` returns the next frame or
    raises ``CameraError`` / ``CameraTimeout`` within about ``timeout`` seconds (a
    broken driver may hang longer; the daemon watches for that)."""

    name: str
    controls: Controls
    streams: Streams  # only picamera2 makes a small stream; the others give the full one

    @property
    def applied(self) -> dict[str, object]:
        """What the camera does of ``controls``, read back from it (config key ->
        value): known once ``open`` has returned."""
        ...

    @property
    def refused(self) -> list[str]:
        """One line for each of ``controls`` the camera could not apply."""
        ...

    def open(self) -> None: ...

    def read(self, timeout: float) -> Frame: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class SourceBase(Closing):
    """Context-manager plumbing shared by the sources: ``with`` opens, then closes."""

    name = "source"
    controls = Controls()
    streams = Streams()

    @property
    def applied(self) -> dict[str, object]:
        return {}

    @property
    def refused(self) -> list[str]:
        """A source without camera controls: each one asked for is one line."""
        return [
            f"{self.name}: camera.{key} is a picamera2 control; not applied"
            for key in self.controls.asked()
        ]

    def open(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.open()
        return self
