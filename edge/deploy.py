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
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from importlib import metadata, resources
from pathlib import Path, PurePosixPath

from edge.errors import DeployError

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
    "systemd/da3-edge-finish-update.service",
)
# Where the deploy tree is in a wheel.
TREE = "edge/data/deploy"
# A wheel's name (PEP 427): distribution, version, build tag, Python, ABI, platform.
_WHEEL_NAME = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)
# A PEP 440 version as da3-edge writes them: release, a/b/rc, .post, .dev, +local.
_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)(?:(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:\.post(?P<post>\d+))?(?:\.dev(?P<dev>\d+))?(?:\+[a-z0-9.]+)?$"
)
# What an installer adds to a wheel's .dist-info (uv_build.json: uv, after building it
# from a source such as a git URL), and the RECORD made again.
_INSTALLERS = frozenset(
    {"INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json", "uv_build.json", "RECORD"}
)
# A fixed time for every entry: the same installed files make the same wheel's bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def root() -> Path:
    """The deploy tree: a folder (a wheel is installed unpacked, and a checkout is one)."""
    tree = resources.files("edge").joinpath("data/deploy")
    path = Path(str(tree))
    if not (path / FILES[0]).is_file():
        raise DeployError(f"{path}: da3-edge's deploy files are missing (a broken install?)")
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
        raise DeployError(
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
        raise DeployError(f"building a wheel of {checkout} failed: {tail}")
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
            raise DeployError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if entry.hash is None or f"{entry.hash.mode}={entry.hash.value}" != _digest(data):
            raise DeployError(
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
        raise DeployError("da3-edge is not installed as a package: pass --wheel") from None
    files = _installed_files(dist)
    info = next((p.split("/")[0] for p in files if p.endswith(".dist-info/WHEEL")), None)
    if info is None:
        raise DeployError(f"{dist.locate_file('')}: da3-edge's .dist-info/WHEEL is missing")
    lines = files[f"{info}/WHEEL"].decode().splitlines()
    tag = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Tag:")), None)
    if tag is None:
        raise DeployError(f"{dist.locate_file(info)}/WHEEL: no Tag line")
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


def version_key(text: str) -> tuple[object, ...]:
    """A version as a sortable key: 1.0.dev1 < 1.0a1 < 1.0rc1 < 1.0 < 1.0.post1 < 1.1."""
    found = _VERSION.match(text.strip().lower())
    if found is None:
        raise DeployError(f"{text!r}: not a version da3-edge can compare")
    release = [int(part) for part in found["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    ranks = {"a": 0, "b": 1, "rc": 2}
    if found["pre"]:
        pre = (ranks[found["pre"]], int(found["pre_n"]))
    else:  # a bare .devN comes before every pre-release of its release
        pre = (-1, 0) if found["dev"] and not found["post"] else (3, 0)
    post = int(found["post"]) if found["post"] else -1
    dev = int(found["dev"]) if found["dev"] else sys.maxsize
    return (tuple(release), pre, post, dev)


def _python_allows(spec: str, have: tuple[int, ...]) -> bool:
    """Whether Python ``have`` meets a Requires-Python ``spec`` (e.g. ``>=3.11,<3.15``)."""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        found = re.match(r"^(~=|==|!=|<=|>=|<|>)\s*([0-9.]+)(\.\*)?$", clause)
        if found is None:
            raise DeployError(f"Requires-Python {spec!r}: cannot read {clause!r}")
        op, text, star = found.groups()
        want = tuple(int(p) for p in text.split("."))
        mine = have[: len(want)] if star or op == "~=" else have + (0,) * (len(want) - len(have))
        ok = {
            "==": mine == want,
            "!=": mine != want,
            "<=": mine <= want,
            ">=": mine >= want,
            "<": mine < want,
            ">": mine > want,
            "~=": have >= want and have[: len(want) - 1] == want[:-1],
        }[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Wheel:
    """A da3-edge wheel as ``update`` reads it: its version, and why it cannot run here."""

    path: Path
    version: str
    tags: tuple[str, str, str]
    requires_python: str | None

    @classmethod
    def read(cls, path: Path) -> Wheel:
        found = _WHEEL_NAME.match(path.name)
        if found is None or found["name"].lower().replace(".", "_") != "da3_edge":
            raise DeployError(f"{path}: not a da3_edge-*.whl file")
        try:
            with zipfile.ZipFile(path) as archive:
                info = f"da3_edge-{found['version']}.dist-info/METADATA"
                names = archive.namelist()
                meta = archive.read(info).decode() if info in names else None
                has_tree = f"{TREE}/{FILES[0]}" in names
        except (OSError, zipfile.BadZipFile) as exc:
            raise DeployError(f"{path}: not a readable wheel ({exc})") from None
        if meta is None or not has_tree:
            raise DeployError(f"{path}: not a da3-edge wheel that carries its installer")
        headers = HeaderParser().parsestr(meta)
        tags = (found["py"], found["abi"], found["plat"])
        return cls(path, found["version"], tags, headers.get("Requires-Python"))

    def why_not_here(self) -> str | None:
        """None when this Python on this machine can install the wheel; else why not."""
        major, minor = sys.version_info[:2]
        py, abi, plat = (set(tag.split(".")) for tag in self.tags)
        here = f"Python {major}.{minor} on {platform.machine()}"
        if not py & {"py3", f"py{major}{minor}", f"cp{major}{minor}"} or not abi & {
            "none",
            "abi3",
            f"cp{major}{minor}",
        }:
            return f"a wheel for {'.'.join(sorted(py))} ({'.'.join(sorted(abi))}), not {here}"
        if "any" not in plat and not any(p.endswith(f"_{platform.machine()}") for p in plat):
            return f"a wheel for {'.'.join(sorted(plat))}, not {here}"
        if self.requires_python and not _python_allows(
            self.requires_python, tuple(sys.version_info[:3])
        ):
            return f"it requires Python {self.requires_python}, not {here}"
        return None

    def extract_tree(self, out: Path) -> Path:
        """The wheel's deploy tree (its installer and what it needs) into ``out``."""
        prefix = f"{TREE}/"
        with zipfile.ZipFile(self.path) as archive:
            for name in archive.namelist():
                rel = PurePosixPath(name[len(prefix) :])
                if not name.startswith(prefix) or name.endswith("/"):
                    continue
                if rel.is_absolute() or ".." in rel.parts:
                    raise DeployError(f"{self.path}: {name}: a path outside the deploy tree")
                dest = out.joinpath(*rel.parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(archive.read(name))
        return out
