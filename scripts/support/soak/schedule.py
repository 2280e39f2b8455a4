"""What the soak does when: the unit's timings, the store's bounds, the faults at fixed
fractions of any length of run, and the two memory windows."""

from __future__ import annotations

from dataclasses import dataclass

from edge.store.ring import FS_SHARE

FSYNC_STALL = 2.5  # seconds each fsync stalls in the slow-fsync fault (a stalling SD card)
# systemd/da3-edge.service
WATCHDOG_SEC = 30.0
RESTART_SEC = 5.0
START_LIMIT = (5, 300.0)
SETTLE = 10.0  # a sample this long after a fault (or a start) must show the steady fds/threads
# The ring: before the good reload, its bytes bite first (a 640x480 frame is ~3 MiB);
# the reload lowers keep_frames below that, so then the count does. store.max_bytes is
# twice the tmpfs, a ring larger than its filesystem (a small Pi's /run): the daemon's
# cap, half the filesystem, is what holds it.
KEEP_FRAMES = (12, 5)
STORE_MIB = 48  # the tmpfs
MAX_BYTES = 2 * STORE_MIB << 20  # the config's store.max_bytes
RING_BYTES = int((STORE_MIB << 20) * FS_SHARE)  # the daemon's cap on this tmpfs
IN_FLIGHT_WORKERS = 1


@dataclass
class Fault:
    """One fault at ``at`` seconds into the run, lasting ``hold`` seconds; measured while
    it held: for a slow fsync, ``during``, the frames the daemon wrote, and ``copied``,
    those persistence copied to the stalled disk; for a core that overflows, ``during``,
    the frames the consumer read that had non-finite pixels."""

    at: float
    kind: str
    hold: float = 0.0
    during: int | None = None
    copied: int | None = None

    @property
    def end(self) -> float:
        return self.at + self.hold


RESTARTS = ("camera-crash", "kill")  # the faults that end the process (then a restart)


def schedule(seconds: float) -> list[Fault]:
    """The faults of a run of ``seconds``, at the same fractions for any length: the
    two that end the process early (a thread's crash, a SIGKILL: restarts before the
    first memory window), the rest between 35 % and 86 %, the last 14 % left quiet for
    the second window. Holds scale too, within bounds."""

    def hold(fraction: float, least: float, most: float) -> float:
        return min(max(seconds * fraction, least), most)

    return [
        Fault(0.04 * seconds, "camera-crash"),
        Fault(0.16 * seconds, "kill"),
        Fault(0.36 * seconds, "camera-error"),
        Fault(0.42 * seconds, "reload-good"),
        Fault(0.48 * seconds, "disk-full", hold(0.02, 8, 60)),
        Fault(0.545 * seconds, "reload-not-utf8"),
        Fault(0.58 * seconds, "camera-hang", hold(0.01, 5, 12)),
        Fault(0.612 * seconds, "slow-fsync", hold(0.02, 8, 60)),
        Fault(0.66 * seconds, "read-only", hold(0.02, 8, 60)),
        Fault(0.71 * seconds, "reload-model-locked"),
        Fault(0.75 * seconds, "reload-bad"),
        Fault(0.80 * seconds, "camera-error"),
        Fault(0.815 * seconds, "core-overflow", hold(0.02, 6, 60)),
    ]


def windows(seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two memory windows: an hour's minutes 15-20 and 55-60, scaled."""
    return (0.25 * seconds, 0.333 * seconds), (0.917 * seconds, seconds)
