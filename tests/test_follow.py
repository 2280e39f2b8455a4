"""Following a store: the real kernel's inotify on a real directory, and the polling
fallback, driven with the same renames the daemon's store makes."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from edge import atomic
from edge.store.follow import Follower
from edge.store.read import latest


def publish(root: Path, seq: int) -> None:
    """What FrameStore does: a frame directory, then a new `latest` renamed over."""
    frame = root / "frames" / f"{seq:010d}"
    frame.mkdir(parents=True)
    tmp = root / f".latest.{os.getpid()}"
    os.symlink(f"frames/{seq:010d}", tmp)
    os.replace(tmp, root / "latest")


def test_latest_and_status_changes_are_reported(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    with Follower(root) as f:
        assert f.mode == "inotify" and f.fileno() is not None
        assert f.wait(0.2) == set()
        publish(root, 0)
        assert f.wait(2) == {"latest"}
        assert latest(root) is not None and latest(root).seq == 0  # type: ignore[union-attr]
        atomic.write_bytes(root / "status.json", b"{}", durable=False)
        assert f.wait(2) == {"status.json"}
        (root / "frames" / "other").mkdir()  # not a publication
        assert f.wait(0.2) == set()


def test_a_store_that_appears_later_or_is_made_anew(tmp_path: Path) -> None:
    """The daemon not started yet (no root), then its store on /run made anew."""
    root = tmp_path / "store"
    with Follower(root, retry=0.1) as f:
        assert f.wait(0.3) == set()
        root.mkdir()
        assert f.wait(2) == {"latest", "status.json"}  # appeared: look at both
        publish(root, 0)
        assert f.wait(2) == {"latest"}
        shutil.rmtree(root)
        assert f.wait(2) == {"latest", "status.json"}
        root.mkdir()
        assert f.wait(2) == {"latest", "status.json"}
        publish(root, 0)
        assert f.wait(2) == {"latest"}


def test_wait_wakes_as_soon_as_a_frame_is_published(tmp_path: Path) -> None:
    """inotify, not a poll interval: the wait ends right after the rename."""
    root = tmp_path / "store"
    root.mkdir()
    with Follower(root, retry=5.0) as f:
        timer = threading.Timer(0.3, publish, (root, 7))
        timer.start()
        t0 = time.monotonic()
        assert f.wait(5) == {"latest"}
        waited = time.monotonic() - t0
        timer.join()
    print(f"woke {waited - 0.3:.3f} s after the rename")
    assert waited < 1.0


def test_polling_where_there_is_no_inotify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge.store import follow

    def no_inotify() -> None:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(follow, "_Inotify", no_inotify)
    root = tmp_path / "store"
    root.mkdir()
    with Follower(root, retry=0.05) as f:
        assert f.mode == "polling" and f.fileno() is None
        publish(root, 0)
        assert f.wait(2) == {"latest"}
        atomic.write_bytes(root / "status.json", b"{}", durable=False)
        assert f.wait(2) == {"status.json"}
        assert f.wait(0.2) == set()
