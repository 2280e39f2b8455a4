"""What the soak does when: the unit's timings, the store's bounds, the faults at fixed
fractions of any length of run, and the two memory windows."""

from __future__ import annotations

from dataclasses import dataclass

# systemd/da3-edge.service
WATCHDOG_SEC = 30.0
RESTART_SEC = 5.0
START_LIMIT = (5, 300.0)
SETTLE = 10.0  # a sample this long after a fault (or a start) must show the steady fds/threads
# The ring: before the good reload, its bytes bite first (a 640x480 frame is ~3 MiB,
# max_bytes half the tmpfs); the reload lowers keep_frames below that, so then the count does.
KEEP_FRAMES = (12, 5)
STORE_MIB = 48  # the tmpfs; the ring's max_bytes is half of it
IN_FLIGHT_WORKERS = 1


@dataclass
class Fault:
    """One fault at ``at`` seconds into the run, lasting ``hold`` seconds."""

    at: float
    kind: str
    hold: float = 0.0

    @property
    def end(self) -> float:
        return self.at + self.hold


def schedule(seconds: float) -> list[Fault]:
    """The faults of a run of ``seconds``, at the same fractions for any length: a
    SIGKILL early (before the first memory window), the rest between 35 % and 86 %,
    the last 14 % left quiet for the second window. Holds scale too, within bounds."""

    def hold(fraction: float, least: float, most: float) -> float:
        return min(max(seconds * fraction, least), most)

    return [
        Fault(0.16 * seconds, "kill"),
        Fault(0.36 * seconds, "camera-error"),
        Fault(0.42 * seconds, "reload-good"),
        Fault(0.48 * seconds, "disk-full", hold(0.02, 8, 60)),
        Fault(0.58 * seconds, "camera-hang", hold(0.01, 5, 12)),
        Fault(0.66 * seconds, "read-only", hold(0.02, 8, 60)),
        Fault(0.75 * seconds, "reload-bad"),
        Fault(0.80 * seconds, "camera-error"),
    ]


def windows(seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two memory windows: an hour's minutes 15-20 and 55-60, scaled."""
    return (0.25 * seconds, 0.333 * seconds), (0.917 * seconds, seconds)
