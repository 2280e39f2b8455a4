"""The run: the daemon started, the faults inflicted on schedule, a sample every so
often, and a consumer following ``latest`` and reading every frame it is told of."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.models import Manifest
from edge.store import follow, layout
from edge.store.read import Published, latest, published_since, read_record

from . import sample
from .daemon import Daemon
from .rules import Run, Sample
from .schedule import FSYNC_STALL, KEEP_FRAMES, Fault, schedule


@dataclass
class Soak:
    out: Path
    seconds: float
    models: Path
    precision: str
    fps: float
    size: tuple[int, int]
    threads: int
    sample_every: float
    samples: list[Sample] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    consumer: dict[str, int] = field(
        default_factory=lambda: {
            "seen": 0,
            "read": 0,
            "pruned": 0,
            "torn": 0,
            "non_finite": 0,  # records saying their core gave NaN or infinite pixels
            "not_strict": 0,  # records with NaN or Infinity in their JSON
        }
    )
    faults: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.mount = self.out / "mnt"
        self.store = self.mount / "store"
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.random_init = any(a.random_init for a in Manifest.load(self.models).cores())
        self.daemon = Daemon(
            self.out,
            self.store,
            self.models,
            self.precision,
            self.fps,
            self.size,
            self.threads,
            now=self.now,
            event=self.event,
        )

    @property
    def runs(self) -> list[Run]:
        return self.daemon.runs

    def now(self) -> float:
        return time.monotonic() - self.t0

    def event(self, kind: str, **facts: Any) -> None:
        record = {"t": round(self.now(), 2), "event": kind, **facts}
        self.events.append(record)
        print(f"[{record['t']:7.1f} s] {kind} {json.dumps(facts) if facts else ''}", flush=True)

    # -- what is measured ---------------------------------------------------------------
    def sample(self) -> Sample:
        proc = self.daemon.proc
        assert proc is not None
        pids = self.daemon.tree = sample.process_tree(proc.pid)
        status = self.daemon.read_status(proc.pid)
        if status is not None:
            self.runs[-1].last_status = status
        counters = (status or {}).get("counters", {})
        record = {
            "t": round(self.now(), 2),
            "pid": proc.pid,
            **sample.processes(pids),
            **sample.store(self.store),
            "captured": counters.get("captured"),
            "written": counters.get("written"),
            "in_flight": counters.get("in_flight"),
            "camera": ((status or {}).get("camera") or {}).get("state"),
            "store": ((status or {}).get("store") or {}).get("state"),
        }
        self.samples.append(record)
        return record

    def consume(self) -> None:
        """A consumer following ``latest``: reads every frame it is told of."""
        before: int | None = None
        with follow.Follower(self.store, retry=0.5) as watcher:
            while not self.stop.is_set():
                if layout.LATEST not in watcher.wait(0.5):
                    continue
                newest = latest(self.store)
                if newest is None:
                    continue
                for frame in published_since(self.store, before, newest):
                    self.read(frame)
                before = newest.seq

    def read(self, frame: Published) -> None:
        self.consumer["seen"] += 1
        record = read_record(self.store, frame.seq)
        depth = frame.path / "frame.depth.png"
        if record is not None and record.get("store_seq") == frame.seq:
            self.consumer["read"] += 1
            self.consumer["non_finite"] += bool(record.get("non_finite_pixels"))
            try:  # as a browser's JSON.parse reads it
                json.loads((frame.path / "frame.json").read_bytes(), parse_constant=_refuse)
            except ValueError:
                self.consumer["not_strict"] += 1
            except OSError:
                pass  # pruned since: read_record had it whole
            flagged = record.get("random_init") == self.random_init
            if not flagged or not depth.stat().st_size:
                self.consumer["torn"] += 1  # misflagged, or an empty depth map
        elif frame.path.is_dir():
            self.consumer["torn"] += 1  # published, yet no complete record
        else:
            self.consumer["pruned"] += 1  # the ring moved past it first

    # -- the faults ---------------------------------------------------------------------
    def inflict(self, fault: Fault) -> None:
        daemon, faults = self.daemon, self.faults
        assert daemon.proc is not None
        self.event(fault.kind, hold=fault.hold) if fault.hold else self.event(fault.kind)
        if fault.kind == "kill":
            run = self.runs[-1]
            run.last_status = daemon.read_status(daemon.proc.pid) or run.last_status
            daemon.signal(signal.SIGKILL)
            daemon.ended("killed")
            daemon.restart(faults)
        elif fault.kind == "reload-good":
            daemon.keep_frames = KEEP_FRAMES[1]
            daemon.write_config(faults)
            daemon.proc.send_signal(signal.SIGHUP)
        elif fault.kind in ("reload-bad", "reload-not-utf8"):
            daemon.write_config(faults, broken="toml" if fault.kind == "reload-bad" else "utf8")
            self.refused_reload("reload: keeping the running config", fault)
        elif fault.kind == "reload-model-locked":
            daemon.write_config(faults, models=daemon.locked_models())
            self.refused_reload("reload: keeping the running model", fault)
        elif fault.kind == "core-overflow":
            self.overflowing_core(fault)
        elif fault.kind == "disk-full":
            self.fill_disk(fault)
        elif fault.kind == "slow-fsync":
            self.slow_fsync(fault)
        elif fault.kind == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(self.mount)], check=True)
            try:
                self.hold(fault)
            finally:
                subprocess.run(["mount", "-o", "remount,rw", str(self.mount)], check=True)
        # camera-error, -hang and -crash: in the fake's script since the start.
        if fault.kind in (
            "disk-full",
            "read-only",
            "slow-fsync",
            "core-overflow",
        ):  # held here; a hang is the camera's
            said = "non_finite" if fault.kind == "core-overflow" else "written"
            measured = {said: fault.during, "copied": fault.copied}
            self.event(f"{fault.kind} over", **{k: v for k, v in measured.items() if v is not None})

    def refused_reload(self, refusal: str, fault: Fault) -> None:
        """SIGHUP with the bad config in place, the refusal awaited, the good config
        back (as an operator would, later)."""
        assert self.daemon.proc is not None
        seen = self.daemon.log_count(refusal)  # an earlier fault may have logged it too
        self.daemon.proc.send_signal(signal.SIGHUP)
        if not self.daemon.logged(refusal, 10.0, after=seen):
            self.event(f"{fault.kind}: no refusal logged within 10 s")
        self.daemon.write_config(self.faults)

    def slow_fsync(self, fault: Fault) -> None:
        """Every fsync of the daemon stalls FSYNC_STALL seconds while the fault holds
        (persistence copies to a folder on disk meanwhile); the frames it wrote then are
        counted from its status.json."""
        assert self.daemon.proc is not None
        pid = self.daemon.proc.pid
        before = self.daemon.read_status(pid)
        self.daemon.slow_flag.write_text(f"{FSYNC_STALL}\n")
        try:
            self.hold(fault)
        finally:
            self.daemon.slow_flag.unlink(missing_ok=True)
        after = self.daemon.read_status(pid)
        if before is not None and after is not None:
            fault.during = after["counters"]["written"] - before["counters"]["written"]
            fault.copied = after["persist"]["copied"] - before["persist"]["copied"]

    def overflowing_core(self, fault: Fault) -> None:
        """A reload to a core that overflows (infinite depth), held, then the good
        config back: the frames read meanwhile that say so are counted."""
        before = self.consumer["non_finite"]
        if not self.daemon.reload(self.faults, models=self.daemon.overflowing_models()):
            self.event(f"{fault.kind}: no reload logged within 30 s")
        try:
            self.hold(fault)
        finally:
            self.daemon.reload(self.faults)
        fault.during = self.consumer["non_finite"] - before

    def fill_disk(self, fault: Fault) -> None:
        filler = self.mount / "filler"
        # Unbuffered: the write that meets ENOSPC raises, and close has nothing left.
        with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
            chunk = b"\0" * (1 << 20)
            while True:
                f.write(chunk)
        self.hold(fault)
        filler.unlink()

    def hold(self, fault: Fault) -> None:
        while self.now() < fault.end:
            self.tick(supervise=False)
            time.sleep(0.2)

    # -- the run ------------------------------------------------------------------------
    def tick(self, supervise: bool = True) -> None:
        if self.samples and self.now() - self.samples[-1]["t"] < self.sample_every:
            return
        if supervise:
            self.daemon.supervise(self.faults)
        self.sample()

    def run(self) -> None:
        self.faults = schedule(self.seconds)
        consumer = threading.Thread(target=self.consume, name="consumer", daemon=True)
        self.daemon.start(self.faults)
        consumer.start()
        pending = list(self.faults)
        try:
            while self.now() < self.seconds:
                if pending and self.now() >= pending[0].at:
                    self.inflict(pending.pop(0))
                self.tick()
                time.sleep(0.2)
        finally:
            self.daemon.stop()
            self.stop.set()
            consumer.join(5)


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")
