"""The daemon on an operator's mistakes and a small Pi: it keeps writing, or stops loudly.

Each test runs the real daemon with FakeCores (scripts.support.fakedaemon: everything
but the core is the daemon's own) on a fault an operator produces: a config saved in
Latin-1, a model folder the service cannot enter, a thread that dies, a burst of
signals, a store on a tmpfs smaller than the ring.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge import config as config_mod
from edge.camera import Frame
from edge.config import ModelConfig, StoreConfig
from edge.daemon import Daemon
from edge.daemon.inference import Result, Results
from edge.daemon.writer import Writer
from edge.fakecore import fake_models
from edge.models import size_shapes
from edge.pipeline import Pipeline
from edge.store.ring import FrameStore
from edge.systemd import Notifier
from scripts.support import fakedaemon, tools
from scripts.support.daemon import (
    FAKE_CORES,
    DaemonProcess,
    Notifications,
    frame_dirs,
    write_config,
)
from scripts.support.fakedaemon import SHAPES
from scripts.support.store import depth_frame
from scripts.support.tools import run_main, tmpfs

NOBODY = 65534


def read_status(store: Path) -> dict[str, Any]:
    try:
        return json.loads((store / "status.json").read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return {}


def latest_seq(store: Path) -> int:
    try:
        return int((store / "latest").resolve(strict=True).name)
    except (FileNotFoundError, ValueError):
        return -1


@pytest.fixture
def models(tmp_path: Path) -> Path:
    return fake_models(tmp_path / "models", SHAPES)


def fake_daemon(tmp: Path, config: Path, *extra: str, uid: int | None = None) -> DaemonProcess:
    return DaemonProcess(tmp, ["--config", str(config), *extra], command=FAKE_CORES, uid=uid)


def wait_written_past(d: DaemonProcess, store: Path, seq: int, what: str) -> None:
    d.wait_for(lambda: latest_seq(store) > seq, what=what)


def test_a_reload_with_a_config_that_is_not_utf8_keeps_running(
    models: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    with fake_daemon(tmp_path, cfg) as d:
        wait_written_past(d, store, 1, "frames")
        cfg.write_bytes(cfg.read_bytes() + "# caméra du salon\n".encode("latin-1"))
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: keeping the running config" in d.log, what="refused")
        seq = latest_seq(store)
        wait_written_past(d, store, seq + 3, "frames after the reload")
        status = d.wait_for(
            lambda: (s := read_status(store)).get("reload", {}).get("ok") is False and s,
            what="the failed reload in status.json",
        )
        assert d.stop() == 0
    assert isinstance(status, dict) and status["state"] == "running"
    assert "is not UTF-8 text" in status["reload"]["error"], status["reload"]
    assert "Traceback" not in d.log
    line = next(x for x in d.log.splitlines() if "reload: keeping the running config" in x)
    print(line)
    n = cfg.read_bytes().count(b"\n")  # the line added last
    assert line.endswith(f"{cfg}:{n}: the config is not UTF-8 text (byte 0xe9); save it as UTF-8")


def test_a_config_that_is_not_utf8_is_one_line_at_start_and_at_check(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_bytes("[camera]\nsource = 'fake'\n# caméra\n".encode("latin-1"))
    for argv in (["run", "--config", str(cfg), "--check-config"], ["run", "--config", str(cfg)]):
        proc = run_main(argv)
        print(proc.stderr)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            f"da3-edge: error: {cfg}:3: the config is not UTF-8 text (byte 0xe9); save it as UTF-8"
        ]


@pytest.fixture
def world_readable() -> Iterator[Path]:
    with tools.world_readable() as base:
        yield base


@pytest.mark.root
def test_a_reload_to_a_model_folder_the_service_cannot_enter_keeps_running(
    world_readable: Path,
) -> None:
    """As the service's user (not root: root enters anything): ``model.dir`` moved to
    a folder it has no permission for, as under ``ProtectHome=yes``."""
    base = world_readable
    models = fake_models(base / "models", SHAPES)
    secret = fake_models(base / "secret" / "models", SHAPES)
    (base / "secret").chmod(0o700)
    subprocess.run(["chmod", "-R", "a+rX", str(models)], check=True)
    store = base / "store"
    store.mkdir()
    os.chown(store, NOBODY, NOBODY)
    cfg = write_config(base / "c.toml", "fake:fps:30", store, models)
    cfg.chmod(0o644)
    with fake_daemon(base, cfg, uid=NOBODY) as d:
        wait_written_past(d, store, 1, "frames as nobody")
        write_config(cfg, "fake:fps:30", store, secret)
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: keeping the running model" in d.log, what="refused")
        seq = latest_seq(store)
        wait_written_past(d, store, seq + 3, "frames after the reload")
        status = d.wait_for(
            lambda: (s := read_status(store)).get("reload", {}).get("ok") is False and s,
            what="the failed reload in status.json",
        )
        assert d.stop() == 0
    assert isinstance(status, dict)
    assert status["model"]["dir"] == str(models)
    assert "Permission denied" in status["reload"]["error"], status["reload"]
    assert "Traceback" not in d.log


def test_a_thread_that_dies_ends_the_process_with_its_traceback(
    models: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:ok*5,crash", store, models)
    with fake_daemon(tmp_path, cfg) as d:
        d.wait_for(lambda: d.proc.poll() is not None, what="the exit")
        code = d.proc.returncode
    print(d.log[-1500:])
    assert code == 70
    assert "thread capture died" in d.log and "Traceback" in d.log
    assert "RuntimeError: fake camera: crashed (scripted)" in d.log
    status = read_status(store)
    assert status["state"] == "failed: thread capture died: fake camera: crashed (scripted)"
    assert len(frame_dirs(store)) >= 1


def test_a_burst_of_signals_never_wedges_the_main_thread(models: Path, tmp_path: Path) -> None:
    """A signal handler that takes a lock the main thread may hold deadlocks it: the
    handler only raises flags."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    with fake_daemon(tmp_path, cfg) as d:
        wait_written_past(d, store, 1, "frames")
        for _ in range(400):
            d.signal(signal.SIGHUP)
        seq = latest_seq(store)
        wait_written_past(d, store, seq + 2, "frames after the burst")
        d.wait_for(lambda: "reload: config" in d.log, what="a reload")
        for _ in range(50):
            d.signal(signal.SIGTERM)
        try:
            code = d.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon wedged under a burst of signals")
    assert code == 0


