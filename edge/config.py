"""The configuration of the daemon and its companions: one TOML file, validated, every
error naming its key.

The shipped default (``edge/data/da3-edge.toml``) documents every key and the flag
that overrides it. ``load`` reads a file over those defaults; an unknown key, a wrong
type or a bad value raises ``ConfigError`` naming ``section.key`` and, when it can be
found, the line.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from edge.errors import ConfigError
from edge.models import PRECISIONS, check_size
from edge.stages import CHOICES
from edge.store.layout import DEFAULT_FORMATS, FORMATS

STAGES = CHOICES

STORE_SIZES = ("core", "camera")  # store.size


@dataclass(frozen=True)
class CameraConfig:
    source: str = "picamera2"
    width: int = 1280
    height: int = 720
    timeout: float = 2.0
    stall_after: float = 10.0
    backoff_min: float = 0.5
    backoff_max: float = 30.0
    # The camera's controls (edge.camera.Controls): picamera2 applies them.
    hflip: bool = False
    vflip: bool = False
    af: str = ""
    lens_position: float = -1.0
    fps: float = 0.0

    def controls(self) -> Any:
        from edge.camera.base import Controls

        return Controls(self.hflip, self.vflip, self.af, self.lens_position, self.fps)


@dataclass(frozen=True)
class ModelConfig:
    dir: str = ""
    precision: str = "fp16"
    size: int = 0  # the cores' long side; 0: 504 when exported, else the only size there
    stages: str = "auto"
    threads: int = 0
    weight_cache: str = "auto"
    workers: int = 1


@dataclass(frozen=True)
class StoreConfig:
    dir: str = ""
    keep_frames: int = 100
    max_bytes: int = 64 << 20
    formats: tuple[str, ...] = DEFAULT_FORMATS
    size: str = "core"  # STORE_SIZES: the outputs at the core's resolution, or the camera's
    preview_max_side: int = 640
    persist_dir: str = ""
    persist_every: float = 60.0
    persist_keep: int = 100


@dataclass(frozen=True)
class DaemonConfig:
    stuck_after: float = 20.0
    status_every: float = 5.0


@dataclass(frozen=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    token_file: str = ""
    basic_auth_file: str = ""
    max_age: float = 10.0
    clients: int = 8
    hosts: tuple[str, ...] = ()
    connections: int = 128
    header_timeout: float = 10.0
    send_timeout: float = 10.0
    downloads: int = 8


# What publish sends of each frame as an image: nothing, the depth preview (PNG), the
# scene (the "rgb" output, JPEG), or both on their own topics.
PREVIEWS = ("off", "depth", "rgb", "both")
# Booleans a key once took, and the values they stand for now (a config written then
# still loads: the installer checks the one on a Pi before anything else).
LEGACY: dict[tuple[str, str], dict[bool, str]] = {
    ("mqtt", "preview"): {True: "depth", False: "off"}
}


@dataclass(frozen=True)
class MqttConfig:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 1883
    username: str = ""
    password_file: str = ""
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    allow_plaintext_password: bool = False
    device_id: str = ""
    state_max_rate: float = 2.0
    preview: str = "off"  # PREVIEWS
    preview_max_rate: float = 1.0
    queue_limit: int = 100

    @property
    def tls_on(self) -> bool:
        """TLS to the broker: asked for, or implied by a CA file or a client certificate."""
        return self.tls or bool(self.tls_ca) or bool(self.tls_cert)


@dataclass(frozen=True)
class Config:
    camera: CameraConfig = field(default_factory=CameraConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    path: str | None = None
    serve: ServeConfig = field(default_factory=ServeConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)


SECTIONS: dict[str, type] = {
    "camera": CameraConfig,
    "model": ModelConfig,
    "store": StoreConfig,
    "daemon": DaemonConfig,
    "serve": ServeConfig,
    "mqtt": MqttConfig,
}
# What `da3-edge run` checks; a companion (serve) checks its own section and the store.
DAEMON_PARTS = ("camera", "model", "store", "daemon")


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


# Upper bounds of the numbers whose own checks set none: past any sane setting, a
# value would overflow a deadline or a buffer rather than mean something.
AT_MOST: dict[tuple[str, str], tuple[float, str]] = {
    ("camera", "width"): (16384, "pixels"),
    ("camera", "height"): (16384, "pixels"),
    ("camera", "timeout"): (600, "seconds"),
    ("camera", "stall_after"): (3600, "seconds"),
    ("camera", "backoff_min"): (3600, "seconds"),
    ("camera", "backoff_max"): (3600, "seconds"),
    ("model", "threads"): (256, "threads"),
    ("store", "keep_frames"): (100_000, "frames"),
    ("store", "max_bytes"): (1 << 36, "bytes: 64 GiB"),
    ("store", "preview_max_side"): (16384, "pixels"),
    ("store", "persist_every"): (604_800, "seconds: a week"),
    ("store", "persist_keep"): (100_000, "frames"),
    ("daemon", "stuck_after"): (3600, "seconds"),
    ("daemon", "status_every"): (3600, "seconds"),
    ("serve", "max_age"): (86_400, "seconds"),
    ("mqtt", "state_max_rate"): (1000, "per second"),
}


def validate(config: Config, text: str = "", parts: Collection[str] = DAEMON_PARTS) -> None:
    """Value checks (ranges, choices) of the sections in ``parts``, each naming its key."""
    path = config.path

    def fail(section: str, key: str, message: str) -> None:
        raise ConfigError(f"{where(path, text, section, key)} {message}")

    for (section, key), (most, unit) in AT_MOST.items():
        if section in parts and getattr(getattr(config, section), key) > most:
            fail(section, key, f"must be at most {most:g} ({unit})")

    if "store" in parts:
        _validate_store(config.store, fail)
    if "serve" in parts:
        _validate_serve(config.serve, fail)
    if "mqtt" in parts:
        _validate_mqtt(config.mqtt, fail)
    if "camera" in parts:
        _validate_daemon(config, fail)


Fail = Callable[[str, str, str], None]


def _validate_daemon(config: Config, fail: Fail) -> None:
    cam, model, daemon = config.camera, config.model, config.daemon
    from edge.camera import open_source
    from edge.errors import UsageError

    try:
        open_source(cam.source, width=cam.width, height=cam.height, timeout=cam.timeout)
    except UsageError as exc:
        fail("camera", "source", f"is not a usable source: {exc}")
    for key in ("width", "height"):
        if getattr(cam, key) < 16:
            fail("camera", key, "must be at least 16")
    for key in ("timeout", "stall_after", "backoff_min", "backoff_max"):
        if getattr(cam, key) <= 0:
            fail("camera", key, "must be positive")
    if cam.backoff_max < cam.backoff_min:
        fail("camera", "backoff_max", "must be at least backoff_min")
    from edge.camera.base import AF_MODES

    if cam.af not in ("", *AF_MODES):
        fail("camera", "af", f'must be one of {", ".join(AF_MODES)} (or "": the camera\'s own)')
    if cam.lens_position >= 0 and cam.af in ("continuous", "auto"):
        fail("camera", "lens_position", 'needs af = "manual" (autofocus moves the lens)')
    if cam.lens_position > 32:
        fail("camera", "lens_position", "must be in dioptres (1 / metres): 0 (infinity) to 32")
    if not (cam.fps == 0 or 0.1 <= cam.fps <= 240):
        fail("camera", "fps", "must be 0 (the camera's own) or 0.1 to 240 frames a second")
    if cam.fps and cam.timeout < 2 / cam.fps:  # picamera2 waits `timeout` for each frame
        fail(
            "camera", "fps",
            f"{cam.fps:g} gives a frame every {1 / cam.fps:g} s: camera.timeout "
            f"({cam.timeout:g} s) must be at least two frame intervals ({2 / cam.fps:g} s)",
        )  # fmt: skip
    if model.precision not in PRECISIONS:
        fail(
            "model", "precision", f"must be one of {', '.join(PRECISIONS)}, not {model.precision!r}"
        )
    if model.size:
        try:
            check_size(model.size)
        except ValueError as exc:
            fail("model", "size", f"must be 0 (504 when exported, else the only size): {exc}")
    if model.stages not in STAGES:
        fail("model", "stages", f"must be one of {', '.join(STAGES)}, not {model.stages!r}")
    if model.threads < 0:
        fail("model", "threads", "must be 0 (auto) or more")
    if not 1 <= model.workers <= 8:
        fail("model", "workers", "must be 1 to 8")
    if daemon.stuck_after < 2 * cam.timeout:
        fail(
            "daemon", "stuck_after", f"must be at least twice camera.timeout ({2 * cam.timeout:g})"
        )
    if daemon.status_every <= 0:
        fail("daemon", "status_every", "must be positive")


def _validate_store(store: StoreConfig, fail: Fail) -> None:
    if store.keep_frames < 1:
        fail("store", "keep_frames", "must be at least 1")
    if store.max_bytes < 1_000_000:
        fail("store", "max_bytes", "must be at least 1000000")
    bad = [f for f in store.formats if f not in FORMATS]
    if bad:
        fail("store", "formats", f"has unknown format(s) {bad} (use {', '.join(FORMATS)})")
    if store.size not in STORE_SIZES:
        fail("store", "size", f"must be one of {', '.join(STORE_SIZES)}, not {store.size!r}")
    if store.preview_max_side < 0:
        fail("store", "preview_max_side", "must be 0 (full size) or more")
    if store.persist_every <= 0:
        fail("store", "persist_every", "must be positive")
    if store.persist_keep < 1:
        fail("store", "persist_keep", "must be at least 1")


def _validate_serve(serve: ServeConfig, fail: Fail) -> None:
    if not serve.host:
        fail("serve", "host", "must be an address, e.g. 127.0.0.1")
    if not 0 <= serve.port <= 65535:
        fail("serve", "port", "must be 0 to 65535 (0: any free port)")
    if serve.max_age <= 0:
        fail("serve", "max_age", "must be positive")
    if not 1 <= serve.clients <= 256:
        fail("serve", "clients", "must be 1 to 256")
    if not serve.clients < serve.connections <= 4096:
        fail("serve", "connections", "must be more than serve.clients and at most 4096")
    for key in ("header_timeout", "send_timeout"):
        if not 0 < getattr(serve, key) <= 600:
            fail("serve", key, "must be more than 0 and at most 600 (seconds)")
    if not 1 <= serve.downloads <= 256:
        fail("serve", "downloads", "must be 1 to 256")
    if not is_loopback(serve.host) and not (serve.token_file or serve.basic_auth_file):
        fail(
            "serve", "host",
            f"is {serve.host}, beyond this machine: it needs serve.basic_auth_file or "
            "serve.token_file (a file only serve's user can read), or use 127.0.0.1",
        )  # fmt: skip
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
    if not 1 <= mqtt.port <= 65535:
        fail("mqtt", "port", "must be 1 to 65535")
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
    if mqtt.state_max_rate < 0:
        fail("mqtt", "state_max_rate", "must be 0 (every frame) or more")
    if mqtt.preview not in PREVIEWS:
        fail("mqtt", "preview", f"must be one of {', '.join(PREVIEWS)}")
    if not 0 < mqtt.preview_max_rate <= 1:
        fail("mqtt", "preview_max_rate", "must be more than 0 and at most 1 (per second)")
    if not 1 <= mqtt.queue_limit <= 100_000:
        fail("mqtt", "queue_limit", "must be 1 to 100000")


def check_models(config: Config, text: str, directory: str | os.PathLike[str] | None) -> None:
    """The models ``config`` asks for (``model.precision``, ``model.size``) are in
    ``directory`` (None: the user's default, edge.models.resolve_models_dir): what the
    daemon checks at its start. ConfigError naming ``model.size`` (or ``model.dir``)."""
    from edge.errors import EdgeError, first_line
    from edge.models import Manifest, resolve_models_dir
    from edge.pipeline import pick_size

    model = config.model
    try:
        manifest = Manifest.load(resolve_models_dir(directory))
        pick_size(manifest, model.precision, model.size or None)
    except (EdgeError, OSError) as exc:
        key = "size" if model.size else "dir"
        why = first_line(exc) if isinstance(exc, EdgeError) else f"cannot read the models ({exc})"
        raise ConfigError(f"{where(config.path, text, 'model', key)}: {why}") from None


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


@dataclass(frozen=True)
class Overrides:
    """``da3-edge run``'s flags that override the file (None: not given). Kept by the
    daemon, so a reloaded file is overridden alike."""

    source: str | None = None
    store: str | None = None
    models: str | None = None
    precision: str | None = None
    size: int | None = None
    stages: str | None = None
    threads: int | None = None


def with_overrides(config: Config, overrides: Overrides) -> Config:
    """``overrides`` over ``config``, validated (ConfigError)."""
    o = overrides
    camera, model, store = config.camera, config.model, config.store
    if o.source is not None:
        camera = replace(camera, source=o.source)
    if o.models is not None:
        model = replace(model, dir=o.models)
    for key in ("precision", "size", "stages", "threads"):
        if getattr(o, key) is not None:
            model = replace(model, **{key: getattr(o, key)})
    if o.store is not None:
        store = replace(store, dir=o.store)
    out = replace(config, camera=camera, model=model, store=store)
    validate(out)
    return out
