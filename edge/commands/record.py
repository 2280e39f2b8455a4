"""``da3-edge record``: the store's frames into an MCAP file (see ``edge.record``).

Exit codes: 0 once the file is finished (a frame count, a duration, or Ctrl-C / SIGTERM
reached); 1 for a store, file or missing-SDK error (one line); 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from edge import config as config_mod
from edge.commands import options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge record",
        description=(
            "Record the store's frames into an MCAP file on Foxglove's schemas: relative "
            "depth and confidence (RawImage 32FC1, not metres), the scene or the preview "
            "(CompressedImage), the camera's calibration and the point cloud where the "
            "field of view is known; with --ros2, ROS 2's own messages instead. New frames as "
            "the daemon writes them, until --frames, --duration or Ctrl-C; the file is "
            "finished whichever ends it. Needs pip install 'da3-edge[robots]'."
        ),
    )
    p.add_argument("out", metavar="OUT.mcap", help="the recording to write (must not exist)")
    options.add_store_and_config(p, sections="[store]")
    p.add_argument("--frames", type=int, default=0, metavar="N", help="stop after N frames")
    p.add_argument("--duration", type=float, default=0.0, metavar="S", help="stop after S seconds")
    p.add_argument(
        "--existing",
        action="store_true",
        help="first the frames in the store now (oldest first), then the new ones",
    )
    p.add_argument(
        "--compression",
        choices=("zstd", "lz4", "none"),
        default="zstd",
        help="the MCAP chunks' compression (default: zstd)",
    )
    p.add_argument(
        "--ros2",
        action="store_true",
        help="ROS 2's messages (sensor_msgs Image 32FC1, CompressedImage, CameraInfo, "
        "PointCloud2; CDR) for ros2 bag play, not Foxglove's; the depth is still relative",
    )
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    if ns.frames < 0 or ns.duration < 0:
        raise SystemExit("da3-edge record: error: --frames and --duration take 0 or more")
    out = Path(ns.out)
    from edge.errors import OutputError

    if out.exists():
        raise OutputError(f"{out} exists: recordings are never overwritten")
    config = config_mod.load(ns.config, parts=("store",))
    from edge.record import Recorded, Recorder, needs_sdk, record
    from edge.record_ros2 import Ros2Recorder, needs_writer
    from edge.store.trust import store_to_read

    needs_writer() if ns.ros2 else needs_sdk()
    root = store_to_read(ns.store, config.store.dir)
    bounds = [f"{ns.frames} frames"] * bool(ns.frames) + [f"{ns.duration:g} s"] * bool(ns.duration)
    bound = " or ".join(bounds) or "until Ctrl-C"
    print(f"recording {root} into {out} ({bound})", file=sys.stderr, flush=True)

    def say(done: Recorded) -> None:
        print(f"\r{done.frames} frames", end="", file=sys.stderr, flush=True)

    recorder = (Ros2Recorder if ns.ros2 else Recorder)(out, ns.compression)
    done = record(
        root, recorder, count=ns.frames, seconds=ns.duration, existing=ns.existing, progress=say
    )
    flag = ", RANDOM-INIT (not a real model)" if done.random_init else ""
    if done.clouds:
        clouds = f", {done.clouds} point clouds"
    else:
        clouds = f" (no point clouds: {done.why_no_cloud})" if done.why_no_cloud else ""
    print(f"\r{out}: {done.frames} frames{clouds}{flag}", file=sys.stderr)
    return 0