def default_ring_config(path: Path, source: str, store: Path, models: Path) -> Path:
    """The shipped config but for the camera, the store's place and the models."""
    path.write_text(
        f'[camera]\nsource = "{source}"\n[store]\ndir = "{store}"\n[model]\ndir = "{models}"\n'
    )
    return path


@pytest.mark.root
@pytest.mark.parametrize("mib", [3, 12])
def test_the_default_ring_on_a_small_tmpfs_never_stops_writing(tmp_path: Path, mib: int) -> None:
    """The default ring (store.max_bytes far above the filesystem) on a tmpfs of a few
    MiB: every frame is written, none fails for want of space."""
    models = fake_models(tmp_path / "models", size_shapes(504))
    with tmpfs(tmp_path / "run", size=f"{mib}m") as run:
        store = run / "store"
        cfg = default_ring_config(tmp_path / "c.toml", "fake:fps:30", store, models)
        with fake_daemon(tmp_path, cfg, "--max-frames", "40") as d:
            d.wait_for(lambda: d.proc.poll() is not None, what="40 frames", timeout=120)
            assert d.proc.returncode == 0, d.log[-2000:]
        status = read_status(store)
        c = status["counters"]
        print({k: v for k, v in c.items() if not isinstance(v, dict)})
        assert c["written"] == 40 and c["failed_write"] == 0, c
        assert latest_seq(store) == 39
        assert "the ring keeps at most" in d.log


