"""``da3-edge record``: a store's frames into MCAP, read back by MCAP's own reader and
its protobuf decoder (readers that are not ours), from a store written by hand and
from the daemon as it runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_protobuf.decoder import DecoderFactory

from edge import geometry
from edge.fov import FieldOfView
from scripts.support import ROOT
from scripts.support.daemon import daemon, frame_dirs
from scripts.support.store import board_store
from scripts.support.tools import run_cli

SEEN = FieldOfView(66.0, "config camera.hfov")


def read_back(path: Path) -> tuple[Any, dict[str, list[Any]], dict[str, dict[str, str]]]:
    """The file's summary, its decoded messages by topic, and its metadata records."""
    with path.open("rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        by_topic: dict[str, list[Any]] = {}
        for _, channel, _, decoded in reader.iter_decoded_messages():
            by_topic.setdefault(channel.topic, []).append(decoded)
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return summary, by_topic, metadata


def test_a_stored_frame_reads_back_as_foxglove_messages(tmp_path: Path) -> None:
    """Three stored frames (the board scene, its picture kept, a field of view): every
    frame's depth and confidence as 32FC1 images equal to its npz, the picture as JPEG,
    the calibration from the field of view, the points DA3's cut keeps; every channel
    and the file say the depth is relative, and that the weights are random."""
    store = board_store(tmp_path / "store", SEEN, ("npz", "rgb", "json"), frames=3)
    out = tmp_path / "rec.mcap"
    proc = run_cli(["record", str(out), "--store", str(store.root), "--existing", "--frames", "3"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(
        "rec.mcap: 3 frames, 3 point clouds, RANDOM-INIT (not a real model)"
    )
    summary, messages, metadata = read_back(out)
    schemas = {c.topic: summary.schemas[c.schema_id].name for c in summary.channels.values()}
    assert schemas == {
        "/da3/depth": "foxglove.RawImage",
        "/da3/confidence": "foxglove.RawImage",
        "/da3/scene": "foxglove.CompressedImage",
        "/da3/calibration": "foxglove.CameraCalibration",
        "/da3/points": "foxglove.PointCloud",
    }
    assert all(c.metadata["depth_scale"] == "relative" for c in summary.channels.values())
    assert summary.statistics.message_count == 15
    assert metadata["da3-edge"]["random_init"] == "true"
    assert metadata["da3-edge"]["depth_scale"] == "relative"
    for n, frame_dir in enumerate(sorted(frame_dirs(store.root))):
        with np.load(frame_dir / "frame.npz") as npz:
            depth, conf = npz["depth"], npz["conf"]
        image = messages["/da3/depth"][n]
        assert (image.width, image.height, image.encoding) == (160, 120, "32FC1")
        got = np.frombuffer(image.data, "<f4").reshape(120, 160)
        np.testing.assert_array_equal(got, depth)
        sure = np.frombuffer(messages["/da3/confidence"][n].data, "<f4").reshape(120, 160)
        np.testing.assert_array_equal(sure, conf)
        assert messages["/da3/scene"][n].format == "jpeg"
        assert messages["/da3/scene"][n].data == (frame_dir / "frame.rgb.jpg").read_bytes()
    k = geometry.Intrinsics.of(66.0, (120, 160), (240, 320))
    calibration = messages["/da3/calibration"][0]
    assert list(calibration.K) == [k.fx, 0, k.cx, 0, k.fy, k.cy, 0, 0, 1]
    cloud = messages["/da3/points"][0]
    assert cloud.point_stride == 16 and len(cloud.data) == 16 * 120 * 160  # all sure
    points = np.frombuffer(cloud.data, [("xyz", "<f4", 3), ("rgba", "u1", 4)])
    z = points["xyz"][:, 2]
    assert np.all(z > 0) and set(points["rgba"][:, 3]) == {255}


def ros2_back(path: Path, types: Any) -> tuple[str, dict[str, list[Any]], dict[str, Any]]:
    """The file's profile, its messages by topic as (schema, decoded with ``types``, a
    rosbags type store), and its metadata records."""
    messages: dict[str, list[Any]] = {}
    with path.open("rb") as fh:
        reader = make_reader(fh)
        for schema, channel, message in reader.iter_messages():
            assert schema is not None
            assert (schema.encoding, channel.message_encoding) == ("ros2msg", "cdr")
            decoded = types.deserialize_cdr(message.data, schema.name)
            messages.setdefault(channel.topic, []).append((schema.name, decoded))
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
        return reader.get_header().profile, messages, metadata


def test_ros2_messages_decode_with_ros2s_own_types(tmp_path: Path) -> None:
    """`record --ros2`: the same frames as ROS 2's sensor_msgs in CDR on a "ros2"
    profile, decoded by rosbags with its own copy of ROS 2's types (not the definitions
    the file carries): depth and confidence 32FC1 equal to the npz, the JPEG, the
    camera's K, and a PointCloud2 of x, y, z and PCL's packed rgb; the file says the
    depth is relative and the weights random."""
    from rosbags.typesys import Stores, get_typestore

    types = get_typestore(Stores.ROS2_HUMBLE)
    store = board_store(tmp_path / "store", SEEN, ("npz", "rgb", "json"), frames=2)
    out = tmp_path / "rec.mcap"
    args = ["record", str(out), "--ros2", "--store", str(store.root), "--existing"]
    proc = run_cli([*args, "--frames", "2"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(
        "rec.mcap: 2 frames, 2 point clouds, RANDOM-INIT (not a real model)"
    )
    profile, messages, metadata = ros2_back(out, types)
    assert profile == "ros2"
    assert {t: m[0][0] for t, m in messages.items()} == {
        "/da3/depth": "sensor_msgs/msg/Image",
        "/da3/confidence": "sensor_msgs/msg/Image",
        "/da3/scene": "sensor_msgs/msg/CompressedImage",
        "/da3/calibration": "sensor_msgs/msg/CameraInfo",
        "/da3/points": "sensor_msgs/msg/PointCloud2",
    }
    assert metadata["da3-edge"]["depth_scale"] == "relative"
    assert metadata["da3-edge"]["random_init"] == "true"
    for n, frame_dir in enumerate(sorted(frame_dirs(store.root))):
        with np.load(frame_dir / "frame.npz") as npz:
            depth, conf = npz["depth"], npz["conf"]
        image = messages["/da3/depth"][n][1]
        assert (image.width, image.height, image.encoding, image.step) == (160, 120, "32FC1", 640)
        assert image.header.frame_id == "da3_camera"
        np.testing.assert_array_equal(np.frombuffer(image.data, "<f4").reshape(120, 160), depth)
        sure = messages["/da3/confidence"][n][1]
        np.testing.assert_array_equal(np.frombuffer(sure.data, "<f4").reshape(120, 160), conf)
        scene = messages["/da3/scene"][n][1]
        assert scene.format == "jpeg"
        assert bytes(scene.data) == (frame_dir / "frame.rgb.jpg").read_bytes()
    k = geometry.Intrinsics.of(66.0, (120, 160), (240, 320))
    info = messages["/da3/calibration"][0][1]
    assert (info.width, info.height) == (160, 120)
    assert list(info.k) == [k.fx, 0, k.cx, 0, k.fy, k.cy, 0, 0, 1]
    cloud = messages["/da3/points"][0][1]
    assert [(f.name, f.offset, f.datatype) for f in cloud.fields] == [
        ("x", 0, 7),
        ("y", 4, 7),
        ("z", 8, 7),
        ("rgb", 12, 7),
    ]
    assert cloud.point_step == 16 and cloud.width == 120 * 160 and cloud.height == 1
    points = np.frombuffer(cloud.data, [("xyz", "<f4", 3), ("rgb", "<u4")])
    assert np.all(points["xyz"][:, 2] > 0) and np.all(points["rgb"] >> 24 == 0)


def test_the_daemons_frames_as_they_come_and_a_stop_finishes_the_file(
    fake_models: Path, tmp_path: Path
) -> None:
    """The daemon running (FakeCores, the fake camera: no field of view): `record`
    takes the frames it publishes from now on; SIGTERM ends it with the file finished,
    and no point cloud, saying why."""
    store = tmp_path / "store"
    out = tmp_path / "live.mcap"
    with daemon(tmp_path, store, fake_models) as d:
        d.wait_for(lambda: len(frame_dirs(store)) >= 2, what="two frames")
        cmd = [sys.executable, "-m", "edge", "record", str(out), "--store", str(store)]
        with subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True) as rec:
            assert rec.stderr is not None
            end = time.monotonic() + 30
            while time.monotonic() < end and not (out.exists() and out.stat().st_size > 4096):
                time.sleep(0.2)
            time.sleep(1.0)
            rec.send_signal(signal.SIGTERM)
            code, said = rec.wait(30), rec.stderr.read()
        assert d.stop() == 0
    assert code == 0, said
    _, messages, metadata = read_back(out)
    frames = len(messages["/da3/depth"])
    assert frames >= 2 and len(messages["/da3/confidence"]) == frames
    assert "/da3/points" not in messages and "/da3/calibration" not in messages
    assert "no field of view given (camera.hfov" in metadata["da3-edge"]["no_point_cloud"]
    assert f"{frames} frames (no point clouds:" in said.splitlines()[-1]
    stamps = [m.timestamp.seconds + m.timestamp.nanos / 1e9 for m in messages["/da3/depth"]]
    assert stamps == sorted(stamps) and len(set(stamps)) == frames  # capture order


def test_refusals_are_one_line(tmp_path: Path) -> None:
    exists = tmp_path / "was-here.mcap"
    exists.write_bytes(b"mine")
    proc = run_cli(["record", str(exists), "--store", str(tmp_path)])
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "never overwritten" in proc.stderr and exists.read_bytes() == b"mine"
    without_sdk = "import sys; sys.modules['foxglove'] = None; from edge.cli import main; "
    without_sdk += (
        f"sys.exit(main(['record', {str(tmp_path / 'x.mcap')!r}, '--store', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", without_sdk], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'da3-edge[robots]'" in proc.stderr
    assert not (tmp_path / "x.mcap").exists()


def test_frames_published_while_the_stored_ones_are_recorded_are_not_lost(
    tmp_path: Path,
) -> None:
    """``--existing`` on a store the daemon keeps writing: the 20 frames published while
    the 3 stored ones are recorded (more than a late look back would find) come next, in
    order, each once."""
    from edge.record import Recorder, record
    from scripts.support.store import write_board

    store = board_store(tmp_path / "store", SEEN, ("npz", "json"), frames=3)
    out = tmp_path / "rec.mcap"

    def meanwhile(done: Any) -> None:
        if done.frames == 1:  # the daemon publishes while the stored frames are read
            for n in range(3, 23):
                write_board(store, SEEN, n)

    recorder = Recorder(out)
    done = record(store.root, recorder, count=23, seconds=30, existing=True, progress=meanwhile)
    assert (done.frames, done.skipped) == (23, 0)
    _, messages, _ = read_back(out)
    stamps = [m.timestamp.seconds + m.timestamp.nanos / 1e9 for m in messages["/da3/depth"]]
    assert len(stamps) == 23 and stamps == sorted(stamps)


def test_a_store_that_cannot_be_watched_still_ends_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inotify out of watches when the recording starts: the error goes up, yet the file
    is finished (readable, its metadata written), Ctrl-C is the shell's again, and no
    --duration timer is left to hold the process."""
    import signal
    import threading

    from edge import record as rec

    def out_of_watches(root: Path) -> None:
        raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(rec, "Follower", out_of_watches)
    store = board_store(tmp_path / "store", SEEN, ("npz", "json"), frames=1)
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "rec.mcap"
    with pytest.raises(OSError, match="watch limit"):
        rec.record(store.root, rec.Recorder(out), seconds=600)
    assert signal.getsignal(signal.SIGINT) is before
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]
    assert read_back(out)[2]["da3-edge"]["frames"] == "0"
