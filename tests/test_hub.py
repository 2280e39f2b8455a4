"""`da3-edge models fetch` (and `models build --weights hub`) against a loopback server
that answers like the Hugging Face hub: a redirect to a file host with the LFS headers,
Range, and the faults a Pi's download meets (a cut connection, a wrong or lying hub, a
full disk, no network)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.support.hub import Hub
from scripts.support.release import tensors_for, write_release
from scripts.support.tools import free_port, run_cli, tmpfs

SHAPE = (42, 56)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hub") / "da3-small"
    return write_release(folder, tensors_for([SHAPE]), seed=9)


@pytest.fixture
def hub(release: Path) -> Iterator[Hub]:
    server = Hub(release)
    yield server
    server.close()


def fetch(hub_endpoint: str, out: Path, *args: str) -> tuple[int, list[str], str]:
    proc = run_cli(
        ["models", "fetch", "--out", str(out), *args],
        extra_env={"HF_ENDPOINT": hub_endpoint},
        timeout=300,
    )
    return proc.returncode, proc.stderr.strip().splitlines(), proc.stdout


def one_error(code: int, lines: list[str]) -> str:
    assert code == 1, lines
    errors = [line for line in lines if line.startswith("da3-edge: error: ")]
    assert errors == lines[-1:], lines
    print(lines[-1])
    return lines[-1]


def test_fetches_the_release_checked_by_the_hubs_sha256(hub: Hub, tmp_path: Path) -> None:
    out = tmp_path / "release"
    code, lines, stdout = fetch(hub.endpoint, out)
    assert code == 0, lines
    assert stdout.strip() == str(out)
    weights = (out / "model.safetensors").read_bytes()
    assert hashlib.sha256(weights).hexdigest() == hub.sha256
    assert (out / "config.json").read_bytes() == hub.config
    assert lines[-1].startswith(f"download: {out / 'model.safetensors'} (") and "ok)" in lines[-1]
    assert not list(out.glob(".*part"))
    code, lines, _ = fetch(hub.endpoint, out)
    assert code == 0 and lines == [
        f"download: not needed: {out / 'model.safetensors'} has SHA-256 {hub.sha256[:12]}..."
    ]


def test_a_cut_download_resumes(hub: Hub, tmp_path: Path) -> None:
    out = tmp_path / "release"
    hub.cut_after = 10_000_000
    line = one_error(*fetch(hub.endpoint, out)[:2])
    assert "the download stopped at 10.0 MB" in line and line.endswith(
        "run the same command again to resume"
    )
    assert (out / ".model.safetensors.part").stat().st_size == 10_000_000
    code, lines, _ = fetch(hub.endpoint, out)
    assert code == 0, lines
    assert hub.ranges == [None, "bytes=10000000-"]
    assert hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest() == hub.sha256


def test_a_wrong_sha256_removes_the_download(hub: Hub, tmp_path: Path) -> None:
    out = tmp_path / "release"
    hub.etag = "0" * 64
    line = one_error(*fetch(hub.endpoint, out)[:2])
    assert f"expected {'0' * 64}: not the release file asked for" in line
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_a_pinned_sha256_wins_over_the_hubs(hub: Hub, tmp_path: Path) -> None:
    out = tmp_path / "release"
    line = one_error(*fetch(hub.endpoint, out, "--sha256", "a" * 64)[:2])
    assert f"expected {'a' * 64}" in line and not (out / "model.safetensors").exists()


def test_a_size_over_the_cap_is_not_downloaded(hub: Hub, tmp_path: Path) -> None:
    hub.announced = 10**15
    line = one_error(*fetch(hub.endpoint, tmp_path / "r")[:2])
    assert "over the 512 MiB any da3-small release could be: not downloaded" in line
    assert hub.ranges == []


def test_more_bytes_than_announced_are_cut_and_removed(hub: Hub, tmp_path: Path) -> None:
    hub.extra = b"x" * 5_000_000
    line = one_error(*fetch(hub.endpoint, tmp_path / "r")[:2])
    assert "more than the" in line and line.endswith("expected: removed")
    assert not list((tmp_path / "r").glob(".*part"))


def test_another_models_config_is_refused(release: Path, tmp_path: Path) -> None:
    other = write_release(
        tmp_path / "other",
        {"model.x": tensors_for([SHAPE])[sorted(tensors_for([SHAPE]))[0]]},
        model_name="da3-large",
    )
    server = Hub(other)
    try:
        line = one_error(*fetch(server.endpoint, tmp_path / "r")[:2])
    finally:
        server.close()
    assert line.endswith("model_name is 'da3-large', not 'da3-small'")


def test_no_hub_is_one_line(tmp_path: Path) -> None:
    line = one_error(*fetch(f"http://127.0.0.1:{free_port()}", tmp_path / "r")[:2])
    assert "cannot download it (" in line or "cannot reach the hub (" in line


def test_a_reason_phrase_reaches_the_terminal_without_escapes(hub: Hub, tmp_path: Path) -> None:
    hub.status = (403, "Forbidden \x1b]0;owned\x07\x1b[2J")
    line = one_error(*fetch(hub.endpoint, tmp_path / "r")[:2])
    assert "\x1b" not in line and "\x07" not in line and "403 Forbidden ?]0;owned??[2J" in line


@pytest.mark.root
def test_a_full_disk_is_refused_before_the_download(hub: Hub, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", size="40m") as disk:
        line = one_error(*fetch(hub.endpoint, disk / "r")[:2])
        assert "MB free," in line and line.endswith("free some space and run again")
        assert not list((disk / "r").glob(".*part"))


@pytest.mark.root
def test_a_disk_that_fills_during_a_download_keeps_no_partial(hub: Hub, tmp_path: Path) -> None:
    """The downloader (fetch's and pull's) from a host that sends no length, onto a disk
    that fills before the file ends."""
    from edge import packs
    from edge.errors import OutputError

    hub.extra = b"x"  # the file host then sends no Content-Length
    with tmpfs(tmp_path / "small", size="40m") as disk:
        with pytest.raises(OutputError, match="no space left on its filesystem: removed"):
            url = f"{hub.endpoint}/files/{hub.sha256}"
            packs.download(url, hub.sha256, disk / "part", lambda done, total: None)
        assert list(disk.iterdir()) == []


def test_build_from_the_hub(hub: Hub, tmp_path: Path) -> None:
    proc = run_cli(
        ["models", "build", "--weights", "hub", "--shape", "42x56", "--out", str(tmp_path / "m")],
        extra_env={"HF_ENDPOINT": hub.endpoint, "XDG_DATA_HOME": str(tmp_path / "data")},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    fetched = tmp_path / "data" / "da3-edge" / "release" / "model.safetensors"
    assert fetched.is_file()
    assert f"weights: {fetched} (" in proc.stderr
    assert (
        proc.stdout.strip()
        == f"wrote 4 artifacts to {tmp_path / 'm'} (random-init: not a real model)"
    )
