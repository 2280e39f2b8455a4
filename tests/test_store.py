"""FrameStore on its own: the ring's bounds, leftovers, numbering, persistence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from edge.depth import DepthFrame
from edge.store import FrameStore


def _frame(n: int, size: tuple[int, int] = (60, 80)) -> DepthFrame:
    rng = np.random.default_rng(n)
    depth = (1 + rng.random(size)).astype(np.float32)
    return DepthFrame(
        depth=depth,
        conf=depth + 1,
        name=f"f{n}",
        source_size=size,
        shape_wanted=(14, 14),
        shape_used=(14, 14),
        precision="fp16",
        stages="numpy",
        model="da3-small",
        weights="random-init:0",
        random_init=True,
        artifact="x.tflite",
    )


def _seqs(store: FrameStore) -> list[int]:
    return sorted(int(p.name) for p in store.frames_dir.iterdir() if p.name.isdigit())


def test_ring_keeps_the_newest_by_count(tmp_path: Path) -> None:
    store = FrameStore(tmp_path, keep_frames=3)
    for n in range(7):
        store.write(_frame(n), {"n": n})
    assert _seqs(store) == [4, 5, 6]
    assert (tmp_path / "latest").resolve() == store.frames_dir / "0000000006"
    assert json.loads((tmp_path / "latest" / "frame.json").read_text())["n"] == 6


def test_ring_keeps_under_max_bytes(tmp_path: Path) -> None:
    probe = FrameStore(tmp_path / "probe")
    one = sum(p.stat().st_size for p in probe.write(_frame(0), {}).iterdir())
    store = FrameStore(tmp_path / "s", keep_frames=100, max_bytes=int(2.5 * one))
    for n in range(6):
        store.write(_frame(n), {})
    assert _seqs(store) == [4, 5]
    assert store.bytes <= 2.5 * one


def test_frames_never_lists_more_than_the_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader listing frames/ sees right after each publish: never more than
    keep_frames, never more than max_bytes (the oldest go first, then the rename)."""
    probe = FrameStore(tmp_path / "probe")
    one = sum(p.stat().st_size for p in probe.write(_frame(0), {}).iterdir())
    seen: list[tuple[int, int]] = []
    rename = os.rename

    def watched(src: object, dst: object) -> None:
        rename(src, dst)  # type: ignore[arg-type]
        if Path(str(dst)).name.isdigit():
            listed = [p for p in Path(str(dst)).parent.iterdir() if p.name.isdigit()]
            seen.append((len(listed), sum(f.stat().st_size for d in listed for f in d.iterdir())))

    monkeypatch.setattr(os, "rename", watched)
    by_count = FrameStore(tmp_path / "count", keep_frames=3)
    for n in range(6):
        by_count.write(_frame(n), {})
    assert max(count for count, _ in seen) == 3, seen
    seen.clear()
    by_bytes = FrameStore(tmp_path / "bytes", keep_frames=100, max_bytes=int(2.5 * one))
    for n in range(6):
        by_bytes.write(_frame(n), {})
    assert max(size for _, size in seen) <= 2.5 * one, (seen, one)
    assert _seqs(by_bytes) == [4, 5]


def test_restart_cleans_leftovers_and_continues_numbering(tmp_path: Path) -> None:
    store = FrameStore(tmp_path)
    for n in range(3):
        store.write(_frame(n), {})
    (store.frames_dir / ".tmp-0000000003").mkdir()  # what a SIGKILL mid-write leaves
    (store.frames_dir / ".tmp-0000000003" / "frame.npz").write_bytes(b"half")
    again = FrameStore(tmp_path)
    again.prepare()
    assert not list(store.frames_dir.glob(".tmp-*"))
    assert again.write(_frame(9), {}).name == "0000000003"


def test_formats_subset_always_keeps_the_record(tmp_path: Path) -> None:
    store = FrameStore(tmp_path, formats=("npz",))
    path = store.write(_frame(0), {})
    assert sorted(p.name for p in path.iterdir()) == ["frame.json", "frame.npz"]


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FrameStore(tmp_path)
    store.write(_frame(0), {})

    def boom(*_: object, **__: object) -> dict[str, bytes]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("edge.frames.render", boom)
    with pytest.raises(OSError):
        store.write(_frame(1), {})
    assert _seqs(store) == [0] and not list(store.frames_dir.glob(".tmp-*"))
    assert (tmp_path / "latest").resolve().name == "0000000000"


def test_persistence_is_rate_limited_and_capped(tmp_path: Path) -> None:
    keep = tmp_path / "state"
    store = FrameStore(tmp_path / "run", persist_dir=keep, persist_every=10.0, persist_keep=2)
    persisted = []
    for n, now in enumerate((0.0, 1.0, 5.0, 10.5, 11.0, 21.0, 40.0)):
        path = store.write(_frame(n), {})
        if store.maybe_persist(path, now=now) is not None:
            persisted.append(n)
    assert persisted == [0, 3, 5, 6]
    kept = sorted(p.name for p in keep.iterdir())
    assert kept == ["0000000005", "0000000006"]  # the newest two
    for name in kept:
        assert sorted(p.name for p in (keep / name).iterdir()) == sorted(
            p.name for p in (store.frames_dir / name).iterdir()
        )
