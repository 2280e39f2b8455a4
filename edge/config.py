"""The configuration of the daemon and its companions: one TOML file, validated, every
error naming its key.

The shipped default (``edge/data/da3-edge.toml``) documents every key and the flag
that overrides it. ``load`` reads a file over those defaults; an unknown key, a wrong
type or a bad value raises ``ConfigError`` naming ``section.key`` and, when it can be
found, the line.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from edge.errors import ConfigError
from edge.fov import HFOV_RANGE
from edge.models import PRECISIONS, check_size
from edge.outputs import DEFAULT_FORMATS, FORMATS
from edge.stages import CHOICES

STAGES = CHOICES
STORE_SIZES = ("core", "camera")  # store.size
AF_MODES = ("continuous", "auto", "manual", "off")  # camera.af; "" leaves it to the camera
# What publish sends of each frame as an image: nothing, the depth preview (PNG), the
# scene (the "rgb" output, JPEG), or both on their own topics.
PREVIEWS = ("off", "depth", "rgb", "both")


def setting(
    default: Any,
    doc: str = "",
    *,
    flag: str = "",
    choices: tuple[str, ...] = (),
    empty: str = "",
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    zero: str = "",
    unit: str = "",
    metavar: str = "",
    check: Callable[[Any], object] | None = None,
) -> Any:
    """A config key, declared once: its default, what it means (``doc``: the shipped
    file's comment and the reference's line; "" when the comment of the key above
    covers it), the flag that overrides it, and what values it takes: one of
    ``choices`` ("" too when ``empty`` says what "" means), or a number from ``low``
    (or more than ``above``) to ``high`` in ``unit``, 0 also allowed when ``zero`` says
    what 0 means. ``validate`` checks all of these; rules between keys it checks by hand.
    ``check`` is a rule of its own (ValueError saying why), for values other than 0.
    A ``flag`` (with ``metavar``, its value's name in --help) is all a command needs:
    ``add_flags`` makes the argument, ``flagged`` reads it back as an ``Overrides``."""
    meta: dict[str, Any] = {"doc": doc, "flag": flag, "choices": choices, "empty": empty}
    meta["metavar"], meta["check"] = metavar, check
    meta |= {"low": low, "above": above, "high": high, "zero": zero, "unit": unit}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class CameraConfig:
    source: str = setting(
        "picamera2",
        'Where frames come from: "picamera2[:INDEX]" (the Pi camera; a Pi 5\'s second '
        'connector is picamera2:1), "opencv[:INDEX]" (USB/UVC), "replay:PATH[@FPS][:once]" '
        '(a directory of images or a video), "fake[:SCRIPT]".',
        flag="--source",
        metavar="SPEC",
    )
    width: int = setting(
        1280,
        "Capture size for picamera2 and opencv; replay and fake ignore it (fake uses it as is).",
        low=16,
        high=16384,
        unit="pixels",
    )
    height: int = setting(720, low=16, high=16384, unit="pixels")
    timeout: float = setting(
        2.0,
        "Seconds to wait for one frame before calling it a timeout.",
        above=0,
        high=600,
        unit="seconds",
    )
    stall_after: float = setting(
        10.0,
        "Seconds without a *new* frame (reads succeed but repeat the same one) before the "
        "camera counts as stalled and is reopened.",
        above=0,
        high=3600,
        unit="seconds",
    )
    backoff_min: float = setting(
        0.5,
        "Reconnect backoff after a camera error: starts at backoff_min seconds, doubles on "
        "each failure, never exceeds backoff_max.",
        above=0,
        high=3600,
        unit="seconds",
    )
    backoff_max: float = setting(30.0, above=0, high=3600, unit="seconds")
    hflip: bool = setting(
        False,
        "The camera's controls, picamera2 only (others say once that they ignore them); "
        "what the camera did of them is read back into status.json (camera.controls) and "
        "doctor. Mirror the picture (a camera mounted upside down: both).",
    )
    vflip: bool = setting(False)
    af: str = setting(
        "",
        'Focus (a Camera Module 3): "continuous", "auto" (once, at start), "manual" (at '
        'lens_position), "off" (fixed at infinity); "" leaves it to the camera.',
        choices=AF_MODES,
        empty="the camera's own",
    )
    lens_position: float = setting(
        -1.0,
        'With af = "manual": the lens position in dioptres, 1 / metres to the subject (0 is '
        "infinity, 2 is 50 cm); -1: not set.",
    )
    fps: float = setting(
        0.0,
        "A cap on the sensor's frame rate (frames a second; 0: the camera's own): a sensor "
        "running faster than inference only makes frames that are dropped.",
        low=0.1,
        high=240,
        zero="the camera's own",
        unit="frames a second",
    )

    hfov: float = setting(
        0.0,
        "The camera's horizontal field of view in degrees, for point clouds (serve's "
        "/latest.ply), recorded in each frame's JSON; 0: the camera module's published one "
        "(Raspberry Pi Camera Module 1, 2, 3 and 3 Wide, through the sensor crop in use). "
        "An HQ or Global Shutter camera's depends on its lens: give it here.",
        low=HFOV_RANGE[0],
        high=HFOV_RANGE[1],
        zero="the camera module's published one",
        unit="degrees",
    )


@dataclass(frozen=True)
class DepthConfig:
    steady: bool = setting(
        True,
        "Steady depth for live views: each frame's depth brought to the scale of the "
        "frames before (a robust median on its confident pixels) and the preview's colour "
        "range smoothed, starting again on a scene change; the npz keeps the frame's own "
        "depth, frame.json the scale (steady). Off: each preview on its own range.",
    )


@dataclass(frozen=True)
class ModelConfig:
    dir: str = setting(
        "",
        "Model directory; empty: $DA3_EDGE_MODELS, else ~/.local/share/da3-edge/models.",
        flag="--models",
        metavar="DIR",
    )
    precision: str = setting(
        "fp16",
        'Core precision: "fp16", "fp32" or "int8".',
        flag="--precision",
        choices=PRECISIONS,
    )
    size: int = setting(
        0,
        "The cores' long side, a multiple of 14: the models made at that size "
        "(`da3-edge models build --size N`). 504 is DA3's own; smaller is faster "
        "(docs/performance.md). 0 = 504 when exported, else the only size in the model "
        "directory.",
        flag="--size",
        zero="504 when exported, else the only size",
        check=check_size,
    )
    stages: str = setting(
        "auto",
        'Pre/post-processing backend: "auto" (ExecuTorch where da3-edge\'s runner and the '
        "model's programs are installed, else numpy; the log says which and why), "
        '"numpy" or "executorch".',
        flag="--stages",
        choices=STAGES,
    )
    threads: int = setting(
        0,
        "CPU threads for the core, per worker; 0 = all cores (at most 4), shared among the "
        "workers.",
        flag="--threads",
        low=0,
        high=256,
        zero="auto",
        unit="threads",
    )
    weight_cache: str = setting(
        "auto",
        "XNNPACK's packed-weight cache: \"auto\" (under the service's CacheDirectory, "
        "/var/cache/da3-edge/daemon/xnnpack, else ~/.cache/da3-edge/xnnpack), a directory, "
        'or "off" (or empty). Packed once, then mapped: faster starts and a lower peak. Not '
        "used when fp16 arithmetic is on (a Pi 5 with an fp16 model): LiteRT 2.3.0 crashes "
        "on the two together.",
    )
    workers: int = setting(
        1,
        "Core worker processes, each computing a different frame (1 to 8). 1 gives the "
        "lowest latency per frame. More trade latency for frames/s and hold one more copy "
        "of the model each. Measured on a 2-core x86_64 in three runs: 2 workers x 1 thread "
        "0.82-0.90 x the core's rate at ~550 ms latency, 1 x 2 threads 0.82-0.86 x at "
        "~330 ms.",
        low=1,
        high=8,
    )


@dataclass(frozen=True)
class StoreConfig:
    dir: str = setting(
        "",
        "Frame store directory; empty: $DA3_EDGE_STORE, else $RUNTIME_DIRECTORY (systemd's "
        "RuntimeDirectory, RAM-backed), else /run/da3-edge, else $XDG_RUNTIME_DIR/da3-edge.",
        flag="--store",
        metavar="DIR",
    )
    keep_frames: int = setting(
        100,
        "The ring: newest frames kept, by count and by total bytes (whichever bites first). "
        "The bytes are bounded by half the filesystem's size too: /run is a tmpfs sized "
        "from RAM (100-200 MB on a 1 GB Pi 5), and its pages count against the unit's "
        "MemoryMax. A 378x504 frame with the default formats is ~2 MB.",
        low=1,
        high=100_000,
        unit="frames",
    )
    max_bytes: int = setting(64 << 20, low=1_000_000, high=1 << 36, unit="bytes: 64 GiB")
    formats: tuple[str, ...] = setting(
        DEFAULT_FORMATS,
        'What each frame directory holds: any of "png", "npz", "preview", "json" ("json" is '
        "always written: it is the frame's record) and \"rgb\" (the camera's picture as "
        "JPEG, at the outputs' size: serve's scene views, publish's scene image).",
        choices=FORMATS,
    )
    size: str = setting(
        "core",
        """The size of every output: "core", the network's own resolution (378x504 for a """
        """4:3 camera at model.size 504; DA3 computes nothing finer), or "camera", """
        "upsampled to the camera's picture (1200x1600: ~10x the pixels to resize and "
        "write, no more detail). frame.json gives both (output_size, source_size).",
        choices=STORE_SIZES,
    )
    preview_max_side: int = setting(
        640,
        "The preview's longest side in pixels (box-averaged down; 0 = the outputs' full "
        "size). Depth PNG and npz are always at store.size. A small preview halves the "
        "writer's work.",
        low=0,
        high=16384,
        zero="full size",
        unit="pixels",
    )
    persist_dir: str = setting(
        "",
        "Optional copies to persistent storage (an SD card: keep it rare). Empty = off. "
        "Empty with systemd: nothing is persisted, even though StateDirectory exists.",
    )
    persist_every: float = setting(
        60.0,
        "At most one persisted frame every persist_every seconds, newest persist_keep kept.",
        above=0,
        high=604_800,
        unit="seconds: a week",
    )
    persist_keep: int = setting(100, low=1, high=100_000, unit="frames")


