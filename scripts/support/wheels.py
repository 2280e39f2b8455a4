"""Wheels of this checkout with another version, or a change to its code: what an update
installs (tests/test_vm.py), made from a copy of the tracked files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from edge import deploy

from . import ROOT


def copy_checkout(out: Path) -> Path:
    """The files git tracks (and new ones it does not ignore), links kept as links."""
    listed = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    proc = subprocess.run(
        ["git", "-c", f"safe.directory={ROOT}", "-C", str(ROOT), *listed],
        capture_output=True,
        check=True,
    )
    names = proc.stdout.decode().split("\0")
    for name in filter(None, names):
        src, dest = ROOT / name, out / name
        if not src.is_symlink() and not src.exists():
            continue  # deleted in the work tree, not yet in the index
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest, follow_symlinks=False)
    return out


def variant(out: Path, version: str, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    """A wheel of this checkout at ``version``, each ``edits`` file (relative path ->
    (text, its replacement)) changed once; the wheel in ``out``."""
    tree = copy_checkout(out / f"src-{version}")
    project = tree / "pyproject.toml"
    text, n = re.subn(
        r'^version = ".*"$', f'version = "{version}"', project.read_text(), count=1, flags=re.M
    )
    assert n == 1, "pyproject.toml has no version line"
    project.write_text(text)
    for rel, (old, new) in (edits or {}).items():
        source = (tree / rel).read_text()
        assert source.count(old) == 1, f"{rel}: {old!r} is not there once"
        (tree / rel).write_text(source.replace(old, new))
    return deploy.build_wheel(tree, out / f"dist-{version}")
