#!/usr/bin/env python3
"""An endurance run of the camera daemon, with faults on a schedule and every frame
accounted for. Maintainer tool; CI runs three minutes of it (.ci/run).

    sudo uv run python scripts/soak.py --minutes 60 --out soak [--models DIR]
        [--precision fp16] [--fps 2] [--size 640x480] [--threads 1] [--plots]
    uv run python scripts/soak.py --recheck --out soak   # judge a finished run again

The real daemon (``python -m edge run``) as a process, supervised as its systemd unit
would be (systemd/da3-edge.service): sd_notify over a real AF_UNIX socket, a watchdog of
WatchdogSec=30 (no ping for 30 s: SIGABRT), Restart=on-failure after RestartSec=5, and
the start limit (5 starts in 300 s: the run fails). The fake camera (640x480, 2
frames/s) stands in for the sensor; the store is a size-limited tmpfs of its own, in a
private mount namespace. The faults, at the same fractions of any length of run
(``schedule``): a SIGKILL (then the restart), camera read errors, a camera hang shorter
than ``daemon.stuck_after`` (the fake's script), a full disk (a filler file) and a
read-only store (a tmpfs remount), a good SIGHUP reload and a bad one (a config that
does not parse). A consumer follows ``latest`` throughout (edge.follow) and reads every
frame it is told of.

Every ``--sample-every`` seconds it records the summed VmRSS, open fds and threads of
the daemon and its core workers, the store's frames and bytes, and the counters of
``status.json``; then it checks (``RULES``; thresholds in the report):

- accounting: each cleanly stopped run's last status.json is exact (captured = written +
  dropped + failed + in flight); a SIGKILLed run's last status had at most the pipeline's
  capacity in flight (mailbox 1 + inference workers+1 + write queue 2 + writing 1), which
  bounds what the kill lost;
- flat memory: the median summed RSS of the window at 25-33 % of the run and of the last
  8 % differ by less than 5 MiB (an hour: minutes 15-20 against 55-60), with no restart
  from the first window on;
- no leaks: fds and threads are the same at every sample taken 10 s or more after the
  last fault (and the last start); the fds counted are those open at each of three
  readings 0.1 s apart (a file being written at the sampling instant is no leak; the
  others are kept in the sample as ``fds_transient``);
- the store stays within its ring (keep_frames, max_bytes) at every sample;
- no frame the consumer was told of was ever half-written; frames kept coming after
  every fault (the written count grew between the first sample after the fault and one
  of the same process 20 s or more later);
- no core worker outlives its daemon by more than 5 s, however the daemon ended.

Writes OUT/samples.jsonl, OUT/events.jsonl, OUT/report.json (with the accounting table)
and the daemon's log; ``--plots`` adds OUT/soak.png. Needs root (mounts) and Linux.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edge import follow, layout, procfs  # noqa: E402
from edge.models import Manifest  # noqa: E402
from tests.daemon_harness import Notifications, frame_dirs  # noqa: E402

# systemd/da3-edge.service
WATCHDOG_SEC = 30.0
RESTART_SEC = 5.0
START_LIMIT = (5, 300.0)
SETTLE = 10.0  # a sample this long after a fault (or a start) must show the steady fds/threads
RSS_FLAT_MIB = 5.0
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


@dataclass
class Run:
    """One life of the daemon process."""

    pid: int
    started: float
    ended: float | None = None
    how: str = "running"  # stopped (SIGTERM), killed (SIGKILL), watchdog, exited N
    exit_code: int | None = None
    last_status: dict[str, Any] | None = None
    # Its workers alive 5 s after it ended (None: not recorded, a run from before the rule).
    orphans: list[int] | None = field(default_factory=list)


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
    mount: Path = field(init=False)
    store: Path = field(init=False)
    config: Path = field(init=False)
    runs: list[Run] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    consumer: dict[str, int] = field(
        default_factory=lambda: {"seen": 0, "read": 0, "pruned": 0, "torn": 0}
    )

    def __post_init__(self) -> None:
        self.mount = self.out / "mnt"
        self.store = self.mount / "store"
        self.config = self.out / "da3-edge.toml"
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree: list[int] = []  # the daemon and its workers, as last seen
        self.notify: Notifications | None = None
        self.keep_frames = KEEP_FRAMES[0]
        self.stop = threading.Event()
        manifest = Manifest.load(self.models)
        self.random_init = any(a.random_init for a in manifest.cores())

    # -- time and records -------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def event(self, kind: str, **facts: Any) -> None:
        record = {"t": round(self.now(), 2), "event": kind, **facts}
        self.events.append(record)
        print(f"[{record['t']:7.1f} s] {kind} {json.dumps(facts) if facts else ''}", flush=True)

    # -- the config and the camera's script --------------------------------------------
    def camera_script(self, faults: list[Fault]) -> str:
        """The fake's script for the rest of the run from now: good frames until each
        camera fault is due, then the fault (at the camera's rate, so roughly on time)."""
        steps, t = [f"fps:{self.fps:g}"], self.now()
        for fault in faults:
            if fault.kind not in ("camera-error", "camera-hang") or fault.at <= t:
                continue
            steps.append(f"ok*{max(1, round((fault.at - t) * self.fps))}")
            steps.append("error*3" if fault.kind == "camera-error" else f"hang:{fault.hold:g}")
            t = fault.end
        return ",".join(steps)

    def write_config(self, script: str, *, broken: bool = False) -> None:
        w, h = self.size
        text = f"""# written by scripts/soak.py
[camera]
source = "fake:{script}"
width = {w}
height = {h}
[model]
dir = "{self.models}"
precision = "{self.precision}"
threads = {self.threads}
workers = {IN_FLIGHT_WORKERS}
[store]
dir = "{self.store}"
keep_frames = {self.keep_frames}
max_bytes = {STORE_MIB * 1024 * 1024 // 2}
[daemon]
status_every = 2.0
"""
        if broken:
            text += "this is not = = toml\n"
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.config)

    # -- the daemon, supervised like its unit ------------------------------------------
    def start(self, faults: list[Fault]) -> None:
        starts = [r.started for r in self.runs if r.started > self.now() - START_LIMIT[1]]
        if len(starts) + 1 > START_LIMIT[0]:
            raise SystemExit(f"soak: start limit hit ({START_LIMIT[0]} in {START_LIMIT[1]:g} s)")
        self.write_config(self.camera_script(faults))
        if self.notify is not None:
            self.notify.close()
        sock = self.out / "notify.sock"
        sock.unlink(missing_ok=True)
        self.notify = Notifications(sock)
        env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DA3_EDGE_MODELS")}
        env.update(
            NOTIFY_SOCKET=str(sock),
            WATCHDOG_USEC=str(int(WATCHDOG_SEC * 1e6)),
            PYTHONUNBUFFERED="1",
        )
        log = open(self.out / "daemon.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge", "run", "--config", str(self.config)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        self.runs.append(Run(self.proc.pid, self.now()))
        self.event("start", pid=self.proc.pid)

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the daemon, noting its core workers first (``ended``)."""
        assert self.proc is not None
        self.tree = process_tree(self.proc.pid)
        self.proc.send_signal(sig)

    def ended(self, how: str) -> None:
        run = self.runs[-1]
        assert self.proc is not None
        run.exit_code = self.proc.wait()
        run.ended = self.now()
        run.how = how
        run.last_status = self.read_status(run.pid) or run.last_status
        # A worker notices its daemon's end (its stdin closes) and exits: however the
        # daemon ended, none may outlive it, or each restart would leave a model behind.
        workers = [p for p in self.tree if p != run.pid]
        deadline = time.monotonic() + 5.0
        while any(map(procfs.alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        run.orphans = [p for p in workers if procfs.alive(p)]
        self.event("end", pid=run.pid, how=how, exit_code=run.exit_code, orphans=run.orphans)

    def supervise(self, faults: list[Fault]) -> None:
        """systemd's part: the watchdog, Restart=on-failure."""
        assert self.proc is not None and self.notify is not None
        run = self.runs[-1]
        if self.proc.poll() is not None:
            self.ended(f"exited {self.proc.returncode}")
            time.sleep(RESTART_SEC)
            self.start(faults)
            return
        pings = [t for t, m in list(self.notify.messages) if m.get("WATCHDOG") == "1"]
        ready = [t for t, m in list(self.notify.messages) if m.get("READY") == "1"]
        since = pings[-1] if pings else (ready[0] if ready else None)
        # Before READY, systemd's TimeoutStartSec applies (90 s), not the watchdog.
        limit = WATCHDOG_SEC if since is not None else 90.0
        since = since if since is not None else self.t0 + run.started
        if time.monotonic() - since > limit:
            self.event("watchdog", pid=run.pid, silent_s=round(time.monotonic() - since, 1))
            self.signal(signal.SIGABRT)
            self.ended("watchdog")
            time.sleep(RESTART_SEC)
            self.start(faults)

    # -- what is measured ---------------------------------------------------------------
    def read_status(self, pid: int | None = None) -> dict[str, Any] | None:
        status = follow.read_json(self.store, layout.STATUS)
        if status is None or (pid is not None and status.get("pid") != pid):
            return None
        return status

    def sample(self) -> dict[str, Any]:
        assert self.proc is not None
        pids = self.tree = process_tree(self.proc.pid)
        rss = threads = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                fields = procfs.status(pid)
                rss += int(fields["VmRSS"].split()[0])
                threads += int(fields["Threads"])
        held, transient = held_fds(pids)
        frames = frame_dirs(self.store)
        store_bytes = sum(
            f.stat().st_size for d in frames for f in d.iterdir() if f.is_file()
        ) if frames else 0  # fmt: skip
        status = self.read_status(self.proc.pid)
        if status is not None:
            self.runs[-1].last_status = status
        counters = (status or {}).get("counters", {})
        record = {
            "t": round(self.now(), 2),
            "pid": self.proc.pid,
            "processes": len(pids),
            "rss_kib": rss,
            "fds": len(held),
            "fds_transient": transient,
            "threads": threads,
            "store_frames": len(frames),
            "store_bytes": store_bytes,
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
                newest = follow.latest(self.store)
                if newest is None:
                    continue
                for frame in follow.published_since(self.store, before, newest):
                    self.consumer["seen"] += 1
                    record = follow.read_record(self.store, frame.seq)
                    depth = frame.path / "frame.depth.png"
                    if record is not None and record.get("store_seq") == frame.seq:
                        self.consumer["read"] += 1
                        flagged = record.get("random_init") == self.random_init
                        if not flagged or not depth.stat().st_size:
                            self.consumer["torn"] += 1  # misflagged, or an empty depth map
                    elif frame.path.is_dir():
                        self.consumer["torn"] += 1  # published, yet no complete record
                    else:
                        self.consumer["pruned"] += 1  # the ring moved past it first
                before = newest.seq

    # -- the faults ---------------------------------------------------------------------
    def inflict(self, fault: Fault, faults: list[Fault]) -> None:
        assert self.proc is not None
        self.event(fault.kind, hold=fault.hold) if fault.hold else self.event(fault.kind)
        if fault.kind == "kill":
            self.runs[-1].last_status = self.read_status(self.proc.pid) or self.runs[-1].last_status
            self.signal(signal.SIGKILL)
            self.ended("killed")
            time.sleep(RESTART_SEC)  # Restart=on-failure, RestartSec=5
            self.start(faults)
        elif fault.kind in ("camera-error", "camera-hang"):
            pass  # in the fake's script since the start
        elif fault.kind == "reload-good":
            self.keep_frames = KEEP_FRAMES[1]
            self.write_config(self.camera_script(faults))
            self.proc.send_signal(signal.SIGHUP)
        elif fault.kind == "reload-bad":
            self.write_config(self.camera_script(faults), broken=True)
            self.proc.send_signal(signal.SIGHUP)
            self.wait_for_log("reload: keeping the running config", 10.0)
            self.write_config(self.camera_script(faults))  # as an operator would, later
        elif fault.kind == "disk-full":
            filler = self.mount / "filler"
            # Unbuffered: the write that meets ENOSPC raises, and close has nothing left.
            with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
                chunk = b"\0" * (1 << 20)
                while True:
                    f.write(chunk)
            self.hold(fault)
            filler.unlink()
        elif fault.kind == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(self.mount)], check=True)
            try:
                self.hold(fault)
            finally:
                subprocess.run(["mount", "-o", "remount,rw", str(self.mount)], check=True)
        if fault.kind in ("disk-full", "read-only"):  # held here; a camera's hang is its own
            self.event(f"{fault.kind} over")

    def hold(self, fault: Fault) -> None:
        while self.now() < fault.end:
            self.tick([])
            time.sleep(0.2)

    def wait_for_log(self, text: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in (self.out / "daemon.log").read_text(errors="replace"):
                return True
            time.sleep(0.2)
        return False

    # -- the run ------------------------------------------------------------------------
    def tick(self, faults: list[Fault]) -> None:
        if self.samples and self.now() - self.samples[-1]["t"] < self.sample_every:
            return
        if faults:
            self.supervise(faults)
        self.sample()

    def run(self) -> None:
        faults = schedule(self.seconds)
        consumer = threading.Thread(target=self.consume, name="consumer", daemon=True)
        self.start(faults)
        consumer.start()
        pending = list(faults)
        try:
            while self.now() < self.seconds:
                if pending and self.now() >= pending[0].at:
                    self.inflict(pending.pop(0), faults)
                self.tick(faults)
                time.sleep(0.2)
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.signal(signal.SIGTERM)
                try:
                    self.proc.wait(15)
                    self.ended("stopped")
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.ended("did not stop within 15 s")
            self.stop.set()
            consumer.join(5)
            if self.notify is not None:
                self.notify.close()
        self.faults = faults


FD_READINGS, FD_GAP_S = 3, 0.1


def open_fds(pids: list[int]) -> set[tuple[int, int, str]]:
    """(pid, fd, target) of every descriptor the processes hold now."""
    return {(pid, fd, target) for pid in pids for fd, target in procfs.fds(pid).items()}


def held_fds(pids: list[int]) -> tuple[set[tuple[int, int, str]], list[str]]:
    """The descriptors open at each of ``FD_READINGS`` readings ``FD_GAP_S`` apart, and
    the targets of those open at some but not all: a file being written at the sampling
    instant is not a leak, and a leaked descriptor stays open, so it is in every reading."""
    readings = []
    for i in range(FD_READINGS):
        if i:
            time.sleep(FD_GAP_S)
        readings.append(open_fds(pids))
    held = set.intersection(*readings)
    return held, sorted({target for _, _, target in set.union(*readings) - held})


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (the core workers)."""
    parents = procfs.parents()
    tree, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parents.items() if pp in frontier]
        tree += frontier
    return tree


# -- the rules ---------------------------------------------------------------------------


def accounting(run: Run, workers: int = IN_FLIGHT_WORKERS) -> dict[str, Any]:
    """One row of the accounting table: where the run's captured frames went."""
    c = (run.last_status or {}).get("counters")
    row: dict[str, Any] = {"pid": run.pid, "how": run.how, "exit_code": run.exit_code}
    if not c:
        return {**row, "ok": False, "why": "no status.json from this run"}
    parts = ("written", "dropped_stale", "dropped_write", "failed_inference", "failed_write")
    accounted = sum(c[p] for p in parts) + c["in_flight"]
    capacity = 1 + (workers + 1) + 2 + 1
    row.update({p: c[p] for p in ("captured", *parts, "in_flight")}, capacity=capacity)
    if run.how == "stopped":
        row["ok"] = c["captured"] == accounted
        row["why"] = f"captured {c['captured']} {'=' if row['ok'] else '!='} {accounted} accounted"
    else:
        # Read while running: the parts may be a frame apart; the in-flight bound holds.
        row["ok"] = c["in_flight"] <= capacity and abs(c["captured"] - accounted) <= 1
        row["why"] = (
            f"last status before the {run.how}: {c['in_flight']} in flight (at most "
            f"{capacity} can be: the most the kill lost), captured {c['captured']} vs "
            f"{accounted} accounted"
        )
    return row


def windows(seconds: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The two memory windows: an hour's minutes 15-20 and 55-60, scaled."""
    return (0.25 * seconds, 0.333 * seconds), (0.917 * seconds, seconds)


def check(soak: Soak | SimpleNamespace) -> dict[str, Any]:
    """The rules, each with what was measured and its threshold."""
    samples, runs, faults = soak.samples, soak.runs, soak.faults
    rules: dict[str, dict[str, Any]] = {}
    table = [accounting(r) for r in runs]
    rules["accounting"] = {
        "ok": all(r["ok"] for r in table) and runs[-1].how == "stopped",
        "measured": [r["why"] for r in table],
    }
    recorded = all(r.orphans is not None for r in runs)
    rules["no_orphans"] = {
        "ok": not any(r.orphans for r in runs) if recorded else None,
        "measured": {f"{r.pid} ({r.how})": r.orphans for r in runs}
        if recorded
        else "not recorded (a run from before this rule)",
        "threshold": "no core worker alive 5 s after its daemon ended",
    }
    (a0, a1), (b0, b1) = windows(soak.seconds)
    first = [s["rss_kib"] for s in samples if a0 <= s["t"] < a1]
    last = [s["rss_kib"] for s in samples if b0 <= s["t"] <= b1]
    restarts = [r.started for r in runs[1:] if r.started >= a0]
    if first and last:
        diff = (statistics.median(last) - statistics.median(first)) / 1024
        rules["rss_flat"] = {
            "ok": abs(diff) < RSS_FLAT_MIB and not restarts,
            "measured": f"median RSS {statistics.median(first) / 1024:.1f} MiB at "
            f"{a0:.0f}-{a1:.0f} s, {statistics.median(last) / 1024:.1f} MiB at "
            f"{b0:.0f}-{b1:.0f} s: {diff:+.2f} MiB; restarts in between: {len(restarts)}",
            "threshold": f"|difference| < {RSS_FLAT_MIB} MiB, no restart",
        }
    else:
        rules["rss_flat"] = {"ok": False, "measured": "no samples in a window"}
    quiet = quiet_samples(samples, faults, runs)
    for key in ("fds", "threads"):
        values = sorted({s[key] for s in quiet})
        rules[f"{key}_steady"] = {
            "ok": len(values) == 1,
            "measured": f"{len(quiet)} samples {SETTLE:g} s or more after a fault: {values}",
            "threshold": "one value",
        }
    max_bytes = STORE_MIB * 1024 * 1024 // 2
    reload = next(f.at for f in faults if f.kind == "reload-good") + SETTLE
    over = [
        s
        for s in samples
        if s["store_frames"] > KEEP_FRAMES[s["t"] >= reload] or s["store_bytes"] > max_bytes
    ]
    after = [s["store_frames"] for s in samples if s["t"] >= reload]
    rules["store_in_ring"] = {
        "ok": not over,
        "measured": f"most frames {max(s['store_frames'] for s in samples)} "
        f"({max(after, default=0)} after the reload), most bytes "
        f"{max(s['store_bytes'] for s in samples) / 2**20:.1f} MiB",
        "threshold": f"<= {KEEP_FRAMES[0]} frames, {KEEP_FRAMES[1]} from {SETTLE:g} s after "
        f"the good reload; <= {max_bytes / 2**20:g} MiB",
    }
    rules["consumer"] = {
        "ok": soak.consumer["torn"] == 0 and soak.consumer["read"] > 0,
        "measured": dict(soak.consumer),
        "threshold": "no half-written frame",
    }
    # Frames after every fault: the daemon's written count grew between the first sample
    # after the fault ended and the last one from the same process 2 x SETTLE or more later.
    recovered = {}
    for fault in faults:
        after = [s for s in samples if s["t"] >= fault.end and s["written"] is not None]
        later = [
            s for s in after[1:] if s["pid"] == after[0]["pid"] and s["t"] >= fault.end + 2 * SETTLE
        ]  # fmt: skip
        grew = later[-1]["written"] - after[0]["written"] if later else 0
        recovered[f"{fault.kind}@{fault.at:.0f}s"] = grew
    rules["frames_after_every_fault"] = {
        "ok": all(n > 0 for n in recovered.values()),
        "measured": {k: f"+{n} frames" for k, n in recovered.items()},
        "threshold": "more than none",
    }
    return {  # a rule whose ok is None was not measured: it neither passes nor fails
        "ok": all(r["ok"] is not False for r in rules.values()),
        "rules": rules,
        "accounting": table,
        "runs": [asdict(r) | {"last_status": None} for r in runs],  # its counters: accounting
    }


def recheck(out: Path) -> dict[str, Any]:
    """The rules again over a finished run's files (report.json, samples.jsonl): a run
    judged by rules written after it."""
    report = json.loads((out / "report.json").read_text())
    setup = report["setup"]
    rows = {row["pid"]: row for row in report["accounting"]}
    runs = []
    for r in report["runs"]:
        row = rows[r["pid"]]
        status = {"counters": row} if "captured" in row else None
        runs.append(
            Run(r["pid"], r["started"], r["ended"], r["how"], r["exit_code"], status,
                r.get("orphans"))
        )  # fmt: skip
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    soak = SimpleNamespace(
        seconds=setup["minutes"] * 60, samples=samples, runs=runs,
        faults=[Fault(**f) for f in setup["faults"]],
        consumer=report["rules"]["consumer"]["measured"],
    )  # fmt: skip
    return {**check(soak), "setup": setup}


def quiet_samples(
    samples: list[dict[str, Any]], faults: list[Fault], runs: list[Run]
) -> list[dict[str, Any]]:
    """Samples at least SETTLE seconds after every fault's end and every start."""
    marks = [f.end for f in faults] + [r.started for r in runs]
    out = []
    for s in samples:
        before = [m for m in marks if m <= s["t"]]
        during = any(f.at <= s["t"] <= f.end for f in faults)
        if not during and before and s["t"] - max(before) >= SETTLE:
            out.append(s)
    return out


# -- the command --------------------------------------------------------------------------


def size(text: str) -> tuple[int, int]:
    w, sep, h = text.partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected WxH, e.g. 640x480")
    return int(w), int(h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the run (default 60)")
    ap.add_argument("--out", type=Path, default=Path("soak"), help="(default ./soak)")
    ap.add_argument("--models", type=Path, help="model directory (default: the small "
                    "random-weight test models, built if missing)")  # fmt: skip
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp32", "int8"))
    ap.add_argument("--fps", type=float, default=2.0, help="camera frames/s (default 2)")
    ap.add_argument("--size", type=size, default=(640, 480), help="WxH (default 640x480)")
    ap.add_argument("--threads", type=int, default=1, help="core threads (default 1)")
    ap.add_argument("--sample-every", type=float, help="seconds (default: 5, 10 past 10 min)")
    ap.add_argument("--plots", action="store_true", help="also draw OUT/soak.png")
    ap.add_argument("--recheck", action="store_true",
                    help="judge the finished run in OUT again by these rules (no run)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.recheck:
        out = args.out.resolve()
        report = recheck(out)
        (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        return verdict(report, out)
    if args.minutes < 2:
        ap.error("--minutes must be at least 2 (the schedule needs room)")
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        print("soak.py: needs Linux and root (a tmpfs store, remounted read-only)", file=sys.stderr)
        return 2
    if os.environ.get("SOAK_NAMESPACE") != "1":
        # A private mount namespace: the tmpfs goes with the process, however it ends.
        env = {**os.environ, "SOAK_NAMESPACE": "1"}
        argv = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
        return subprocess.call(["unshare", "--mount", "--propagation", "private", *argv], env=env)
    models = args.models
    if models is None:
        from tests.conftest import build_small_models

        models = build_small_models()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("daemon.log", "samples.jsonl", "events.jsonl", "report.json"):
        (out / name).unlink(missing_ok=True)
    soak = Soak(
        out, args.minutes * 60, models.resolve(), args.precision, args.fps, args.size,
        args.threads, args.sample_every or (5.0 if args.minutes <= 10 else 10.0),
    )  # fmt: skip
    soak.mount.mkdir(exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={STORE_MIB}m", "soak", str(soak.mount)], check=True
    )
    try:
        soak.run()
    finally:
        subprocess.run(["umount", "-l", str(soak.mount)], check=False)
    report = check(soak)
    report["setup"] = {
        "minutes": args.minutes, "models": str(models), "precision": args.precision,
        "fps": args.fps, "size": list(args.size), "threads": args.threads,
        "faults": [asdict(f) for f in soak.faults], "windows_s": windows(soak.seconds),
    }  # fmt: skip
    for name, rows in (("samples.jsonl", soak.samples), ("events.jsonl", soak.events)):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.plots:
        plot(soak, out / "soak.png")
    return verdict(report, out)


def verdict(report: dict[str, Any], out: Path) -> int:
    """Print each rule's result; 0 if all hold."""
    for name, rule in report["rules"].items():
        said = {True: "ok  ", False: "FAIL", None: "n/a "}[rule["ok"]]
        print(f"{said} {name}: {rule['measured']}")
    minutes = report["setup"]["minutes"]
    print(f"soak: {'passed' if report['ok'] else 'FAILED'} ({minutes:g} min; {out}/report.json)")
    return 0 if report["ok"] else 1


def rates(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Frames written per second between consecutive samples of one process."""
    out = []
    for a, b in itertools.pairwise(samples):
        if a["pid"] == b["pid"] and a["written"] is not None and b["written"] is not None:
            out.append((b["t"], (b["written"] - a["written"]) / max(b["t"] - a["t"], 1e-6)))
    return out


def plot(soak: Soak, path: Path) -> None:
    """Four panels against time (RSS, fds and threads, the store, frames/s), faults
    marked: drawn with Pillow, no plotting library."""
    from PIL import Image, ImageDraw, ImageFont

    s = soak.samples
    panels = [
        ("summed RSS, MiB (daemon + core worker)", [[(r["t"], r["rss_kib"] / 1024) for r in s]]),
        ("open fds (blue), threads (orange)",
         [[(r["t"], r["fds"]) for r in s], [(r["t"], r["threads"]) for r in s]]),
        ("store: MiB (blue), frames (orange)",
         [[(r["t"], r["store_bytes"] / 2**20) for r in s], [(r["t"], r["store_frames"]) for r in s]]),
        ("frames written per second", [rates(s)]),
    ]  # fmt: skip
    colours = ("#1f77b4", "#ff7f0e")
    width, height, left, top, gap = 1200, 900, 70, 30, 24
    ph = (height - top - len(panels) * gap) // len(panels)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    span = max(soak.seconds, 1.0)
    draw.text((left, 6), f"da3-edge soak: {soak.seconds / 60:g} min, {soak.size[0]}x{soak.size[1]} at "
              f"{soak.fps:g} frames/s, {soak.precision}; faults marked (grey)", fill="black", font=font)  # fmt: skip
    for i, (title, series) in enumerate(panels):
        y0 = top + i * (ph + gap) + gap
        y1 = y0 + ph
        values = [v for line in series for _, v in line] or [0.0]
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.1 or max(abs(hi) * 0.05, 1.0)
        lo, hi = lo - pad, hi + pad

        def x(t: float) -> float:
            return left + (width - left - 20) * t / span

        def y(v: float, y0: float = y0, y1: float = y1, lo: float = lo, hi: float = hi) -> float:
            return y1 - (y1 - y0) * (v - lo) / (hi - lo)

        draw.rectangle((left, y0, width - 20, y1), outline="black")
        draw.text((left + 4, y0 - 14), title, fill="black", font=font)
        for v in (lo + pad, hi - pad):
            draw.text((4, y(v) - 6), f"{v:.1f}", fill="black", font=font)
            draw.line((left - 4, y(v), left, y(v)), fill="black")
        for fault in soak.faults:
            draw.line((x(fault.at), y0, x(fault.at), y1), fill="#bbbbbb")
            if i == 0:
                draw.text((x(fault.at) + 2, y0 + 2), fault.kind, fill="#888888", font=font)
        for colour, line in zip(colours, series, strict=False):
            if len(line) > 1:
                draw.line([(x(t), y(v)) for t, v in line], fill=colour, width=2)
    for t in range(0, int(span) + 1, max(60, int(span) // 12 // 60 * 60)):
        draw.text((left + (width - left - 20) * t / span - 8, height - 14), f"{t // 60} min",
                  fill="black", font=font)  # fmt: skip
    img.save(path)


if __name__ == "__main__":
    raise SystemExit(main())
