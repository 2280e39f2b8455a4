"""Install the torch-free ExecuTorch runtime: pinned wheel -> runtime libraries -> runner.

``install()`` (``da3-edge install-executorch``):

1. the ``executorch`` wheel for the target platform, from PyPI or a given file, checked
   against the SHA-256 pinned below (a download is kept in the user's cache, verified
   again before each use);
2. its ``executorch/lib`` runtime libraries (none links libtorch) and headers, unpacked
   into a scratch directory beside the destination;
3. ``runner.cpp`` compiled against them with the system C++ compiler (``$CXX``, else
   ``c++`` / ``g++`` / ``clang++``; a cross compiler with ``cxx=`` for another platform);
4. on the host platform, the new runner loaded once to check it; then the scratch
   directory renamed into place (a running daemon keeps the old files it mapped).

Run again with the same inputs, it changes nothing. The wheel's version is the
export environment's (``requirements/export.txt``): the programs and the runtime that
runs them come from one ExecuTorch release, and tests/test_etrunner.py keeps them equal.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import platform as _platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from edge import atomic, etrunner
from edge.errors import EdgeError
from edge.models import cache_dir as edge_cache
from edge.models import sha256_file


@dataclass(frozen=True)
class Wheel:
    filename: str
    url: str
    sha256: str


# Any CPython tag carries the same runtime libraries; cp311 is the one pinned (Raspberry
# Pi OS bookworm's Python). The runner uses no CPython API, so it serves every Python.
_PYPI = "https://files.pythonhosted.org/packages"
WHEELS = {
    "x86_64": Wheel(
        "executorch-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        f"{_PYPI}/d3/da/e9b47ab590550d4ecc2b2a447d13e755ade3fa96399d3fa83d9833084c5d/",
        "274c28c2fe2b76acb03f9fa381537425c40e0098dcf886baf6d97a1a55ffe300",
    ),
    "aarch64": Wheel(
        "executorch-1.5.1-cp311-cp311-manylinux_2_28_aarch64.whl",
        f"{_PYPI}/c9/e4/02f092de72be310cfdea4400adc53489322f008b8e60003a77e934b682ce/",
        "8ee02348a3ea80ddf770822911ebf78da616b73afce0fbaaa79f23311c88c66a",
    ),
}
# The libraries the runner links: the runtime, the optimized CPU kernels (which register
# themselves from static initialisers), the XNNPACK delegate and the thread pool.
LIBS = (
    "libexecutorch.so",
    "libexecutorch_kernels_optimized.so",
    "libexecutorch_backend_xnnpack.so",
    "libexecutorch_threadpool.so",
)

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def host_platform() -> str:
    machine = _platform.machine().lower()
    if sys.platform != "linux":
        raise EdgeError(
            f"install-executorch supports Linux (x86_64, aarch64); not {sys.platform} "
            "(no Mac to verify it on yet): use --stages numpy"
        )
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)


def cache_dir() -> Path:
    """Downloaded wheels: in da3-edge's cache (``models.cache_dir``)."""
    return edge_cache() / "wheels"


def _check_wheel(path: Path, wheel: Wheel) -> None:
    try:
        got = sha256_file(path)
    except OSError as exc:
        raise EdgeError(f"{path}: cannot read the wheel ({exc.strerror})") from None
    if got != wheel.sha256:
        raise EdgeError(
            f"{path}: SHA-256 {got[:16]}..., expected {wheel.sha256[:16]}... for "
            f"{wheel.filename}: not the pinned wheel (delete it and retry)"
        )


def fetch_wheel(wheel: Wheel, progress: Progress = _quiet) -> Path:
    """The pinned wheel from the cache, else downloaded into it; hash-checked either way."""
    cache = cache_dir()
    path = cache / wheel.filename
    if path.is_file():
        _check_wheel(path, wheel)
        progress(f"wheel: {path} (cached, SHA-256 ok)")
        return path
    cache.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {wheel.filename} from PyPI")
    start = time.monotonic()

    def download(out: BinaryIO) -> None:
        digest = hashlib.sha256()
        with urllib.request.urlopen(wheel.url + wheel.filename, timeout=60) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != wheel.sha256:
            raise EdgeError(
                f"{wheel.filename}: downloaded SHA-256 {digest.hexdigest()[:16]}..., "
                f"expected {wheel.sha256[:16]}...: refusing it"
            )

    try:  # renamed into the cache only once its SHA-256 is right
        atomic.write_bytes(path, download)
    except OSError as exc:
        raise EdgeError(f"cannot download {wheel.filename} ({exc})") from None
    size = path.stat().st_size / 1e6
    progress(f"wheel: {path} ({size:.1f} MB in {time.monotonic() - start:.1f} s, SHA-256 ok)")
    return path


def _compiler(cxx: str | None) -> list[str]:
    found = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), "c++")
    command = cxx or os.environ.get("CXX") or found
    words = command.split()
    if not words or shutil.which(words[0]) is None:
        raise EdgeError(
            f"no C++ compiler {command!r} to build the ExecuTorch runner "
            "(Debian / Raspberry Pi OS: sudo apt install g++)"
        )
    return words


