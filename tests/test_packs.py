"""``da3-edge models pack`` / ``models pull`` against a real HTTP server on loopback:
resumed transfers, wrong hashes, unsafe packs, a server that stops answering."""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from edge import packs
from edge.fakecore import fake_models
from scripts.support.httpfile import Server
from scripts.support.tools import as_user, run_main, world_readable


@pytest.fixture
def models(tmp_path: Path) -> Path:
    return fake_models(tmp_path / "exported", [(378, 504), (504, 378)])


@pytest.fixture
def packed(models: Path, tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "pack.tar.gz"
    return out, packs.pack(models, out)


@pytest.fixture
def server(packed: tuple[Path, str]) -> Iterator[Server]:
    s = Server(packed[0])
    yield s
    s.close()


def pull(url: str, sha: str, out: Path) -> tuple[int, str, str]:
    proc = run_main(["models", "pull", url, "--sha256", sha, "--out", str(out)])
    return proc.returncode, proc.stdout, proc.stderr


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_pack_then_pull_gives_the_same_models(
    models: Path, packed: tuple[Path, str], server: Server, tmp_path: Path
) -> None:
    sha = packed[1]
    proc = run_main(["models", "pack", str(models), "--out", str(tmp_path / "again.tar.gz")])
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[1] == f"sha256 {sha}"  # the same folder, the same bytes
    out = tmp_path / "pi" / "models"
    code, stdout, stderr = pull(server.url, sha, out)
    assert code == 0, stderr
    assert stdout == f"{out}: 2 files: 2 cores (fp16; sizes 504), RANDOM-INIT (not a real model)\n"
    assert "download: " in stderr and "(100%)" in stderr
    assert {k: v for k, v in digests(out).items() if k != ".pack-sha256"} == digests(models)
    assert packs.installed_pack(out) == sha
    assert [p.name for p in out.parent.iterdir()] == ["models"]  # nothing left beside it
    # Again: nothing downloaded while every file still checks; a file changed since, and
    # the pack comes again.
    asked = len(server.ranges)
    code, again, stderr = pull(server.url, sha, out)
    assert (code, again, len(server.ranges)) == (0, stdout, asked), stderr
    assert stderr == f"download: not needed: {out} holds that pack (every file checked)\n"
    victim = next(out.glob("*.tflite"))
    victim.write_bytes(victim.read_bytes()[:-1] + b"!")
    code, _, stderr = pull(server.url, sha, out)
    assert code == 0 and len(server.ranges) == asked + 1, stderr
    assert {k: v for k, v in digests(out).items() if k != ".pack-sha256"} == digests(models)


def test_an_interrupted_download_resumes_where_it_stopped(
    packed: tuple[Path, str], server: Server, tmp_path: Path
) -> None:
    pack, sha = packed
    out = tmp_path / "pi" / "models"
    server.cut_after = pack.stat().st_size // 3
    code, _, stderr = pull(server.url, sha, out)
    print(stderr)
    assert code == 1 and not out.exists()
    assert stderr.splitlines()[-1].endswith("run the same command again to resume")
    kept = next(out.parent.glob(".models.*.tar.gz")).stat().st_size
    assert kept == pack.stat().st_size // 3
    code, _, stderr = pull(server.url, sha, out)
    assert code == 0, stderr
    assert server.ranges == [None, f"bytes={kept}-"]  # the second asked only for the rest
    assert packs.installed_pack(out) == sha


def test_a_wrong_hash_replaces_nothing(
    models: Path, packed: tuple[Path, str], server: Server, tmp_path: Path
) -> None:
    out = tmp_path / "pi" / "models"
    out.mkdir(parents=True)
    (out / "mine").write_text("the models in use")
    code, _, stderr = pull(server.url, "0" * 64, out)
    assert code == 1
    assert stderr.splitlines()[-1] == (
        f"da3-edge: error: {server.url}: SHA-256 {packed[1]}, expected {'0' * 64}: not the "
        "pack asked for"
    )
    assert [p.name for p in out.iterdir()] == ["mine"]
    assert [p.name for p in out.parent.iterdir()] == ["models"]  # the bad download is gone


def _tar(path: Path, members: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_unsafe_or_broken_packs_are_refused(models: Path, tmp_path: Path) -> None:
    manifest = (models / "manifest.json").read_bytes()
    link = tarfile.TarInfo("models/x.tflite")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    cores = sorted(models.glob("*.tflite"))
    cases: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
        "a path outside models/": [_file("models/manifest.json", manifest), _file("../evil", b"x")],
        "a link": [_file("models/manifest.json", manifest), (link, None)],
        "a tampered model": [
            _file("models/manifest.json", manifest),
            _file(f"models/{cores[0].name}", cores[0].read_bytes() + b"!"),
            _file(f"models/{cores[1].name}", cores[1].read_bytes()),
        ],
    }
    out = tmp_path / "pi" / "models"
    for case, members in cases.items():
        pack = tmp_path / "bad.tar.gz"
        sha = _tar(pack, members)
        code, _, stderr = pull(pack.as_uri(), sha, out)
        print(case, stderr)
        assert code == 1, case
        *progress, line = stderr.splitlines()
        assert line.startswith("da3-edge: error: ") and "Traceback" not in stderr, line
        assert all(p.startswith("download: ") for p in progress), progress
        assert not out.exists() and not (tmp_path / "evil").exists(), case
        assert not list(out.parent.glob(".models.new")), case


def test_a_server_that_stops_answering_is_given_up_on(
    packed: tuple[Path, str], server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packs, "TIMEOUT_S", 0.5)
    server.stall = 3.0
    start = time.monotonic()
    code, _, stderr = pull(server.url, packed[1], tmp_path / "models")
    took = time.monotonic() - start
    print(stderr, f"{took:.1f} s")
    assert code == 1 and "no answer for 0.5 s" in stderr
    assert took < 3.0


@pytest.mark.parametrize("top", ["da3-edge-models/", ""])
def test_a_model_folder_packed_by_hand_is_taken(models: Path, tmp_path: Path, top: str) -> None:
    """``tar -czf`` of a model folder (any folder name), or of its files at the top."""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [
        _file(f"{top}{p.name}", p.read_bytes()) for p in sorted(models.iterdir())
    ]
    if top:
        folder = tarfile.TarInfo(top.rstrip("/"))
        folder.type = tarfile.DIRTYPE
        members.insert(0, (folder, None))
    pack = tmp_path / "hand.tar.gz"
    sha = _tar(pack, members)
    out = tmp_path / "pi" / "models"
    code, _, stderr = pull(pack.as_uri(), sha, out)
    assert code == 0, stderr
    assert {k: v for k, v in digests(out).items() if k != ".pack-sha256"} == digests(models)


def test_files_from_two_folders_are_refused(models: Path, tmp_path: Path) -> None:
    files = sorted(models.iterdir())
    members = [_file(f"a/{files[0].name}", b"x"), _file(f"b/{files[1].name}", b"y")]
    pack = tmp_path / "two.tar.gz"
    code, _, stderr = pull(pack.as_uri(), _tar(pack, members), tmp_path / "models")
    assert code == 1 and "'b/" in stderr and "is not a file of one model folder" in stderr


def test_a_sparse_member_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """A 1 GiB sparse file packs into a few hundred bytes (GNU tar --sparse): unpacked,
    it would write the whole GiB. Refused before any of it is written."""
    import subprocess

    src = tmp_path / "src" / "models"
    src.mkdir(parents=True)
    with (src / "da3-small_378x504_fp16.tflite").open("wb") as fh:
        fh.truncate(1 << 30)
    pack = tmp_path / "sparse.tar.gz"
    subprocess.run(
        ["tar", "--sparse", "-czf", str(pack), "-C", str(src.parent), "models"], check=True
    )
    assert pack.stat().st_size < 100_000
    out = tmp_path / "pi" / "models"
    code, _, stderr = pull(pack.as_uri(), hashlib.sha256(pack.read_bytes()).hexdigest(), out)
    print(stderr)
    assert code == 1 and stderr.splitlines()[-1].endswith("is a sparse file: not a model pack")
    assert not out.exists() and not list(out.parent.glob(".models.new*"))


def test_a_pack_announced_past_any_models_size_is_not_downloaded(
    server: Server, packed: tuple[Path, str], tmp_path: Path
) -> None:
    """A server announcing 10^15 bytes (a pack is ~5 GB at most): `models pull` refuses
    it in one line before writing a byte, and leaves no partial to fail on again."""
    server.announced = 10**15
    out = tmp_path / "pulled"
    code, _, stderr = pull(server.url, packed[1], out)
    assert code == 1, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"da3-edge: error: {server.url}: 1000000000.0 MB, over the 8589.9 MB expected: not downloaded"
    ), stderr
    assert not out.exists() and not list(tmp_path.glob(".models.*"))


