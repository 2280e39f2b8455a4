"""FrameStore on its own: the ring's bounds, leftovers, numbering, persistence."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edge.config import StoreConfig
from edge.store import ring
from edge.store.ring import FS_SHARE, FrameStore
from scripts.support.store import depth_frame
from scripts.support.tools import tmpfs


def _seqs(store: FrameStore) -> list[int]:
    return sorted(int(p.name) for p in store.frames_dir.iterdir() if p.name.isdigit())


def test_ring_keeps_the_newest_by_count(tmp_path: Path) -> None:
    store = FrameStore(tmp_path, StoreConfig(keep_frames=3))
    for n in range(7):
        store.write(depth_frame(n), {"n": n})
    assert _seqs(store) == [4, 5, 6]
    assert (tmp_path / "latest").resolve() == store.frames_dir / "0000000006"
    assert json.loads((tmp_path / "latest" / "frame.json").read_text())["n"] == 6


def test_ring_keeps_under_max_bytes(tmp_path: Path) -> None:
    probe = FrameStore(tmp_path / "probe", StoreConfig())
    one = sum(p.stat().st_size for p in probe.write(depth_frame(0), {}).iterdir())
    store = FrameStore(tmp_path / "s", StoreConfig(keep_frames=100, max_bytes=int(2.5 * one)))
    for n in range(6):
        store.write(depth_frame(n), {})
    assert _seqs(store) == [4, 5]
    assert store.bytes <= 2.5 * one


def test_frames_never_lists_more_than_the_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader listing frames/ sees right after each publish: never more than
    keep_frames, never more than max_bytes (the oldest go first, then the rename)."""
    probe = FrameStore(tmp_path / "probe", StoreConfig())
    one = sum(p.stat().st_size for p in probe.write(depth_frame(0), {}).iterdir())
    seen: list[tuple[int, int]] = []
    rename = os.rename

    def watched(src: object, dst: object) -> None:
        rename(src, dst)  # type: ignore[arg-type]
        if Path(str(dst)).name.isdigit():
            listed = [p for p in Path(str(dst)).parent.iterdir() if p.name.isdigit()]
            seen.append((len(listed), sum(f.stat().st_size for d in listed for f in d.iterdir())))

    monkeypatch.setattr(os, "rename", watched)
    by_count = FrameStore(tmp_path / "count", StoreConfig(keep_frames=3))
    for n in range(6):
        by_count.write(depth_frame(n), {})
    assert max(count for count, _ in seen) == 3, seen
    seen.clear()
    by_bytes = FrameStore(
        tmp_path / "bytes", StoreConfig(keep_frames=100, max_bytes=int(2.5 * one))
    )
    for n in range(6):
        by_bytes.write(depth_frame(n), {})
    assert max(size for _, size in seen) <= 2.5 * one, (seen, one)
    assert _seqs(by_bytes) == [4, 5]


def test_restart_cleans_leftovers_and_continues_numbering(tmp_path: Path) -> None:
    store = FrameStore(tmp_path, StoreConfig())
    for n in range(3):
        store.write(depth_frame(n), {})
    (store.frames_dir / ".tmp-0000000003").mkdir()  # what a SIGKILL mid-write leaves
    (store.frames_dir / ".tmp-0000000003" / "frame.npz").write_bytes(b"half")
    again = FrameStore(tmp_path, StoreConfig())
    again.prepare()
    assert not list(store.frames_dir.glob(".tmp-*"))
    assert again.write(depth_frame(9), {}).name == "0000000003"


def test_a_removed_frames_folder_never_reuses_a_number_under_the_same_id(
    tmp_path: Path,
) -> None:
    """Someone removes frames/ (to free room, to start clean): a number said once under
    a store id is never said again for another frame under it, or serve's ETag
    (id + number) would answer 304 for a frame the client never saw."""
    import shutil

    store = FrameStore(tmp_path, StoreConfig())
    for n in range(3):
        store.write(depth_frame(n), {})
    said = {(store.instance, 2)}
    shutil.rmtree(store.frames_dir)  # while the daemon runs: its next write meets it
    with pytest.raises(OSError):
        store.write(depth_frame(3), {})
    store.prepare()  # what the writer does after a fault
    name = store.write(depth_frame(4), {}).name
    assert (store.instance, int(name)) not in said and int(name) >= 3
    shutil.rmtree(store.frames_dir)  # while it is stopped: a restart starts again at 0
    again = FrameStore(tmp_path, StoreConfig())
    name = again.write(depth_frame(5), {}).name
    assert name == "0000000000" and again.instance != store.instance
    said |= {(store.instance, int(name))}
    assert (again.instance, 0) not in said


