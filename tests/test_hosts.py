"""Where each environment installs, checked against PyPI as it is today.

The runtime (requirements/runtime.txt, from uv.lock) must install on a Pi (Linux
aarch64; Pi OS bookworm's glibc 2.36) and on an Apple Silicon Mac, at every Python the
project claims; the export environment (requirements/export*.txt) where the docs say
models can be made (Linux x86_64, Apple Silicon), and not on a Pi, for the reason the
docs give. Each is resolved with ``uv pip compile --python-platform``: wheels only, no
install, no download of the wheels themselves.

The macOS floor the docs state comes from the binaries: every Mach-O file in the macOS
wheels those resolves pick, read over HTTP range requests (the central directory and
each binary's first bytes, not whole wheels: the export set is ~430 MB a Python), its
LC_BUILD_VERSION minimum OS. Wheel tags say less than that (ai-edge-litert's says
macOS 12). Results are kept per wheel SHA-256 in da3-edge's cache.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import struct
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scripts.support import ROOT
from scripts.support.tools import require_tool

pytestmark = pytest.mark.network

REQ = ROOT / "requirements"
MAC_DOC = ROOT / "docs" / "how-to" / "macos.md"
EXPORT_DOC = ROOT / "docs" / "how-to" / "export-models.md"
PYTHONS = ("3.11", "3.12", "3.13", "3.14")  # pyproject: requires-python >=3.11,<3.15
EXPORT_PYTHONS = ("3.11", "3.12", "3.13")  # transformers' pins have no 3.14 wheels
PI = "aarch64-manylinux_2_36"  # Pi OS bookworm's glibc; trixie's is newer
MAC = "aarch64-apple-darwin"
EXPORT_HOSTS = ("x86_64-manylinux_2_28", MAC)
EXPORT = [
    str(REQ / "export.txt"),
    "-c",
    str(REQ / "export-constraints.txt"),
    "--no-binary",
    "antlr4-python3-runtime",  # an sdist only, pure Python
]


def doc_floor(doc: Path, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, doc.read_text())
    assert found, f"{doc.name} states no macOS floor matching {pattern!r}"
    return tuple(int(x) for x in found.group(1).split("."))


def runtime_floor() -> tuple[int, ...]:
    return doc_floor(MAC_DOC, r"with \*\*macOS (\d+(?:\.\d+)*) or newer\*\*")


def export_floor() -> tuple[int, ...]:
    return doc_floor(EXPORT_DOC, r"Apple Silicon Mac with \*\*macOS (\d+(?:\.\d+)*) or newer\*\*")


def compile_for(
    platform: str, python: str, reqs: list[str], floor: tuple[int, ...], out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    uv = require_tool("uv", "pip install uv")
    cmd = [
        uv,
        "pip",
        "compile",
        "--no-config",
        "--quiet",
        "--python-platform",
        platform,
        "--python-version",
        python,
        "--only-binary",
        ":all:",
        *reqs,
        "-o",
        str(out) if out else "/dev/null",
    ]
    env = {
        **os.environ,
        "UV_PYTHON_DOWNLOADS": "never",
        "MACOSX_DEPLOYMENT_TARGET": ".".join(map(str, floor)),
    }
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")


@pytest.mark.parametrize("platform", [PI, MAC])
@pytest.mark.parametrize("python", PYTHONS)
def test_runtime_set_installs_on_a_pi_and_a_mac(platform: str, python: str) -> None:
    proc = compile_for(platform, python, [str(REQ / "runtime.txt")], runtime_floor())
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("platform", EXPORT_HOSTS)
@pytest.mark.parametrize("python", EXPORT_PYTHONS)
def test_export_env_resolves_where_the_docs_say(platform: str, python: str) -> None:
    proc = compile_for(platform, python, EXPORT, export_floor())
    assert proc.returncode == 0, proc.stderr


def test_export_env_does_not_resolve_on_a_pi_for_the_stated_reason() -> None:
    """The docs say a Pi cannot make models and name the wheel that is missing; when that
    changes, this fails and the docs can say so."""
    proc = compile_for("aarch64-manylinux_2_28", "3.11", EXPORT, export_floor())
    assert proc.returncode != 0
    assert "litert-converter==0.5.0 has no wheels with a matching platform tag" in proc.stderr
    assert "`litert-converter` (0.5.0)" in EXPORT_DOC.read_text()


# ------------------------------------------------------------------ Mach-O minimum OS
LC_BUILD_VERSION, LC_VERSION_MIN_MACOSX = 0x32, 0x24
MH_MAGIC_64, FAT_MAGIC = 0xFEEDFACF, 0xCAFEBABE
CPU_ARM64 = 0x0100000C


def _range(url: str, start: int, end: int | None = None, patience: float = 180.0) -> bytes:
    """Bytes [start, end) of ``url`` (``start`` < 0: the last -start). A shared CI
    network drops a lookup or a connection now and then: those, and the server's 5xx
    and 429, are retried with backoff for up to ``patience`` seconds."""
    spec = f"bytes={start}-{'' if end is None else end - 1}" if start >= 0 else f"bytes={start}"
    deadline, delay = time.monotonic() + patience, 1.0
    while True:
        req = urllib.request.Request(url, headers={"Range": spec})
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                assert response.status == 206, f"{url}: no range support ({response.status})"
                return bytes(response.read())
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            refused = isinstance(exc, urllib.error.HTTPError) and exc.code < 500 and exc.code != 429
            if refused or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 20.0)


def _members(url: str, size: int) -> list[tuple[str, int, int, int]]:
    """(name, method, compressed size, local header offset) of every zip member."""
    tail = _range(url, -min(size, 1 << 16))
    at = tail.rindex(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<II", tail, at + 12)
    cd = _range(url, cd_offset, cd_offset + cd_size)
    out, pos = [], 0
    while pos + 46 <= len(cd) and cd[pos : pos + 4] == b"PK\x01\x02":
        (method,) = struct.unpack_from("<H", cd, pos + 10)
        (csize,) = struct.unpack_from("<I", cd, pos + 20)
        n, m, k = struct.unpack_from("<HHH", cd, pos + 28)
        (offset,) = struct.unpack_from("<I", cd, pos + 42)
        out.append((cd[pos + 46 : pos + 46 + n].decode(), method, csize, offset))
        pos += 46 + n + m + k
    return out


def _head(url: str, member: tuple[str, int, int, int], want: int) -> bytes:
    """The first ``want`` uncompressed bytes of a member (or all it has)."""
    _name, method, csize, offset = member
    head = _range(url, offset, offset + 30 + 1024 + min(csize, want + want // 50 + 4096))
    n, m = struct.unpack_from("<HH", head, 26)
    data = head[30 + n + m :]
    if method == 0:
        return data[:want]
    return zlib.decompressobj(-15).decompress(data, want)


def _arm64_slice(url: str, member: tuple[str, int, int, int]) -> bytes | None:
    """A member's Mach-O header and load commands: the arm64 slice of a universal one."""
    binary = _head(url, member, 1 << 16)
    if len(binary) < 8 or struct.unpack_from(">I", binary)[0] != FAT_MAGIC:
        return binary
    (count,) = struct.unpack_from(">I", binary, 4)
    for i in range(count):
        cpu, _sub, offset, _size, _align = struct.unpack_from(">IIIII", binary, 8 + 20 * i)
        if cpu == CPU_ARM64:
            return _head(url, member, offset + (1 << 16))[offset:]
    return None