@pytest.mark.root
def test_a_thousand_frames_on_a_1gb_pi_run(tmp_path: Path) -> None:
    """The default config with its store on a 100 MiB tmpfs (a 1 GB Pi 5's /run) and
    the cores of size 504: 1,000 frames, every one written."""
    models = fake_models(tmp_path / "models", size_shapes(504))
    with tmpfs(tmp_path / "run", size="100m") as run:
        store = run / "store"
        cfg = default_ring_config(tmp_path / "c.toml", "fake:fps:40", store, models)
        with fake_daemon(tmp_path, cfg, "--max-frames", "1000") as d:
            d.wait_for(lambda: d.proc.poll() is not None, what="1,000 frames", timeout=900)
            assert d.proc.returncode == 0, d.log[-2000:]
        c = read_status(store)["counters"]
        used = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        print({k: v for k, v in c.items() if not isinstance(v, dict)}, f"store {used} B")
        assert c["written"] == 1000 and c["failed_write"] == 0, c
        assert latest_seq(store) == 999 and used <= 50 << 20


def test_a_camera_that_will_not_close_ends_the_daemon(models: Path, tmp_path: Path) -> None:
    """A driver stuck in its close (picamera2's stop() after a cable fault): waiting on
    it would beat the heart forever and never get the camera back; the daemon exits."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:ok*5,wedge", store, models)
    with fake_daemon(tmp_path, cfg) as d:
        d.wait_for(lambda: d.proc.poll() is not None, what="the exit")
        code = d.proc.returncode
    print(d.log[-800:])
    assert code == 70
    assert "camera: fake did not close within 4 s: exiting, so that a new process" in d.log
    assert "Traceback" not in d.log
    assert read_status(store)["state"].startswith("failed: thread capture died: camera: fake")


def test_the_windows_latency_counts_the_write(tmp_path: Path) -> None:
    """status.json's latency is capture to published: a store that takes 0.3 s to write
    a frame (an SD card, a busy tmpfs) shows in it."""

    class SlowStore(FrameStore):
        def write(self, frame: Any, record: dict[str, Any], steady: Any = None) -> Path:
            time.sleep(0.3)
            return super().write(frame, record, steady)

    results, stop = Results(), threading.Event()
    slow = SlowStore(tmp_path / "s", StoreConfig())
    writer = Writer(
        slow, "fake", results, stop, lambda: None, dropped_stale=lambda: 0, max_frames=2
    )
    for n in range(2):
        camera = Frame(np.zeros((4, 4, 3), np.uint8), n, time.time(), time.monotonic())
        results.put(Result(depth_frame(n), camera, 1))
    writer.run()  # writes both, then stops (max_frames)
    p50 = writer.window.summary()["latency_ms"]["p50"]
    print(f"latency p50 {p50} ms")
    assert p50 >= 300


def test_a_slow_model_load_in_a_reload_keeps_the_watchdog_fed(models: Path, tmp_path: Path) -> None:
    """A reload's model load takes minutes on an SD card (hashing), while the other
    threads go on writing frames with the running model: the watchdog is pinged all
    along, and a stop asked meanwhile is not held up by the load."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    notify = Notifications(tmp_path / "notify.sock")
    loads: list[float] = []

    def open_pipeline(model: ModelConfig) -> Pipeline:
        loads.append(time.monotonic())
        if len(loads) > 1:
            time.sleep(3.0)  # the reload's load
        return fakedaemon.open_pipeline(model)

    daemon = Daemon(
        config_mod.load(cfg),
        Notifier(str(notify.path), watchdog_usec=1_000_000),
        open_pipeline=open_pipeline,
    )

    def operator() -> None:
        deadline = time.monotonic() + 30
        while latest_seq(store) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        write_config(cfg, "fake:fps:30", store, models, model={"threads": 2})
        daemon._reload_signalled = True
        while len(loads) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3.5)  # the load is done by now
        daemon._stop_signalled = True

    helper = threading.Thread(target=operator)
    helper.start()
    try:
        assert daemon.run() == 0
    finally:
        helper.join(30)
        daemon.notifier.close()
        notify.close()
    start = loads[1]
    pings = [t for t, m in notify.messages if "WATCHDOG" in m and start < t < start + 3.0]
    print(f"{len(pings)} watchdog pings during the 3 s load")
    assert len(pings) >= 4  # every 0.5 s
    assert read_status(store)["reload"]["ok"] is True


