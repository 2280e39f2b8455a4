"""``da3-edge foxglove``: the store's frames live to a real Foxglove WebSocket client
(Foxglove's own @foxglove/ws-protocol under node, scripts/support/foxglove_client),
its messages decoded with the schemas the server advertised (by protobuf's own
decoder, through MCAP's protobuf support), from a store written as the daemon writes."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from mcap_protobuf.decoder import DecoderFactory

from edge.fov import FieldOfView
from edge.store.ring import FrameStore
from scripts.support import ROOT
from scripts.support.store import board_store, write_board
from scripts.support.tools import require_tool, run_cli

CLIENT = ROOT / "scripts" / "support" / "foxglove_client"
SEEN = FieldOfView(66.0, "config camera.hfov")
TOPICS = ["/da3/depth", "/da3/confidence", "/da3/scene", "/da3/calibration", "/da3/points"]


@pytest.fixture(scope="module")
def client() -> Path:
    """The client's packages, as its lock file pins them (npm ci: from the registry, or
    npm's cache)."""
    npm = require_tool("npm", "apt install npm")
    require_tool("node", "apt install nodejs")
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return CLIENT / "client.mjs"


@pytest.fixture
def companion(tmp_path: Path) -> Iterator[tuple[FrameStore, subprocess.Popen[str], str]]:
    """A store with one frame, and ``da3-edge foxglove`` on it (any free port): the
    store, the process and its URL."""
    store = board_store(tmp_path / "store", SEEN, ("npz", "rgb", "json"), frames=1)
    args = ["foxglove", "--store", str(store.root), "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge", *args], stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert " on ws://127.0.0.1:" in line, line
    try:
        yield store, proc, line.split(" on ", 1)[1].strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
        proc.stderr.close()


def decoded(channel: dict[str, Any], data: str) -> Any:
    """A message as the advertised schema says, by protobuf's decoder."""
    schema = SimpleNamespace(
        id=channel["id"],
        name=channel["schemaName"],
        encoding=channel["schemaEncoding"],
        data=base64.b64decode(channel["schema"]),
    )
    decoder = DecoderFactory().decoder_for(channel["encoding"], schema)  # type: ignore[arg-type]
    assert decoder is not None
    return decoder(base64.b64decode(data))


@pytest.mark.network  # npm ci, unless npm's cache has the two packages
def test_a_foxglove_client_gets_each_new_frame_on_foxglove_schemas(
    client: Path, companion: tuple[FrameStore, subprocess.Popen[str], str]
) -> None:
    """The client subscribes to every channel; the frames the daemon writes after that
    arrive as RawImage 32FC1 depth and confidence equal to the npz, the JPEG scene, the
    calibration and the point cloud; every channel says the depth is relative."""
    store, proc, url = companion
    got = watch(client, url, store)
    assert got["serverInfo"]["name"] == "da3-edge"
    channels = {c["topic"]: c for c in got["channels"]}
    assert {t: channels[t]["schemaName"] for t in TOPICS} == {
        "/da3/depth": "foxglove.RawImage",
        "/da3/confidence": "foxglove.RawImage",
        "/da3/scene": "foxglove.CompressedImage",
        "/da3/calibration": "foxglove.CameraCalibration",
        "/da3/points": "foxglove.PointCloud",
    }
    assert all(c["encoding"] == "protobuf" for c in channels.values())
    depth = [decoded(channels["/da3/depth"], m) for m in got["messages"]["/da3/depth"]]
    assert [(d.encoding, d.width, d.height, d.frame_id) for d in depth] == [
        ("32FC1", 160, 120, "da3_camera")
    ] * 2
    seqs = []
    for image in depth:
        values = np.frombuffer(image.data, "<f4").reshape(120, 160)
        t = image.timestamp.seconds + image.timestamp.nanos / 1e9
        seqs.append(store_frame_with(store, t, values))
    assert [image.timestamp.seconds for image in depth] == [1000 + s for s in seqs]
    assert seqs[0] >= 1 and seqs[1] > seqs[0]  # frames written after it subscribed
    scene = decoded(channels["/da3/scene"], got["messages"]["/da3/scene"][0])
    assert scene.format == "jpeg" and scene.data[:2] == b"\xff\xd8"
    points = decoded(channels["/da3/points"], got["messages"]["/da3/points"][0])
    assert points.frame_id == "da3_camera" and points.point_stride == 16
    assert len(points.data) == 16 * 120 * 160  # a confidence of 2 everywhere: all kept
    calibration = decoded(channels["/da3/calibration"], got["messages"]["/da3/calibration"][0])
    assert (calibration.width, calibration.height) == (160, 120)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert proc.stderr is not None
    said = proc.stderr.read().strip().splitlines()[-1]
    assert said.startswith("foxglove: stopped after ") and "RANDOM-INIT" in said


