"""FAT images for a Pi's boot partition: made with mkfs.vfat and filled with mtools
(this machine's kernel has no vfat), mounted read-write with fusefat where a program
must work on the mounted partition as on a laptop (``da3-edge card``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .tools import require_tool

MTOOLS_ENV = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}


def image(path: Path, files: dict[str, bytes], size_mib: int) -> Path:
    """A FAT image labelled ``bootfs`` holding ``files`` (name -> bytes) at its top."""
    require_tool("mkfs.vfat", "scripts/install-host-packages.sh dosfstools")
    require_tool("mcopy", "scripts/install-host-packages.sh mtools")
    path.unlink(missing_ok=True)
    subprocess.run(
        ["mkfs.vfat", "-n", "bootfs", "-C", str(path), str(size_mib * 1024)],
        check=True,
        capture_output=True,
    )
    staged = path.with_name(path.name + ".files")
    staged.mkdir()
    for name, data in files.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_bytes(data)
    if files:
        subprocess.run(
            ["mcopy", "-s", "-i", str(path), *map(str, sorted(staged.iterdir())), "::/"],
            check=True,
            capture_output=True,
            env=MTOOLS_ENV,
        )
    for p in sorted(staged.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    staged.rmdir()
    return path


@contextlib.contextmanager
def mounted(path: Path) -> Iterator[Path]:
    """The image mounted read-write with fusefat (root; /dev/fuse), unmounted after."""
    fusefat = require_tool("fusefat", "scripts/install-host-packages.sh fusefat")
    point = path.with_name(path.name + ".mnt")
    point.mkdir(exist_ok=True)
    subprocess.run([fusefat, "-o", "rw+", str(path), str(point)], check=True, capture_output=True)
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)
        point.rmdir()


def listing(path: Path, directory: str = "::/") -> str | None:
    """``mdir -b`` of a directory in the image (one path a line), or None if it is not there."""
    proc = subprocess.run(
        ["mdir", "-b", "-i", str(path), directory], capture_output=True, text=True, env=MTOOLS_ENV
    )
    return proc.stdout if proc.returncode == 0 else None


def read(path: Path, name: str) -> bytes | None:
    """A file of the image (``::/NAME``), or None if it is not there."""
    proc = subprocess.run(
        ["mtype", "-i", str(path), f"::/{name}"], capture_output=True, env=MTOOLS_ENV
    )
    return proc.stdout if proc.returncode == 0 else None