@pytest.mark.root
def test_a_reload_to_a_store_it_cannot_write_keeps_the_running_one(
    models: Path, tmp_path: Path
) -> None:
    """A read-only store (a mount, as root bits prove nothing) passes the trust checks;
    the reload writes there first, and keeps the running store when it cannot."""
    from scripts.support.tools import tmpfs

    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    with tmpfs(tmp_path / "ro", read_only=True, mode="0755") as ro, fake_daemon(tmp_path, cfg) as d:
        wait_written_past(d, store, 1, "frames")
        write_config(cfg, "fake:fps:30", ro, models)
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: keeping the running store" in d.log, what="refused")
        seq = latest_seq(store)
        wait_written_past(d, store, seq + 2, "frames in the running store")
        d.wait_for(lambda: read_status(store).get("reload", {}).get("ok") is False, what="status")
        error = read_status(store)["reload"]["error"]
        print(error)
        assert error.startswith(f"store: {ro}") and "Read-only file system" in error
        assert d.stop() == 0


def test_a_reload_to_another_store_checks_it_and_says_where_frames_went(
    models: Path, tmp_path: Path
) -> None:
    store, unsafe, moved = tmp_path / "store", tmp_path / "unsafe", tmp_path / "moved"
    unsafe.mkdir()
    unsafe.chmod(0o777)  # any user could plant links there
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    with fake_daemon(tmp_path, cfg) as d:
        wait_written_past(d, store, 1, "frames")
        write_config(cfg, "fake:fps:30", unsafe, models)
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: keeping the running store" in d.log, what="refused")
        seq = latest_seq(store)
        wait_written_past(d, store, seq + 2, "frames in the running store")
        assert not (unsafe / "frames").exists()
        write_config(cfg, "fake:fps:30", moved, models)
        d.signal(signal.SIGHUP)
        wait_written_past(d, moved, 1, "frames in the new store")
        d.wait_for(lambda: read_status(moved).get("state") == "running", what="new status")
        assert d.stop() == 0
    assert read_status(store)["state"] == f"moved to {moved}"
    assert "writable by others" in d.log or "group or others" in d.log, d.log[-1500:]


def test_a_model_refused_at_verification_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload to a tampered model: the pipeline opened for it (its stages' programs,
    its cores' workers) is closed, not left open for the life of the daemon."""
    from edge.daemon.parts import load_pipeline
    from edge.errors import ModelCorrupt

    models = fake_models(tmp_path / "models", [(42, 56)])
    victim = next(models.glob("*.tflite"))
    victim.write_bytes(victim.read_bytes() + b"tampered")
    closed: list[Pipeline] = []
    real_close = Pipeline.close

    def close(self: Pipeline) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(Pipeline, "close", close)
    with pytest.raises(ModelCorrupt):
        load_pipeline(ModelConfig(dir=str(models), stages="numpy"))
    assert len(closed) == 1


def test_a_sighup_while_the_model_loads_is_a_reload_once_running(
    models: Path, tmp_path: Path
) -> None:
    """The docs offer `kill -HUP`; sent while the model loads (minutes on a Pi, 3 s of
    --load-delay here) it used to end the daemon (SIGHUP's default action). Now the
    daemon comes up, then reloads."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, models)
    with fake_daemon(tmp_path, cfg, "--load-delay", "3") as d:
        d.wait_for(lambda: "fakedaemon: loading for 3 s" in d.log, what="the load")
        d.signal(signal.SIGHUP)
        wait_written_past(d, store, 1, "frames after a SIGHUP during the load")
        d.wait_for(
            lambda: (read_status(store).get("reload") or {}).get("ok") is True, what="reload"
        )
        assert d.stop() == 0
