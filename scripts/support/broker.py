"""A real mosquitto broker for the tests: loopback, a free port, users, optional TLS."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tools import free_port, require_tool


class Broker:
    """``mosquitto -c`` on 127.0.0.1; ``stop``/``start`` keep the port (a broker restart).
    ``users`` None: anonymous clients allowed (the benchmarks' broker)."""

    def __init__(
        self,
        tmp: Path,
        users: dict[str, str] | None,
        tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        mosquitto = require_tool("mosquitto", "scripts/install-host-packages.sh mosquitto")
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp, self.port, self.mosquitto = tmp, free_port(), mosquitto
        lines = [
            "user root",  # run as root in CI: keep reading these root-owned files
            f"listener {self.port} 127.0.0.1",
            "persistence false",  # a restart forgets retained messages: they must be re-sent
            "log_dest stderr",
        ]
        if users is None:
            lines.append("allow_anonymous true")
        else:
            lines += ["allow_anonymous false", f"password_file {self._passwords(users)}"]
        if tls is not None:
            ca, cert, key = tls
            lines += [f"cafile {ca}", f"certfile {cert}", f"keyfile {key}"]
        self.conf = tmp / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        self.log = tmp / "mosquitto.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def _passwords(self, users: dict[str, str]) -> Path:
        passwd = require_tool("mosquitto_passwd", "scripts/install-host-packages.sh mosquitto")
        passwords = self.tmp / "passwords"
        passwords.touch(mode=0o600)
        for user, password in users.items():
            subprocess.run(
                [passwd, "-b", str(passwords), user, password], check=True, capture_output=True
            )
        return passwords

    def start(self) -> None:
        with open(self.log, "ab") as log:  # the child keeps its own copy of the fd
            self.proc = subprocess.Popen(
                [self.mosquitto, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT
            )
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"mosquitto did not start:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@dataclass
class Message:
    topic: str
    payload: bytes
    retain: bool
    t: float


@dataclass
class Listener:
    """A real paho client subscribed to ``topics``, collecting every message."""

    port: int
    user: str
    password: str
    topics: tuple[str, ...] = ("da3edge/#", "homeassistant/#")
    tls_ca: Path | None = None
    messages: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self._lock = threading.Lock()
        client = paho.Client(CallbackAPIVersion.VERSION2)
        client.username_pw_set(self.user, self.password)
        if self.tls_ca is not None:
            client.tls_set(ca_certs=str(self.tls_ca))

        def on_connect(c: Any, *_: Any) -> None:
            for topic in self.topics:
                c.subscribe(topic, qos=1)

        def on_message(_c: Any, _u: Any, m: Any) -> None:
            with self._lock:
                self.messages.append(Message(m.topic, m.payload, bool(m.retain), time.time()))

        client.on_connect = on_connect
        client.on_message = on_message
        client.connect("127.0.0.1", self.port)
        client.loop_start()
        self.client = client

    def on(self, suffix: str) -> list[Message]:
        with self._lock:
            return [m for m in self.messages if m.topic.endswith(suffix)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
