"""``/metrics``: Prometheus text, prefix ``da3edge_``, base units (docs/reference/serve.md).

Counters and states are the daemon's own, read from ``status.json`` at each scrape
(they start again from 0 when the daemon restarts, as Prometheus counters may);
the two latency histograms are serve's, observed from each frame record it sees
(since serve started). Nothing is computed that the files do not say.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from edge.serve.hub import Hub, Newest
from edge.version import version

P = "da3edge_"
# Seconds: a Pi 5 core is ~0.16-0.4 s, the end-to-end latency up to a few seconds.
BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class Metrics:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.registry = CollectorRegistry(auto_describe=False)
        self.inference = Histogram(
            P + "inference_seconds",
            "Time in the core (LiteRT) per frame, as the daemon "
            "recorded it; frames seen by serve since it started",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.latency = Histogram(
            P + "end_to_end_latency_seconds",
            "Capture to written per frame; frames seen by serve since it started",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_FromStatus(hub))
        hub.observers.append(self.observe)

    def observe(self, newest: Newest) -> None:
        record = newest.record
        latency = record.get("latency_ms")
        core = (record.get("timings_ms") or {}).get("core")
        if isinstance(latency, (int, float)):
            self.latency.observe(latency / 1000)
        if isinstance(core, (int, float)):
            self.inference.observe(core / 1000)


class _FromStatus(Collector):
    """Everything else, read when scraped."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Any]:
        status = self.hub.status() or {}
        counters = status.get("counters") or {}
        running = status.get("state") == "running"
        yield _gauge("daemon_up", "1 while the daemon's status.json says running", running)

        def counter(name: str, doc: str, key: str) -> CounterMetricFamily:
            return CounterMetricFamily(P + name, doc, value=float(counters.get(key, 0) or 0))

        yield counter("frames_captured", "New frames from the camera", "captured")
        yield counter("frames_written", "Frames published in the store", "written")
        dropped = CounterMetricFamily(
            P + "frames_dropped", "Frames dropped for freshness, by where", labels=["reason"]
        )
        dropped.add_metric(["stale"], float(counters.get("dropped_stale", 0) or 0))
        dropped.add_metric(["write_behind"], float(counters.get("dropped_write", 0) or 0))
        yield dropped
        failed = CounterMetricFamily(P + "frames_failed", "Frames lost to errors", labels=["stage"])
        for stage, n in (counters.get("failed_inference_by_stage") or {}).items():
            failed.add_metric([str(stage)], float(n or 0))
        failed.add_metric(["write"], float(counters.get("failed_write", 0) or 0))
        yield failed
        yield counter("camera_reopens", "Camera reopened after a fault", "reopens")
        yield counter("camera_errors", "Camera errors", "camera_errors")
        yield _gauge("frames_in_flight", "Frames on their way", counters.get("in_flight", 0))
        window = status.get("window") or {}
        yield _gauge("frames_per_second", "Written frames/s over the window", window.get("fps"))
        newest = self.hub.read_newest()
        written = newest.record.get("t_written") if newest is not None else None
        yield _gauge(
            "last_frame_timestamp_seconds", "When the newest frame was written (Unix)", written
        )
        store_bytes, free = _store_bytes(self.hub)
        yield _gauge("store_bytes", "Bytes of the frames in the store", store_bytes)
        yield _gauge("store_free_bytes", "Free bytes where the store is", free)
        yield from _heat(status)
        model = status.get("model") or {}
        info = InfoMetricFamily(P + "build", "Version, model and how it runs")
        labels = {
            "version": version(),
            "model": str(model.get("model", "")),
            "precision": str(model.get("precision", "")),
            "stages": str(model.get("stages", "")),
            "random_init": str(bool(model.get("random_init"))).lower(),
        }
        info.add_metric([], labels)
        yield info


def _heat(status: dict[str, Any]) -> Iterator[Any]:
    """The SoC's temperature, the daemon's thermal control and the firmware's flags."""
    system = status.get("system") or {}
    celsius = system.get("temperature_c")
    yield _gauge("cpu_temperature_celsius", "SoC temperature (absent off a Pi)", celsius)
    heat = status.get("thermal") or {}
    duty = "Share of its unspaced frame rate the daemon runs at (1: not spaced for heat)"
    yield _gauge("thermal_duty", duty, heat.get("duty"))
    spacing = "Least time between two core runs the thermal control imposes (0: none)"
    yield _gauge("thermal_interval_seconds", spacing, heat.get("interval_s"))
    throttled = system.get("throttled")
    if isinstance(throttled, dict):
        flags = GaugeMetricFamily(
            P + "throttled", "The Pi firmware's throttling flags (1 = set)", labels=["flag"]
        )
        for flag, on in throttled.items():
            if isinstance(on, bool):
                flags.add_metric([flag], float(on))
        yield flags


def _gauge(name: str, doc: str, value: Any) -> GaugeMetricFamily:
    family = GaugeMetricFamily(P + name, doc)
    if isinstance(value, (bool, int, float)):
        family.add_metric([], float(value))
    return family


def _store_bytes(hub: Hub) -> tuple[float | None, float | None]:
    frames = hub.root / "frames"
    total = 0
    try:
        for entry in os.scandir(frames):
            if entry.is_dir(follow_symlinks=False) and entry.name.isdigit():
                try:
                    total += sum(f.stat().st_size for f in os.scandir(entry.path))
                except FileNotFoundError:
                    continue  # pruned meanwhile
        vfs = os.statvfs(hub.root)
    except OSError:
        return None, None
    return float(total), float(vfs.f_bavail * vfs.f_frsize)


__all__ = ["Metrics"]
