#!/usr/bin/env python3
"""What `da3-edge serve` costs the daemon, in paired alternating rounds.

    uv run --frozen --no-sync python -m scripts.bench_serve [--rounds 5] [--json FILE]

Each round runs `da3-edge run` on the same replay (1200x1600 photo-like JPEGs at
--fps, store on a tmpfs) twice: alone, and with `da3-edge serve` following its store
and a light client doing what the live page does (an /events subscriber that fetches
/latest.jpg for every frame, /api/status every 2 s) plus a Prometheus-like /metrics
scrape every second; the order alternates round by round. Reported: the daemon's
frames/s with serve over alone (per round and the median), serve's CPU time per
written frame and its peak RSS (from /proc), and the delay from a frame's `latest`
switch (the symlink's mtime) to its /events event, p50/p99. scripts/compare_pytorch
runs this as part of its side-by-side run. Compare only figures from one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
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
from scripts.support.replay import replay_daemon, replay_photos, steady_fps, tmpfs_dir


def peak_rss_mib(pid: int) -> float:

    return processes.kib(pid, "VmHWM") / 1024


class Client:
    """The page's requests and a scraper, on threads, against serve on ``port``."""

    def __init__(self, port: int, store: Path) -> None:
        self.port, self.store = port, store
        self.stop = threading.Event()
        self.delays: list[float] = []
        self.requests = 0
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._events, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _get(self, path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            self.requests += 1
            if resp.status not in (200, 304, 503):
                self.errors.append(f"{path}: {resp.status}")
        finally:
            conn.close()

    def _events(self) -> None:
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/events")
                resp = conn.getresponse()
                while not self.stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    if not line.startswith(b"data: "):
                        continue
                    t_event = time.time()
                    seq = json.loads(line[6:])["store_seq"]
                    latest = self.store / "latest"
                    try:
                        if os.readlink(latest).endswith(f"{seq:010d}"):
                            self.delays.append(t_event - os.lstat(latest).st_mtime)
                    except OSError:
                        pass
                    self._get(f"/latest.jpg?frame={seq}")
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)  # serve not up yet, or a reconnect

    def _poll(self) -> None:
        n = 0
        while not self.stop.wait(1.0):
            try:
                self._get("/metrics")
                if n % 2 == 0:
                    self._get("/api/status")
            except (OSError, http.client.HTTPException) as exc:
                self.errors.append(str(exc))
            n += 1

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


def run_daemon(
    models: Path, replay: Path, work: Path, args: argparse.Namespace, serve: bool
) -> dict[str, Any]:

    store = Path(tempfile.mkdtemp(prefix="store-", dir=work)) / "store"
    total = args.warmup + args.frames
    config = work / "daemon.toml"
    config.write_text(f"[store]\nkeep_frames = {total}\nmax_bytes = {total << 25}\n")
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    server = client = None
    out: dict[str, Any] = {}
    if serve:
        log = work / "serve.log"
        server = subprocess.Popen(
            [sys.executable, "-m", "edge", "serve", "--store", str(store), "--port", "0"],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=open(log, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        port = 0
        for _ in range(200):
            found = re.search(r"on http://[^:]+:(\d+)/", log.read_text())
            if found:
                port = int(found.group(1))
                break
            time.sleep(0.05)
        if not port:
            raise SystemExit(f"serve did not start: {log.read_text()[-2000:]}")
        client = Client(port, store)
        cpu0 = processes.cpu_seconds(server.pid)
    records = replay_daemon(
        replay, store, models, config=config, fps=args.fps, frames=total, code=ROOT
    )
    if server is not None and client is not None:
        time.sleep(0.5)  # the last events
        client.close()
        out["serve_cpu_ms_per_frame"] = (
            (processes.cpu_seconds(server.pid) - cpu0) * 1000 / len(records)
        )
        out["serve_peak_rss_mib"] = peak_rss_mib(server.pid)
        out["delays_ms"] = [d * 1000 for d in client.delays]
        out["client_requests"] = client.requests
        out["client_errors"] = client.errors[:5]
        server.terminate()
        server.wait(10)
    shutil.rmtree(store.parent, ignore_errors=True)
    out["fps"] = steady_fps(records, args.warmup)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, default=ROOT / ".cache" / "tests" / "full")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--frames", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--fps", type=float, default=10.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from edge import platform as edge_platform
    from edge.stats import nearest_rank

    work = Path(tempfile.mkdtemp(prefix="da3-bench-serve-", dir=tmpfs_dir()))
    try:
        replay = replay_photos(work / "replay")
        rounds = []
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {s: run_daemon(args.models, replay, work, args, s) for s in order}
            ratio = got[True]["fps"] / got[False]["fps"]
            rounds.append({"alone": got[False], "with_serve": got[True], "ratio": ratio})
            print(
                f"round {i + 1}/{args.rounds}: alone {got[False]['fps']:.3f}, with serve "
                f"{got[True]['fps']:.3f} frames/s ({ratio:.3f}); serve "
                f"{got[True]['serve_cpu_ms_per_frame']:.1f} CPU-ms/frame, "
                f"{got[True]['serve_peak_rss_mib']:.1f} MiB",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    delays = [d for r in rounds for d in r["with_serve"]["delays_ms"]]
    report = {
        "what": "da3-edge run with serve and a page-like client vs alone, paired rounds",
        "machine": {"cpu": edge_platform.cpu_features().model, "cores": os.cpu_count()},
        "replay": {"size": "1200x1600", "fps": args.fps},
        "frames": args.frames,
        "rounds": [
            {k: v for k, v in r.items() if k != "with_serve"}
            | {"with_serve": {k: v for k, v in r["with_serve"].items() if k != "delays_ms"}}
            for r in rounds
        ],
        "median_fps_ratio": statistics.median(r["ratio"] for r in rounds),
        "serve_cpu_ms_per_frame": statistics.median(
            r["with_serve"]["serve_cpu_ms_per_frame"] for r in rounds
        ),
        "serve_peak_rss_mib": max(r["with_serve"]["serve_peak_rss_mib"] for r in rounds),
        "event_delay_ms": {
            "n": len(delays),
            "p50": nearest_rank(delays, 50) if delays else None,
            "p99": nearest_rank(delays, 99) if delays else None,
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
