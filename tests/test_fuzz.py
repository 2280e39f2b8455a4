"""Bounded fuzzing of what takes input from outside: serve's HTTP surface, the config
loader, the image decoder. Seeded (each run the same inputs, so a failure reproduces),
a few thousand cases each, their counts printed.

What must hold: serve never answers 500 and never logs a traceback; the config loader
only ever refuses with a one-line ConfigError; the decoder only ever refuses one file
with a one-line ImageError, and snap goes on with the next file.
"""

from __future__ import annotations

import collections
import io
import random
import socket
import time
from pathlib import Path

import pytest
from PIL import Image

from edge import config as config_mod
from edge import images
from edge.errors import ConfigError, ImageError
from scripts.support.photos import photo_path
from scripts.support.serve import serving
from scripts.support.store import store
from scripts.support.tools import run_cli

SEED = 20261204
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"]
METHODS += ["get", "G\x00T", "BREW", ""]  # and bad ones
PATHS = [
    "/",
    "/latest.json",
    "/latest.npz",
    "/latest.png",
    "/latest.preview.png",
    "/latest.jpg",
    "/stream.mjpg",
    "/events",
    "/healthz",
    "/metrics",
    "/api/status",
    "/nothing",
    "/../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "//latest.json",
    "/latest.json/",
    "/latest.json%00",
    "/\u00e9t\u00e9",
    "/" + "a" * 5000,
    "*",
    "http://localhost/latest.json",
    "/latest.json?x",
    "/events?" + "&" * 300,
]
HEADERS = [
    "Host",
    "Authorization",
    "If-None-Match",
    "Range",
    "Content-Length",
    "Transfer-Encoding",
    "Accept",
    "Cookie",
    "X-Forwarded-For",
    "Connection",
    "Expect",
    "Upgrade",
]
VALUES = [
    "",
    "localhost",
    "Bearer x",
    "Basic !!",
    "bytes=0-",
    "bytes=oops-",
    "-1",
    "99999999999999999999",
    "chunked",
    "close",
    "100-continue",
    "websocket",
    '"a-1", W/"b"',
    "\u00ff" * 20,
    "x" * 9000,
]


