"""edge.systemd against real AF_UNIX datagram sockets, as systemd would listen."""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.systemd import Notifier
from scripts.support import children


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket in tmp_path and the NOTIFY_SOCKET value naming it."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(5)
    sock.bind(str(path))
    try:
        yield sock, str(path)
    finally:
        sock.close()


def received(sock: socket.socket) -> bytes:
    return sock.recv(65536)


def test_ready_with_status_arrives_exactly(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": address})
    try:
        assert notifier.enabled
        assert notifier.ready("up") is True
        assert received(sock) == b"READY=1\nSTATUS=up"
        assert notifier.ready() is True
        assert received(sock) == b"READY=1"
    finally:
        notifier.close()


def test_each_message_kind(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": address})
    try:
        assert notifier.status("fps 9.8, camera ok")
        assert received(sock) == b"STATUS=fps 9.8, camera ok"
        assert notifier.watchdog()
        assert received(sock) == b"WATCHDOG=1"
        assert notifier.stopping()
        assert received(sock) == b"STOPPING=1"
        assert notifier.stopping("bye")
        assert received(sock) == b"STOPPING=1\nSTATUS=bye"
        assert notifier.notify(STATUS="two\nlines", ERRNO=5, READY=True)
        assert received(sock) == b"STATUS=two lines\nERRNO=5\nREADY=1"
        assert notifier.status("caméra ok")
        assert received(sock) == "STATUS=caméra ok".encode()
    finally:
        notifier.close()


def test_reloading_carries_the_monotonic_clock(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": address})
    try:
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert notifier.reloading()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        first, second = received(sock).split(b"\n")
        assert first == b"RELOADING=1"
        key, _, value = second.partition(b"=")
        assert key == b"MONOTONIC_USEC"
        assert before <= int(value) <= after
    finally:
        notifier.close()


def test_abstract_socket() -> None:
    name = f"da3-edge-test-{os.getpid()}-{secrets.token_hex(4)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(5)
    sock.bind("\0" + name)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
    try:
        assert notifier.ready("abstract")
        assert received(sock) == b"READY=1\nSTATUS=abstract"
    finally:
        notifier.close()
        sock.close()


def test_noop_without_notify_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    for notifier in (Notifier.from_env(), Notifier.from_env({})):
        assert not notifier.enabled
        assert notifier.watchdog_interval is None
        assert notifier.ready("up") is False
        assert notifier.status("x") is False
        assert notifier.watchdog() is False
        assert notifier.stopping() is False
        assert notifier.reloading() is False
        notifier.close()


def test_from_env_reads_os_environ(
    monkeypatch: pytest.MonkeyPatch, listener: tuple[socket.socket, str]
) -> None:
    sock, address = listener
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    notifier = Notifier.from_env()
    try:
        assert notifier.watchdog_interval == 15.0
        assert notifier.watchdog()
        assert received(sock) == b"WATCHDOG=1"
    finally:
        notifier.close()


def test_watchdog_interval_is_half_the_timeout() -> None:
    env = {"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "10000000"}
    assert Notifier.from_env(env).watchdog_interval == 5.0
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier.from_env(env).watchdog_interval == 5.0


@pytest.mark.parametrize("usec", ["", "0", "-5", "ten"])
def test_no_watchdog_without_a_valid_timeout(usec: str) -> None:
    env = {"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": usec}
    assert Notifier.from_env(env).watchdog_interval is None
    assert Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent"}).watchdog_interval is None


@pytest.mark.parametrize("pid", ["1", "not-a-pid"])
def test_watchdog_pid_of_another_process_disables_the_watchdog(pid: str) -> None:
    assert str(os.getpid()) != pid
    env = {"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "10000000", "WATCHDOG_PID": pid}
    notifier = Notifier.from_env(env)
    assert notifier.watchdog_interval is None
    assert notifier.enabled  # notifications still go; only the watchdog is not ours


def test_missing_socket_returns_false(tmp_path: Path) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    try:
        assert notifier.enabled
        assert notifier.ready("up") is False
        assert notifier.watchdog() is False
    finally:
        notifier.close()


def test_unsupported_address_returns_false() -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": "relative/notify.sock"})
    assert notifier.ready() is False
    notifier.close()


def test_a_socket_that_appears_later_is_reached(tmp_path: Path) -> None:
    path = tmp_path / "late.sock"
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(path)})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.settimeout(5)
    try:
        assert notifier.ready() is False
        sock.bind(str(path))  # systemd re-created its socket (daemon-reexec)
        assert notifier.ready() is True
        assert received(sock) == b"READY=1"
    finally:
        notifier.close()
        sock.close()


def test_nothing_sent_after_close(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    notifier = Notifier.from_env({"NOTIFY_SOCKET": address})
    assert notifier.status("one")
    notifier.close()
    assert notifier.status("two") is False
    notifier.close()  # idempotent
    assert received(sock) == b"STATUS=one"
    sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        sock.recv(65536)


def test_notify_from_another_process(listener: tuple[socket.socket, str]) -> None:
    sock, address = listener
    env = {k: v for k, v in os.environ.items() if k not in ("WATCHDOG_PID",)}
    env.update(NOTIFY_SOCKET=address, WATCHDOG_USEC="10000000")
    proc = children.run("notify", env=env)
    assert proc.returncode == 0, proc.stderr
    pid = proc.stdout.strip()
    assert received(sock) == f"READY=1\nSTATUS=pid {pid}".encode()
    assert received(sock) == b"WATCHDOG=1"


def test_subprocess_with_foreign_watchdog_pid_does_not_see_a_watchdog(
    listener: tuple[socket.socket, str],
) -> None:
    """A child that inherits the parent's WATCHDOG_PID is not the watched process."""
    _sock, address = listener
    env = dict(os.environ, NOTIFY_SOCKET=address, WATCHDOG_USEC="10000000")
    env["WATCHDOG_PID"] = str(os.getpid())  # ours, not the child's
    proc = children.run("watchdog-interval", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None"