def test_formats_subset_always_keeps_the_record(tmp_path: Path) -> None:
    store = FrameStore(tmp_path, StoreConfig(formats=("npz",)))
    path = store.write(depth_frame(0), {})
    assert sorted(p.name for p in path.iterdir()) == ["frame.json", "frame.npz"]


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FrameStore(tmp_path, StoreConfig())
    store.write(depth_frame(0), {})

    def boom(*_: object, **__: object) -> dict[str, bytes]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("edge.frames.render", boom)
    with pytest.raises(OSError):
        store.write(depth_frame(1), {})
    assert _seqs(store) == [0] and not list(store.frames_dir.glob(".tmp-*"))
    assert (tmp_path / "latest").resolve().name == "0000000000"


def _persisted(keep: Path) -> list[tuple[str, int]]:
    """(copy name, the ring's store_seq it holds), oldest first."""
    names = sorted(p.name for p in keep.iterdir() if p.name.isdigit())
    return [(n, json.loads((keep / n / "frame.json").read_text())["store_seq"]) for n in names]


def test_persistence_is_rate_limited_and_capped(tmp_path: Path) -> None:
    keep = tmp_path / "state"
    store = FrameStore(
        tmp_path / "run", StoreConfig(persist_dir=str(keep), persist_every=10.0, persist_keep=2)
    )
    assert store.persist is not None
    persisted = []
    for n, now in enumerate((0.0, 1.0, 5.0, 10.5, 11.0, 21.0, 40.0)):
        path = store.write(depth_frame(n), {})
        if store.persist.maybe_copy(path, now=now) is not None:
            persisted.append(n)
    assert persisted == [0, 3, 5, 6]
    assert _persisted(keep) == [("0000000002", 5), ("0000000003", 6)]  # the newest two
    for name, seq in _persisted(keep):
        assert sorted(p.name for p in (keep / name).iterdir()) == sorted(
            p.name for p in (store.frames_dir / f"{seq:010d}").iterdir()
        )
    assert store.persist.copied == 4 and store.persist.state == ("ok", None)


def test_persisted_copies_survive_a_store_reset(tmp_path: Path) -> None:
    """/run is new at every boot: the ring numbers from 0 again, the copies on the SD
    card go on with their own numbers (none collides, none is pruned as the oldest)."""
    keep = tmp_path / "state"
    for boot in range(3):
        run = tmp_path / f"run{boot}"  # a new, empty /run
        store = FrameStore(
            run, StoreConfig(persist_dir=str(keep), persist_every=1.0, persist_keep=4)
        )
        assert store.persist is not None
        for n in range(3):
            path = store.write(depth_frame(n), {"boot": boot})
            assert store.persist.maybe_copy(path, now=float(n)) is not None
    copies = sorted(p.name for p in keep.iterdir() if p.name.isdigit())
    assert copies == [f"{n:010d}" for n in range(5, 9)]
    boots = [json.loads((keep / c / "frame.json").read_text())["boot"] for c in copies]
    assert boots == [1, 2, 2, 2]  # the newest four, in the order they were made


def test_a_failing_persist_dir_backs_off_and_spares_the_ring(tmp_path: Path) -> None:
    keep = tmp_path / "state"
    store = FrameStore(tmp_path / "run", StoreConfig(persist_dir=str(keep), persist_every=10.0))
    assert store.persist is not None
    keep.write_text("not a directory")  # an SD card gone read-only, a mount lost: an OSError
    tried = []
    for n, now in enumerate((0.0, 10.0, 20.0, 30.0, 60.0, 100.0)):
        path = store.write(depth_frame(n), {})  # the ring goes on writing
        before = store.persist.failed
        assert store.persist.maybe_copy(path, now=now) is None
        if store.persist.failed > before:
            tried.append(now)
    assert tried == [0.0, 20.0, 60.0]  # then 140: 20, 40, 80 s apart
    state, reason = store.persist.state
    assert state == "failing" and reason is not None and str(keep) in reason, reason
    assert _seqs(store) == [0, 1, 2, 3, 4, 5]
    keep.unlink()
    keep.mkdir()
    assert store.persist.maybe_copy(store.frames_dir / "0000000005", now=140.0) is not None
    assert store.persist.state == ("ok", None) and store.persist.copied == 1