def watch(client: Path, url: str, store: FrameStore) -> Any:
    """What the client printed once it had two messages of each topic, while new
    frames came every 0.3 s (each captured at 1000 s + its number)."""
    node = require_tool("node", "apt install nodejs")
    reader = subprocess.Popen(
        [node, str(client), url, "2", "60", *TOPICS], stdout=subprocess.PIPE, text=True
    )
    stop = threading.Event()

    def daemon() -> None:
        n = 1
        while not stop.wait(0.3):
            write_board(store, SEEN, n, t_capture=1000.0 + n)
            n += 1

    writer = threading.Thread(target=daemon)
    writer.start()
    try:
        out, _ = reader.communicate(timeout=90)
    finally:
        stop.set()
        writer.join()
    assert reader.returncode == 0, out
    return json.loads(out)


def store_frame_with(store: FrameStore, t_capture: float, depth: np.ndarray) -> int:
    """The number of the stored frame captured at ``t_capture``, its depth checked equal
    to ``depth``."""
    for frame_dir in sorted((store.root / "frames").iterdir()):
        record = json.loads((frame_dir / "frame.json").read_text())
        if abs(record.get("t_capture", -1) - t_capture) < 1e-6:
            with np.load(frame_dir / "frame.npz") as npz:
                np.testing.assert_array_equal(npz["depth"], depth)
            return int(frame_dir.name)
    raise AssertionError(f"no stored frame captured at {t_capture}")


def test_beyond_loopback_it_refuses_in_one_line(tmp_path: Path) -> None:
    store = board_store(tmp_path / "store", SEEN, ("npz", "json"), frames=1)
    for host, port in (("0.0.0.0", []), ("192.168.1.20", []), ("::", ["--port", "9100"])):
        proc = run_cli(["foxglove", "--host", host, *port, "--store", str(store.root)])
        assert proc.returncode == 2
        n = port[-1] if port else "8765"  # the tunnel names the port it listens on
        assert proc.stderr.splitlines() == [
            f"da3-edge: error: --host {host}: the Foxglove WebSocket protocol has no login, so "
            "da3-edge foxglove listens on loopback only; from another machine, tunnel it: "
            f"ssh -L {n}:127.0.0.1:{n} PI, then ws://127.0.0.1:{n}"
        ], proc.stderr
    proc = run_cli(["foxglove", "--host", "pi.local", "--port", "0", "--store", str(store.root)])
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "tunnel it: ssh -L N:127.0.0.1:N PI with N the port it prints, then ws://127.0.0.1:N"
    ), proc.stderr


def test_no_client_no_reading(companion: tuple[FrameStore, subprocess.Popen[str], str]) -> None:
    """While nobody subscribes the companion reads no frame: frames written for a while
    are not sent, and it stops at SIGTERM saying so."""
    store, proc, _ = companion
    for n in range(1, 6):
        write_board(store, SEEN, n)
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert proc.stderr is not None
    assert proc.stderr.read().strip().splitlines()[-1] == ("foxglove: stopped after 0 frames sent")
