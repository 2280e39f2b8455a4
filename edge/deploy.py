"""What the package deploys, read from the package itself: the installer, the first
boot's script, the units and the runtime requirements (``edge/data/deploy/``), and the
installed da3-edge as one wheel again.

``edge/data/deploy/`` is laid out as the checkout is (``scripts/install-pi.sh``,
``requirements/``, ``systemd/``), each file a link to its source at the top level: the
build puts the files' bytes in the wheel, so the installer finds what it needs beside
itself whether it runs from a checkout, a card's bundle or an installed wheel.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile
from importlib import metadata, resources
from pathlib import Path

from edge.errors import CardError

DISTRIBUTION = "da3-edge"
# Every deployed file, by its path in the checkout (and in the deploy tree, and in a
# card's bundle). The installer's own "is missing" check names the same.
FILES = (
    "scripts/install-pi.sh",
    "scripts/pi/first-boot.sh",
    "requirements/runtime.txt",
    "requirements/runtime-numpy1.txt",
    "requirements/uv.txt",
    "systemd/README.md",
    "systemd/da3-edge.service",
    "systemd/da3-edge-serve.service",
    "systemd/da3-edge-publish.service",
    "systemd/serve-lan.conf",
)
# What an installer adds to a wheel's .dist-info, and the RECORD made again.
_INSTALLERS = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json", "RECORD"})
# A fixed time for every entry: the same installed files make the same wheel's bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def root() -> Path:
    """The deploy tree: a folder (a wheel is installed unpacked, and a checkout is one)."""
    tree = resources.files("edge").joinpath("data/deploy")
    path = Path(str(tree))
    if not (path / FILES[0]).is_file():
        raise CardError(f"{path}: da3-edge's deploy files are missing (a broken install?)")
    return path


def checkout_root() -> Path | None:
    """The source checkout this da3-edge runs from (``uv sync`` installs it editable),
    or None for an installed wheel."""
    top = Path(__file__).resolve().parent.parent
    if (top / "pyproject.toml").is_file() and (top / "scripts" / "install-pi.sh").is_file():
        return top
    return None


def own_wheel(out: Path) -> Path:
    """This da3-edge as a wheel in ``out``: built from the checkout it runs from, or the
    installed files packed again (their RECORD hashes checked first)."""
    checkout = checkout_root()
    return build_wheel(checkout, out) if checkout is not None else repack(out)


def build_wheel(checkout: Path, out: Path) -> Path:
    """A wheel of the checkout (``uv build``: reproducible, so the same code gives the
    same bytes and a second ``card`` run copies nothing)."""
    uv = shutil.which("uv")
    if uv is None:
        raise CardError(
            "uv not found to build a wheel of the checkout: install uv, or pass --wheel"
        )
    proc = subprocess.run(
        [uv, "--no-config", "build", "--quiet", "--wheel", "--out-dir", str(out), str(checkout)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    wheels = sorted(out.glob("da3_edge-*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
        raise CardError(f"building a wheel of {checkout} failed: {tail}")
    return wheels[0]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _installed_files(dist: metadata.Distribution) -> dict[str, bytes]:
    """The wheel's files as installed (path in the wheel -> bytes), each checked
    against the hash RECORD holds for it."""
    files: dict[str, bytes] = {}
    for entry in dist.files or ():
        parts = entry.parts
        if parts[0] == ".." or "__pycache__" in parts:
            continue  # the launcher in bin/, compiled caches: the installer's, not the wheel's
        if parts[0].endswith(".dist-info") and len(parts) == 2 and parts[1] in _INSTALLERS:
            continue
        path = Path(str(dist.locate_file(entry)))
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CardError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if entry.hash is None or f"{entry.hash.mode}={entry.hash.value}" != _digest(data):
            raise CardError(
                f"{path}: differs from what was installed (its RECORD hash): reinstall "
                "da3-edge, or pass --wheel"
            )
        files[entry.as_posix()] = data
    return files


def repack(out: Path) -> Path:
    """The installed da3-edge packed as the wheel it was installed from: the same files,
    a RECORD made again, fixed times (so the same install gives the same bytes)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise CardError("da3-edge is not installed as a package: pass --wheel") from None
    files = _installed_files(dist)
    info = next((p.split("/")[0] for p in files if p.endswith(".dist-info/WHEEL")), None)
    if info is None:
        raise CardError(f"{dist.locate_file('')}: da3-edge's .dist-info/WHEEL is missing")
    lines = files[f"{info}/WHEEL"].decode().splitlines()
    tag = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Tag:")), None)
    if tag is None:
        raise CardError(f"{dist.locate_file(info)}/WHEEL: no Tag line")
    wheel = out / f"{info.removesuffix('.dist-info')}-{tag}.whl"
    record = f"{info}/RECORD"
    lines = [f"{name},{_digest(data)},{len(data)}" for name, data in sorted(files.items())]
    files[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    # The package first, .dist-info last, RECORD at the very end (as wheels are written).
    order = sorted(files, key=lambda name: (name.startswith(info), name == record, name))
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in order:
            item = zipfile.ZipInfo(name, _EPOCH)
            item.external_attr = 0o644 << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, files[name])
    return wheel
