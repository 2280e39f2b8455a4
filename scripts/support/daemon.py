"""Drive the real daemon process: a notify socket, its log, its store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import ROOT


class Notifications:
    """A real AF_UNIX datagram socket that collects sd_notify messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, dict[str, str]]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((time.monotonic(), fields))

    def having(self, key: str, since: float = 0.0) -> list[dict[str, str]]:
        return [m for t, m in list(self.messages) if key in m and t >= since]

    def arrived(self, key: str, timeout: float = 10.0) -> list[dict[str, str]]:
        """``having(key)`` once a message with it has been read, or [] at ``timeout``:
        a datagram the daemon sent before its log line (or its exit) may still be on
        its way to the reading thread when the test looks."""
        end = time.monotonic() + timeout
        while not (found := self.having(key)) and time.monotonic() < end:
            time.sleep(0.05)
        return found

    def close(self) -> None:
        self._stop = True
        self.sock.close()


RUN = ("-m", "edge", "run")
FAKE_CORES = ("-m", "scripts.support.fakedaemon")


class DaemonProcess:
    def __init__(
        self,
        tmp: Path,
        args: list[str],
        *,
        watchdog_usec: int | None = None,
        env: dict[str, str] | None = None,
        command: tuple[str, ...] = RUN,
        uid: int | None = None,
    ) -> None:
        """``python COMMAND ARGS``: the daemon (``da3-edge run``), or with
        ``command=FAKE_CORES`` the same daemon with FakeCores (scripts.support.fakedaemon);
        with ``uid``, as that user (``setpriv``: CI runs as root, where permissions
        prove nothing), which must be able to reach ``tmp`` and what the config names."""
        self.notify = Notifications(tmp / "notify.sock")
        as_user: list[str] = []
        if uid is not None:
            self.notify.path.chmod(0o777)  # the user sends to it
            as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        self.log_path = tmp / "daemon.log"
        full_env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DEBUG", "DA3_EDGE_MODELS", "NOTIFY_SOCKET")
        }
        full_env["NOTIFY_SOCKET"] = str(self.notify.path)
        full_env["PYTHONUNBUFFERED"] = "1"
        if watchdog_usec:
            full_env["WATCHDOG_USEC"] = str(watchdog_usec)
        full_env.update(env or {})
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*as_user, sys.executable, *command, *args],
            cwd=ROOT,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(
        self, check: Callable[[], object], timeout: float = 30.0, what: str = "condition"
    ) -> object:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = check()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited ({self.proc.returncode}) waiting for {what}:\n{self.log[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log[-3000:]}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.notify.close()
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> DaemonProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def frame_dirs(store: Path) -> list[Path]:
    frames = store / "frames"
    if not frames.is_dir():
        return []
    return sorted(p for p in frames.iterdir() if p.name.isdigit())


class Command:
    """`python -m edge COMMAND ARGS` as a long-running process with its log in a file
    (serve, publish): ``log`` to read it, ``stop`` for SIGTERM and the exit code."""

    def __init__(
        self, command: str, args: list[str], log: Path, env: dict[str, str] | None = None
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "NOTIFY_SOCKET")} | (
            env or {}
        )
        env["PYTHONUNBUFFERED"] = "1"
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge", command, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def write_config(
    path: Path, source: str, store_dir: Path, models: Path, **extra: dict[str, object]
) -> Path:
    sections: dict[str, dict[str, object]] = {
        "camera": {
            "source": source,
            "width": 320,
            "height": 240,
            "timeout": 1.0,
            "stall_after": 2.0,
            "backoff_min": 0.2,
            "backoff_max": 1.0,
        },
        "model": {"dir": str(models), "threads": 1},
        "store": {"dir": str(store_dir), "keep_frames": 5},
        "daemon": {"stuck_after": 4.0, "status_every": 0.5},
    }
    for name, values in extra.items():
        sections.setdefault(name, {}).update(values)
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def daemon(
    tmp: Path,
    store_dir: Path,
    models: Path,
    source: str = "fake:fps:20",
    /,
    **sections: dict[str, object],
) -> DaemonProcess:
    """The daemon on ``source`` writing ``store_dir``, in a directory of its own under
    ``tmp`` (one per start); ``sections`` add to its config (``write_config``). With a
    folder ``edge.fakecore.fake_models`` wrote it runs FakeCores (scripts.support.
    fakedaemon: for tests of what reads the store), with exported models LiteRT
    (``da3-edge run``)."""
    from edge.fakecore import FAKE_WEIGHTS
    from edge.models import Manifest

    run = Path(tempfile.mkdtemp(dir=tmp, prefix="daemon-"))
    cfg = write_config(run / "c.toml", source, store_dir, models, **sections)
    fake = all(a.weights == FAKE_WEIGHTS for a in Manifest.load(models).cores())
    return DaemonProcess(run, ["--config", str(cfg)], command=FAKE_CORES if fake else RUN)