@dataclass(frozen=True)
class DaemonConfig:
    stuck_after: float = setting(
        20.0,
        "A thread that makes no progress for this many seconds is stuck: the daemon stops "
        "pinging systemd's watchdog (so systemd restarts it). Waiting for a camera in "
        "backoff is progress.",
        high=3600,
        unit="seconds",
    )
    status_every: float = setting(
        5.0,
        "Seconds between STATUS updates (and log lines with the same numbers).",
        above=0,
        high=3600,
        unit="seconds",
    )
    thermal_target: float = setting(
        75.0,
        "The SoC temperature the daemon keeps under, in degrees Celsius: above it the "
        "core's runs are spaced out, smoothly, until the temperature holds there; below "
        "it frames come at the camera's pace (a Pi 5's firmware lowers its clock from "
        "80). Read from $DA3_EDGE_THERMAL_PATH, else the CPU's thermal zone.",
        low=40,
        high=100,
        zero="off",
        unit="degrees Celsius",
    )


@dataclass(frozen=True)
class ServeConfig:
    host: str = setting(
        "127.0.0.1",
        "The address to listen on. Loopback by default; any other needs credentials "
        "(token_file or basic_auth_file).",
        flag="--host",
        metavar="ADDR",
    )
    port: int = setting(
        8000,
        "The port to listen on; 0: any free one.",
        flag="--port",
        low=0,
        high=65535,
        zero="any free port",
    )
    token_file: str = setting(
        "",
        "Credentials, each a file readable only by its owner, the user serve runs as (one "
        "line): a bearer token (`Authorization: Bearer ...`), and/or `user:password` for "
        "HTTP basic auth (what a browser asks for). Empty: none (loopback only). When set, "
        "every request needs one of them, on any address.",
    )
    basic_auth_file: str = setting("")
    max_age: float = setting(
        10.0,
        "/healthz answers 503 once the newest frame is older than this many seconds.",
        above=0,
        high=86_400,
        unit="seconds",
    )
    clients: int = setting(
        8,
        "Clients of /events and /stream.mjpg at once; more are refused with 503.",
        low=1,
        high=256,
    )
    hosts: tuple[str, ...] = setting(
        (),
        "On a loopback address, only requests that name this machine (localhost, "
        "127.0.0.1, [::1]) are answered, others get 421: a web page cannot reach the store "
        "through a browser here by making its own name point at 127.0.0.1. More names to "
        'accept (an SSH tunnel\'s, say): hosts = ["depthcam.local"].',
    )
    connections: int = setting(
        128,
        "Bounds against clients that hold on: connections at once (at the bound, the one "
        "that has waited longest for its request gives way); seconds to send a request's "
        "headers; seconds a client may leave the send buffer full before it is dropped; "
        "/latest.npz, .png and .preview.png downloads at once (more: 503).",
        high=4096,
    )
    header_timeout: float = setting(10.0, above=0, high=600, unit="seconds")
    send_timeout: float = setting(10.0, above=0, high=600, unit="seconds")
    downloads: int = setting(8, low=1, high=256)


