"""``da3-edge publish``: frames and health from the store to an MQTT broker.

A read-only companion like serve: it follows the store (``edge.store.follow``: inotify) and
reads ``status.json``; the daemon never waits for it. paho-mqtt's network thread keeps
the connection (keepalive, reconnect with capped backoff; a refused login is logged in
one line, once per reason, and retried the same way, never an exit into a restart
loop). Messages wait in a bounded queue (``mqtt.queue_limit``): while the broker is
away or slow the oldest are dropped and counted (in ``stats``), so memory stays flat.
Topics and payloads: ``edge.publish.topics``, docs/reference/mqtt.md.
"""

from __future__ import annotations

import collections
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from edge.config import MqttConfig, is_loopback
from edge.credentials import read_secret, read_secret_file
from edge.errors import ConfigError
from edge.publish import topics as t
from edge.store import layout
from edge.store.follow import Follower
from edge.store.read import frame_names, latest, published_since, read_json, read_record
from edge.store.trust import read_in
from edge.systemd import Notifier

log = logging.getLogger("edge.publish")
KEEPALIVE = 30
BACKOFF = (1, 30)  # seconds: first reconnect delay, cap


class Publisher:
    """The publish loop (``run``, main thread) and the paho callbacks (its thread).

    Owned by the main thread: the queue's contents, rate limits and counters; by paho's
    thread: ``connected`` and the last refusal reason. Both only append to or pop from
    the deque (thread-safe in CPython) and read each other's flags.
    """

    def __init__(self, mqtt: MqttConfig, store: Path) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.mqtt = mqtt
        self.store = store
        self.topics = t.Topics(mqtt.device_id or t.default_device_id())
        self.queue: collections.deque[tuple[str, bytes, int, bool]] = collections.deque()
        self.dropped = self.sent = 0
        self.connected = False
        self.stop = threading.Event()
        self._refused: str | None = None
        self._last_state = self._last_preview = float("-inf")
        client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=f"da3edge-{self.topics.device_id}"
        )
        if mqtt.username:
            password = (
                read_secret(mqtt.password_file, "mqtt.password_file").decode()
                if (mqtt.password_file)
                else None
            )
            client.username_pw_set(mqtt.username, password)
        if mqtt.tls_key:
            read_secret_file(mqtt.tls_key, "mqtt.tls_key")  # like every other secret
        if mqtt.tls_on:
            try:  # no tls_ca: the system's CA store (ssl's default context)
                client.tls_set(
                    ca_certs=mqtt.tls_ca or None,
                    certfile=mqtt.tls_cert or None,
                    keyfile=mqtt.tls_key or None,
                )
            except (OSError, ValueError) as exc:
                raise ConfigError(f"mqtt.tls/tls_ca/tls_cert/tls_key: {exc}") from None
        elif not is_loopback(mqtt.host):
            log.warning(
                "mqtt: %s is not on this machine and TLS is off: what is published "
                "can be read on the way (mqtt.tls = true)",
                mqtt.host,
            )
        client.will_set(self.topics.availability, b"offline", qos=1, retain=True)
        client.reconnect_delay_set(*BACKOFF)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_connect_fail = self._on_connect_fail
        client.on_message = self._on_message
        self.client = client

    # -- paho's thread ---------------------------------------------------------------
    def _on_connect(
        self, client: Any, _userdata: Any, _flags: Any, reason: Any, _props: Any
    ) -> None:
        if reason.is_failure:
            self._refusal(f"refused the connection: {reason}")
            return
        self._refused = None
        log.info("mqtt: connected to %s:%d as %s", self.mqtt.host, self.mqtt.port, self.topics.base)
        client.publish(self.topics.availability, b"online", qos=1, retain=True)
        self._announce(client)
        client.subscribe(t.HA_STATUS, qos=1)
        self.connected = True

    def _on_connect_fail(self, _client: Any, _userdata: Any) -> None:
        # paho calls this inside its `except OSError` (refused, unreachable, TLS): the
        # exception is the current one.
        exc = sys.exc_info()[1]
        self._refusal(f"cannot connect ({exc or 'connection failed'})")

    def _refusal(self, why: str) -> None:
        """Say why the broker cannot be used, once per reason (retries are paho's)."""
        if why != self._refused:
            log.error(
                "mqtt: %s:%d %s; retrying (every %d s at most)",
                self.mqtt.host,
                self.mqtt.port,
                why,
                BACKOFF[1],
            )
            self._refused = why

    def _announce(self, client: Any) -> None:
        payload = t.discovery(self.topics, preview=self.mqtt.preview)
        client.publish(self.topics.discovery, json.dumps(payload).encode(), qos=1, retain=True)

    def _on_disconnect(
        self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _props: Any
    ) -> None:
        if self.connected:
            log.warning("mqtt: disconnected (%s); reconnecting", reason)
        self.connected = False

    def _on_message(self, client: Any, _userdata: Any, message: Any) -> None:
        if message.topic == t.HA_STATUS and message.payload == b"online":
            self._announce(client)  # Home Assistant restarted: tell it again

    # -- the main thread -------------------------------------------------------------
    def enqueue(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        if len(self.queue) >= self.mqtt.queue_limit:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append((topic, payload, qos, retain))

    def flush(self) -> None:
        """Hand queued messages to paho while connected and its socket keeps up."""
        while self.queue and self.connected and not self.client.want_write():
            topic, payload, qos, retain = self.queue.popleft()
            self.client.publish(topic, payload, qos=qos, retain=retain)
            self.sent += 1

    def counts(self) -> dict[str, int]:
        return {"queued": len(self.queue), "dropped": self.dropped, "sent": self.sent}

    def on_frame(self, seq: int) -> None:
        record = read_record(self.store, seq)
        if record is None:
            return  # pruned already
        now = time.monotonic()
        rate = self.mqtt.state_max_rate
        if rate == 0 or now - self._last_state >= 1 / rate:
            self._last_state = now
            self.enqueue(self.topics.state, json.dumps(t.state_payload(record)).encode())
        preview = self.mqtt.preview
        if preview != "off" and now - self._last_preview >= 1 / self.mqtt.preview_max_rate:
            wanted = {
                "preview": (self.topics.preview, preview in ("depth", "both")),
                "rgb": (self.topics.scene, preview in ("rgb", "both")),
            }
            images = {
                topic: read_in(self.store, *frame_names(seq, fmt))
                for fmt, (topic, on) in wanted.items()
                if on
            }
            if any(data is None for data in images.values()):
                return  # pruned already, or not written (store.formats)
            self._last_preview = now
            for topic, data in images.items():
                assert data is not None
                self.enqueue(topic, data, retain=True)

    def on_status(self) -> None:
        newest = latest(self.store)
        record = read_record(self.store, newest.seq) if newest is not None else None
        payload = t.stats_payload(read_json(self.store, layout.STATUS), record, self.counts())
        self.enqueue(self.topics.stats, json.dumps(payload).encode(), qos=1, retain=True)

    def run(self) -> int:
        self.client.connect_async(self.mqtt.host, self.mqtt.port, keepalive=KEEPALIVE)
        self.client.loop_start()
        follower = Follower(self.store)
        seen = latest(self.store)
        Notifier.from_env().ready(f"publishing {self.store} to {self.mqtt.host}:{self.mqtt.port}")
        log.info(
            "publishing %s to %s:%d under %s/",
            self.store,
            self.mqtt.host,
            self.mqtt.port,
            self.topics.base,
        )
        next_stats = 0.0
        try:
            while not self.stop.is_set():
                changed = follower.wait(0.2)
                if layout.LATEST in changed:
                    newest = latest(self.store)
                    if newest is not None and (seen is None or newest.seq != seen.seq):
                        before = seen.seq if seen is not None else None
                        for item in published_since(self.store, before, newest):
                            self.on_frame(item.seq)
                        seen = newest
                # status.json every few seconds, or (no daemon) every 10 s anyway.
                if layout.STATUS in changed or time.monotonic() >= next_stats:
                    self.on_status()
                    next_stats = time.monotonic() + 10
                self.flush()
        finally:
            follower.close()
            if self.connected:
                info = self.client.publish(self.topics.availability, b"offline", qos=1, retain=True)
                info.wait_for_publish(2)
            self.client.disconnect()
            self.client.loop_stop()
        return 0


def run(mqtt: MqttConfig, store: Path) -> int:
    """Publish until SIGTERM/SIGINT; 0 after a clean stop."""
    publisher = Publisher(mqtt, store)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        publisher.stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    return publisher.run()
