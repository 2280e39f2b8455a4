"""`da3-edge serve` under hostile clients, on loopback, against the real process.

A store written by hand (tests/test_store_trust.py's), a serve with small bounds from
its config, and clients that misbehave: a thousand connections that never finish
their request, clients that never read a stream or a download, a web page's request
under another name (DNS rebinding), guessed credentials. Each must leave serve
answering real requests, its files and memory bounded. docs/reference/security.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from edge.serve.auth import Backoff
from scripts.support import processes
from scripts.support.serve import serving
from scripts.support.store import frame, store

HEADER_TIMEOUT, SEND_TIMEOUT = 3.0, 3.0


def config(tmp_path: Path, **extra: object) -> Path:
    """A [serve] section with small bounds; ``extra`` keys added or replaced."""
    keys: dict[str, object] = {
        "connections": 64,
        "header_timeout": HEADER_TIMEOUT,
        "send_timeout": SEND_TIMEOUT,
        "downloads": 4,
        **extra,
    }
    lines = ["[serve]", *(f"{k} = {json.dumps(v)}" for k, v in keys.items())]
    path = tmp_path / "serve.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def fds(pid: int) -> list[str]:
    return list(processes.fds(pid).values())


def connections(pid: int) -> int:
    """The TCP connections ``pid`` holds open: its TCP sockets other than listeners. (A
    count of all its sockets would depend on when asyncio opens its own wake-up pair.)"""
    state = {}  # socket inode -> TCP state
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                state[fields[9]] = fields[3]
    inodes = [f[len("socket:[") : -1] for f in fds(pid) if f.startswith("socket:[")]
    return len([i for i in inodes if state.get(i, "0A") != "0A"])  # 0A: LISTEN


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def until(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def get(
    port: int, path: str, headers: dict[str, str] | None = None, timeout: float = 10
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@contextlib.contextmanager
def soft_files(limit: int) -> Iterator[None]:
    """This process's soft limit on open files set to ``limit`` for a while: what a
    child started meanwhile keeps."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_thousand_half_open_connections_do_not_starve_serve(tmp_path: Path) -> None:
    """1,100 connections that send half a request line and wait, against serve with the
    1024 open files a unit gets by default: a real request is still answered within 3 s,
    and serve never holds more connections than its bound."""
    root = store(tmp_path)
    cfg = config(tmp_path)
    with contextlib.ExitStack() as stack:
        with soft_files(1024):
            s = stack.enter_context(
                serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log")
            )
        pid = s.proc.pid
        idle: list[socket.socket] = []
        stack.callback(close_all, idle)
        with soft_files(8192):  # this process opens the 1,100
            for _ in range(1100):
                with contextlib.suppress(OSError):  # serve may have closed one: the point
                    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
                    idle.append(sock)
                    sock.sendall(b"GET /latest.json HTT")
            start = time.monotonic()
            try:
                code = get(s.port, "/latest.json", timeout=3)[0]
            except OSError as exc:
                pytest.fail(f"a real request among 1,100 half-open ones: no answer ({exc})")
            took = time.monotonic() - start
            assert code == 200 and took < 3
            # Connections it has just dropped to make room close on its loop's next turn.
            until(lambda: connections(pid) <= 64, 30, "serve down to 64 connections")
            print(
                f"a real request among 1,100 half-open ones: {code} in {took:.2f} s; serve "
                f"holds {connections(pid)} connections (at most 64)"
            )
    assert "Traceback" not in s.log