@dataclass(frozen=True)
class MqttConfig:
    enabled: bool = setting(False)
    host: str = setting("127.0.0.1", "The broker's address and port.")
    port: int = setting(1883, low=1, high=65535)
    username: str = setting(
        "",
        "Credentials: a user name, and a file holding the password (one line), readable "
        "only by its owner, the user publish runs as. Empty: anonymous.",
    )
    password_file: str = setting("")
    tls: bool = setting(
        False,
        "TLS: on with the system's CAs (tls = true), or with the CA that signed the "
        "broker's certificate (tls_ca, a PEM file; setting it turns TLS on), and optionally "
        "a client certificate and key (the key a secret file, as password_file).",
    )
    tls_ca: str = setting("")
    tls_cert: str = setting("")
    tls_key: str = setting("")
    allow_plaintext_password: bool = setting(
        False,
        "A password for a broker that is not on this machine goes only over TLS; true "
        "sends it in clear anyway (anyone on the way can read it).",
    )
    device_id: str = setting(
        "",
        "Topics are da3edge/<device_id>/...; empty: a hash of this machine's id made for "
        "da3-edge (never the machine id itself).",
    )
    state_max_rate: float = setting(
        2.0,
        "At most this many `state` messages a second (one per written frame); 0 = every frame.",
        low=0,
        high=1000,
        zero="every frame",
        unit="per second",
    )
    preview: str = setting(
        "off",
        'Publish each frame as an image too, at most preview_max_rate a second (<= 1): "off", '
        '"depth" (the preview, PNG, on .../preview), "rgb" (the scene, JPEG, on .../scene: '
        'needs "rgb" in store.formats) or "both". (true and false, from before, mean '
        '"depth" and "off".)',
        choices=PREVIEWS,
    )
    preview_max_rate: float = setting(1.0, above=0, high=1, unit="per second")
    queue_limit: int = setting(
        100,
        "Messages held while the broker is away or slow; beyond this the oldest is dropped "
        "(and counted in `stats`).",
        low=1,
        high=100_000,
    )

    @property
    def tls_on(self) -> bool:
        """TLS to the broker: asked for, or implied by a CA file or a client certificate."""
        return self.tls or bool(self.tls_ca) or bool(self.tls_cert)


