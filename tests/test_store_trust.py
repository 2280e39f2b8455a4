"""Attacks on the store, reproduced against the real serve, publish and daemon.

Each store here is written by hand as a hostile local user would leave it: ``latest``
pointing out of the store, a frame file that is a link to a private file or a FIFO, a
``store-id`` carrying a header and an event, a store directory that is a link, someone
else's, or writable by others, and no private place for the default store. What must
hold: nothing outside the store's own regular files is ever read and handed on (to an
HTTP client, to the broker), nothing blocks, and a store that cannot be trusted is
refused at start in one line. docs/reference/security.md lists the defences.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from edge.config import MqttConfig
from edge.publish import Publisher
from scripts.support.serve import serving
from scripts.support.store import frame, store
from scripts.support.tools import as_user, run_cli, world_readable

SECRET = b"the service user's private key: -----BEGIN PRIVATE KEY----- 42"


def point_latest(root: Path, target: str) -> None:
    (root / "latest").unlink()
    os.symlink(target, root / "latest")


def secret_file(tmp_path: Path) -> Path:
    secret = tmp_path / "private" / "key.pem"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    return secret


def get(port: int, path: str, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def outside_frame(tmp_path: Path) -> Path:
    """A frame-shaped directory outside the store whose npz is the secret."""
    outside = tmp_path / "outside"
    frame(outside, 42, npz=SECRET, preview=SECRET)
    return outside / "0000000042"


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_latest_pointing_out_of_the_store_is_not_followed(tmp_path: Path, how: str) -> None:
    root = store(tmp_path, seq=7)
    target = outside_frame(tmp_path)
    point_latest(root, str(target) if how == "absolute" else "../outside/0000000042")
    with serving(["--store", str(root)], tmp_path / "serve.log") as s:
        for path in ("/latest.npz", "/latest.json", "/latest.preview.png", "/latest.jpg"):
            code, _, body = get(s.port, path)
            print(path, code, body[:80])
            assert SECRET not in body and code == 503, (path, code)
    assert "Traceback" not in s.log


@pytest.mark.parametrize("name", ["frame.npz", "frame.preview.png", "frame.rgb.jpg"])
def test_a_frame_file_that_is_a_link_is_not_served_or_published(tmp_path: Path, name: str) -> None:
    root = store(tmp_path)
    target = root / "frames" / "0000000042" / name
    target.unlink(missing_ok=True)
    os.symlink(secret_file(tmp_path), target)
    with serving(["--store", str(root)], tmp_path / "serve.log") as s:
        for path in (
            "/latest.npz",
            "/latest.preview.png",
            "/latest.rgb.jpg",
            "/latest.jpg",
            "/latest.jpg?view=side",
            "/stream.mjpg",
            "/stream.mjpg?view=rgb",
        ):
            stream = path.startswith("/stream.mjpg")
            code, _, body = mjpg(s.port, path) if stream else get(s.port, path, timeout=3)
            print(path, code, body[:80])
            assert SECRET not in body, path
        assert get(s.port, "/latest.json")[0] == 200  # the honest record is still served
    # publish reads the same files for the broker (the preview goes out retained).
    publisher = Publisher(MqttConfig(enabled=True, preview="both"), root)
    publisher.on_frame(42)
    sent = [payload for _topic, payload, _qos, _retain in publisher.queue]
    assert sent and not [p for p in sent if SECRET in p], sent


def mjpg(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """The first second of a /stream.mjpg."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    conn.request("GET", path)
    resp = conn.getresponse()
    body = b""
    with contextlib.suppress(TimeoutError):
        body = resp.read(4096)
    conn.close()
    return resp.status, {}, body


def test_a_fifo_in_place_of_a_frame_file_blocks_nothing(tmp_path: Path) -> None:
    root = store(tmp_path)
    npz = root / "frames" / "0000000042" / "frame.npz"
    npz.unlink()
    os.mkfifo(npz)
    with serving(["--store", str(root)], tmp_path / "serve.log") as s:
        start = time.monotonic()
        code, _, _ = get(s.port, "/latest.npz", timeout=5)
        assert code == 503 and time.monotonic() - start < 3
        assert get(s.port, "/healthz", timeout=3)[0] in (200, 503)


def test_a_store_id_with_a_newline_injects_no_header_or_event(tmp_path: Path) -> None:
    """The ETag and the events' ids come from store-id: one that is not 16 hex digits
    is not used (a newline there split the ETag header and forged an event)."""
    root = store(tmp_path)
    forged = 'x\nevent: frame\ndata: {"forged": true}\n\nid: y'
    (root / "store-id").write_text(forged)
    with serving(["--store", str(root)], tmp_path / "serve.log") as s:
        code, headers, _ = get(s.port, "/latest.json")
        assert code == 200 and headers["etag"] == '"0-42"', headers
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        conn.request("GET", "/events")
        resp = conn.getresponse()
        assert resp.readline() == b"retry: 2000\n"
        frame(root / "frames", 43)
        os.symlink("frames/0000000043", root / ".latest.new")
        os.replace(root / ".latest.new", root / "latest")
        lines: list[bytes] = []
        while len(lines) < 4:
            lines.append(resp.readline())
        conn.close()
    print(lines)
    assert lines[1:4] == [b"id: 0-43\n", b"event: frame\n", lines[3]]
    assert json.loads(lines[3].removeprefix(b"data: "))["store_seq"] == 43
    assert b"forged" not in b"".join(lines)