def test_a_request_whose_headers_never_end_is_closed(tmp_path: Path) -> None:
    root = store(tmp_path)
    with serving(
        ["--config", str(config(tmp_path)), "--store", str(root)], tmp_path / "serve.log"
    ) as s:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        sock.sendall(b"GET /latest.json HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        start = time.monotonic()
        assert sock.recv(1024) == b""  # closed by serve
        took = time.monotonic() - start
        print(f"closed after {took:.1f} s (header_timeout {HEADER_TIMEOUT:g} s)")
        assert took >= HEADER_TIMEOUT - 0.5
        sock.close()


def noise_png(path: Path, side: int = 640) -> None:
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(path)


class Publisher(threading.Thread):
    """Publishes a new frame (a large, incompressible preview) every ``every`` s."""

    def __init__(self, root: Path, every: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.seq = 43

    def run(self) -> None:
        while not self.stop.wait(self.every):
            path = frame(self.root / "frames", self.seq)
            noise_png(path / "frame.preview.png")
            link = self.root / f".latest.{self.seq}"
            os.symlink(f"frames/{self.seq:010d}", link)
            os.replace(link, self.root / "latest")
            self.seq += 1


def test_clients_that_never_read_a_stream_are_dropped(tmp_path: Path) -> None:
    """40 clients open /stream.mjpg and never read while frames come: each is closed once
    its send buffer stays full for send_timeout; serve's descriptors and memory stay
    bounded, and a reading client still gets frames."""
    root = store(tmp_path)
    noise_png(root / "frames" / "0000000042" / "frame.preview.png")
    publisher = Publisher(root)
    cfg = config(tmp_path, clients=64, connections=128)
    stalled: list[socket.socket] = []
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(
            serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log")
        )
        pid = s.proc.pid
        publisher.start()
        stack.callback(publisher.join, 30)  # its last frame written, so none stays open
        stack.callback(publisher.stop.set)
        stack.callback(close_all, stalled)
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: localhost\r\n\r\n")
            stalled.append(sock)
        # Taken in by serve (not still in the listen queue), and answering.
        until(lambda: connections(pid) >= 40, 60, "serve took the 40 streams")
        before = processes.kib(pid, "VmRSS")
        start = time.monotonic()
        try:
            until(
                lambda: connections(pid) == 0,
                60 + 10 * SEND_TIMEOUT,
                "serve closed the 40 stalled streams",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {connections(pid)} still open") from None
        after = processes.kib(pid, "VmRSS")
        print(
            f"40 stalled streams dropped after {time.monotonic() - start:.1f} s "
            f"(send_timeout {SEND_TIMEOUT:g} s); serve RSS {before / 1024:.1f} MiB with "
            f"them, {after / 1024:.1f} MiB after; descriptors now {len(fds(pid))}"
        )
        assert after < before + 50 * 1024
        # A client that reads still gets frames.
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
        conn.request("GET", "/stream.mjpg")
        resp = conn.getresponse()
        assert resp.status == 200 and b"image/jpeg" in resp.read(2048)
        conn.close()
    assert "Traceback" not in s.log


def test_a_stalled_download_keeps_no_pruned_file_open(tmp_path: Path) -> None:
    """A client that asks for /latest.npz (20 MB) and never reads; the frame is pruned:
    after send_timeout serve holds no deleted file. More downloads than serve.downloads
    at once are refused."""
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    frame(root / "frames", 42, npz=os.urandom(20 << 20))
    (root / "store-id").write_text("0123456789abcdef\n")
    os.symlink("frames/0000000042", root / "latest")
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(
            serving(
                ["--config", str(config(tmp_path)), "--store", str(root)], tmp_path / "serve.log"
            )
        )
        pid = s.proc.pid
        stalled: list[socket.socket] = []
        stack.callback(close_all, stalled)
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /latest.npz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            stalled.append(sock)
        until(lambda: [f for f in fds(pid) if f.endswith("frame.npz")], 30, "the downloads began")
        code, _, body = get(s.port, "/latest.npz")
        assert code == 503 and b"too many downloads at once" in body
        for f in (root / "frames" / "0000000042").iterdir():  # pruned
            f.unlink()
        (root / "frames" / "0000000042").rmdir()
        held = until(
            lambda: not [f for f in fds(pid) if "(deleted)" in f] or None,
            60 + 10 * SEND_TIMEOUT,
            "serve let go of the pruned file",
        )
        assert held


def test_downloads_abandoned_at_once_give_back_their_slot(tmp_path: Path) -> None:
    """Clients that ask for /latest.npz and close at once, more than serve.downloads of
    them: each download's file and slot are given back, so a real download still works
    and serve holds no frame file."""
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    frame(root / "frames", 42, npz=os.urandom(4 << 20))
    (root / "store-id").write_text("0123456789abcdef\n")
    os.symlink("frames/0000000042", root / "latest")
    with serving(
        ["--config", str(config(tmp_path)), "--store", str(root)], tmp_path / "serve.log"
    ) as s:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(b"GET /latest.npz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            sock.close()  # a reset, before reading anything
        # Once serve has dealt with them (no deadline but this), a download gets through.
        body = until(
            lambda: (r := get(s.port, "/latest.npz"))[0] == 200 and r[2],
            60,
            "a download after the abandoned ones",
        )
        assert len(body) == 4 << 20
        # That download's own file is closed just after its last byte went out, which the
        # client can have read first: a deadline, not an instant.
        until(
            lambda: not [f for f in fds(s.proc.pid) if f.endswith("frame.npz")],
            30,
            "serve let go of every frame file",
        )


HOSTS = {
    "localhost": 200,
    "localhost:8000": 200,
    "127.0.0.1:8000": 200,
    "[::1]:8000": 200,
    "DepthCam.local": 200,  # configured in serve.hosts (names are not case-sensitive)
    "attacker.example": 421,
    "attacker.example:8000": 421,
    "127.0.0.1.attacker.example": 421,
}


def test_host_names_other_than_this_machines_get_421(tmp_path: Path) -> None:
    """On loopback, a request naming another host (a web page whose own name resolves to
    127.0.0.1: DNS rebinding) gets 421 and no content."""
    root = store(tmp_path)
    cfg = config(tmp_path, hosts=["depthcam.local"])
    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        for host, code in HOSTS.items():
            got, _, body = get(s.port, "/latest.json", {"Host": host})
            assert got == code, (host, got)
            if code == 421:
                assert body == b"", host


def strong_token() -> str:
    return "kQ3v_Zf8-Lw2Rt9yXa7Mn4Pb6Hc1Jd0Es5Ug"  # 36 chars of the base64url alphabet


def secret(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("token", "s3cret-token", "the token in {path} is too weak to be guessed safely"),
        ("token", "0123456789abcdef0123", "the token in {path} is too weak"),  # 80 bits of hex
        ("token", "a" * 43, "the token in {path} is too weak"),  # long, but one letter
        ("token", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ", "the token in {path} is too weak"),
        ("basic", "viewer:", "must hold user:password, neither of them empty"),
        ("basic", ":pa55word", "must hold user:password, neither of them empty"),
        ("basic", "a:1", "the password in {path} is too weak to be guessed safely"),
        ("basic", "admin:admin", "the password in {path} is too weak"),
        ("basic", "pi:raspberry", "the password in {path} is too weak"),
    ],
)
def test_weak_credentials_are_refused_at_start(
    tmp_path: Path, kind: str, text: str, message: str
) -> None:
    from scripts.support.tools import run_cli

    path = secret(tmp_path, kind, text)
    key = "token_file" if kind == "token" else "basic_auth_file"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\n{key} = "{path}"\n')
    proc = run_cli(
        ["serve", "--config", str(cfg), "--port", "0", "--store", str(tmp_path)], timeout=60
    )
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and message.format(path=path) in lines[0], proc.stderr


def test_a_fifo_as_a_secret_file_does_not_block_the_start(tmp_path: Path) -> None:
    from scripts.support.tools import run_cli

    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[serve]\ntoken_file = "{fifo}"\n')
    proc = run_cli(
        ["serve", "--config", str(cfg), "--port", "0", "--store", str(tmp_path)], timeout=60
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"da3-edge: error: serve.token_file: {fifo} is not a regular file"


def test_failed_logins_are_slowed_per_client(tmp_path: Path) -> None:
    """Each wrong credential is answered after its address's penalty (0.5 s, 1 s, 2 s,
    ...); the right one is checked first and answered at once, penalty or not."""
    token = secret(tmp_path, "token", strong_token())
    cfg = config(tmp_path, token_file=str(token))
    root = store(tmp_path)
    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        waits = []
        for _ in range(4):
            start = time.monotonic()
            code, _, _ = get(s.port, "/latest.json", {"Authorization": "Bearer guess"}, timeout=30)
            waits.append(time.monotonic() - start)
            assert code == 401
        print("answers to wrong tokens after", [f"{w:.2f} s" for w in waits])
        for n, wait in enumerate(waits):
            assert wait >= 0.5 * 2**n - 0.05, waits
        start = time.monotonic()
        code, _, _ = get(s.port, "/latest.json", {"Authorization": f"Bearer {strong_token()}"})
        took = time.monotonic() - start
        print(f"the right token after them: {code} in {took:.2f} s")
        assert code == 200 and took < 0.5
        basic = base64.b64encode(b"x:y").decode()
        assert get(s.port, "/latest.json", {"Authorization": f"Basic {basic}"})[0] == 401


def test_guesses_in_parallel_get_429_unchecked(tmp_path: Path) -> None:
    """While one wrong guess from an address serves its penalty, 20 more from the same
    address at once (parallel connections, say): one waits its turn, the others get 429
    at once, unchecked. A header that passed before goes through anyway."""
    token = secret(tmp_path, "token", strong_token())
    cfg = config(tmp_path, token_file=str(token))
    root = store(tmp_path)
    right = {"Authorization": f"Bearer {strong_token()}"}
    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        assert get(s.port, "/latest.json", right)[0] == 200  # remembered from now on
        for _ in range(3):  # a penalty of 4 s for the next wrong one
            get(s.port, "/latest.json", {"Authorization": "Bearer guess"}, timeout=30)
        held = threading.Thread(
            target=get,
            args=(s.port, "/latest.json", {"Authorization": "Bearer held"}),
            kwargs={"timeout": 30},
        )
        held.start()
        time.sleep(0.5)  # its check is done, its penalty runs
        answers: list[tuple[int, float]] = []

        def guess(n: int) -> None:
            start = time.monotonic()
            code = get(s.port, "/latest.json", {"Authorization": f"Bearer guess{n}"}, timeout=60)[0]
            answers.append((code, time.monotonic() - start))

        guesses = [threading.Thread(target=guess, args=(n,)) for n in range(20)]
        for t in guesses:
            t.start()
        until(lambda: len(answers) >= 19, 30, "19 answers")
        assert get(s.port, "/latest.json", right)[0] == 200
        for t in [held, *guesses]:
            t.join(60)
    codes = sorted(code for code, _ in answers)
    refused = [took for code, took in answers if code == 429]
    print(f"20 guesses during a penalty: {codes}, the 429s within {max(refused):.2f} s")
    # The one that waited was checked after the penalty (3.5 s left) and served its own.
    assert codes == [401] + [429] * 19, codes
    assert max(took for code, took in answers if code == 401) > 3.0


def test_a_login_waits_out_a_neighbours_penalty_instead_of_429(tmp_path: Path) -> None:
    """A script at 127.0.0.1 failing logins one after another, and the owner's first
    login from the same address (an SSH tunnel arrives there too): the owner is checked
    once the script's penalty ends, and let in, never answered 429."""
    token = secret(tmp_path, "token", strong_token())
    cfg = config(tmp_path, token_file=str(token))
    root = store(tmp_path)
    stop = threading.Event()
    failed: list[int] = []

    def script() -> None:
        while not stop.is_set():
            failed.append(get(s.port, "/latest.json", {"Authorization": "Bearer guess"}, 30)[0])

    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        guesser = threading.Thread(target=script)
        guesser.start()
        try:
            answers = []
            for spaces in (1, 2):  # two logins, each a header serve has not seen pass
                # Three more failures since the last login let in (which cleared the
                # address's penalty): the script's fourth guess is in its 4 s penalty.
                seen = len(failed)
                until(lambda n=seen + 3: len(failed) >= n, 30, "three failed logins")
                time.sleep(0.2)
                start = time.monotonic()
                auth = {"Authorization": "Bearer" + " " * spaces + strong_token()}
                code = get(s.port, "/latest.json", auth, timeout=30)[0]
                answers.append((code, round(time.monotonic() - start, 2)))
                assert code == 200, answers
        finally:
            stop.set()
            guesser.join(60)
    print(f"the owner's logins beside the script's failures: {answers}; the script's: {failed}")
    assert set(failed) == {401}


def test_backoff_doubles_clears_and_forgets() -> None:
    now = [100.0]
    backoff = Backoff(first=0.5, cap=8.0, size=3, clock=lambda: now[0])
    assert backoff.wait("a") == 0
    for expected in (0.5, 1.0, 2.0, 4.0, 8.0, 8.0):
        backoff.failed("a")
        assert backoff.wait("a") == expected
    now[0] += 3.0
    assert backoff.wait("a") == 5.0  # what is left of the 8 s
    backoff.succeeded("a")
    assert backoff.wait("a") == 0
    backoff.failed("a")
    assert backoff.wait("a") == 0.5  # cleared: starts again at the first step
    for client in ("b", "c"):  # three addresses remembered: the table is full
        backoff.failed(client)
    assert not backoff.room()  # a fourth finds no room while they are in penalty
    now[0] += 0.6  # their penalties just ended: still remembered (a next failure doubles)
    assert not backoff.room() and backoff.knows("a")
    now[0] += 8.0  # out of penalty for over cap: forgotten, room again
    assert backoff.room() and not backoff.knows("a") and not backoff.knows("b")
    backoff.failed("d")
    assert backoff.wait("d") == 0.5 and backoff.room()  # one of three


def test_plain_stream_readers_leave_slots_for_the_page(tmp_path: Path) -> None:
    """Eight plain readers of /stream.mjpg from one address (curl in a loop) took every
    slot and the page's /events answered 503: streams from one address are capped, and a
    quarter of the slots stays for events."""
    cfg = config(tmp_path)
    root = store(tmp_path)
    noise_png(root / "frames" / "0000000042" / "frame.preview.png", side=64)
    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        socks, codes = [], []
        try:
            for _ in range(8):
                sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
                sock.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                codes.append(int(sock.recv(64).split()[1]))
                socks.append(sock)
            events = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            events.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            events_code = int(events.recv(64).split()[1])
            events.close()
        finally:
            close_all(socks)
    print(f"eight streams from one address: {codes}; then /events: {events_code}")
    assert codes == [200, 200] + [503] * 6 and events_code == 200


def test_one_address_cannot_take_every_events_slot(tmp_path: Path) -> None:
    """Eight /events from one address took every slot, and the page from another address
    answered 503: one address takes at most all but a quarter of the slots."""
    cfg = config(tmp_path)
    root = store(tmp_path)
    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        socks, codes = [], []
        try:
            for source in ["127.0.0.1"] * 8 + ["127.0.0.2"]:
                sock = socket.create_connection(
                    ("127.0.0.1", s.port), timeout=5, source_address=(source, 0)
                )
                sock.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                codes.append(int(sock.recv(64).split()[1]))
                socks.append(sock)
        finally:
            close_all(socks)
    print(f"eight /events from one address, then one from another: {codes}")
    assert codes == [200] * 6 + [503] * 2 + [200]


class _Transport(asyncio.Transport):
    """What H11Protocol writes to, in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.out, self.closing = b"", False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += bytes(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_the_uvicorn_state_serves_limits_read_is_where_they_read_it() -> None:
    """edge/serve/limits.py overrides H11Protocol's methods and reads its private state:
    ``connections`` (the server's set), ``loop``, ``transport``, ``cycle`` (None between
    requests) and the cycle's ``response_complete``. pyproject.toml pins uvicorn to the
    range this passes on: a uvicorn that moves them fails here, not serve on a Pi."""
    from uvicorn.config import Config
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.server import ServerState

    async def app(scope: object, receive: object, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def one_request() -> None:
        config = Config(app=app, log_config=None)
        config.load()
        state = ServerState()
        proto = H11Protocol(
            config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
        )
        transport = _Transport()
        proto.connection_made(transport)
        assert proto.connections is state.connections and proto in proto.connections
        assert proto.transport is transport and proto.loop is asyncio.get_running_loop()
        assert proto.cycle is None
        proto.data_received(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert proto.cycle is not None and proto.cycle.response_complete is False
        for _ in range(100):
            await asyncio.sleep(0.01)
            if proto.cycle.response_complete:
                break
        assert proto.cycle.response_complete, transport.out
        assert transport.out.startswith(b"HTTP/1.1 204 ")
        for name in (
            "data_received",
            "on_response_complete",
            "pause_writing",
            "resume_writing",
            "connection_lost",
        ):
            assert callable(getattr(H11Protocol, name)), name
        proto.connection_lost(None)
        assert proto not in state.connections

    asyncio.run(one_request())


def test_guesses_from_many_addresses_never_slow_a_logged_in_download(tmp_path: Path) -> None:
    """480 loopback addresses (any local user has 127.x.y.z) each guess a hashed password
    at once. Password checks are bounded for the whole server (two at a time, 429 past
    that) and run on threads of their own: a logged-in user's 7 MB download is not queued
    behind 16 MiB scrypt runs, and serve's memory stays far under its unit's 256M."""
    from edge.passwords import hashed

    password = "correct horse battery staple rides again"
    users = tmp_path / "users"
    users.write_text(f"viewer:{hashed(password)}\n")
    users.chmod(0o600)
    cfg = config(tmp_path, basic_auth_file=str(users), connections=600)
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    frame(root / "frames", 7, npz=os.urandom(7_000_000))
    (root / "store-id").write_text("s\n")
    os.symlink("frames/0000000007", root / "latest")
    right = {"Authorization": "Basic " + base64.b64encode(f"viewer:{password}".encode()).decode()}
    wrong = {"Authorization": "Basic " + base64.b64encode(b"viewer:guess").decode()}
    codes: list[int] = []

    def guess(n: int) -> None:
        conn = http.client.HTTPConnection(
            "127.0.0.1", s.port, timeout=60, source_address=(f"127.1.{n // 200}.{n % 200 + 2}", 0)
        )
        try:
            conn.request("GET", "/latest.json", headers=wrong)
            codes.append(conn.getresponse().status)
        except OSError:
            codes.append(0)
        finally:
            conn.close()

    with serving(["--config", str(cfg), "--store", str(root)], tmp_path / "serve.log") as s:
        assert get(s.port, "/latest.json", right)[0] == 200  # logged in: remembered
        threads = [threading.Thread(target=guess, args=(n,)) for n in range(480)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the guesses are in
        start = time.monotonic()
        code, _, body = get(s.port, "/latest.npz", right, timeout=60)
        took = time.monotonic() - start
        for t in threads:
            t.join(60)
        peak = processes.kib(s.proc.pid, "VmHWM") / 1024
    print(
        f"logged-in download {len(body) / 1e6:.1f} MB in {took:.2f} s during 480 guesses; "
        f"answers {sorted(set(codes))}, 429: {codes.count(429)}, serve peak RSS {peak:.0f} MiB"
    )
    assert code == 200 and len(body) == 7_000_000
    assert took < 2.0
    assert codes.count(429) > 0 and set(codes) <= {401, 429}
    assert peak < 150, peak