# Booleans a key once took, and the values they stand for now (a config written then
# still loads: the installer checks the one on a Pi before anything else).
LEGACY: dict[tuple[str, str], dict[bool, str]] = {
    ("mqtt", "preview"): {True: "depth", False: "off"}
}
# The shipped file's opening comment (edge/data/da3-edge.toml, made from these
# declarations by scripts/support/config_docs.py), and the sections' own comments.
FILE_DOC = (
    "da3-edge configuration: the camera daemon (`da3-edge run --config FILE`) and its "
    "companions (`da3-edge serve`, `da3-edge publish`, `--config FILE`). Every key is "
    "optional; the value shown is the default. A command-line flag, where one exists, "
    "overrides the key (named beside it). `da3-edge run --check-config` validates a file "
    "and names the bad key and its line; docs/reference/config.md lists every key."
)
# The sections' own comments in the shipped file, before their first key's.
SECTION_DOCS = {
    "depth": "What the daemon does with each frame's depth before it writes it.",
    "serve": "`da3-edge serve`: the live page, the latest frame, events, health and metrics.",
    "mqtt": "`da3-edge publish`: frames and health to an MQTT broker, with Home Assistant "
    "discovery. Off until enabled here (and its unit enabled: da3-edge-publish.service).",
}


@dataclass(frozen=True)
class Config:
    camera: CameraConfig = field(default_factory=CameraConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    depth: DepthConfig = field(default_factory=DepthConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    path: str | None = None
    serve: ServeConfig = field(default_factory=ServeConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)


SECTIONS: dict[str, type] = {
    "camera": CameraConfig,
    "model": ModelConfig,
    "depth": DepthConfig,
    "store": StoreConfig,
    "daemon": DaemonConfig,
    "serve": ServeConfig,
    "mqtt": MqttConfig,
}
# What `da3-edge run` checks; a companion (serve) checks its own section and the store.
DAEMON_PARTS = ("camera", "model", "depth", "store", "daemon")


def flag_help(key: str) -> str:
    """The --help of a flag that overrides config ``key`` (section.key): the first
    sentence of the key's doc, and the key."""
    section, name = key.split(".")
    doc = next(f for f in fields(SECTIONS[section]) if f.name == name).metadata["doc"]
    return f"{doc.split('. ')[0].rstrip('.')} (config {key})"


def default_text() -> str:
    return resources.files("edge").joinpath("data/da3-edge.toml").read_text()


def _line_of(text: str, section: str, key: str | None) -> int | None:
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([A-Za-z0-9_.-]+)\s*\]", stripped)
        if header:
            current = header.group(1)
            if key is None and current == section:
                return number
            continue
        if key is not None and current == section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return number
    return None


def where(path: str | None, text: str, section: str, key: str | None = None) -> str:
    """``FILE:LINE: section.key``, the place an error names (the line when found)."""
    name = f"{section}.{key}" if key else section
    line = _line_of(text, section, key) if text else None
    place = f"{path or 'config'}" + (f":{line}" if line else "")
    return f"{place}: {name}"


def _coerce(value: Any, default: Any, where: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, not {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        if not math.isfinite(value):  # TOML has nan and inf; every range check passes nan
            raise ConfigError(f"{where} must be a finite number, not {value!r}")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, not {value!r}")
        return tuple(value)
    raise ConfigError(f"{where}: unsupported value {value!r}")  # pragma: no cover


def parse(text: str, path: str | None = None, parts: Collection[str] = DAEMON_PARTS) -> Config:
    """A Config from TOML text over the defaults; ConfigError on anything wrong (every
    section's keys and types; the values of the ``parts`` the caller uses)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path or 'config'}: not valid TOML ({exc})") from None
    sections: dict[str, Any] = {}
    for name, value in data.items():
        if name not in SECTIONS:
            raise ConfigError(
                f"{where(path, text, name)}: unknown section (use {', '.join(SECTIONS)})"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{where(path, text, name)}: must be a [{name}] table")
        cls = SECTIONS[name]
        defaults = cls()
        values = {}
        for key, raw in value.items():
            if key not in defaults.__dataclass_fields__:
                known = ", ".join(defaults.__dataclass_fields__)
                raise ConfigError(f"{where(path, text, name, key)}: unknown key (known: {known})")
            raw = LEGACY.get((name, key), {}).get(raw, raw) if isinstance(raw, bool) else raw
            values[key] = _coerce(raw, getattr(defaults, key), where(path, text, name, key))
        sections[name] = cls(**values)
    config = Config(**sections, path=path)
    validate(config, text, parts)
    return config


def validate(config: Config, text: str = "", parts: Collection[str] = DAEMON_PARTS) -> None:
    """Value checks of the sections in ``parts``, each naming its key: what each key's
    declaration says (``setting``), then the rules between keys."""
    path = config.path

    def fail(section: str, key: str, message: str) -> None:
        raise ConfigError(f"{where(path, text, section, key)} {message}")

    for section in parts:
        values = getattr(config, section)
        for f in fields(values):
            why = refusal(getattr(values, f.name), f.metadata)
            if why:
                fail(section, f.name, why)
    if "serve" in parts:
        _validate_serve(config.serve, fail)
    if "mqtt" in parts:
        _validate_mqtt(config.mqtt, fail)
    if "camera" in parts:
        _validate_daemon(config, fail)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def allowed(meta: Mapping[str, Any]) -> str:
    """What a key takes, as its refusal says it ("" when its declaration sets nothing)."""
    choices, empty = meta.get("choices", ()), meta.get("empty", "")
    if choices:
        return ", ".join(choices) + (f' (or "": {empty})' if empty else "")
    low, above, high = meta.get("low"), meta.get("above"), meta.get("high")
    zero, unit = meta.get("zero", ""), meta.get("unit", "")
    if above is not None:
        text = "positive" if above == 0 else f"more than {_number(above)}"
        text += f" and at most {_number(high)}" if high is not None else ""
    elif low is not None and high is not None:
        text = f"{_number(low)} to {_number(high)}"
    elif low is not None:
        text = f"at least {_number(low)}" if low else "0 or more"
    elif high is not None:
        text = f"at most {_number(high)}"
    else:
        return ""
    if zero:
        text = f"0 ({zero}) " + text[2:] if text.startswith("0 ") else f"0 ({zero}) or {text}"
    return text + (f" ({unit})" if unit else "")


def refusal(value: Any, meta: Mapping[str, Any]) -> str:
    """Why ``value`` is not one its key takes ("" when it is): after "must be", or
    "has" for a list."""
    choices, empty = meta.get("choices", ()), meta.get("empty", "")
    if choices:
        given = value if isinstance(value, tuple) else (value,)
        bad = [v for v in given if v not in choices and not (v == "" and empty)]
        if not bad:
            return ""
        if isinstance(value, tuple):
            return f"has unknown value(s) {bad} (use {allowed(meta)})"
        return f"must be one of {allowed(meta)}, not {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    low, above, high = meta.get("low"), meta.get("above"), meta.get("high")
    if value == 0 and meta.get("zero"):
        return ""
    if (
        (low is not None and value < low)
        or (above is not None and value <= above)
        or (high is not None and value > high)
    ):
        return f"must be {allowed(meta)}"
    return ""


Fail = Callable[[str, str, str], None]


def _validate_daemon(config: Config, fail: Fail) -> None:
    """The daemon's rules between keys, and those no declaration can say."""
    cam, model, daemon = config.camera, config.model, config.daemon
    from edge import sources
    from edge.errors import UsageError

    try:
        sources.parse(cam.source)
    except UsageError as exc:
        fail("camera", "source", f"is not a usable source: {exc}")
    if cam.backoff_max < cam.backoff_min:
        fail("camera", "backoff_max", "must be at least backoff_min")
    if cam.lens_position >= 0 and cam.af in ("continuous", "auto"):
        fail("camera", "lens_position", 'needs af = "manual" (autofocus moves the lens)')
    if cam.lens_position > 32:
        fail("camera", "lens_position", "must be in dioptres (1 / metres): 0 (infinity) to 32")
    if cam.fps and cam.timeout < 2 / cam.fps:  # picamera2 waits `timeout` for each frame
        fail(
            "camera",
            "fps",
            f"{cam.fps:g} gives a frame every {1 / cam.fps:g} s: camera.timeout "
            f"({cam.timeout:g} s) must be at least two frame intervals ({2 / cam.fps:g} s)",
        )
    if model.size:
        try:
            check_size(model.size)
        except ValueError as exc:
            fail("model", "size", f"must be 0 (504 when exported, else the only size): {exc}")
    if daemon.stuck_after < 2 * cam.timeout:
        fail(
            "daemon", "stuck_after", f"must be at least twice camera.timeout ({2 * cam.timeout:g})"
        )


def _validate_serve(serve: ServeConfig, fail: Fail) -> None:
    if not serve.host:
        fail("serve", "host", "must be an address, e.g. 127.0.0.1")
    if not serve.clients < serve.connections:
        fail("serve", "connections", "must be more than serve.clients and at most 4096")
    if not is_loopback(serve.host) and not (serve.token_file or serve.basic_auth_file):
        fail(
            "serve",
            "host",
            f"is {serve.host}, beyond this machine: it needs serve.basic_auth_file or "
            "serve.token_file (a file only serve's user can read), or use 127.0.0.1",
        )
    bad = [h for h in serve.hosts if not re.fullmatch(r"[A-Za-z0-9.-]{1,253}", h)]
    if bad:
        fail("serve", "hosts", f"has names that are not host names: {bad}")


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (a name could resolve to anything)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _validate_mqtt(mqtt: MqttConfig, fail: Fail) -> None:
    if not mqtt.host:
        fail("mqtt", "host", "must be the broker's address")
    if mqtt.password_file and not mqtt.username:
        fail("mqtt", "password_file", "needs mqtt.username")
    if bool(mqtt.tls_cert) != bool(mqtt.tls_key):
        fail(
            "mqtt", "tls_cert" if mqtt.tls_key else "tls_key", "goes with tls_cert and tls_key both"
        )
    if (
        mqtt.password_file
        and not mqtt.tls_on
        and not is_loopback(mqtt.host)
        and not mqtt.allow_plaintext_password
    ):
        fail(
            "mqtt",
            "password_file",
            f"would go to {mqtt.host} in clear: set mqtt.tls = true (the system's CAs) or "
            "mqtt.tls_ca, or mqtt.allow_plaintext_password = true to send it anyway",
        )
    if mqtt.device_id and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", mqtt.device_id):
        fail("mqtt", "device_id", "must be 1-64 of A-Z a-z 0-9 _ - (it is part of topics)")


def load(path: str | os.PathLike[str] | None, parts: Collection[str] = DAEMON_PARTS) -> Config:
    """The defaults, or a file over them."""
    if path is None:
        return Config()
    return parse(read_text(path), str(path), parts)


def read_text(path: str | os.PathLike[str]) -> str:
    """A config file's text; ConfigError (one line) when it cannot be read or is not
    UTF-8."""
    p = Path(path)
    try:
        return p.read_bytes().decode()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the config ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # a comment saved in Latin-1 by an editor
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{p}:{line}: the config is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); "
            "save it as UTF-8"
        ) from None


Overrides = Mapping[str, Any]
"""Flags that override the file: ``section.key`` -> value (``flagged``). Kept by the
daemon, so that a reloaded file is overridden alike."""


def flag_keys(parts: Collection[str]) -> list[tuple[str, Any]]:
    """Each ``section.key`` of ``parts`` declared with a flag, and its declaration."""
    return [
        (f"{section}.{f.name}", f)
        for section in parts
        for f in fields(SECTIONS[section])
        if f.metadata.get("flag")
    ]


def add_flags(parser: argparse.ArgumentParser, parts: Collection[str]) -> None:
    """The flags of ``parts``' keys, each as its declaration says: its type, choices and
    bounds (a value out of them is argparse's one-line error), and its --help."""
    for key, f in flag_keys(parts):
        meta = f.metadata
        parser.add_argument(
            meta["flag"],
            type=_flag_value(key, type(f.default), meta),
            choices=meta["choices"] or None,
            metavar=None if meta["choices"] else meta["metavar"] or "N",
            help=flag_help(key),
        )


def flagged(ns: argparse.Namespace, parts: Collection[str]) -> Overrides:
    """The flags of ``parts`` that were given, by key."""
    given = {key: getattr(ns, _dest(f.metadata["flag"])) for key, f in flag_keys(parts)}
    return {key: value for key, value in given.items() if value is not None}


def _dest(flag: str) -> str:
    """argparse's attribute for ``flag`` ("--weight-cache" -> "weight_cache")."""
    return flag.removeprefix("--").replace("-", "_")


def _flag_value(key: str, kind: type, meta: Mapping[str, Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        why = "" if meta["choices"] else refusal(value, meta)
        if not why and value and meta["check"] is not None:
            try:
                meta["check"](value)
            except ValueError as exc:
                why = str(exc)
        if why:
            raise argparse.ArgumentTypeError(f"{why} (config {key})")
        return value

    return parse


def with_overrides(
    config: Config, overrides: Overrides, parts: Collection[str] = DAEMON_PARTS
) -> Config:
    """``overrides`` over ``config``, validated (ConfigError)."""
    changed: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        section, name = key.split(".")
        changed.setdefault(section, {})[name] = value
    sections = {name: replace(getattr(config, name), **keys) for name, keys in changed.items()}
    out = replace(config, **sections)
    validate(out, parts=parts)
    return out