@pytest.mark.root
def test_a_pack_larger_than_the_disk_is_refused_before_it_is_written(
    models: Path, tmp_path: Path
) -> None:
    from scripts.support.tools import tmpfs

    big = _file("models/da3-small_378x504_fp16.tflite", bytes(40 << 20))  # compresses to 40 kB
    pack = tmp_path / "big.tar.gz"
    sha = _tar(pack, [_file("models/manifest.json", (models / "manifest.json").read_bytes()), big])
    with tmpfs(tmp_path / "disk", size="32m") as disk:
        code, _, stderr = pull(pack.as_uri(), sha, disk / "models")
        print(stderr)
        line = stderr.splitlines()[-1]
        assert (
            code == 1
            and "needs 41.9 MB, the filesystem has" in line
            and line.endswith("nothing installed")
        )
        assert sorted(p.name for p in disk.iterdir()) == [f".models.{sha[:16]}.tar.gz"]


def test_pack_never_writes_through_a_link_planted_beside_its_output(
    models: Path, packed: tuple[Path, str], tmp_path: Path
) -> None:
    """Another user who can write the output's folder plants a link at the name a
    temporary file would take: the pack is written under a name of its own and renamed,
    and the link's target is left as it was."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's file\n")
    out = tmp_path / "shared" / "models.tar.gz"
    out.parent.mkdir()
    for name in (f".{out.name}.tmp", f"{out.name}.tmp", f".{out.name}.part"):
        (out.parent / name).symlink_to(victim)
    proc = run_main(["models", "pack", str(models), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == b"root's file\n"
    assert hashlib.sha256(out.read_bytes()).hexdigest() == packed[1]


def test_pull_never_writes_through_a_link_planted_at_its_download(
    packed: tuple[Path, str], server: Server, tmp_path: Path
) -> None:
    """The download's name beside the output is known in advance (resumed runs find
    it): a link planted there by another user who can write the folder is refused, and
    its target left as it was."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's file\n")
    out = tmp_path / "shared" / "models"
    out.parent.mkdir()
    (out.parent / f".models.{packed[1][:16]}.tar.gz").symlink_to(victim)
    code, _, stderr = pull(server.url, packed[1], out)
    assert code == 1 and stderr.splitlines() == [
        f"da3-edge: error: {out.parent}/.models.{packed[1][:16]}.tar.gz: not a regular file "
        "where the download goes: refused"
    ], stderr
    assert victim.read_bytes() == b"root's file\n" and not out.exists()