def _minos(binary: bytes) -> tuple[int, ...] | None:
    """LC_BUILD_VERSION's (or LC_VERSION_MIN_MACOSX's) minimum OS of a Mach-O file."""
    if len(binary) < 32 or struct.unpack_from("<I", binary)[0] != MH_MAGIC_64:
        return None
    ncmds, _sizeofcmds = struct.unpack_from("<II", binary, 16)
    pos = 32
    for _ in range(ncmds):
        if pos + 8 > len(binary):
            break
        cmd, cmdsize = struct.unpack_from("<II", binary, pos)
        if cmd == LC_BUILD_VERSION:
            (v,) = struct.unpack_from("<I", binary, pos + 12)
            return (v >> 16, (v >> 8) & 0xFF, v & 0xFF)
        if cmd == LC_VERSION_MIN_MACOSX:
            (v,) = struct.unpack_from("<I", binary, pos + 8)
            return (v >> 16, (v >> 8) & 0xFF, v & 0xFF)
        pos += cmdsize
    return None


def _candidate(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith((".so", ".dylib")) or (
        "." not in base and ("/bin/" in name or "/.dylibs/" in name)
    )


def wheel_floors(url: str, size: int, sha256: str) -> dict[str, list[int]]:
    """Each Mach-O member of a remote wheel -> its minimum macOS (cached by SHA-256)."""
    # Per machine, like the VM's and the containers' roots (not the session's cache).
    cache = Path.home() / ".cache" / "da3-edge" / "macho" / f"{sha256}.json"
    if cache.is_file():
        return dict(json.loads(cache.read_text()))
    floors: dict[str, list[int]] = {}
    for member in _members(url, size):
        binary = _arm64_slice(url, member) if _candidate(member[0]) else None
        found = _minos(binary) if binary else None
        if found is not None:
            floors[member[0]] = list(found)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(floors, indent=1))
    return floors


