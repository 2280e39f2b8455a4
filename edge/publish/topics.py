"""What `da3-edge publish` sends where (docs/reference/mqtt.md): topics and payloads.

Topics live under ``da3edge/<device id>/``; Home Assistant's device-based discovery
goes to ``homeassistant/device/<object id>/config`` (the shape in Home Assistant's MQTT
docs, "Device discovery payload": one retained message with ``dev``, ``o`` and ``cmps``,
each component with a platform ``p`` and a ``unique_id``). Relative depth is never
offered as a distance: no entity carries depth at all, only health and timing.
"""

from __future__ import annotations

import hashlib
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.version import version

ROOT = "da3edge"
HA_PREFIX = "homeassistant"
HA_STATUS = f"{HA_PREFIX}/status"


def default_device_id(machine_id: Path = Path("/etc/machine-id")) -> str:
    """An id for this machine made for da3-edge: a hash of the machine id (or, without
    one, of the host name) with an app-specific prefix, so it can be published without
    publishing the machine id (machine-id(5) asks for exactly that)."""
    try:
        source = machine_id.read_text().strip()
    except OSError:
        source = ""
    source = source or socket.gethostname()
    return hashlib.sha256(f"da3-edge:mqtt:{source}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Topics:
    device_id: str

    @property
    def base(self) -> str:
        return f"{ROOT}/{self.device_id}"

    @property
    def availability(self) -> str:
        return f"{self.base}/availability"

    @property
    def state(self) -> str:
        return f"{self.base}/state"

    @property
    def stats(self) -> str:
        return f"{self.base}/stats"

    @property
    def preview(self) -> str:
        return f"{self.base}/preview"

    @property
    def scene(self) -> str:
        return f"{self.base}/scene"

    @property
    def discovery(self) -> str:
        return f"{HA_PREFIX}/device/da3edge_{self.device_id}/config"


def state_payload(record: dict[str, Any]) -> dict[str, Any]:
    """One written frame, small: numbers, times, the depth range and its kind."""
    depth = record.get("depth") or {}
    return {
        "store_seq": record.get("store_seq"),
        "camera_seq": record.get("camera_seq"),
        "t_capture": record.get("t_capture"),
        "t_capture_iso": record.get("t_capture_iso"),
        "t_written": record.get("t_written"),
        "latency_ms": record.get("latency_ms"),
        "depth_min": depth.get("min"),
        "depth_max": depth.get("max"),
        "depth_kind": "relative (larger = farther, arbitrary scale; not metres)",
        "random_init": bool(record.get("random_init")),
        "precision": record.get("precision"),
    }


def stats_payload(
    status: dict[str, Any] | None, newest: dict[str, Any] | None, publisher: dict[str, int]
) -> dict[str, Any]:
    """status.json's figures, flattened for sensors, plus the publisher's own counts."""
    status = status or {}
    counters = status.get("counters") or {}
    window = status.get("window") or {}
    latency = window.get("latency_ms") or {}
    system = status.get("system") or {}
    throttled = system.get("throttled")
    written = newest.get("t_written") if newest else None
    return {
        "state": status.get("state", "not running"),
        "fps": window.get("fps"),
        "latency_p50_ms": latency.get("p50"),
        "latency_p99_ms": latency.get("p99"),
        "captured": counters.get("captured"),
        "written": counters.get("written"),
        "dropped": (counters.get("dropped_stale") or 0) + (counters.get("dropped_write") or 0)
        if counters
        else None,
        "failed": (counters.get("failed_inference") or 0) + (counters.get("failed_write") or 0)
        if counters
        else None,
        "camera": (status.get("camera") or {}).get("state"),
        "store": (status.get("store") or {}).get("state"),
        "temperature_c": system.get("temperature_c"),
        "thermal_pace_pct": _percent((status.get("thermal") or {}).get("duty")),
        "throttled": _now_throttled(throttled),
        "last_frame": _iso(written) if isinstance(written, (int, float)) else None,
        "last_frame_age_s": round(time.time() - written, 1)
        if isinstance(written, (int, float))
        else None,
        "random_init": bool((status.get("model") or {}).get("random_init")),
        "publisher": publisher,
    }


def _percent(share: Any) -> int | None:
    """A share (0..1) as a whole percentage; None when it is not a number."""
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        return None
    return round(share * 100)


def _now_throttled(flags: Any) -> str | None:
    if not isinstance(flags, dict):
        return None
    now = [k for k, v in flags.items() if v is True and not k.endswith("_occurred")]
    return "ON" if now else "OFF"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# Home Assistant's health sensors: key, name, the stats field's template, and the rest.
MEASURED = {"state_class": "measurement"}
DIAGNOSTIC = {"entity_category": "diagnostic"}
# Kept unformatted: a table, a sensor to a row (its extras on the row's second line).
SENSORS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("fps", "Frames per second", "{{ value_json.fps }}",
     {"unit_of_measurement": "frames/s", **MEASURED, "suggested_display_precision": 2}),
    ("latency", "Latency p50", "{{ value_json.latency_p50_ms }}",
     {"device_class": "duration", "unit_of_measurement": "ms", **MEASURED}),
    ("last_frame", "Last frame", "{{ value_json.last_frame }}", {"device_class": "timestamp"}),
    ("temperature", "SoC temperature", "{{ value_json.temperature_c }}",
     {"device_class": "temperature", "unit_of_measurement": "°C", **MEASURED, **DIAGNOSTIC}),
    ("written", "Frames written", "{{ value_json.written }}",
     {"state_class": "total_increasing", **DIAGNOSTIC}),
    ("thermal_pace", "Pace kept for heat", "{{ value_json.thermal_pace_pct }}",
     {"unit_of_measurement": "%", **MEASURED, **DIAGNOSTIC}),
)  # fmt: skip


def discovery(topics: Topics, *, preview: str) -> dict[str, Any]:
    """Home Assistant device-based discovery for this publisher: health sensors, and
    the depth preview and the scene as image entities when they are published (preview:
    config.PREVIEWS). Shared: the stats topic as the state topic, availability on our
    availability topic."""
    uid = f"da3edge_{topics.device_id}"
    cmps: dict[str, dict[str, Any]] = {
        key: {
            "p": "sensor",
            "name": name,
            "unique_id": f"{uid}_{key}",
            "value_template": template,
            **extra,
        }
        for key, name, template, extra in SENSORS
    }
    cmps["throttled"] = {
        "p": "binary_sensor",
        "name": "Throttled",
        "unique_id": f"{uid}_throttled",
        "device_class": "problem",
        "value_template": "{{ value_json.throttled }}",
        "payload_on": "ON",
        "payload_off": "OFF",
        **DIAGNOSTIC,
    }
    if preview in ("depth", "both"):
        cmps["preview"] = {
            "p": "image",
            "name": "Relative depth preview",
            "unique_id": f"{uid}_preview",
            "image_topic": topics.preview,
            "content_type": "image/png",
        }
    if preview in ("rgb", "both"):
        cmps["scene"] = {
            "p": "image",
            "name": "Scene",
            "unique_id": f"{uid}_scene",
            "image_topic": topics.scene,
            "content_type": "image/jpeg",
        }
    return {
        "dev": {
            "ids": [uid],
            "name": f"da3-edge {topics.device_id}",
            "mf": "da3-edge",
            "mdl": "Depth Anything 3 small (relative depth)",
            "sw": version(),
        },
        "o": {"name": "da3-edge", "sw": version()},
        "cmps": cmps,
        "state_topic": topics.stats,
        "availability_topic": topics.availability,
        "payload_available": "online",
        "payload_not_available": "offline",
        "qos": 1,
    }