def _compiler_version(words: list[str]) -> str:
    proc = subprocess.run([*words, "--version"], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    return lines[0] if lines else words[0]


def _unpack(wheel_path: Path, into: Path) -> None:
    wanted = {f"executorch/lib/{name}" for name in LIBS}
    with zipfile.ZipFile(wheel_path) as z:
        names = z.namelist()
        missing = wanted - set(names)
        if missing:
            raise EdgeError(f"{wheel_path.name}: no {', '.join(sorted(missing))}")
        for name in names:
            keep = name in wanted or name.startswith("executorch/include/")
            keep = keep or (".dist-info/licenses/" in name and not name.endswith("/"))
            if keep:
                z.extract(name, into)


def compile_runner(build: Path, cxx: list[str]) -> None:
    """runner.cpp -> build/runner.so against build/executorch/{include,lib}."""
    include = build / "executorch" / "include"
    source = build / "runner.cpp"
    source.write_bytes(etrunner.runner_source())
    command = [
        *cxx,
        "-O2",
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-Wno-deprecated-declarations",
        "-DC10_USING_CUSTOM_GENERATED_MACROS",
        f'-DDA3ET_EXECUTORCH_VERSION="{etrunner.EXECUTORCH_VERSION}"',
        f"-I{include}",
        f"-I{include / 'executorch/runtime/core/portable_type/c10'}",
        str(source),
        "-o",
        str(build / "runner.so"),
        f"-L{build / 'executorch' / 'lib'}",
        "-lexecutorch",
        # The kernels and the delegate register from static initialisers: link them even
        # though no symbol of theirs is named.
        "-Wl,--no-as-needed",
        "-lexecutorch_kernels_optimized",
        "-lexecutorch_backend_xnnpack",
        "-lexecutorch_threadpool",
        "-Wl,--as-needed",
        "-Wl,-rpath,$ORIGIN/executorch/lib",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise EdgeError(f"building the ExecuTorch runner failed ({cxx[0]}): {tail}")
    source.unlink()


def _smoke(build: Path) -> None:
    """Load the new runner in this process: it must be the version it claims."""
    try:
        lib = ctypes.CDLL(str(build / "runner.so"))
    except OSError as exc:
        raise EdgeError(f"the new ExecuTorch runner does not load ({exc})") from None
    lib.da3et_executorch_version.restype = ctypes.c_char_p
    version = lib.da3et_executorch_version().decode()
    if lib.da3et_abi() != etrunner.ABI or version != etrunner.EXECUTORCH_VERSION:
        raise EdgeError(f"the new ExecuTorch runner reports executorch {version}")


def current(dest: Path, record: dict[str, Any]) -> bool:
    """Is ``dest`` already this exact build?"""
    try:
        have = json.loads((dest / "runtime.json").read_text())
    except (OSError, ValueError):
        return False
    keys = ("executorch", "abi", "platform", "wheel_sha256", "runner_sha256")
    files = [dest / "runner.so", *(dest / "executorch" / "lib" / n for n in LIBS)]
    return all(have.get(k) == record[k] for k in keys) and all(f.is_file() for f in files)


def install(
    dest: str | os.PathLike[str] | None = None,
    *,
    target: str | None = None,
    wheel: str | os.PathLike[str] | None = None,
    cxx: str | None = None,
    force: bool = False,
    progress: Progress = _quiet,
) -> tuple[Path, bool]:
    """Install the runtime into ``dest`` (default: this Python's); (path, changed)."""
    host = host_platform()
    target = target or host
    if target not in WHEELS:
        raise EdgeError(f"no pinned executorch wheel for {target} (have: {', '.join(WHEELS)})")
    if target != host and not cxx:
        raise EdgeError(
            f"building for {target} on {host} needs a cross compiler: "
            f"--cxx {target}-linux-gnu-g++ (Debian: apt install g++-{target}-linux-gnu)"
        )
    pinned = WHEELS[target]
    path = Path(dest) if dest else etrunner.default_dir()
    record: dict[str, Any] = {
        "executorch": etrunner.EXECUTORCH_VERSION,
        "abi": etrunner.ABI,
        "platform": target,
        "wheel": pinned.filename,
        "wheel_sha256": pinned.sha256,
        "runner_sha256": etrunner.source_digest(),
    }
    if not force and current(path, record):
        return path, False
    note = etrunner.failure_note(path)
    try:
        try:
            _build(path, record, pinned, target == host, wheel=wheel, cxx=cxx, progress=progress)
        except OSError as exc:
            raise EdgeError(f"cannot install the ExecuTorch runner into {path} ({exc})") from None
    except EdgeError as exc:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            note.write_text(f"{exc}\n")
        raise
    note.unlink(missing_ok=True)
    return path, True


def _build(
    path: Path,
    record: dict[str, Any],
    pinned: Wheel,
    native: bool,
    *,
    wheel: str | os.PathLike[str] | None,
    cxx: str | None,
    progress: Progress,
) -> None:
    """Fetch, unpack, compile, check (``native``: load it here) and swap into ``path``."""
    words = _compiler(cxx)
    record["compiler"] = _compiler_version(words)
    if wheel:
        wheel_path = Path(wheel)
        if wheel_path.name != pinned.filename:
            raise EdgeError(f"{wheel_path}: expected the pinned {pinned.filename}")
        _check_wheel(wheel_path, pinned)
    else:
        wheel_path = fetch_wheel(pinned, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-"))
    try:
        _unpack(wheel_path, build)
        progress(f"building runner.so with {record['compiler']}")
        start = time.monotonic()
        compile_runner(build, words)
        shutil.rmtree(build / "executorch" / "include")
        progress(f"built in {time.monotonic() - start:.1f} s")
        if native:
            _smoke(build)
        (build / "runtime.json").write_text(json.dumps(record, indent=2) + "\n")
        os.chmod(build, 0o755)  # mkdtemp makes it 0700; the service user reads it
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.replace(build, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
