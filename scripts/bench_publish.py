#!/usr/bin/env python3
"""What `da3-edge publish` costs per message, and how late its messages are.

    uv run --frozen --no-sync python -m scripts.bench_publish [--frames 30] [--json FILE]

Runs a local mosquitto (Debian's; anonymous, loopback, a free port), the daemon on the
same replay as scripts/bench_serve.py (1200x1600 photo-like JPEGs, store on a tmpfs),
and `da3-edge publish` with every frame's state (state_max_rate 0), once with the
preview off and once on. A paho subscriber times each `state` message against its
frame's `latest` switch (the symlink's mtime). Reported per run: the publisher's CPU
time per message sent (from /proc) and the delay p50/p99. scripts/compare_pytorch
runs this as part of its side-by-side run. Compare only figures from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from scripts.support import ROOT, processes
from scripts.support.broker import Broker
from scripts.support.replay import replay_daemon, replay_photos, tmpfs_dir


class Delays:
    """A paho subscriber to the publisher's topics: every message counted, and for each
    ``state`` that names the frame ``latest`` points at, the delay from the symlink's
    switch (its mtime) to the message's arrival."""

    def __init__(self, port: int, store: Path) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.store, self.received = store, 0
        self.ms: list[float] = []
        self.lock = threading.Lock()
        self.client = paho.Client(CallbackAPIVersion.VERSION2)
        self.client.on_message = self.on_message
        self.client.connect("127.0.0.1", port)
        self.client.subscribe("da3edge/#")
        self.client.loop_start()

    def on_message(self, _c: Any, _u: Any, m: Any) -> None:
        t = time.time()
        with self.lock:
            self.received += 1
        if not m.topic.endswith("/state"):
            return
        seq = json.loads(m.payload)["store_seq"]
        latest = self.store / "latest"
        try:
            if os.readlink(latest).endswith(f"{seq:010d}"):
                with self.lock:
                    self.ms.append((t - os.lstat(latest).st_mtime) * 1000)
        except OSError:
            pass

    def close(self) -> None:
        self.client.loop_stop()


def publisher(work: Path, store: Path, cfg: Path) -> subprocess.Popen[bytes]:
    """``da3-edge publish`` on ``store``, once it says it is connected (10 s at most)."""
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    log = work / "publish.log"
    argv = [sys.executable, "-m", "edge", "publish", "--config", str(cfg), "--store", str(store)]
    with open(log, "wb") as fh:
        pub = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    end = time.monotonic() + 10
    while "connected to" not in log.read_text() and time.monotonic() < end:
        time.sleep(0.05)
    return pub


def one_run(work: Path, replay: Path, args: argparse.Namespace, preview: bool) -> dict[str, Any]:
    """The daemon and ``publish`` on one store, the preview ``preview``: the publisher's
    CPU per message and the latest -> state delays after the warm-up."""
    from edge.stats import nearest_rank

    mosquitto = Broker(work / "broker", users=None)
    port = mosquitto.port
    store = Path(tempfile.mkdtemp(prefix="store-", dir=work)) / "store"
    delays = Delays(port, store)
    cfg = work / "c.toml"
    total = args.warmup + args.frames
    cfg.write_text(
        f"[store]\nkeep_frames = {total}\nmax_bytes = {total << 25}\n"
        f'[mqtt]\nenabled = true\nport = {port}\ndevice_id = "bench"\nstate_max_rate = 0.0\n'
        f"preview = {'true' if preview else 'false'}\nqueue_limit = 1000\n"
    )
    pub = publisher(work, store, cfg)
    try:
        cpu0 = processes.cpu_seconds(pub.pid)
        replay_daemon(replay, store, args.models, config=cfg, fps=args.fps, frames=total, code=ROOT)
        time.sleep(1.0)  # the last frames' messages
        cpu = processes.cpu_seconds(pub.pid) - cpu0
    finally:
        pub.terminate()
        pub.wait(10)
        delays.close()
        mosquitto.stop()
        shutil.rmtree(store.parent, ignore_errors=True)
    steady = delays.ms[args.warmup :] or delays.ms
    messages = delays.received  # states, stats, previews, availability, discovery
    return {
        "preview": preview,
        "frames": total,
        "messages": messages,
        "cpu_ms_per_message": cpu * 1000 / max(1, messages),
        "cpu_ms_per_frame": cpu * 1000 / total,
        "delay_ms": {
            "n": len(steady),
            "p50": nearest_rank(steady, 50) if steady else None,
            "p99": nearest_rank(steady, 99) if steady else None,
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, default=ROOT / ".cache" / "tests" / "full")
    p.add_argument("--frames", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--fps", type=float, default=10.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if shutil.which("mosquitto") is None:
        raise SystemExit("mosquitto is not installed (requirements/apt.txt)")
    from edge import platform as edge_platform

    work = Path(tempfile.mkdtemp(prefix="da3-bench-publish-", dir=tmpfs_dir()))
    try:
        replay = replay_photos(work / "replay")
        runs = [one_run(work, replay, args, preview) for preview in (False, True)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "what": "da3-edge publish: CPU per message and latest->state delay, preview off/on",
        "machine": {"cpu": edge_platform.cpu_features().model, "cores": os.cpu_count()},
        "runs": runs,
        "median_cpu_ms_per_message": statistics.median(r["cpu_ms_per_message"] for r in runs),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