def unsafe_store(tmp_path: Path, kind: str) -> Path:
    root = store(tmp_path)
    if kind == "a symbolic link":
        link = tmp_path / "link"
        os.symlink(root, link)
        return link
    if kind == "writable by others":
        os.chmod(root, 0o777)
    elif kind == "writable by the group":
        os.chmod(root, 0o775)
    elif kind == "another user's":
        os.chown(root, 65534, 65534)
    return root


UNSAFE = {
    "a symbolic link": "is a symbolic link: give the directory it points to",
    "writable by others": "can be written by group or others (mode 777): chmod go-w",
    "writable by the group": "can be written by group or others (mode 775): chmod go-w",
    "another user's": "belongs to uid 65534 and gid 65534, neither this user (uid 0) nor one",
}


@pytest.mark.parametrize(
    "kind",
    [pytest.param(k, marks=pytest.mark.root) if k == "another user's" else k for k in UNSAFE],
)
@pytest.mark.parametrize("command", ["serve", "publish", "run"])
def test_an_untrusted_store_is_refused_at_start(tmp_path: Path, kind: str, command: str) -> None:
    root = unsafe_store(tmp_path, kind)
    config = tmp_path / "c.toml"
    config.write_text('[mqtt]\nenabled = true\n[daemon]\n[camera]\nsource = "fake"\n')
    args = {
        "serve": ["serve", "--store", str(root), "--port", "0"],
        "publish": ["publish", "--config", str(config), "--store", str(root)],
        "run": ["run", "--source", "fake", "--store", str(root), "--models", str(tmp_path)],
    }[command]
    try:  # a store that is not refused is served: the command runs until stopped
        proc = run_cli(args, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"da3-edge {command} started on a store that is {kind}")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("da3-edge: error: store "), proc.stderr
    assert UNSAFE[kind] in lines[0]


@pytest.mark.root
def test_a_store_shared_through_a_group_not_its_owners_is_refused() -> None:
    """Another user (Debian's bin) leaves a store of its own frames in a group it shares
    with the reader (users): serve, as nobody in users, refuses it at start in one line
    instead of handing them out. The daemon's way, a store shared through its owner's own
    group (daemon:daemon here, as da3-edge:da3-edge on a Pi), with the reader in that
    group: doctor reads it. So does serve's view under its unit's private user namespace
    (the daemon unmapped, shown as the overflow uid 65534, through serve's own primary
    group), stood in for by nobody's store in the reader's primary group."""
    with world_readable() as base:
        roots = {}
        owners = {"shared": (2, 100), "own": (1, 1), "unmapped": (65534, 1)}
        for name, (uid, gid) in owners.items():
            (base / name).mkdir(mode=0o755)
            roots[name] = store(base / name)
            for path in [roots[name], *roots[name].rglob("*")]:
                os.lchown(path, uid, gid)
            os.chmod(roots[name], 0o750)
        try:
            serve = ("serve", "--store", str(roots["shared"]), "--port", "0")
            refused = as_user(65534, 65534, "100", *serve)
        except subprocess.TimeoutExpired:
            pytest.fail("serve started on a store another user shares through group users")
        doctor = ("doctor", "--json", "--models", str(base), "--store")
        read = [
            as_user(65534, 65534, "1", *doctor, str(roots["own"])),
            as_user(2, 1, "", *doctor, str(roots["unmapped"])),
        ]
    print(refused.stderr)
    assert refused.returncode == 1 and refused.stderr.splitlines() == [
        f"da3-edge: error: store {roots['shared']} belongs to uid 2 through gid 100, a group "
        "that is not that user's own (any member could have made it): use a store of your "
        "own, or one shared through its owner's own group (as da3-edge:da3-edge)"
    ]
    for proc in read:
        check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "store")
        print(check)
        assert check["status"] == "ok" and check["detail"].endswith("readable here"), check


@pytest.mark.root
def test_no_private_place_for_the_store_is_an_error_not_tmp(tmp_path: Path) -> None:
    """As an unprivileged user without $XDG_RUNTIME_DIR (sudo -u, cron, containers) the
    default store is refused, not made in /tmp where another user could make it first."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("XDG_RUNTIME_DIR", "DA3_EDGE_STORE", "RUNTIME_DIRECTORY")
    }
    proc = as_user(65534, 65534, "", "serve", "--port", "0", env=env)
    print(proc.stderr)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "da3-edge: error: no private place for the store: /run is not writable and "
        "$XDG_RUNTIME_DIR is not set; give --store DIR (config store.dir), a directory only "
        "this user can write"
    ]
