"""Model packs: one model directory as a ``.tar.gz`` with its SHA-256, to serve the Pis
that need it from one export (``da3-edge models pack`` / ``models pull``).

A pack holds one folder, ``models/``, with ``manifest.json`` and the files it lists,
nothing else; ``pull`` also takes a folder of another name, or the files at the top (a
model folder packed by hand with ``tar -czf``). ``pull`` fetches one over HTTP(S) (or
``file://``) with a progress line, resumes an interrupted download (HTTP Range) on the
next run, checks the pack's SHA-256, then its manifest and every file's size and
SHA-256, and only then replaces the target folder (a rename; the old one kept until
then). Anything else in an archive (links, devices, paths outside its one folder, a
second folder) refuses the whole pack. Standard library only: the Pi installer runs it
from the wheel before the venv exists.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import shutil
import stat
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from edge import atomic
from edge.errors import EdgeError, OutputError, PackError, printable
from edge.models import MANIFEST, Manifest, sha256_file

RECORD = ".pack-sha256"  # in a pulled folder: the SHA-256 of the pack it came from

TOP = "models"  # the one folder in a pack
MAX_PACK = 8 << 30  # bytes: every size's cores at every precision are ~5 GB
TIMEOUT_S = 30.0  # a server silent this long (connect, or between two reads) has stopped
CHUNK = 1 << 20


def pack(directory: Path, out: Path) -> str:
    """``directory``'s manifest and the files it lists into ``out`` (.tar.gz), after a
    full check of each; the pack's SHA-256. Reproducible: the same folder gives the
    same bytes (fixed times, owners and order)."""
    manifest = Manifest.load(directory)
    files = [manifest.path]
    for artifact in manifest.artifacts:
        files.append(manifest.verify(artifact, full=True))

    def write(raw: BinaryIO) -> None:
        # gzip's header holds a time and a name: fixed, so the bytes depend on the files only
        with (
            gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for path in files:
                info = tarfile.TarInfo(f"{TOP}/{path.name}")
                info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
                with path.open("rb") as fh:
                    tar.addfile(info, fh)

    # A temporary name of its own (O_EXCL): never a link someone planted beside ``out``.
    atomic.write_bytes(out, write)
    return sha256_file(out)


Progress = Callable[[int, int | None], None]  # bytes so far, total (None: unknown)


SCHEMES = ("http", "https", "file")


class Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed to http(s) only, and never from https to plain http: who
    fetches which pack stays off the wire once https was asked for."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        old, new = urllib.parse.urlsplit(req.full_url).scheme, urllib.parse.urlsplit(newurl).scheme
        if new not in ("http", "https") or (old == "https" and new != "https"):
            reason = f"refused a redirect from {old}:// to {printable(newurl)}"
            raise urllib.error.HTTPError(req.full_url, code, reason, headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def open_url(request: urllib.request.Request | str) -> Any:
    """``urlopen`` for a pack or a release: http, https and file URLs only, redirects
    as ``Redirects`` allows them; PackError for another scheme."""
    url = request if isinstance(request, str) else request.full_url
    if urllib.parse.urlsplit(url).scheme not in SCHEMES:
        raise PackError(f"{printable(url)}: only http://, https:// and file:// URLs")
    opener = urllib.request.build_opener(Redirects)
    return opener.open(request, timeout=TIMEOUT_S)


def download(
    url: str,
    want: str,
    dest: Path,
    progress: Progress,
    limit: int | None = None,
    what: str = "pack",
) -> None:
    """``url`` into ``dest``, resumed from what ``dest`` holds already (HTTP Range), then
    its SHA-256 checked against ``want``; PackError on a mismatch (``dest`` removed: a
    wrong file is not resumed), past ``limit`` bytes or on a full disk (removed too), and
    for a server that stops answering (``dest`` kept: run again to resume)."""
    try:
        found = os.lstat(dest)
    except FileNotFoundError:
        have = 0
    else:
        if not stat.S_ISREG(found.st_mode):
            raise OutputError(f"{dest}: not a regular file where the download goes: refused")
        have = found.st_size
    if limit is not None and have > limit:
        dest.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = open_url(request)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing past what we have: it is whole
            response = None
        else:
            raise PackError(
                f"{url}: the server answered {exc.code} {printable(str(exc.reason))}"
            ) from None
    except (OSError, ValueError) as exc:
        raise PackError(f"{url}: cannot download it ({why(exc)})") from None
    if response is not None:
        with response:
            _receive(url, response, dest, have, progress, limit)
    got = sha256_file(dest)
    if got != want:
        dest.unlink()
        raise PackError(f"{url}: SHA-256 {got}, expected {want}: not the {what} asked for")


def _receive(
    url: str, response: Any, dest: Path, have: int, progress: Progress, limit: int | None
) -> None:
    resumed = have and getattr(response, "status", 200) == 206
    total = _total(response, have if resumed else 0)
    done = have if resumed else 0
    if limit is not None and total is not None and total > limit:
        dest.unlink(missing_ok=True)
        raise PackError(f"{url}: {_size(total)}, over the {_size(limit)} expected: not downloaded")
    if total is not None:
        _room(dest.parent, total - done, url)
    with _open_partial(dest, bool(resumed)) as fh:
        try:
            while chunk := response.read(CHUNK):
                done += len(chunk)
                if limit is not None and done > limit:
                    raise _Oversize
                fh.write(chunk)
                progress(done, total)
        except _Oversize:
            fh.close()
            dest.unlink()
            raise PackError(f"{url}: more than the {_size(limit or 0)} expected: removed") from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                fh.close()
                dest.unlink()
                raise OutputError(f"{dest}: no space left on its filesystem: removed") from None
            raise PackError(
                f"{url}: the download stopped at {_size(done)} ({why(exc)}); "
                "run the same command again to resume"
            ) from None
    if total is not None and done < total:
        raise PackError(
            f"{url}: the download stopped at {_size(done)} of {_size(total)}; "
            "run the same command again to resume"
        )


def _open_partial(dest: Path, append: bool) -> BinaryIO:
    """The download's file, never through a link (another user who can write its folder
    may plant one at the name) and only a regular file; OutputError in one line when it
    cannot be opened (a folder this user cannot write)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(dest, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{dest}: a link where the download goes: refused") from None
        raise OutputError(f"{dest}: cannot write the download there ({why(exc)})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(f"{dest}: not a regular file where the download goes: refused")
    return os.fdopen(fd, "ab" if append else "wb")


class _Oversize(Exception):
    pass


SPARE = 16 << 20  # bytes left free beyond a download on its filesystem


def _room(folder: Path, need: int, url: str) -> None:
    """Refuse a download the filesystem cannot hold with ``SPARE`` to spare."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if free < need + SPARE:
        raise OutputError(
            f"{folder}: {free / 1e6:.0f} MB free, {url} needs {(need + SPARE) / 1e6:.0f} MB "
            "(the file and a margin): free some space and run again"
        )


def _size(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{int(n)} bytes"


def _total(response: object, offset: int) -> int | None:
    length = getattr(response, "headers", {}).get("Content-Length")
    return offset + int(length) if length and str(length).isdigit() else None


def why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, TimeoutError):
        return f"no answer for {TIMEOUT_S:g} s"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def unpack(archive: Path, out: Path, label: str) -> None:
    """``archive``'s model files into the new folder ``out``: regular files in one
    folder (``models/``, or any one name: a hand-made ``tar -czf`` of a model folder), or
    at the top; nothing else (PackError naming the first other member; ``label``: where
    the archive came from, for the messages)."""
    out.mkdir()
    where: str | None = None  # the one folder the files are in ("": the top), once seen
    budget: int | None = None  # bytes the filesystem can still take, once read
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                name = PurePosixPath(member.name)
                parts = tuple(p for p in name.parts if p != ".")
                folder = parts[0] if len(parts) == 2 or member.isdir() else ""
                if (
                    len(parts) not in (1, 2)
                    or name.is_absolute()
                    or ".." in parts
                    or where not in (None, folder)
                    or not (member.isfile() or (member.isdir() and len(parts) == 1))
                ):
                    raise PackError(
                        f"{label}: {member.name!r} is not a file of one model folder: a pack "
                        "holds one folder's files only; nothing installed"
                    )
                where = folder
                if member.isdir():
                    continue
                budget = _budget(member, out, label, budget)
                src = tar.extractfile(member)
                assert src is not None
                with src, (out / name.name).open("xb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
    except EdgeError:
        raise
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise PackError(f"{label}: not a readable .tar.gz ({exc})") from None


def _budget(member: tarfile.TarInfo, out: Path, label: str, budget: int | None) -> int:
    """What is left for the members after ``member``, checked before a byte of it is
    written: a sparse member (a small archive that unpacks huge) is refused, and so is
    one the filesystem cannot hold with ``SPARE`` to spare."""
    if member.issparse():
        raise PackError(f"{label}: {member.name!r} is a sparse file: not a model pack")
    if budget is None:
        st = os.statvfs(out)
        budget = st.f_bavail * st.f_frsize - SPARE
    if member.size > budget:
        raise OutputError(
            f"{out}: {member.name!r} needs {_size(member.size)}, the filesystem has "
            f"{_size(max(budget, 0))} to spare: nothing installed"
        )
    return budget - member.size


def check(folder: Path, label: str) -> Manifest:
    """The manifest, and every file it lists by size and SHA-256 (PackError)."""
    try:
        manifest = Manifest.load(folder)
        for artifact in manifest.artifacts:
            manifest.verify(artifact, full=True)
        extra = (
            {p.name for p in folder.iterdir()}
            - {MANIFEST, RECORD}
            - {a.file for a in manifest.artifacts}
        )
    except EdgeError as exc:
        raise PackError(f"{label}: its models do not check: {exc}; nothing installed") from None
    if extra:
        raise PackError(f"{label}: holds files its manifest does not list: {sorted(extra)}")
    return manifest


def pull(url: str, want: str, out: Path, progress: Progress) -> tuple[Manifest, bool]:
    """The pack at ``url`` (SHA-256 ``want``) as the model folder ``out``, replaced only
    once everything checks, and whether it was downloaded: not when ``out`` came from
    that pack and every file still checks. The download is kept beside ``out`` until it
    is whole."""
    want = want.lower()
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise PackError(f"--sha256 {want!r}: not a SHA-256 (64 hex digits)")
    out = out.absolute()
    if installed_pack(out) == want:
        with contextlib.suppress(PackError):
            return check(out, str(out)), False
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out.parent}: cannot make it ({exc.strerror or exc})") from None
    partial = out.with_name(f".{out.name}.{want[:16]}.tar.gz")
    download(url, want, partial, progress, limit=MAX_PACK)
    new = out.with_name(f".{out.name}.new")
    old = out.with_name(f".{out.name}.old")
    for leftover in (new, old):
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        unpack(partial, new, url)
        check(new, url)
        (new / RECORD).write_text(want + "\n")
        if out.exists():
            os.rename(out, old)
        os.rename(new, out)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        if old.exists() and not out.exists():
            os.rename(old, out)  # put back what was there
        raise
    shutil.rmtree(old, ignore_errors=True)
    partial.unlink()
    return Manifest.load(out), True


def installed_pack(folder: Path) -> str | None:
    """The SHA-256 of the pack ``folder`` came from (``pull``), if it did."""
    with contextlib.suppress(OSError):
        return (folder / RECORD).read_text().strip() or None
    return None


class Meter:
    """A progress line on stderr, at most every ``every`` s (and the last)."""

    def __init__(self, what: str, write: Callable[[str], None], every: float = 1.0) -> None:
        self.what, self.write, self.every = what, write, every
        self._last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self._last < self.every and done != total:
            return
        self._last = now
        of = f" of {_size(total)} ({100 * done // total}%)" if total else ""
        self.write(f"{self.what}: {_size(done)}{of}")


def describe(manifest: Manifest) -> str:
    cores = manifest.cores()
    kinds = sorted({f"{a.precision}" for a in cores})
    sizes = sorted({max(a.shape) for a in cores})
    flag = ", RANDOM-INIT (not a real model)" if any(a.random_init for a in cores) else ""
    return (
        f"{len(manifest.artifacts)} files: {len(cores)} cores ({', '.join(kinds)}; "
        f"sizes {', '.join(map(str, sizes))}){flag}"
    )
