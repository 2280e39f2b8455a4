"""The camera daemon, driven as a real process: frames, faults, signals, config.

Each test starts `python -m edge run` with a real AF_UNIX notify socket, injects a
fault (fake camera script, a real tmpfs that fills up or is read-only, a signal) and
checks what the process does: its store, its notify messages, its log, its exit. Where
the model is not the subject (camera faults, signals, a reload, a reader) the same
daemon runs FakeCores (scripts.support.fakedaemon), so those run without the export
environment (the quick lane).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scripts.support import children
from scripts.support.daemon import FAKE_CORES, DaemonProcess, frame_dirs, write_config
from scripts.support.tools import auto_stages, run_cli, run_main, tmpfs

FILES = {"frame.depth.png", "frame.npz", "frame.preview.png", "frame.json"}


def assert_complete(frame_dir: Path, size: str = "core") -> dict[str, Any]:
    """All of a frame's files, its maps at store.size's: the core's or the camera's."""
    names = {p.name for p in frame_dir.iterdir()}
    assert names == FILES, (frame_dir, names)
    meta: dict[str, Any] = json.loads((frame_dir / "frame.json").read_text())
    out = {"core": tuple(meta["shape_used"]), "camera": (240, 320)}[size]
    assert tuple(meta["output_size"]) == out and meta["source_size"] == [240, 320]
    with np.load(frame_dir / "frame.npz") as npz:
        assert npz["depth"].shape == npz["conf"].shape == out
    return meta


def test_frames_flow_with_provenance_and_a_bounded_ring(small_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    # The fake camera at 100 fps outruns inference: the newest frame must win.
    cfg = write_config(tmp_path / "c.toml", "fake:fps:100", store, small_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)]) as d:
        d.wait_for(lambda: d.notify.having("READY"), what="READY=1")
        d.wait_for(
            lambda: (
                len(list((store / "frames").glob("0*"))) >= 5
                and int((store / "latest").resolve().name) >= 7
            ),
            what="8 frames",
        )
        latest = (store / "latest").resolve()
        meta = assert_complete(latest)
        dirs = frame_dirs(store)
        status = d.wait_for(
            lambda: [
                m
                for m in d.notify.having("STATUS")
                if "written" in m["STATUS"] and "camera ok" in m["STATUS"]
            ],
            what="STATUS",
        )
        status_json = json.loads((store / "status.json").read_text())
        code = d.stop()
        log = d.log
    assert code == 0
    # The default stages (auto): one line at start says which and why; status.json
    # and every frame's record name the backend that ran.
    backend = auto_stages()
    assert len(re.findall(rf"stages: {backend} \(auto: ", log)) == 1, log
    assert status_json["model"]["stages"] == backend and meta["stages"] == backend
    assert len(dirs) <= 5  # keep_frames
    for key in (
        "store_seq",
        "camera_seq",
        "t_capture",
        "t_written",
        "latency_ms",
        "weights",
        "random_init",
        "precision",
        "shape_used",
    ):
        assert key in meta, key
    assert meta["random_init"] is True and meta["source"] == "fake:fps:100"
    assert 0 < float(meta["latency_ms"]) < 10_000
    assert float(meta["t_written"]) >= float(meta["t_capture"])
    text = status[-1]["STATUS"]  # type: ignore[index]
    assert "fps" in text and "latency p50" in text and "dropped" in text
    # Stale frames were dropped and counted, not queued: camera seq runs ahead of store seq.
    assert int(meta["dropped_stale_total"]) > 0
    assert int(meta["camera_seq"]) > int(meta["store_seq"])


def test_replay_source(small_models: Path, photos: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with DaemonProcess(
        tmp_path,
        [
            "--source",
            f"replay:{photos / 'good'}@20",
            "--store",
            str(store),
            "--models",
            str(small_models),
            "--max-frames",
            "4",
        ],
    ) as d:
        assert d.proc.wait(60) == 0
    dirs = frame_dirs(store)
    assert len(dirs) == 4
    sizes = set()
    for p in dirs:
        meta = json.loads((p / "frame.json").read_text())
        sizes.add(tuple(meta["source_size"]))
        assert meta["source"].startswith("replay:")
    assert len(sizes) >= 2  # different photos went through


def test_replay_hands_over_decoded_frames_once_decoded(photos: Path) -> None:
    from edge.camera.replay import ReplaySource

    source = ReplaySource(photos / "good", fps=1000)
    source.open()
    n = len(source._files)
    first = [source.read(1.0).rgb for _ in range(n)]
    again = [source.read(1.0).rgb for _ in range(n)]
    assert all(a is b for a, b in zip(first, again, strict=True))  # not decoded again
    assert not any(a.flags.writeable for a in again)  # shared: nobody may write into it
    source.close()
    source.open()  # a reopen reads the files again
    assert source.read(1.0).rgb is not first[0]
    source.close()


def test_camera_errors_reopen_with_backoff(fake_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:openfail*6,ok*3,error*2,ok", store, fake_models)
    with DaemonProcess(
        tmp_path, ["--config", str(cfg)], command=FAKE_CORES, watchdog_usec=1_000_000
    ) as d:
        d.wait_for(
            lambda: [m for m in d.notify.having("STATUS") if "reconnecting" in m["STATUS"]],
            what="reconnecting in STATUS",
        )
        d.wait_for(lambda: frame_dirs(store), what="a frame once the camera opened")
        t_first_frame = time.monotonic()
        d.wait_for(lambda: len(frame_dirs(store)) >= 3, what="frames after the camera came back")
        d.wait_for(
            lambda: "camera: error: fake camera: read failed (scripted); reopening in" in d.log,
            what="read error reopened",
        )
        pings_while_waiting = [
            t for t, m in d.notify.messages if "WATCHDOG" in m and t < t_first_frame
        ]
        # The counts are reported, not just kept: 6 failed opens + 2 read errors.
        d.wait_for(
            lambda: [
                m for m in d.notify.having("STATUS") if "errors camera 8 / write 0" in m["STATUS"]
            ],
            what="error counts in STATUS",
        )
        assert d.stop() == 0
    log = d.log
    # capped exponential backoff: 0.2, 0.4, 0.8, then 1.0 (backoff_max) for the six failed opens
    for step in (
        "retrying in 0.2 s",
        "retrying in 0.4 s",
        "retrying in 0.8 s",
        "retrying in 1.0 s",
    ):
        assert step in log, step
    assert "retrying in 1.6 s" not in log
    # ~4 s of waiting for a camera is progress: the watchdog (every 0.5 s) kept being fed.
    assert len(pings_while_waiting) >= 4, pings_while_waiting


def test_frozen_camera_is_a_stall(fake_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:ok*3,freeze*100000", store, fake_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)], command=FAKE_CORES) as d:
        d.wait_for(
            lambda: "stalled: no new frame for 2 s" in d.log, what="stall detected", timeout=30
        )
        d.wait_for(
            lambda: "camera: fake open" in d.log.split("stalled")[-1],
            what="reopened after the stall",
        )
        assert d.stop() == 0


def test_hung_camera_stops_the_watchdog(fake_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:ok*3,hang:600", store, fake_models)
    with DaemonProcess(
        tmp_path, ["--config", str(cfg)], command=FAKE_CORES, watchdog_usec=1_000_000
    ) as d:
        d.wait_for(lambda: len(d.notify.having("WATCHDOG")) >= 2, what="first pings")
        d.wait_for(
            lambda: "thread capture made no progress" in d.log, what="stuck capture", timeout=20
        )
        t_stuck = time.monotonic()
        time.sleep(2.0)
        late = d.notify.having("WATCHDOG", since=t_stuck + 0.5)
        stuck = d.wait_for(
            lambda: [m for m in d.notify.having("STATUS") if "STUCK: capture" in m["STATUS"]],
            what="STUCK in STATUS",
        )
        assert d.stop() == 0  # SIGTERM still stops it cleanly, hung thread or not
    assert late == [], "watchdog pings must stop while a thread is stuck"
    assert stuck


def test_disk_full_then_space_returns(small_models: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", size="400k") as mnt:
        store = mnt / "store"
        cfg = write_config(
            tmp_path / "c.toml", "fake", store, small_models, store={"formats": ["npz", "json"]}
        )
        with DaemonProcess(tmp_path, ["--config", str(cfg)]) as d:
            d.wait_for(lambda: "No space left on device" in d.log, what="ENOSPC reported")
            d.wait_for(
                lambda: [
                    m
                    for m in d.notify.having("STATUS")
                    if "not writing: No space left" in m["STATUS"]
                    and "/ write 0," not in m["STATUS"]
                ],
                what="STATUS says not writing, with a write error count",
            )
            before = {p.name for p in frame_dirs(store)}
            for p in frame_dirs(store):
                assert_complete_subset(p)
            assert not [p for p in (store / "frames").iterdir() if p.name.startswith(".tmp-")]
            subprocess.run(["mount", "-o", "remount,size=20m", str(mnt)], check=True)
            d.wait_for(
                lambda: len({p.name for p in frame_dirs(store)} - before) >= 3,
                what="writing resumed",
            )
            d.wait_for(
                lambda: [m for m in d.notify.having("STATUS") if "store ok" in m["STATUS"]],
                what="store ok again",
            )
            assert d.proc.poll() is None
            assert d.stop() == 0


def assert_complete_subset(frame_dir: Path) -> None:
    assert {p.name for p in frame_dir.iterdir()} == {"frame.npz", "frame.json"}
    json.loads((frame_dir / "frame.json").read_text())


def test_read_only_store_keeps_running(small_models: Path, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        store = ro / "store"
        cfg = write_config(tmp_path / "c.toml", "fake", store, small_models)
        with DaemonProcess(tmp_path, ["--config", str(cfg)]) as d:
            d.wait_for(lambda: d.notify.having("READY"), what="READY despite the store")
            d.wait_for(
                lambda: [
                    m for m in d.notify.having("STATUS") if "Read-only file system" in m["STATUS"]
                ],
                what="read-only reported",
            )
            subprocess.run(["mount", "-o", "remount,rw", str(ro)], check=True)
            d.wait_for(lambda: len(frame_dirs(store)) >= 2, what="frames once writable")
            assert d.stop() == 0


def test_sigterm_exits_zero_within_5s(fake_models: Path, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", "fake", tmp_path / "store", fake_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)], command=FAKE_CORES) as d:
        d.wait_for(lambda: frame_dirs(tmp_path / "store"), what="a frame")
        start = time.monotonic()
        d.signal(signal.SIGTERM)
        code = d.proc.wait(10)
        elapsed = time.monotonic() - start
        assert d.notify.arrived("STOPPING")
    print(f"SIGTERM -> exit {code} in {elapsed:.2f} s")
    assert code == 0 and elapsed < 5.0


def test_sigkill_never_leaves_a_partial_frame(fake_models: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake", store, fake_models, store={"keep_frames": 50})
    rng = random.Random(7)
    for round_ in range(4):
        work = tmp_path / f"round{round_}"  # each process gets its own notify socket
        work.mkdir()
        with DaemonProcess(work, ["--config", str(cfg)], command=FAKE_CORES) as d:
            d.wait_for(lambda: d.notify.having("READY"), what="READY")
            time.sleep(rng.uniform(0.5, 2.5))
            d.signal(signal.SIGKILL)
            d.proc.wait(10)
        for p in frame_dirs(store):
            assert_complete(p)
        latest = store / "latest"
        if latest.exists():
            assert_complete(latest.resolve())
    # A restart clears what the kills left half-written and carries on numbering.
    before = [p.name for p in frame_dirs(store)]
    (tmp_path / "final").mkdir()
    with DaemonProcess(
        tmp_path / "final", ["--config", str(cfg), "--max-frames", "2"], command=FAKE_CORES
    ) as d:
        assert d.proc.wait(60) == 0
    assert not [p for p in (store / "frames").iterdir() if p.name.startswith(".tmp-")]
    after = [p.name for p in frame_dirs(store)]
    assert after[-1] > (before[-1] if before else "")


def _meta(frame_dir: Path) -> dict[str, Any]:
    """A frame's record; {} when it went (pruned) while being read."""
    try:
        meta: dict[str, Any] = json.loads((frame_dir / "frame.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta


def test_sighup_reloads_and_keeps_the_old_config_when_bad(
    fake_models: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake", store, fake_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)], command=FAKE_CORES) as d:
        # a frame directory is renamed into place before `latest` points at it
        first = d.wait_for(lambda: _meta(store / "latest").get("field_of_view"), what="a frame")
        assert isinstance(first, dict)
        assert first["horizontal_degrees"] is None and "camera.hfov" in first["source"]
        write_config(
            cfg, "fake", store, fake_models, store={"keep_frames": 2}, camera={"hfov": 70.0}
        )
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: config" in d.log and "applied" in d.log, what="reload applied")
        assert d.notify.arrived("RELOADING")
        d.wait_for(
            lambda: len(frame_dirs(store)) <= 2 and frame_dirs(store),
            what="new keep_frames in force",
        )
        d.wait_for(
            lambda: (
                _meta(store / "latest").get("field_of_view")
                == {"horizontal_degrees": 70.0, "source": "config camera.hfov"}
            ),
            what="camera.hfov recorded in the frames",
        )
        cfg.write_text("[camera]\nwidth = 'wide'\n")
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "reload: keeping the running config" in d.log, what="bad reload refused")
        assert "camera.width must be an integer" in d.log
        n = len(list((store / "frames").iterdir()))
        d.wait_for(
            lambda: int((store / "latest").resolve().name) > 0 and d.proc.poll() is None,
            what="still running",
        )
        assert d.stop() == 0
        assert n >= 1


def test_invalid_config_at_start_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[camera]\nsource = 'fake'\n\n[store]\nkeep_frames = 0\n")
    proc = run_main(["run", "--config", str(cfg)])
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"da3-edge: error: {cfg}:5: store.keep_frames must be 1 to 100000 (frames)"
    )
    proc = run_main(["run", "--config", str(cfg), "--check-config"])
    assert proc.returncode == 1
    good = tmp_path / "good.toml"
    good.write_text(run_main(["run", "--print-default-config"]).stdout)
    proc = run_main(["run", "--config", str(good), "--check-config"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"{good}: ok"


def test_missing_or_tampered_model_refuses_to_start(small_models: Path, tmp_path: Path) -> None:
    proc = run_cli(
        [
            "run",
            "--source",
            "fake",
            "--store",
            str(tmp_path / "s"),
            "--models",
            str(tmp_path / "none"),
        ]
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("da3-edge: error: no model in ")
    # A size the folder lacks (the small models are 182): one line, no other size run.
    argv = ["run", "--source", "fake", "--store", str(tmp_path / "s"), "--models"]
    proc = run_cli([*argv, str(small_models), "--size", "280"])
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"da3-edge: error: {small_models}: no fp16 models of size 280 (have 182); "
        "make them with `da3-edge models build --weights hub --size 280 --precision fp16`"
    )
    copy = tmp_path / "m"
    shutil.copytree(small_models, copy)
    victim = next(copy.glob("*_fp16.tflite"))
    data = bytearray(victim.read_bytes())
    data[12345] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc = run_cli(
        ["run", "--source", "fake", "--store", str(tmp_path / "s"), "--models", str(copy)]
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "does not match the manifest" in line
    assert not (tmp_path / "s" / "frames").exists()


def test_a_reader_following_latest_sees_only_whole_frames(
    fake_models: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake", store, fake_models, store={"keep_frames": 3})
    with DaemonProcess(tmp_path, ["--config", str(cfg)], command=FAKE_CORES) as d:
        d.wait_for(lambda: d.notify.having("READY"), what="READY")
        reader = children.run("whole-frames", store, 3, 60)
        assert d.stop() == 0
    assert reader.returncode == 0, reader.stderr
    assert int(reader.stdout) >= 3


def test_the_core_never_waits_for_pre_or_postprocessing(small_models: Path, tmp_path: Path) -> None:
    """In the running daemon (in this process, real pipeline and worker), frame N+1 is
    preprocessed before N is collected, and submitted before N is postprocessed."""
    from edge import config as config_mod
    from edge.daemon import Daemon
    from edge.systemd import Notifier

    cfg = write_config(tmp_path / "c.toml", "fake:fps:100", tmp_path / "store", small_models)
    daemon = Daemon(config_mod.load(cfg), Notifier(None), max_frames=6)
    events: list[tuple[str, str]] = []
    pipeline = daemon.inference.pipeline

    def spy(step: str) -> None:
        real = getattr(pipeline, step)

        def wrapper(arg: object, *args: object, **kwargs: object) -> object:
            out = real(arg, *args, **kwargs)
            name = kwargs.get("name") if step == "prepare" else arg.still.name  # type: ignore[attr-defined]
            events.append((step, str(name)))
            return out

        setattr(pipeline, step, wrapper)

    for step in ("prepare", "submit", "collect", "finish"):
        spy(step)
    assert daemon.run() == 0
    order = {event: i for i, event in enumerate(events)}
    names = [name for step, name in events if step == "finish"]
    assert len(names) >= 6, events
    overlapped = 0
    for this, following in itertools.pairwise(names):
        assert order["submit", this] < order["collect", this] < order["finish", this]
        if order["prepare", following] < order["collect", this]:
            assert order["submit", following] < order["finish", this]
            overlapped += 1
    print(f"{overlapped} of {len(names) - 1} frames preprocessed while the core ran the one before")
    # The fake camera has a new frame every 10 ms: all but the first (which starts
    # with no idea how long the core takes) find one waiting.
    assert overlapped >= len(names) - 2


def test_sighup_with_a_new_model_switches_between_frames(
    small_models: Path, tmp_path: Path
) -> None:
    """A model change on reload: the new pipeline is loaded beside the old one, and
    the infer thread switches over after the frame the old core is computing."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, small_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)]) as d:
        d.wait_for(lambda: frame_dirs(store), what="a frame")
        write_config(
            cfg, "fake:fps:30", store, small_models, model={"precision": "fp32", "threads": 2}
        )
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "applied" in d.log, what="reload applied")

        def newest() -> dict[str, object]:
            try:
                latest = (store / "latest").resolve(strict=True)
                return json.loads((latest / "frame.json").read_text())  # type: ignore[no-any-return]
            except FileNotFoundError:
                return {}  # pruned between resolve and read: ask again

        d.wait_for(lambda: newest().get("precision") == "fp32", what="an fp32 frame")
        meta = newest()
        assert meta["threads"] == 2 and meta["fp16_arithmetic"] is False
        assert d.stop() == 0
    assert "inference failed" not in d.log and "Traceback" not in d.log


def test_two_workers_compute_two_frames_at_once(small_models: Path, tmp_path: Path) -> None:
    """model.workers = 2: two worker processes, a frame in each at the same time, the
    results written in capture order (at the camera's size: store.size = "camera")."""
    from edge import config as config_mod
    from edge.daemon import Daemon
    from edge.systemd import Notifier

    store = tmp_path / "store"
    cfg = write_config(
        tmp_path / "c.toml",
        "fake:fps:100",
        store,
        small_models,
        model={"workers": 2, "threads": 1},
        store={"dir": str(store), "keep_frames": 20, "size": "camera"},
    )
    daemon = Daemon(config_mod.load(cfg), Notifier(None), max_frames=8)
    pipeline = daemon.inference.pipeline
    events: list[tuple[str, str, int]] = []  # (step, frame name, worker)
    workers: dict[str, int] = {}
    real_prepare, real_submit, real_collect = pipeline.prepare, pipeline.submit, pipeline.collect

    def prepare(image: Any, *args: Any, **kwargs: Any) -> Any:
        job = real_prepare(image, *args, **kwargs)
        workers[str(kwargs["name"])] = int(kwargs["worker"])
        return job

    def step(name: str, real: Callable[[Any], None]) -> Any:
        def wrapper(job: Any) -> None:
            real(job)
            frame = job.still.name
            events.append((name, frame, workers[frame]))

        return wrapper

    pipeline.prepare = prepare  # type: ignore[method-assign]
    pipeline.submit = step("submit", real_submit)  # type: ignore[method-assign]
    pipeline.collect = step("collect", real_collect)  # type: ignore[method-assign]
    assert daemon.run() == 0
    in_flight: set[tuple[str, int]] = set()
    most = 0
    for kind, frame, worker in events:
        if kind == "submit":
            assert worker not in {w for _, w in in_flight}, events  # one frame per worker
            in_flight.add((frame, worker))
            most = max(most, len(in_flight))
        else:
            in_flight.discard((frame, worker))
    print(
        f"{len(events) // 2} frames, at most {most} in flight, workers {sorted(set(workers.values()))}"
    )
    assert most == 2 and set(workers.values()) == {0, 1}
    metas = [assert_complete(d, "camera") for d in frame_dirs(store)]
    assert len(metas) >= 8
    assert all(m["workers"] == 2 and m["threads"] == 1 for m in metas)
    seqs = [m["camera_seq"] for m in sorted(metas, key=lambda m: m["store_seq"])]
    assert seqs == sorted(seqs), seqs  # written in capture order


def read_status(store: Path) -> dict[str, Any]:
    try:
        return json.loads((store / "status.json").read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return {}


def assert_accounted(status: dict[str, Any]) -> None:
    """Every captured frame was written, dropped, failed, or is still in flight."""
    c = status["counters"]
    dropped = c["dropped_stale"] + c["dropped_write"]
    failed = c["failed_inference"] + c["failed_write"]
    parts = c["written"] + dropped + failed + c["in_flight"]
    print({k: v for k, v in c.items() if not isinstance(v, dict)})
    assert c["captured"] == parts, c
    assert c["in_flight"] == sum(c["in_flight_by_stage"].values())
    assert c["failed_inference"] == sum(c["failed_inference_by_stage"].values())


def test_status_file_accounts_for_every_frame_with_a_failing_core(tmp_path: Path) -> None:
    """In this process, with FakeCores (one scripted failure): status.json at exit
    balances, names the failure, and flags the fake model."""
    from edge import config as config_mod
    from edge.daemon import Daemon
    from edge.fakecore import FakeCore, fake_models
    from edge.pipeline import Pipeline, PipelineSpec
    from edge.systemd import Notifier

    models = fake_models(tmp_path / "models", [(378, 504)])
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:60", store, models)

    def open_pipeline(model: object) -> Pipeline:
        open_core, _ = FakeCore.opener(delay=0.03, fail=(2,))
        return Pipeline.load(PipelineSpec(models, core_process=True), open_core=open_core)

    daemon = Daemon(config_mod.load(cfg), Notifier(None), max_frames=6, open_pipeline=open_pipeline)
    assert daemon.run() == 0
    status = read_status(store)
    assert status["state"] == "stopped" and status["pid"] == os.getpid()
    assert_accounted(status)
    c = status["counters"]
    assert c["written"] == 6 and len(frame_dirs(store)) == 5  # keep_frames
    assert c["failed_inference_by_stage"]["core"] == 1
    assert c["failed_inference_last"] == "core: scripted failure of image 2"
    assert status["model"]["random_init"] is True and status["model"]["weights"] == ["fake-core"]
    assert status["camera"]["source"] == "fake:fps:60" and status["camera"]["state"] == "stopped"
    store_id = (store / "store-id").read_text().strip()
    assert status["store"] == {
        "dir": str(store),
        "id": store_id,
        "state": "ok",
        "reason": None,
        "cap_bytes": 64 << 20,
    }
    assert status["persist"] is None and status["reload"] is None
    assert status["config"]["digest"].startswith("sha256:")
    assert status["window"]["frames"] == 6 and status["window"]["latency_ms"]["p50"] > 0
    assert set(status["system"]) == {"temperature_c", "throttled"}


def test_status_json_while_running_and_after_sigterm(small_models: Path, tmp_path: Path) -> None:
    """The real daemon: status.json is always whole JSON, refreshed every
    status_every, and balanced once the daemon has stopped."""
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.toml", "fake:fps:30", store, small_models)
    with DaemonProcess(tmp_path, ["--config", str(cfg)]) as d:
        first = d.wait_for(
            lambda: (s := read_status(store)).get("counters", {}).get("written", 0) >= 2 and s,
            what="status.json with 2 frames written",
        )
        assert isinstance(first, dict)
        assert first["state"] == "running" and first["pid"] == d.proc.pid
        assert first["camera"]["state"] == "ok" and first["store"]["state"] == "ok"
        assert first["model"]["precision"] == "fp16" and first["model"]["random_init"] is True
        reads = []
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # a reader racing the writer never sees half a file
            reads.append(read_status(store))
            time.sleep(0.01)
        assert all(r.get("format") == 1 for r in reads)
        assert len({r["updated_at"] for r in reads}) >= 2  # refreshed (status_every 0.5 s)
        assert d.stop() == 0
    final = read_status(store)
    assert final["state"] == "stopped"
    assert_accounted(final)
    assert final["counters"]["written"] >= first["counters"]["written"]
    assert not list(store.glob(".status.json.*"))  # no temporary file left behind


def test_the_daemon_writes_on_while_the_card_stalls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real daemon (a fake core), persisting to a card whose flush stalls until the
    test lets it go: every frame is written to the ring meanwhile, and the copy lands
    once the card answers. (Before, the writer thread waited out each of the copy's
    nine fsyncs: a stalled card stopped the ring and, past 20 s, the watchdog.)"""
    from edge import config as config_mod
    from edge.daemon import Daemon
    from edge.fakecore import FakeCore, fake_models
    from edge.pipeline import Pipeline, PipelineSpec
    from edge.store import ring
    from edge.systemd import Notifier

    store, keep = tmp_path / "store", tmp_path / "card"
    gate, real_fsync = threading.Event(), os.fsync
    stalled_in: set[str] = set()

    def fsync(fd: int) -> None:  # the card's: stalls until the test lets it go
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(keep)):
            stalled_in.add(threading.current_thread().name)
            if threading.current_thread().name == "persist":
                gate.wait(20)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(ring, "_syncfs", lambda: None, raising=False)  # each flush an fsync
    models = fake_models(tmp_path / "models", [(378, 504)])
    persist = {"persist_dir": str(keep), "persist_every": 0.01}
    cfg = write_config(tmp_path / "c.toml", "fake:fps:60", store, models, store=persist)

    def open_pipeline(model: object) -> Pipeline:
        open_core, _ = FakeCore.opener()
        return Pipeline.load(PipelineSpec(models), open_core=open_core)

    daemon = Daemon(
        config_mod.load(cfg), Notifier(None), max_frames=12, open_pipeline=open_pipeline
    )
    assert daemon.run() == 0
    status = read_status(store)
    assert stalled_in == {"persist"}, stalled_in  # never the writer's thread
    assert status["counters"]["written"] == 12 and not gate.is_set()
    assert status["persist"]["copied"] == 0 and status["persist"]["failed"] == 0
    gate.set()
    end = time.monotonic() + 30
    while not [p for p in keep.glob("0*") if p.is_dir()] and time.monotonic() < end:
        time.sleep(0.02)
    copies = sorted(p.name for p in keep.iterdir())
    assert copies == ["0000000000"], copies