def _one_frame_bytes(tmp_path: Path, size: tuple[int, int]) -> int:
    probe = FrameStore(tmp_path / "probe", StoreConfig())
    return sum(p.stat().st_size for p in probe.write(depth_frame(0, size), {}).iterdir())


@pytest.mark.root
def test_the_ring_fits_the_filesystem_it_lives_on(tmp_path: Path) -> None:
    """store.max_bytes far above the filesystem (the default ring on a small Pi's /run):
    the cap is a share of the filesystem's size, and every frame is written."""
    size = (120, 160)
    one = _one_frame_bytes(tmp_path, size)
    with tmpfs(tmp_path / "run", size="2m") as run:
        store = FrameStore(run / "store", StoreConfig(keep_frames=100, max_bytes=100_000_000))
        store.prepare()
        fs = os.statvfs(run)
        assert store.cap == int(fs.f_blocks * fs.f_frsize * FS_SHARE) < store.max_bytes
        for n in range(40):
            store.write(depth_frame(n, size), {})
            assert store.bytes <= store.cap
        print(f"frame {one} B, filesystem {fs.f_blocks * fs.f_frsize} B, cap {store.cap} B")
        assert _seqs(store)[-1] == 39 and len(_seqs(store)) >= 2
        assert (store.root / "latest").resolve().name == "0000000039"


