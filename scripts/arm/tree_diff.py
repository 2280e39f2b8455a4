"""What an install left in a root file system after ``install-pi.sh --uninstall --purge``.

    python3 tree_diff.py list ROOT > LISTING
    python3 tree_diff.py diff BEFORE AFTER
    python3 tree_diff.py leftovers BEFORE AFTER

``list`` writes one line per path under ROOT (the mounts of installer-check.sh's chroot
left out: /proc, /sys, /dev, /run, /tmp, /src, /mnt): its type, mode, owner, link
target and, for a file, its content's SHA-256.

``diff`` prints one line per path added, removed or changed between two listings, apt's
and dpkg's own state and the logs aside: installer-check.sh takes BEFORE on a system
that has the installer's apt packages, installs, purges, takes AFTER, and wants nothing.

``leftovers`` is for a first install, which also installs apt packages (their files and
what their maintainer scripts make are not da3-edge's): it prints only what is da3-edge's
by name (any path with da3-edge or da3_edge in it), and anything added to root's caches
and settings (~/.cache, ~/.config, ~/.local: where pip, uv or da3-edge would write).

Nothing printed: nothing left.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys

SKIP = {"proc", "sys", "dev", "run", "tmp", "src", "mnt"}
APT_STATE = (
    "/var/lib/dpkg/",
    "/var/lib/apt/",
    "/var/cache/apt/",
    "/var/cache/debconf/",
    "/var/cache/ldconfig/",
    "/var/log/",
)
ROOTS_OWN = ("/root/.cache", "/root/.config", "/root/.local")


def describe(path: str, st: os.stat_result) -> str:
    what = f"{stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        return f"{what} -> {os.readlink(path)}"
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return f"{what} {digest.hexdigest()}"
    return what


def listing(root: str) -> None:
    for top, dirs, files in os.walk(root):
        rel_top = "/" + os.path.relpath(top, root).removeprefix(".").lstrip("/")
        if rel_top == "/":
            dirs[:] = [d for d in dirs if d not in SKIP]
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(top, name)
            sys.stdout.write(f"{os.path.join(rel_top, name)}\t{describe(path, os.lstat(path))}\n")


def read(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)


def changes(before: dict[str, str], after: dict[str, str]) -> list[tuple[str, str, str]]:
    out = []
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        if was != now and not name.startswith(APT_STATE):
            what = "added" if was is None else "removed" if now is None else "changed"
            out.append((what, name, now or was or ""))
    return out


def ours(name: str) -> bool:
    return "da3-edge" in name or "da3_edge" in name or name.startswith(ROOTS_OWN)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "list":
        listing(*args)
    elif command in ("diff", "leftovers"):
        found = changes(read(args[0]), read(args[1]))
        for what, name, detail in found:
            if command == "diff" or ours(name):
                print(f"{what}: {name} ({detail})")
    else:
        sys.exit(f"usage: {sys.argv[0]} list ROOT | diff BEFORE AFTER | leftovers BEFORE AFTER")
