"""The daemon as its systemd unit runs it (systemd/da3-edge.service): its config and the
fake camera's script written, started with a real sd_notify socket, the watchdog kept,
Restart=on-failure after RestartSec, the start limit; each life recorded as a ``Run``."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.models import Manifest, sha256_file
from edge.store import layout, read
from scripts.support import ROOT, processes
from scripts.support.daemon import Notifications

from .rules import Run
from .sample import process_tree
from .schedule import (
    IN_FLIGHT_WORKERS,
    KEEP_FRAMES,
    MAX_BYTES,
    RESTART_SEC,
    START_LIMIT,
    WATCHDOG_SEC,
    Fault,
)

# The faults the fake camera's script plays, as its steps.
CAMERA_STEPS = {"camera-error": "error*3", "camera-hang": "hang:{hold:g}", "camera-crash": "crash"}
NOBODY = 65534
APPLIED = "reload: config"  # the daemon's log line when a reload's config is applied


@dataclass
class Daemon:
    """``python -m edge run`` with the soak's config, supervised; ``now`` is the run's
    clock and ``event`` its log."""

    out: Path
    store: Path
    models: Path
    precision: str
    fps: float
    size: tuple[int, int]
    threads: int
    now: Callable[[], float]
    event: Callable[..., None]
    keep_frames: int = KEEP_FRAMES[0]
    runs: list[Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.config = self.out / "da3-edge.toml"
        # The slow-fsync fault: an LD_PRELOAD library that stalls every fsync while the
        # flag file holds its seconds (slowfsync.c), built once a run.
        self.slow_flag = self.out / "slow-fsync"
        self.slow_lib = self.out / "slowfsync.so"
        source = Path(__file__).with_name("slowfsync.c")
        gcc = ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"]
        subprocess.run([*gcc, "-o", str(self.slow_lib), str(source), "-ldl"], check=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree: list[int] = []  # the daemon and its workers, as last seen
        self.notify: Notifications | None = None
        self.started_at = time.monotonic() - self.now()  # the clock's zero, monotonic

    # -- the config and the camera's script --------------------------------------------
    def camera_script(self, faults: list[Fault]) -> str:
        """The fake's script for the rest of the run from now: good frames until each
        camera fault is due, then the fault (at the camera's rate, so roughly on time)."""
        steps, t = [f"fps:{self.fps:g}"], self.now()
        for fault in faults:
            if fault.kind not in CAMERA_STEPS or fault.at <= t:
                continue
            steps.append(f"ok*{max(1, round((fault.at - t) * self.fps))}")
            steps.append(CAMERA_STEPS[fault.kind].format(hold=fault.hold))
            t = fault.end
        return ",".join(steps)

    def write_config(
        self, faults: list[Fault], *, broken: str = "", models: Path | None = None
    ) -> None:
        """The config, with the camera's script from now on; ``broken``: "toml" (does not
        parse) or "utf8" (a comment saved in Latin-1); ``models``: another model.dir."""
        w, h = self.size
        text = f"""# written by python -m scripts.soak
[camera]
source = "fake:{self.camera_script(faults)}"
width = {w}
height = {h}
[model]
dir = "{models or self.models}"
precision = "{self.precision}"
threads = {self.threads}
workers = {IN_FLIGHT_WORKERS}
[store]
dir = "{self.store}"
keep_frames = {self.keep_frames}
max_bytes = {MAX_BYTES}
persist_dir = "{self.out / "persist"}"
persist_every = 1.0
persist_keep = 5
[daemon]
status_every = 2.0
"""
        data = text.encode()
        if broken == "toml":
            data += b"this is not = = toml\n"
        elif broken == "utf8":
            data += "# caméra du salon\n".encode("latin-1")
        tmp = self.config.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(self.config)

    def locked_models(self) -> Path:
        """A model folder the daemon cannot enter: behind a directory of another user's,
        0700 (as a home under ProtectHome= is to the service)."""
        locked = self.out / "locked"
        locked.mkdir(exist_ok=True)
        link = locked / "models"
        if not link.is_symlink():
            link.symlink_to(self.models)
        os.chown(locked, NOBODY, NOBODY)
        locked.chmod(0o700)
        return link

    def overflowing_models(self) -> Path:
        """A copy of the model folder whose core overflows, as an fp16 core can: the
        depth head's largest weight (its last 1x1 convolution, 2 x C floats) set to
        65504, fp16's largest, so exp() gives infinity at most pixels; the manifest's
        digest made to match. An int8 core's head has no float weight to change."""
        from scripts.support.tflite import spans

        done = self.out / "overflowing"
        if done.is_dir():
            return done
        work = self.out / ".overflowing"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(self.models, work)
        manifest = Manifest.load(work)
        for core in manifest.cores():
            if core.precision != self.precision:
                continue
            path = work / core.file
            data = bytearray(path.read_bytes())
            heads = [s for s in spans(bytes(data)) if len(s[3]) == 4 and s[3][:3] == (2, 1, 1)]
            if len(heads) != 1:
                raise SystemExit(f"soak: {core.file}: no float weight of the depth head to change")
            start, size, dtype, shape = heads[0]
            depth = np.frombuffer(bytes(data[start : start + size]), dtype).reshape(shape)[0]
            at = start + int(np.argmax(depth)) * dtype.itemsize
            data[at : at + dtype.itemsize] = np.array([65504.0], dtype).tobytes()
            path.write_bytes(data)
            manifest.upsert(dataclasses.replace(core, sha256=sha256_file(path), bytes=len(data)))
        manifest.save()
        work.rename(done)
        return done

    # -- the process --------------------------------------------------------------------
    def logged(self, text: str, timeout: float, after: int = 0) -> bool:
        """Whether the daemon's log holds ``text`` more than ``after`` times within
        ``timeout`` s."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log_count(text) > after:
                return True
            time.sleep(0.2)
        return False

    def log_count(self, text: str) -> int:
        return (self.out / "daemon.log").read_text(errors="replace").count(text)

    def reload(self, faults: list[Fault], models: Path | None = None) -> bool:
        """The config (with ``models`` as model.dir) written and SIGHUP sent; whether
        the daemon said it applied a config within 30 s."""
        assert self.proc is not None
        seen = self.log_count(APPLIED)
        self.write_config(faults, models=models)
        self.proc.send_signal(signal.SIGHUP)
        return self.logged(APPLIED, 30.0, after=seen)

    def start(self, faults: list[Fault]) -> None:
        starts = [r.started for r in self.runs if r.started > self.now() - START_LIMIT[1]]
        if len(starts) + 1 > START_LIMIT[0]:
            raise SystemExit(f"soak: start limit hit ({START_LIMIT[0]} in {START_LIMIT[1]:g} s)")
        self.write_config(faults)
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
            LD_PRELOAD=str(self.slow_lib),
            DA3_SOAK_SLOW_FSYNC=str(self.slow_flag),
        )
        # Root, but without the capabilities that skip permission checks: file modes
        # bind the daemon as they bind the unit's user.
        unprivileged = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
        with open(self.out / "daemon.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*unprivileged, sys.executable, "-m", "edge", "run", "--config", str(self.config)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.runs.append(Run(self.proc.pid, self.now()))
        self.event("start", pid=self.proc.pid)

    def restart(self, faults: list[Fault]) -> None:
        """Restart=on-failure: RestartSec, then a start."""
        time.sleep(RESTART_SEC)
        self.start(faults)

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
        while any(map(processes.alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        run.orphans = [p for p in workers if processes.alive(p)]
        self.event("end", pid=run.pid, how=how, exit_code=run.exit_code, orphans=run.orphans)

    def supervise(self, faults: list[Fault]) -> None:
        """systemd's part: the watchdog, Restart=on-failure."""
        assert self.proc is not None and self.notify is not None
        run = self.runs[-1]
        if self.proc.poll() is not None:
            self.ended(f"exited {self.proc.returncode}")
            self.restart(faults)
            return
        pings = [t for t, m in list(self.notify.messages) if m.get("WATCHDOG") == "1"]
        ready = [t for t, m in list(self.notify.messages) if m.get("READY") == "1"]
        since = pings[-1] if pings else (ready[0] if ready else None)
        # Before READY, systemd's TimeoutStartSec applies (90 s), not the watchdog.
        limit = WATCHDOG_SEC if since is not None else 90.0
        since = since if since is not None else self.started_at + run.started
        if time.monotonic() - since > limit:
            self.event("watchdog", pid=run.pid, silent_s=round(time.monotonic() - since, 1))
            self.signal(signal.SIGABRT)
            self.ended("watchdog")
            self.restart(faults)

    def stop(self) -> None:
        """SIGTERM, as systemd stops the unit; SIGKILL after 15 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
                self.ended("stopped")
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.ended("did not stop within 15 s")
        if self.notify is not None:
            self.notify.close()

    def read_status(self, pid: int | None = None) -> dict[str, Any] | None:
        """The store's status.json, if it is ``pid``'s (when given)."""
        status = read.read_json(self.store, layout.STATUS)
        if status is None or (pid is not None and status.get("pid") != pid):
            return None
        return status