@pytest.mark.root
def test_a_full_filesystem_prunes_the_oldest_frames_and_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Something else fills the filesystem (the ring's share is not free): the writer
    prunes the ring's oldest frames, never ``latest``, and writes the frame."""
    size = (120, 160)
    one = _one_frame_bytes(tmp_path, size)
    with tmpfs(tmp_path / "run", size="4m") as run:
        store = FrameStore(run / "store", StoreConfig(keep_frames=100, max_bytes=100_000_000))
        for n in range(6):
            store.write(depth_frame(n, size), {})
        fs = os.statvfs(run)
        ballast = run / "ballast"  # leaves room for about one frame
        ballast.write_bytes(b"\0" * (fs.f_bavail * fs.f_frsize - int(1.5 * one)))
        for n in range(6, 30):
            store.write(depth_frame(n, size), {})
            assert (store.root / "latest").resolve().name == f"{n:010d}"
        print(f"frame {one} B; ring left {_seqs(store)}, cap {store.cap} B")
        assert _seqs(store)[-1] == 29
        # The room it found is the ring's cap from now on: no ENOSPC at every frame.
        full = [r for r in caplog.records if "is full: pruned" in r.getMessage()]
        assert len(full) == 1 and store.cap < 2 << 20
        ballast.unlink()  # the room comes back: so does the cap, and the ring grows
        for n in range(30, 40):
            store.write(depth_frame(n, size), {})
        assert store.cap == store.fitted == int(fs.f_blocks * fs.f_frsize * FS_SHARE)
        assert store.cap // one - 1 <= len(_seqs(store)) <= store.cap // one  # sizes vary a little


@pytest.mark.root
@pytest.mark.parametrize("room", [0.3, 0.7, 1.0, 1.2])
def test_a_full_filesystem_writes_frames_of_varying_size(tmp_path: Path, room: float) -> None:
    """A camera's frames vary in size (their content compresses more or less): once the
    ring has pruned to the room something else left it, a frame larger than the last
    one must still fit, not fail with ENOSPC while the ring holds frames it could drop
    (about half the frames failed so in the soak's minute of full disk)."""
    sizes = [(120, 160), (144, 160)]  # 20 % apart
    one = _one_frame_bytes(tmp_path, sizes[1])
    with tmpfs(tmp_path / "run", size="4m") as run:
        store = FrameStore(run / "store", StoreConfig(keep_frames=100, max_bytes=100_000_000))
        for n in range(6):
            store.write(depth_frame(n, sizes[n % 2]), {})
        fs = os.statvfs(run)
        ballast = run / "ballast"  # leaves ``room`` of the larger frame
        ballast.write_bytes(b"\0" * (fs.f_bavail * fs.f_frsize - int(room * one)))
        failed = []
        for n in range(6, 40):
            try:
                store.write(depth_frame(n, sizes[(n * 7 // 3) % 2]), {})
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                failed.append(n)
        print(f"frames {one} B at most; failed {failed}; ring left {_seqs(store)}")
        assert failed == [] and _seqs(store)[-1] == 39
        assert not list(store.frames_dir.glob(".tmp-*"))


@pytest.mark.root
def test_no_room_for_even_one_frame_fails_and_keeps_latest(tmp_path: Path) -> None:
    size = (120, 160)
    with tmpfs(tmp_path / "run", size="4m") as run:
        store = FrameStore(run / "store", StoreConfig())
        store.write(depth_frame(0, size), {})
        fs = os.statvfs(run)
        (run / "ballast").write_bytes(b"\0" * (fs.f_bavail * fs.f_frsize))
        with pytest.raises(OSError) as info:
            store.write(depth_frame(1, size), {})
        assert info.value.errno == errno.ENOSPC
        assert _seqs(store) == [0] and not list(store.frames_dir.glob(".tmp-*"))
        assert (store.root / "latest").resolve().name == "0000000000"


def _until(check: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"no {what} within {deadline_s:g} s"
        time.sleep(0.01)


def test_a_stalled_card_never_holds_up_the_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer only offers a frame: while the card stalls in a flush (held here
    until the test lets it go), offers return at once, later frames are passed over
    (one copy under way at most) and the ring goes on; the copy, made in the persist
    thread, holds the frame offered even after the ring has dropped it."""
    gate = threading.Event()
    flushed_in: list[str] = []
    real_flush = ring.flush

    def stalled(directory: Path, names: list[str]) -> None:
        flushed_in.append(threading.current_thread().name)
        gate.wait(60)
        real_flush(directory, names)

    monkeypatch.setattr(ring, "flush", stalled)
    keep = tmp_path / "state"
    store = FrameStore(
        tmp_path / "run", StoreConfig(keep_frames=3, persist_dir=str(keep), persist_every=0.001)
    )
    assert store.persist is not None
    assert store.persist.offer(store.write(depth_frame(0), {"n": 0}))
    _until(lambda: bool(flushed_in), "flush started")
    for n in range(1, 11):
        assert not store.persist.offer(store.write(depth_frame(n), {"n": n}))  # busy
    assert _seqs(store) == [8, 9, 10] and store.persist.copied == 0 and not gate.is_set()
    gate.set()
    _until(lambda: store.persist is not None and store.persist.copied == 1, "copy")
    assert flushed_in == ["persist"]
    assert _persisted(keep) == [("0000000000", 0)]
    _until(lambda: store.persist is not None and not store.persist.busy(), "idle")
    assert store.persist.offer(store.frames_dir / "0000000010")
    _until(lambda: store.persist is not None and store.persist.copied == 2, "second copy")
    assert _persisted(keep) == [("0000000000", 0), ("0000000001", 10)]
    store.persist.close()


def test_a_persisted_copy_is_two_flushes_not_one_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy's files reach the card in one flush (syncfs on Linux), then its rename:
    not an fsync for each file and one for the folder after each (9 a frame)."""
    keep = tmp_path / "state"
    store = FrameStore(tmp_path / "run", StoreConfig(persist_dir=str(keep), persist_every=1.0))
    assert store.persist is not None
    path = store.write(depth_frame(0), {})
    assert len(list(path.iterdir())) >= 3
    fsyncs: list[int] = []
    flushes: list[list[str]] = []
    real_fsync, real_flush = os.fsync, ring.flush

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    def flush(directory: Path, names: list[str]) -> None:
        flushes.append(names)
        real_flush(directory, names)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(ring, "flush", flush)
    assert store.persist.maybe_copy(path, now=0.0) is not None
    assert [sorted(names) for names in flushes] == [sorted(p.name for p in path.iterdir())]
    assert len(fsyncs) == (1 if ring._syncfs() is not None else len(flushes[0]) + 2)
