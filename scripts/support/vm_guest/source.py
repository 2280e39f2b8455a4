"""Unmodified picamera2 through da3-edge's source, one part of the VM test per run:

    python source.py WIDTH HEIGHT SMALL PART

SMALL is the small stream the daemon would ask for (WxH, or ``-`` for none). PART:
``open`` (open, ten frames, more than its four buffers: every request must be
released; close; and again), ``controls`` (flip, autofocus, a frame-rate cap),
``small`` (a second, scaled stream: libcamera scales it here, a Pi's ISP), ``cpu``
(capture CPU per frame: the full picture, the small stream, both), ``index1`` (one
camera: camera 1 is refused, naming camera 0), ``none`` (no camera yet: each open
fails in one line, twice alike).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import numpy as np

from edge.camera import Controls, Streams
from edge.camera.picamera2 import Picamera2Source
from edge.errors import CameraError

Size = tuple[int, int]


def opens(width: int, height: int, small: Size | None) -> None:
    for run in range(2):
        src = Picamera2Source(width=width, height=height, timeout=5.0)
        t = time.monotonic()
        src.open()
        print(f"run {run}: open {time.monotonic() - t:.2f} s", flush=True)
        frames = [src.read(5.0) for _ in range(10)]
        print(f"run {run}: seq {[f.seq for f in frames]} shape {frames[-1].rgb.shape}", flush=True)
        np.save(f"/job/frames/rgb{run}.npy", frames[-1].rgb)
        t = time.monotonic()
        src.close()
        print(f"run {run}: closed in {time.monotonic() - t:.2f} s (bound {src.timeout + 3:g} s)")


def controls(width: int, height: int, small: Size | None) -> None:
    src = Picamera2Source(width=width, height=height, timeout=5.0)
    src.controls = Controls(hflip=True, af="continuous", fps=5.0)
    with src:
        frames = [src.read(5.0) for _ in range(12)]
    print("applied:", json.dumps(src.applied, sort_keys=True))
    ts = [t for f in frames if (t := f.sensor_ts) is not None]  # libcamera's, every frame
    print(f"mean rate: {(len(ts) - 1) / (ts[-1] - ts[0]):.3f}")
    for line in src.refused:
        print("refused:", line)
    np.save("/job/frames/controls.npy", frames[-1].rgb)


def small_stream(width: int, height: int, small: Size | None) -> None:
    src = Picamera2Source(width=width, height=height, timeout=5.0)
    src.streams = Streams(small=small, full=True)
    with src:
        frames = [src.read(5.0) for _ in range(3)]
        print("colour_space:", src._cam.camera_configuration().get("colour_space"))
    f = frames[-1]
    print("applied:", json.dumps(src.applied, sort_keys=True))
    assert f.full is not None
    print(f"small {f.rgb.shape} camera_size {f.camera_size} full {f.full.shape}")
    for line in src.refused:
        print("refused:", line)
    np.save("/job/frames/small.npy", f.rgb)
    np.save("/job/frames/full.npy", f.full)


def cpu(width: int, height: int, small: Size | None) -> None:
    kinds = {
        "full": Streams(),
        "small": Streams(small=small, full=False),
        "small+full": Streams(small=small, full=True),
    }
    n = 12
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for rnd in range(2):  # the order reversed in the second round
        for name in list(kinds)[:: 1 if rnd == 0 else -1]:
            src = Picamera2Source(width=width, height=height, timeout=10.0)
            src.streams = kinds[name]
            with src:
                for _ in range(3):
                    src.read(10.0)
                t, p = time.thread_time(), time.process_time()
                for _ in range(n):
                    src.read(10.0)
                got[name].append(((time.thread_time() - t) / n, (time.process_time() - p) / n))
    for name, v in got.items():
        print(
            f"cpu {name}: read() {1000 * min(x[0] for x in v):.1f} ms, "
            f"process {1000 * min(x[1] for x in v):.1f} ms per frame"
        )


def index1(width: int, height: int, small: Size | None) -> None:
    try:
        Picamera2Source(index=1, width=width, height=height, timeout=5.0).open()
    except CameraError as e:
        print(f"index 1: CameraError: {e}")
        return
    sys.exit("index 1: opened a camera that is not there")


def none(width: int, height: int, small: Size | None) -> None:
    for run in range(2):
        try:
            Picamera2Source(width=width, height=height, timeout=5.0).open()
        except CameraError as e:
            print(f"open {run}: CameraError: {e}")
        else:
            sys.exit(f"open {run}: opened a camera that is not there")


PARTS: dict[str, Callable[[int, int, Size | None], None]] = {
    "open": opens,
    "controls": controls,
    "small": small_stream,
    "cpu": cpu,
    "index1": index1,
    "none": none,
}


def main(argv: list[str]) -> int:
    width, height, small_text, part = int(argv[0]), int(argv[1]), argv[2], argv[3]
    small = None
    if small_text != "-":
        w, _, h = small_text.partition("x")
        small = (int(w), int(h))
    PARTS[part](width, height, small)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
