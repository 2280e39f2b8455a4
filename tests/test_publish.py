"""`da3-edge publish` against a real mosquitto broker, fed by the real daemon (with
FakeCores where the model is not the subject: scripts/support/fakedaemon.py).

Each test starts its own broker on 127.0.0.1 and a free port with a password file
(mosquitto_passwd), a real paho subscriber, and `python -m edge publish` as a process.
The discovery payload is checked against the shape Home Assistant's MQTT docs give for
device-based discovery: home-assistant.io, source/_integrations/mqtt.markdown, section
"Device discovery payload" (the docs at commit a68e488f, Home Assistant 2024.12; the
form arrived in 2024.11): `dev` and `o` at the root, `cmps` whose components each have
a platform `p` and a `unique_id`. Home Assistant itself needs a newer Python than this
machine's.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from edge.errors import ConfigError
from scripts.support import processes
from scripts.support.broker import Broker, Listener
from scripts.support.daemon import Command, DaemonProcess, frame_dirs
from scripts.support.daemon import daemon as start
from scripts.support.tools import require_tool

USER, PASSWORD = "da3edge", "pa55-word"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    (tmp_path / "broker").mkdir()
    b = Broker(tmp_path / "broker", {USER: PASSWORD, "ha": "ha-pass"})
    try:
        yield b
    finally:
        b.stop()


def mqtt_config(tmp: Path, port: int, *, password: str = PASSWORD, **extra: object) -> Path:
    secret = tmp / "mqtt-password"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    values: dict[str, object] = {
        "enabled": True,
        "host": "127.0.0.1",
        "port": port,
        "username": USER,
        "password_file": str(secret),
        "device_id": "testpi",
        "state_max_rate": 0.0,
        **extra,
    }
    lines = ["[mqtt]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    path = tmp / "publish.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Publish(Command):
    def __init__(
        self, config: Path, store: Path, log: Path, env: dict[str, str] | None = None
    ) -> None:
        super().__init__("publish", ["--config", str(config), "--store", str(store)], log, env)

    def rss_kib(self) -> int:
        return processes.kib(self.proc.pid, "VmRSS")


@contextmanager
def publishing(
    config: Path, store: Path, log: Path, env: dict[str, str] | None = None
) -> Iterator[Publish]:
    p = Publish(config, store, log, env)
    try:
        yield p
    finally:
        p.stop()


def daemon(tmp: Path, store: Path, models: Path, source: str = "fake:fps:10") -> DaemonProcess:
    """The daemon (support.daemon's) with a ring that keeps every frame of a test."""
    return start(tmp, store, models, source, store={"dir": str(store), "keep_frames": 200})


def wait(check: Any, timeout: float, what: str, *logs: Any) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(
        f"timed out waiting for {what}\n" + "\n".join(str(x)[-2000:] for x in logs)
    )


# The device-based discovery payload as Home Assistant's MQTT docs describe it:
# required at the root `dev` (with `ids`) and `o` (with `name`), and `cmps`, whose
# every component has a platform `p` and a `unique_id`; per platform the keys the
# platform's docs mark required or that we rely on.
PLATFORM_KEYS = {
    "sensor": {"name", "unique_id", "value_template"},
    "binary_sensor": {"name", "unique_id", "value_template", "payload_on", "payload_off"},
    "image": {"name", "unique_id", "image_topic", "content_type"},
}
DEVICE_CLASSES: dict[str, set[str | None]] = {
    "sensor": {None, "duration", "timestamp", "temperature"},
    "binary_sensor": {"problem"},
}


def check_discovery(payload: dict[str, Any], *, preview: bool) -> None:
    assert isinstance(payload["dev"]["ids"], list) and payload["dev"]["ids"]
    assert payload["dev"]["name"] and payload["o"]["name"] == "da3-edge"
    assert payload["state_topic"] == "da3edge/testpi/stats"
    assert payload["availability_topic"] == "da3edge/testpi/availability"
    assert (payload["payload_available"], payload["payload_not_available"]) == ("online", "offline")
    cmps = payload["cmps"]
    ids = [c["unique_id"] for c in cmps.values()]
    assert len(set(ids)) == len(ids)
    for key, comp in cmps.items():
        assert re.fullmatch(r"[a-zA-Z0-9_-]+", key), key
        platform = comp["p"]
        assert PLATFORM_KEYS[platform] <= set(comp), (key, comp)
        assert comp.get("device_class") in DEVICE_CLASSES.get(platform, {None}), comp
        for text in (comp["name"], comp.get("unit_of_measurement", "")):
            assert "metre" not in text and text not in ("m", "cm", "mm"), comp  # never a distance
    assert {"fps", "latency", "last_frame", "temperature", "thermal_pace", "throttled"} <= set(cmps)
    assert ("preview" in cmps) is preview


def check_retained(port: int) -> None:
    """A later subscriber (Home Assistant starting) gets the retained messages."""
    late = Listener(port, "ha", "ha-pass")
    try:
        wait(
            lambda: late.on("/config") and late.on("/availability") and late.on("/stats"),
            10,
            "retained messages",
        )
        (config,) = late.on("homeassistant/device/da3edge_testpi/config")
        assert config.retain
        check_discovery(json.loads(config.payload), preview=True)
        (availability,) = late.on("/availability")
        assert availability.retain and availability.payload == b"offline"  # stopped cleanly
        stats = json.loads(late.on("/stats")[-1].payload)
        assert stats["written"] >= 8 and stats["publisher"]["dropped"] == 0
        assert stats["thermal_pace_pct"] == 100  # not spaced for heat
    finally:
        late.close()
    login = ["-p", str(port), "-u", "ha", "-P", "ha-pass"]
    sub = subprocess.run(
        ["mosquitto_sub", *login, "-t", "da3edge/#", "-v", "-W", "2"],
        capture_output=True,
        text=True,
        errors="replace",  # the preview is binary
    )
    assert "da3edge/testpi/availability offline" in sub.stdout, sub.stdout + sub.stderr


def test_discovery_availability_and_a_state_for_every_frame(
    small_models: Path, tmp_path: Path, broker: Broker
) -> None:
    from edge import bench

    photos = tmp_path / "replay"
    photos.mkdir()
    for i in range(6):
        (photos / f"{i}.jpg").write_bytes(bench.synthetic_jpeg(240, 320, seed=i))
    store = tmp_path / "store"
    cfg = mqtt_config(tmp_path, broker.port, preview=True)
    listener = Listener(broker.port, "ha", "ha-pass")
    try:
        with (
            publishing(cfg, store, tmp_path / "publish.log") as pub,
            daemon(tmp_path, store, small_models, source=f"replay:{photos}@8") as d,
        ):
            wait(lambda: listener.on("/availability"), 20, "availability", pub.log)
            first_state = wait(lambda: listener.on("/state"), 30, "a state message", pub.log)
            first = json.loads(first_state[0].payload)["store_seq"]
            wait(lambda: len(frame_dirs(store)) >= first + 8, 60, "8 more frames", d.log)
            assert d.stop() == 0
            last = max(int(p.name) for p in frame_dirs(store))
            wait(
                lambda: any(
                    json.loads(m.payload)["store_seq"] == last for m in listener.on("/state")
                ),
                10,
                "the last frame's state",
            )
            wait(lambda: listener.on("/preview"), 10, "a preview")
            # The daemon's last status.json (written as it stopped) reaches the stats topic
            # after the last frame's state: wait for it before stopping the publisher.
            wait(
                lambda: any(
                    json.loads(m.payload)["state"] == "stopped" for m in listener.on("/stats")
                ),
                20,
                "the final stats",
                pub.log,
            )
        seqs = [json.loads(m.payload)["store_seq"] for m in listener.on("/state")]
        print(f"state for frames {seqs[0]}..{seqs[-1]}: {len(seqs)} messages")
        assert seqs == list(range(first, last + 1)), seqs  # every frame, in order, once
        state = json.loads(listener.on("/state")[-1].payload)
        assert state["random_init"] is True and "not metres" in state["depth_kind"]
        assert listener.on("/preview")[-1].payload[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        listener.close()
    assert pub.proc.returncode == 0, pub.log
    check_retained(broker.port)


def test_a_wrong_password_is_one_line_and_retried(tmp_path: Path, broker: Broker) -> None:
    cfg = mqtt_config(tmp_path, broker.port, password="wrong")
    with publishing(cfg, tmp_path / "store", tmp_path / "publish.log") as pub:
        time.sleep(5)  # several attempts (backoff from 1 s)
        assert pub.proc.poll() is None, pub.log  # still there: no exit into a restart loop
        attempts = broker.log.read_text().count("disconnected, not authorised")
        assert pub.stop() == 0
    refused = [ln for ln in pub.log.splitlines() if "refused the connection" in ln]
    print(refused, f"{attempts} connection attempts in the broker's log")
    assert len(refused) == 1 and "Not authorized" in refused[0]
    assert attempts >= 2


def test_sigkill_leaves_offline_and_a_broker_restart_is_survived(
    fake_models: Path, tmp_path: Path, broker: Broker
) -> None:
    store = tmp_path / "store"
    cfg = mqtt_config(tmp_path, broker.port, state_max_rate=5.0)
    listener = Listener(broker.port, "ha", "ha-pass")
    try:
        with daemon(tmp_path, store, fake_models) as d:
            pub = Publish(cfg, store, tmp_path / "publish.log")
            wait(
                lambda: [m for m in listener.on("/availability") if m.payload == b"online"],
                20,
                "online",
                pub.log,
            )
            wait(lambda: listener.on("/state"), 20, "state")
            # The broker goes away for 10 s and comes back (forgetting everything).
            broker.stop()
            t_down = time.time()
            time.sleep(10)
            broker.start()
            listener.close()
            listener = Listener(broker.port, "ha", "ha-pass")
            wait(lambda: listener.on("/config"), 40, "discovery again", pub.log)
            wait(
                lambda: [m for m in listener.on("/availability") if m.payload == b"online"],
                10,
                "online again",
            )
            wait(lambda: listener.on("/state"), 20, "state again")
            # The daemon never noticed: frames kept coming through the outage.
            times = sorted(
                json.loads((p / "frame.json").read_text())["t_written"] for p in frame_dirs(store)
            )
            during = [t for t in times if t_down <= t <= t_down + 10]
            gaps = [b - a for a, b in itertools.pairwise(times)]
            print(f"{len(during)} frames while the broker was down; longest gap {max(gaps):.2f} s")
            assert len(during) >= 10 and max(gaps) < 3
            # SIGKILL: no goodbye from the publisher; the broker sends its last will.
            pub.proc.kill()
            assert pub.stop() == -signal.SIGKILL
            wait(
                lambda: [m for m in listener.on("/availability") if m.payload == b"offline"],
                10,
                "offline (last will)",
            )
            assert d.stop() == 0
    finally:
        listener.close()


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    """A CA made here with openssl: (certificate, key)."""
    openssl = require_tool("openssl", "apt install openssl")
    d.mkdir(parents=True, exist_ok=True)
    ca, key = d / f"{name}.pem", d / f"{name}.key"
    new_key = ["-newkey", "rsa:2048", "-nodes", "-keyout", str(key)]
    details = ["-days", "2", "-subj", f"/CN={name}"]
    subprocess.run(
        [openssl, "req", "-x509", *new_key, "-out", str(ca), *details],
        check=True,
        capture_output=True,
    )
    return ca, key


def server_cert(d: Path, ca: Path, ca_key: Path) -> tuple[Path, Path]:
    openssl = require_tool("openssl", "apt install openssl")
    key, csr, cert, ext = d / "server.key", d / "server.csr", d / "server.pem", d / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    new_key = ["-newkey", "rsa:2048", "-nodes", "-keyout", str(key)]
    subprocess.run(
        [openssl, "req", *new_key, "-out", str(csr), "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
    )
    signer = ["-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial"]
    out = ["-out", str(cert), "-days", "2", "-extfile", str(ext)]
    subprocess.run(
        [openssl, "x509", "-req", "-in", str(csr), *signer, *out], check=True, capture_output=True
    )
    return cert, key


def test_tls_with_the_right_ca_and_not_with_another(fake_models: Path, tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    ca, ca_key = make_ca(pki, "test-ca")
    other, _ = make_ca(pki, "other-ca")
    cert, key = server_cert(pki, ca, ca_key)
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker", {USER: PASSWORD, "ha": "ha-pass"}, tls=(ca, cert, key))
    listener = Listener(broker.port, "ha", "ha-pass", tls_ca=ca)
    store = tmp_path / "store"
    try:
        with daemon(tmp_path, store, fake_models) as d:
            wrong = tmp_path / "wrong"
            wrong.mkdir()
            cfg = mqtt_config(wrong, broker.port, tls_ca=str(other))
            with publishing(cfg, store, wrong / "publish.log") as pub:
                wait(lambda: "cannot connect" in pub.log, 15, "a TLS refusal", pub.log)
                time.sleep(2)
                assert pub.proc.poll() is None
            refused = [ln for ln in pub.log.splitlines() if "cannot connect" in ln]
            print(refused)
            assert len(refused) == 1 and "CERTIFICATE_VERIFY_FAILED" in refused[0]
            assert not listener.on("/state")
            cfg = mqtt_config(tmp_path, broker.port, tls_ca=str(ca))
            with publishing(cfg, store, tmp_path / "publish.log") as pub:
                wait(lambda: listener.on("/state"), 30, "state over TLS", pub.log)
            # tls = true, no CA file: the system's CA store, here the CA through OpenSSL's
            # own SSL_CERT_FILE (what `update-ca-certificates` maintains on a Pi).
            system = tmp_path / "system"
            system.mkdir()
            cfg = mqtt_config(system, broker.port, tls=True)
            seen = len(listener.on("/state"))
            with publishing(cfg, store, system / "publish.log", {"SSL_CERT_FILE": str(ca)}) as pub:
                wait(
                    lambda: len(listener.on("/state")) > seen,
                    30,
                    "state over TLS, system CAs",
                    pub.log,
                )
            assert d.stop() == 0
    finally:
        listener.close()
        broker.stop()
    assert "cannot connect" not in pub.log


def test_a_broker_down_for_15_s_costs_bounded_memory(
    fake_models: Path, tmp_path: Path, broker: Broker
) -> None:
    """The fake camera at 10 frames/s, every frame's state queued, queue_limit 20: while
    the broker is away the queue holds 20, the rest is dropped and counted, and the
    publisher's memory stays flat."""
    store = tmp_path / "store"
    cfg = mqtt_config(tmp_path, broker.port, queue_limit=20)
    listener = Listener(broker.port, "ha", "ha-pass")
    try:
        with (
            daemon(tmp_path, store, fake_models) as d,
            publishing(cfg, store, tmp_path / "publish.log") as pub,
        ):
            wait(lambda: len(listener.on("/state")) >= 5, 30, "states", pub.log)
            broker.stop()
            time.sleep(3)
            rss_before = pub.rss_kib()
            written_before = len(frame_dirs(store))
            time.sleep(12)
            rss_after = pub.rss_kib()
            written = len(frame_dirs(store)) - written_before
            broker.start()
            listener.close()
            listener = Listener(broker.port, "ha", "ha-pass")
            stats = wait(
                lambda: [
                    json.loads(m.payload)
                    for m in listener.on("/stats")
                    if json.loads(m.payload)["publisher"]["dropped"] > 0
                ],
                30,
                "stats with drops",
                pub.log,
            )
            assert d.stop() == 0
        publisher = stats[0]["publisher"]
        grew = rss_after - rss_before
        print(
            f"{written} frames in 12 s with the broker down; publisher {publisher}; RSS "
            f"{rss_before} -> {rss_after} KiB"
        )
        assert written >= 40  # the daemon kept its pace
        assert publisher["queued"] == 20 and publisher["dropped"] >= written - 20
        assert grew < 2048, grew
    finally:
        listener.close()


def test_disabled_or_misconfigured_is_one_line(tmp_path: Path) -> None:
    from scripts.support.tools import run_main

    off = run_main(["publish", "--store", str(tmp_path)])
    assert off.returncode == 0
    assert off.stderr == (
        "da3-edge publish: mqtt.enabled is false in the defaults: nothing to publish\n"
    )
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[mqtt]\nenabled = true\ndevice_id = "has spaces"\n')
    bad = run_main(["publish", "--config", str(cfg)])
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert f"{cfg}:3: mqtt.device_id must be 1-64 of A-Z a-z 0-9 _ -" in bad.stderr
    secret = tmp_path / "pw"
    secret.write_text("x\n")
    secret.chmod(0o644)
    cfg.write_text(f'[mqtt]\nenabled = true\nusername = "u"\npassword_file = "{secret}"\n')
    leaky = run_main(["publish", "--config", str(cfg), "--store", str(tmp_path)])
    assert leaky.returncode == 1
    assert f"mqtt.password_file: {secret} can be read by others (mode 644)" in leaky.stderr
    # A password for a broker elsewhere goes only over TLS, unless asked for in clear.
    secret.chmod(0o600)
    remote = (
        f'[mqtt]\nenabled = true\nhost = "192.0.2.7"\nusername = "u"\npassword_file = "{secret}"\n'
    )
    cfg.write_text(remote)
    clear = run_main(["publish", "--config", str(cfg), "--store", str(tmp_path)])
    assert clear.returncode == 1 and clear.stderr.count("\n") == 1, clear.stderr
    assert (
        f"{cfg}:5: mqtt.password_file would go to 192.0.2.7 in clear: set mqtt.tls = true "
        "(the system's CAs) or mqtt.tls_ca, or mqtt.allow_plaintext_password = true to send it "
        "anyway"
    ) in clear.stderr
    from edge import config as config_mod

    assert config_mod.parse(remote + "tls = true\n", parts=("mqtt",)).mqtt.tls_on
    assert config_mod.parse(remote + "allow_plaintext_password = true\n", parts=("mqtt",))
    # The TLS client key is a secret like the others.
    key = tmp_path / "client.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o644)
    cfg.write_text(f'[mqtt]\nenabled = true\ntls = true\ntls_cert = "{key}"\ntls_key = "{key}"\n')
    leaky_key = run_main(["publish", "--config", str(cfg), "--store", str(tmp_path)])
    assert leaky_key.returncode == 1
    assert f"mqtt.tls_key: {key} can be read by others (mode 644)" in leaky_key.stderr


@pytest.mark.parametrize(
    ("preview", "topics"),
    [("off", []), ("depth", ["/preview"]), ("rgb", ["/scene"]), ("both", ["/preview", "/scene"])],
)
def test_preview_the_depth_the_scene_or_both(
    tmp_path: Path, preview: str, topics: list[str]
) -> None:
    """mqtt.preview picks the images sent with each frame (retained, each its own topic),
    and discovery announces an image entity for each."""
    from edge.config import MqttConfig
    from edge.publish import Publisher
    from edge.publish import topics as t
    from scripts.support.store import frame

    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    path = frame(root / "frames", 7, preview=b"\x89PNG\r\n\x1a\n depth")
    (path / "frame.rgb.jpg").write_bytes(b"\xff\xd8\xff scene")
    publisher = Publisher(MqttConfig(enabled=True, preview=preview, device_id="testpi"), root)
    publisher.on_frame(7)
    images = {
        topic.removeprefix("da3edge/testpi"): (payload[:4], retain)
        for topic, payload, _qos, retain in publisher.queue
        if not topic.endswith("/state")
    }
    assert sorted(images) == topics
    if "/preview" in images:
        assert images["/preview"] == (b"\x89PNG", True)
    if "/scene" in images:
        assert images["/scene"] == (b"\xff\xd8\xff ", True)
    payload = t.discovery(publisher.topics, preview=preview)
    check_discovery(payload, preview=preview in ("depth", "both"))
    assert ("scene" in payload["cmps"]) is (preview in ("rgb", "both"))


def test_a_preview_of_true_or_false_still_loads() -> None:
    """Configs written when mqtt.preview was a boolean: true is the depth, false none."""
    from edge import config as config_mod

    for old, now in ((True, "depth"), (False, "off")):
        text = f"[mqtt]\nenabled = true\npreview = {str(old).lower()}\n"
        assert config_mod.parse(text, parts=("mqtt",)).mqtt.preview == now
    with pytest.raises(ConfigError, match=r"mqtt\.preview must be one of off, depth"):
        config_mod.parse('[mqtt]\npreview = "scene"\n', parts=("mqtt",))


def test_discovery_again_when_home_assistant_comes_online(tmp_path: Path, broker: Broker) -> None:
    """Home Assistant restarting publishes `online` on homeassistant/status: the device
    is announced again (its retained config may have been cleared meanwhile)."""
    cfg = mqtt_config(tmp_path, broker.port)
    listener = Listener(broker.port, "ha", "ha-pass")
    try:
        with publishing(cfg, tmp_path / "store", tmp_path / "publish.log") as pub:
            wait(lambda: listener.on("/config"), 20, "discovery", pub.log)
            time.sleep(0.5)
            before = len(listener.on("/config"))
            listener.client.publish("homeassistant/status", b"online", qos=1)
            wait(lambda: len(listener.on("/config")) > before, 10, "discovery again", pub.log)
            listener.client.publish("homeassistant/status", b"offline", qos=1)
            time.sleep(1)
            assert len(listener.on("/config")) == before + 1  # only `online` triggers it
    finally:
        listener.close()


def test_a_broker_elsewhere_without_tls_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker on another machine with TLS off: a warning naming it and the fix; none
    for a broker on this machine, none with TLS on."""
    import logging

    from edge.config import MqttConfig
    from edge.publish import Publisher

    for host, tls, warned in (
        ("192.0.2.1", False, True),
        ("broker.lan", False, True),
        ("127.0.0.1", False, False),
        ("::1", False, False),
        ("192.0.2.1", True, False),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="edge.publish"):
            Publisher(MqttConfig(enabled=True, host=host, tls=tls, device_id="testpi"), tmp_path)
        said = [r.getMessage() for r in caplog.records if "TLS is off" in r.getMessage()]
        assert bool(said) == warned, (host, tls, caplog.text)
        if warned:
            assert said == [
                f"mqtt: {host} is not on this machine and TLS is off: what is published "
                "can be read on the way (mqtt.tls = true)"
            ]
