"""What every camera source provides: ``Frame`` and the ``Source`` protocol."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

import numpy as np

from edge.closing import Closing


@dataclass(frozen=True)
class Frame:
    """One captured image.

    ``t_capture`` is wall-clock seconds (``time.time()``) when the sensor delivered
    it, or the source's own timestamp; ``t_mono`` is ``time.monotonic()`` at the same
    moment, for latencies. ``seq`` counts frames from this source, from 0.
    """

    rgb: np.ndarray  # (H, W, 3) uint8
    seq: int
    t_capture: float
    t_mono: float
    sensor_ts: float | None = None  # the driver's timestamp, when it has one (stall check)


class Source(Protocol):
    """A camera. ``open`` may raise ``CameraError``; ``read`` returns the next frame or
    raises ``CameraError`` / ``CameraTimeout`` within about ``timeout`` seconds (a
    broken driver may hang longer; the daemon watches for that)."""

    name: str

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

    def open(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.open()
        return self