def raw_request(rng: random.Random) -> bytes:
    method = rng.choice(METHODS)
    path = rng.choice(PATHS)
    if rng.random() < 0.3:
        path += "?" + "&".join(
            f"{rng.choice('abcxyz')}={rng.randbytes(rng.randint(0, 8)).hex()}"
            for _ in range(rng.randint(0, 5))
        )
    version = rng.choice(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", ""])
    lines = [f"{method} {path} {version}".strip()]
    if rng.random() < 0.9:
        lines.append(f"Host: {rng.choice(['localhost', '127.0.0.1:8000', 'evil.example'])}")
    for _ in range(rng.randint(0, 6)):
        lines.append(f"{rng.choice(HEADERS)}: {rng.choice(VALUES)}")
    body = rng.randbytes(rng.choice([0, 0, 10, 1000]))
    if body and rng.random() < 0.5:
        lines.append(f"Content-Length: {len(body)}")
    head = "\r\n".join(lines).encode("utf-8", "surrogateescape") + b"\r\n\r\n"
    if rng.random() < 0.05:  # bytes no HTTP parser expects
        head = rng.randbytes(rng.randint(1, 200)) + b"\r\n\r\n"
    return head + body


def status_of(port: int, request: bytes) -> int | None:
    """The status code serve answers (None: it closed without an answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return None  # closed on us mid-request: no answer, not a 500
        data = b""
        try:
            while len(data) < 64 and (chunk := sock.recv(4096)):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    if not data.startswith(b"HTTP/"):
        return None
    return int(data.split(b" ", 2)[1])


def test_http_surface_never_answers_500(tmp_path: Path) -> None:
    root = store(tmp_path)
    rng = random.Random(SEED)
    counts: collections.Counter[int | None] = collections.Counter()
    start = time.monotonic()
    with serving(["--store", str(root)], tmp_path / "serve.log") as s:
        for _ in range(2000):
            code = status_of(s.port, raw_request(rng))
            counts[code] += 1
            assert code is None or code < 500 or code == 503, code
    took = time.monotonic() - start
    shown = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))
    print(f"2000 fuzzed requests in {took:.0f} s; answers {shown}")
    assert "Traceback" not in s.log and "Exception" not in s.log, s.log[-3000:]
    assert counts[200] > 0 and counts[404] > 0  # the cases reached the app, not only h11


def mutations(data: bytes, rng: random.Random) -> bytes:
    """One of: flipped bytes, a cut, a repeated slice, an inserted run, a spliced part."""
    out = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:
        for _ in range(rng.randint(1, 16)):
            if out:
                out[rng.randrange(len(out))] = rng.randrange(256)
    elif kind == 1:
        out = out[: rng.randrange(len(out) + 1)]
    elif kind == 2 and out:
        i = rng.randrange(len(out))
        out[i:i] = out[i : i + rng.randint(1, 64)] * rng.randint(1, 4)
    elif kind == 3:
        i = rng.randrange(len(out) + 1)
        out[i:i] = rng.randbytes(rng.randint(1, 32))
    elif out:
        i, j = sorted(rng.randrange(len(out)) for _ in range(2))
        del out[i:j]
    return bytes(out)


def test_config_loader_refuses_in_one_line() -> None:
    text = config_mod.default_text().encode()
    rng = random.Random(SEED)
    outcomes: collections.Counter[str] = collections.Counter()
    for n in range(3000):
        mutated = mutations(text, rng).decode("utf-8", "replace")
        try:
            config_mod.parse(mutated, f"fuzz-{n}.toml")
            outcomes["accepted"] += 1
        except ConfigError as exc:
            assert "\n" not in str(exc), str(exc)
            assert str(exc).startswith(f"fuzz-{n}.toml"), str(exc)
            outcomes["refused in one line"] += 1
    print(f"3000 mutated configs: {dict(outcomes)}")
    assert outcomes["refused in one line"] > 1000


@pytest.fixture(scope="module")
def encoded() -> dict[str, bytes]:
    with Image.open(photo_path("coffee.png")) as im:
        small = im.convert("RGB").resize((96, 64))
    out = {}
    for fmt in ("JPEG", "PNG"):
        buf = io.BytesIO()
        small.save(buf, fmt)
        out[fmt] = buf.getvalue()
    return out


def test_image_decoder_refuses_one_file_at_a_time(encoded: dict[str, bytes]) -> None:
    rng = random.Random(SEED)
    outcomes: collections.Counter[str] = collections.Counter()
    for n in range(3000):
        fmt = rng.choice(sorted(encoded))
        try:
            still = images.load(mutations(encoded[fmt], rng), name=f"f{n}.{fmt.lower()}")
            assert still.rgb.ndim == 3 and still.rgb.shape[2] == 3
            outcomes[f"{fmt} decoded"] += 1
        except ImageError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f"f{n}."), str(exc)
            outcomes[f"{fmt} refused in one line"] += 1
    print(f"3000 mutated images: {dict(outcomes)}")
    assert sum(v for k, v in outcomes.items() if "refused" in k) > 300


def test_snap_goes_on_past_bad_files(
    small_models: Path, tmp_path: Path, encoded: dict[str, bytes]
) -> None:
    """A folder of mutated files around two good ones: each bad one is one line, the
    good ones are written, the exit code says some failed."""
    rng = random.Random(SEED)
    folder = tmp_path / "in"
    folder.mkdir()
    bad = 0
    for n in range(40):
        fmt = rng.choice(sorted(encoded))
        data = mutations(encoded[fmt], rng)
        try:
            images.load(data)
        except ImageError:
            bad += 1
        (folder / f"m{n:02d}.{'jpg' if fmt == 'JPEG' else 'png'}").write_bytes(data)
    (folder / "good-a.jpg").write_bytes(encoded["JPEG"])
    (folder / "good-b.png").write_bytes(encoded["PNG"])
    out = tmp_path / "out"
    proc = run_cli(
        ["snap", str(folder), "--models", str(small_models), "-o", str(out)], timeout=600
    )
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("da3-edge: error: ")]
    print(
        f"snap over 42 files, {bad} of them undecodable: exit {proc.returncode}, "
        f"{len(errors)} error lines"
    )
    assert "Traceback" not in proc.stderr
    assert len(errors) == bad and proc.returncode == (1 if bad else 0)
    assert (tmp_path / "out" / "good-a.json").exists() and (
        tmp_path / "out" / "good-b.json"
    ).exists()


USER_DATA_PARTS = {
    "head": ["#cloud-config\n", "#cloud-config \n", "#cloud-config\r\n", "", "#cloud-conf\n"],
    "before": [
        "",
        "hostname: pi\n",
        "base: &cmds\n- [echo, a]\n",
        "a: &x {runcmd: [[echo, m]]}\n",
        "users:\n- name: pi\n  groups: [a, b]\n",
        "# a comment\n",
        "key: 'x'\n",
    ],
    "runcmd": [
        "runcmd:\n- [echo, a]\n",
        "runcmd: [[echo, a], [echo, b]]\n",
        "runcmd: *cmds\n",
        "<<: *x\n",
        "runcmd: &r\n- [echo, a]\n",
        "runcmd:\n- &e [echo, a]\n- *e\n",
        "runcmd:\n  - echo a\n  - |\n    echo b\n",
        "runcmd: []\n",
        "runcmd: 'echo'\n",
        "runcmd:\n- [echo, a]\nruncmd:\n- [echo, b]\n",
        "runcmd:\n- [echo, a]  # c\n",
        "runcmd:\n- - echo\n  - a\n",
        "",
        "runcmd:\n- [bash, /boot/firmware/da3-edge/x.sh]\n",
    ],
    "after": ["", "packages: [avahi-daemon]\n", "rpi: {interfaces: {serial: true}}\n", "x: [\n"],
}


def test_card_merges_or_refuses_any_user_data_in_one_line() -> None:
    """Imager's user-data as owners and tools may leave it (aliases, merge keys, anchors,
    flow style, block scalars, CRLF, duplicate keys, broken YAML), every combination and
    then seeded mutations: card's merge gives Imager's data plus its one entry, or a
    one-line CardError; never another exception."""
    import itertools

    import yaml

    from edge import card
    from edge.errors import CardError

    rng = random.Random(SEED)
    texts = ["".join(parts) for parts in itertools.product(*USER_DATA_PARTS.values())]
    texts += [
        mutations(rng.choice(texts).encode(), rng).decode("utf-8", "replace") for _ in range(3000)
    ]
    outcomes: collections.Counter[str] = collections.Counter()
    for text in texts:
        if "\r\n" in text:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        try:
            merged = card.merge_user_data(text, "user-data")
        except CardError as exc:
            assert "\n" not in str(exc), str(exc)
            outcomes["refused"] += 1
            continue
        if merged is None:
            outcomes["there already"] += 1
            continue
        data, again = yaml.safe_load(text) or {}, yaml.safe_load(merged)
        assert again == {**data, "runcmd": [*(data.get("runcmd") or []), card.ENTRY]}, text
        outcomes["merged"] += 1
    print(dict(outcomes), f"of {len(texts)}")
    assert outcomes["merged"] > 100 and outcomes["refused"] > 100