@pytest.mark.root
def test_pull_into_a_folder_the_user_cannot_write_is_one_line(
    packed: tuple[Path, str], server: Server
) -> None:
    with world_readable() as base:
        folder = base / "roots"
        folder.mkdir(mode=0o755)
        out = folder / "models"
        args = ["models", "pull", server.url, "--sha256", packed[1], "--out", str(out)]
        proc = as_user(65534, 65534, "", *args, cwd=base)
        assert proc.returncode == 1 and proc.stderr.splitlines() == [
            f"da3-edge: error: {folder}/.models.{packed[1][:16]}.tar.gz: cannot write the "
            "download there (Permission denied)"
        ], proc.stderr
        assert list(folder.iterdir()) == []


@pytest.mark.parametrize("url", ["ftp://example.org/m.tar.gz", "data:,hello", "gopher://x/"])
def test_pull_takes_http_https_and_file_urls_only(url: str, tmp_path: Path) -> None:
    code, _, stderr = pull(url, "0" * 64, tmp_path / "models")
    assert code == 1 and stderr.count("\n") == 1, stderr
    assert "only http://, https:// and file:// URLs" in stderr
    assert not list(tmp_path.iterdir())


def test_a_redirect_never_leaves_https_for_plain_http() -> None:
    """A pack asked over https is not fetched in the clear because a server said so
    (its SHA-256 would still be checked, but who fetches what would be on the wire);
    http to https, and https to https elsewhere, are followed."""
    import email.message
    import urllib.error
    import urllib.request

    handler = packs.Redirects()
    headers = email.message.Message()

    def follow(start: str, to: str) -> str:
        asked = urllib.request.Request(start)
        made = handler.redirect_request(asked, None, 302, "Found", headers, to)
        assert made is not None
        return str(made.full_url)

    assert follow("http://a/m.tar.gz", "https://b/m.tar.gz") == "https://b/m.tar.gz"
    assert follow("https://a/m.tar.gz", "https://cdn/m.tar.gz") == "https://cdn/m.tar.gz"
    for to in ("http://b/m.tar.gz", "ftp://b/m.tar.gz", "file:///etc/shadow"):
        with pytest.raises(urllib.error.HTTPError, match="redirect"):
            follow("https://a/m.tar.gz", to)


def test_a_servers_words_reach_the_terminal_without_escapes(tmp_path: Path) -> None:
    """`models pull`: a server's reason phrase and a redirect's Location carrying
    terminal escapes (a colour, a window title, a clear screen) reach the one-line error
    with every control character as '?'."""
    import http.server
    import threading

    class Hostile(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/reason":
                self.send_response(404, "Not \x1b[31mFound\x1b]0;owned\x07")
            else:
                self.send_response(302)
                self.send_header("Location", "ftp://x/\x1b[2Jm.tar.gz")
            self.end_headers()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        lines = {}
        for path in ("/reason", "/moved"):
            code, _, stderr = pull(base + path, "0" * 64, tmp_path / "models")
            assert code == 1 and stderr.count("\n") == 1, stderr
            lines[path] = stderr
    finally:
        httpd.shutdown()
        httpd.server_close()
    print(lines)
    assert not any(c in line for line in lines.values() for c in "\x1b\x07")
    assert "404 Not ?[31mFound?]0;owned?" in lines["/reason"]
    assert "refused a redirect from http:// to ftp://x/" in lines["/moved"]  # quoted: %1B
