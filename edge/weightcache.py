"""XNNPACK's packed-weight cache: a model's weights packed once, mapped at every load.

At every load XNNPACK packs a model's weights into its kernels' layout (an fp16 model on
a CPU without fp16 arithmetic: dequantised to fp32, ~100 MiB), which is most of a load's
time and, with the model file's pages beside it, the peak of a still. Given a cache file
it packs once and later maps the file instead (docs/performance.md has the numbers).

What makes it safe to use by default:

- **Per user.** The directory is ``models.cache_dir() / "xnnpack"`` (the XDG cache, or
  systemd's ``CacheDirectory=``; ``$DA3_EDGE_WEIGHT_CACHE`` overrides it, "off" turns
  the default off), created 0700. A directory that is a symlink, belongs to
  another user, or is writable by group or others is not used (one warning): a cache
  file is mapped as code-adjacent data, and another user's file must never be.
- **Keyed.** The file name carries the model's SHA-256 (or, without a manifest, its size,
  mtime and inode), the LiteRT version and the XNNPACK flags: a re-export, an upgrade
  or a policy change never maps a stale file.
- **Built in a child, renamed into place.** LiteRT 2.3.0 aborts the whole process when
  it cannot write the cache (a full disk: SIGABRT, "cannot append buffer to cache
  file"). So a child process builds it under a temporary name; only when the child
  exits 0 is the file hashed, its sidecar written and both renamed into place. A
  crashed or failed build leaves no file behind and the caller runs without a cache.
  Before building, the filesystem must have room for ``2 x model + 64 MiB``.
- **Verified before use.** The sidecar records the file's SHA-256 and its identity
  (``models.file_identity``: size, mtime, ctime, inode, device); a file whose identity
  differs is rebuilt, never handed to XNNPACK.
- **Never with fp16 arithmetic** (``Core`` drops it: LiteRT aborts on that combination;
  tests/test_core.py keeps the canary).

``python -m edge.weightcache MODEL OUT FLAGS THREADS`` is the child.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from edge import litert

log = logging.getLogger(__name__)

SUFFIX = ".xnnpack"
MARGIN = 64 * 2**20
BUILD_TIMEOUT_S = 900  # a Pi 5 packs the fp32 model in seconds; this is a hang guard


def default_dir() -> Path | None:
    """Where "auto" keeps caches: ``$DA3_EDGE_WEIGHT_CACHE`` (a directory, or "off"),
    else ``models.cache_dir() / "xnnpack"``."""
    value = os.environ.get("DA3_EDGE_WEIGHT_CACHE")
    if value:
        return None if value == "off" else Path(value)
    from edge.models import cache_dir

    return cache_dir() / "xnnpack"


def directory(path: Path) -> Path | None:
    """``path``, made if missing (0700), if it is safe to keep caches in; else None,
    with the reason logged."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as exc:
        log.warning("weight cache not used: cannot create %s (%s)", path, exc.strerror or exc)
        return None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        why = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
    elif hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        why = f"owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return path
    log.warning("weight cache not used: %s is %s", path, why)
    return None


def name(model: Path, sha256: str | None, flags: int | None) -> str:
    """The cache file's name for ``model`` (its manifest hash if known) and ``flags``."""
    if sha256:
        ident = sha256[:32]
    else:
        st = model.stat()
        ident = f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"
    tag = f"f{flags}" if flags is not None else "default"
    return f"{model.stem}.{ident}.litert-{litert.version()}.{tag}{SUFFIX}"


def _stamp(path: Path) -> list[int]:
    from edge.models import file_identity

    return file_identity(path.stat())


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def valid(path: Path) -> bool:
    """Is ``path`` a cache file this module completed, unchanged since?"""
    try:
        record = json.loads(_sidecar(path).read_text())
        return bool(record.get("stamp") == _stamp(path) and record.get("sha256"))
    except (OSError, ValueError, AttributeError):
        return False


def _room(directory: Path, model: Path) -> bool:
    need = 2 * model.stat().st_size + MARGIN
    free = shutil.disk_usage(directory).free
    if free < need:
        log.warning(
            "weight cache not built: %s has %d MiB free, %d MiB needed",
            directory,
            free // 2**20,
            need // 2**20,
        )
        return False
    return True


def build(
    directory: Path, model: Path, sha256: str | None, flags: int | None, threads: int
) -> Path | None:
    """Build the cache for ``model`` in a child process; its path, or None (logged)."""
    from edge.models import sha256_file

    final = directory / name(model, sha256, flags)
    if not _room(directory, model):
        return None
    tmp = directory / f".{final.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    flags_arg = "" if flags is None else str(flags)
    args = [sys.executable, "-m", "edge.weightcache", str(model), str(tmp), flags_arg, str(threads)]
    t0 = time.perf_counter()
    try:
        # Not traced: the child's marks would interleave with this process's own.
        env = {k: v for k, v in os.environ.items() if k != "DA3_EDGE_TRACE"}
        proc = subprocess.run(
            args, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env
        )
        if proc.returncode != 0 or not tmp.is_file():
            said = [ln for ln in proc.stderr.splitlines() if not ln.startswith("INFO: ")]
            errors = [ln for ln in said if "ERROR" in ln or "Error" in ln]
            tail = " | ".join((errors or said)[-2:]).strip()
            log.warning(
                "weight cache not built for %s (the builder exited %d: %s)",
                model.name,
                proc.returncode,
                tail or "no message",
            )
            return None
        os.chmod(tmp, 0o600)
        digest = sha256_file(tmp)
        os.replace(tmp, final)
        # The record after the rename (which changes the file's ctime), itself renamed
        # into place: until it is, the file is not valid, and a reader rebuilds.
        record = {"sha256": digest, "stamp": _stamp(final), "model": model.name}
        side = _sidecar(tmp)
        side.write_text(json.dumps(record) + "\n")
        os.replace(side, _sidecar(final))
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("weight cache not built for %s (%s)", model.name, exc)
        return None
    finally:
        for leftover in (tmp, _sidecar(tmp)):
            with contextlib.suppress(OSError):  # missing, or a read-only directory
                leftover.unlink()
    _prune(directory, model, keep=final)
    log.info("weight cache built for %s in %.1f s", model.name, time.perf_counter() - t0)
    return final


def _prune(directory: Path, model: Path, keep: Path) -> None:
    """Drop this model name's caches under other keys (older exports, LiteRT versions):
    a cache directory holds one file per model name and flags, not one per export."""
    tag = keep.name.rsplit(".", 2)[-2]
    for old in directory.glob(f"{model.stem}.*{SUFFIX}"):
        if old != keep and old.name.rsplit(".", 2)[-2] == tag:
            old.unlink(missing_ok=True)
            _sidecar(old).unlink(missing_ok=True)


def path_for(
    cache_dir: Path, model: Path, sha256: str | None, flags: int | None, threads: int
) -> tuple[Path | None, bool]:
    """The cache file to hand XNNPACK for ``model``: (path or None, built just now)."""
    directory_ = directory(cache_dir)
    if directory_ is None:
        return None, False
    final = directory_ / name(model, sha256, flags)
    if valid(final):
        return final, False
    built = build(directory_, model, sha256, flags, threads)
    return built, built is not None


def _child(argv: list[str]) -> int:
    """Compile ``model`` with XNNPACK writing its packed weights to ``out``."""
    model, out, flags, threads = argv
    litert.compile_model(model, int(threads), int(flags) if flags else None, out).close()
    return 0 if os.path.isfile(out) and os.path.getsize(out) > 0 else 1


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