def mac_wheels(
    reqs: list[str], pythons: tuple[str, ...], floor: tuple[int, ...], tmp: Path
) -> list[dict[str, object]]:
    """The binary wheels uv picks for an Apple Silicon Mac at each Python (pylock.toml)."""
    wheels: dict[str, dict[str, object]] = {}
    for python in pythons:
        out = tmp / f"pylock.mac{python.replace('.', '')}.toml"
        proc = compile_for(MAC, python, reqs, floor, out)
        assert proc.returncode == 0, proc.stderr
        for package in tomllib.loads(out.read_text())["packages"]:
            for wheel in package.get("wheels", []):
                if not str(wheel["url"]).endswith("-none-any.whl"):
                    wheels[str(wheel["url"])] = wheel
    return list(wheels.values())


@pytest.mark.parametrize(
    ("name", "reqs", "pythons", "floor", "doc"),
    [
        ("runtime", [str(REQ / "runtime.txt")], PYTHONS, runtime_floor, MAC_DOC),
        ("export", EXPORT, EXPORT_PYTHONS, export_floor, EXPORT_DOC),
    ],
)
def test_docs_state_the_macos_the_binaries_need(
    tmp_path: Path,
    name: str,
    reqs: list[str],
    pythons: tuple[str, ...],
    floor: object,
    doc: Path,
) -> None:
    stated = floor()  # type: ignore[operator]
    wheels = mac_wheels(reqs, pythons, stated, tmp_path)
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(
                lambda w: wheel_floors(
                    str(w["url"]),
                    int(w["size"]),
                    str(w["hashes"]["sha256"]),
                ),
                wheels,
            )
        )
    need: tuple[int, ...] = (0,)
    why = ""
    for wheel, floors in zip(wheels, results, strict=True):
        file = str(wheel["url"]).rsplit("/", 1)[1]
        if not floors:
            continue
        member, top = max(floors.items(), key=lambda kv: tuple(kv[1]))
        print(
            f"{file}: {len(floors)} Mach-O files, the highest floor macOS "
            f"{'.'.join(map(str, top))} ({member})"
        )
        if tuple(top) > need:
            need, why = tuple(top), f"{file}: {member}"
    shown = ".".join(map(str, need))
    print(
        f"{name}: {len(wheels)} binary wheels at Python {', '.join(pythons)}; they need "
        f"macOS {shown} ({why}); {doc.name} states {'.'.join(map(str, stated))}"
    )
    assert (*stated, 0, 0)[:3] >= (*need, 0, 0)[:3], (
        f"{doc.name} states macOS {'.'.join(map(str, stated))}; {why} needs {shown}"
    )
