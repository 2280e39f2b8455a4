"""The soak's rules (scripts/support/soak/rules.py) on made-up samples: each rule fails on the
fault it is for. (The soak itself runs in .ci/run, three minutes beside the aarch64
lane.)"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scripts.support.soak import sample
from scripts.support.soak.report import recheck
from scripts.support.soak.rules import Run, accounting, check
from scripts.support.soak.schedule import (
    KEEP_FRAMES,
    RESTART_SEC,
    RESTARTS,
    SETTLE,
    schedule,
    windows,
)


def status(captured: int, written: int, in_flight: int = 0, **parts: int) -> dict[str, Any]:
    counters = dict.fromkeys(
        ("dropped_stale", "dropped_write", "failed_inference", "failed_write"), 0
    )
    counters.update(parts, captured=captured, written=written, in_flight=in_flight)
    return {"counters": counters}


@pytest.mark.parametrize("minutes", [3, 60])
def test_schedule_leaves_the_windows_quiet(minutes: int) -> None:
    seconds = minutes * 60.0
    faults = schedule(seconds)
    (a0, _), (b0, _) = windows(seconds)
    assert [f.at for f in faults] == sorted(f.at for f in faults)
    ends = [f for f in faults if f.kind in RESTARTS]
    # The restarts (RestartSec and a start) are over before the first memory window.
    assert len(ends) == 2 and all(f.at + RESTART_SEC + SETTLE < a0 for f in ends)
    assert ends[1].at - ends[0].at > RESTART_SEC + SETTLE  # the second finds a running daemon
    assert max(f.end for f in faults) + SETTLE < b0
    kinds = {"kill", "camera-crash", "camera-error", "camera-hang", "disk-full", "read-only"}
    kinds |= {"slow-fsync", "core-overflow"}
    reloads = {"reload-good", "reload-bad", "reload-not-utf8", "reload-model-locked"}
    assert {f.kind for f in faults} >= kinds | reloads
    hang = next(f for f in faults if f.kind == "camera-hang")
    assert hang.hold < 20.0  # shorter than daemon.stuck_after: a camera hang, not a stuck daemon


def test_accounting() -> None:
    exact = accounting(Run(1, 0.0, how="stopped", last_status=status(10, 6, 1, dropped_stale=3)))
    assert exact["ok"], exact
    short = accounting(Run(1, 0.0, how="stopped", last_status=status(10, 6, 0, dropped_stale=3)))
    assert not short["ok"] and "10 != 9" in short["why"]
    capacity = 1 + 2 + 2 + 1  # one worker
    killed = accounting(Run(2, 0.0, how="killed", last_status=status(20, 20 - capacity, capacity)))
    assert killed["ok"], killed
    too_many = accounting(
        Run(2, 0.0, how="killed", last_status=status(20, 19 - capacity, capacity + 1))
    )
    assert not too_many["ok"]
    assert not accounting(Run(3, 0.0, how="killed"))["ok"]  # no status.json at all


def made_up(**change: Any) -> SimpleNamespace:
    """A clean three-minute soak: flat, steady, within the ring, every fault recovered."""
    seconds = 180.0
    faults = schedule(seconds)
    crash, kill = (next(f for f in faults if f.kind == k) for k in RESTARTS)
    samples = []
    for i in range(37):
        t = i * 5.0
        pid = 1 if t < crash.at else 2 if t < kill.at else 3
        samples.append(
            {
                "t": t,
                "pid": pid,
                "rss_kib": 240 * 1024,
                "fds": 13,
                "threads": 7,
                "store_frames": 5,
                "store_bytes": 20 << 20,
                "written": int(2 * t) + 1,
            }
        )
    runs = [
        Run(1, 0.0, crash.at, "exited 70", 70, status(14, 14)),
        Run(2, crash.at + RESTART_SEC, kill.at, "killed", -9, status(40, 38, 2)),
        Run(3, kill.at + RESTART_SEC, seconds, "stopped", 0, status(300, 280, 0, failed_write=20)),
    ]
    for fault in faults:
        if fault.kind == "slow-fsync":  # the camera's 2 frames/s, as if the stall cost nothing
            fault.during, fault.copied = int(2 * fault.hold), 1
        if fault.kind == "core-overflow":
            fault.during = int(2 * fault.hold)
    fake = SimpleNamespace(
        seconds=seconds,
        samples=samples,
        runs=runs,
        faults=faults,
        consumer={
            "seen": 300,
            "read": 300,
            "pruned": 0,
            "torn": 0,
            "non_finite": int(2 * next(f.hold for f in faults if f.kind == "core-overflow")),
            "not_strict": 0,
        },
    )
    for key, value in change.items():
        setattr(fake, key, value)
    return fake


def failing(fake: SimpleNamespace) -> set[str]:
    report = check(fake)
    return {name for name, rule in report["rules"].items() if not rule["ok"]}


def test_clean_run_passes() -> None:
    fake = made_up()
    report = check(fake)
    assert report["ok"], report["rules"]


def test_each_rule_fails_on_its_fault() -> None:
    fake = made_up()
    for s in fake.samples[-4:]:
        s["rss_kib"] += 6 * 1024  # grew 6 MiB by the end
    assert failing(fake) == {"rss_flat"}

    fake = made_up()
    fake.samples[-1]["fds"] += 1  # one descriptor leaked
    assert failing(fake) == {"fds_steady"}

    fake = made_up()
    fake.samples[-3]["threads"] += 1
    assert failing(fake) == {"threads_steady"}

    fake = made_up()
    fake.samples[10]["store_frames"] = KEEP_FRAMES[0] + 1
    assert failing(fake) == {"store_in_ring"}

    fake = made_up()  # the good reload lowered keep_frames; the ring must follow
    fake.samples[-1]["store_frames"] = KEEP_FRAMES[1] + 1
    assert failing(fake) == {"store_in_ring"}

    fake = made_up()
    fake.consumer["torn"] = 1
    assert failing(fake) == {"consumer"}

    fake = made_up()
    fake.runs[-1].how = "did not stop within 15 s"
    assert "accounting" in failing(fake)

    fake = made_up()
    late = Run(4, 100.0, None, "stopped", 0, status(5, 5))  # a restart inside the windows
    fake.runs.insert(3, late)
    assert "rss_flat" in failing(fake)

    fake = made_up()
    fake.runs[1].orphans = [4242]  # the killed daemon's worker lived on
    assert failing(fake) == {"no_orphans"}

    fake = made_up()
    stalled_from = next(f.at for f in fake.faults if f.kind == "disk-full")  # nothing after
    for s in fake.samples:
        if s["t"] >= stalled_from:
            s["written"] = int(2 * stalled_from)
    assert "frames_after_every_fault" in failing(fake)

    fake = made_up()  # the writer waited for each stalled fsync: a frame every 2.5 s or less
    stall = next(f for f in fake.faults if f.kind == "slow-fsync")
    stall.during = int(stall.hold / 2.5)
    assert failing(fake) == {"frames_while_fsync_stalls"}

    fake = made_up()  # a stall that did not bite: persistence copied at its own pace
    stall = next(f for f in fake.faults if f.kind == "slow-fsync")
    stall.copied = int(stall.hold)
    assert failing(fake) == {"frames_while_fsync_stalls"}


def test_the_overflow_rule_fails_on_its_faults() -> None:
    fake = made_up()  # a record with NaN in its JSON: the page's JSON.parse fails on it
    fake.consumer["not_strict"] = 1
    assert failing(fake) == {"frames_of_an_overflowing_core"}

    fake = made_up()  # the overflowing core did not bite (or no frame came while it ran)
    next(f for f in fake.faults if f.kind == "core-overflow").during = 0
    assert failing(fake) == {"frames_of_an_overflowing_core"}


def test_recheck_judges_a_finished_run_from_its_files(tmp_path: Path) -> None:
    fake = made_up()
    setup = {"minutes": fake.seconds / 60, "faults": [asdict(f) for f in fake.faults]}

    report = check(fake) | {"setup": setup}
    (tmp_path / "report.json").write_text(json.dumps(report))

    def write(samples: list[dict[str, Any]]) -> None:
        (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))

    write(fake.samples)
    again = recheck(tmp_path)
    assert again["ok"] and again["rules"] == report["rules"]
    fake.samples[-1]["fds"] += 1  # the samples on file are what is judged, not the old verdict
    write(fake.samples)
    assert not recheck(tmp_path)["rules"]["fds_steady"]["ok"]


def test_fds_counts_what_stays_open_and_names_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A descriptor open at every reading counts (a leak stays open); one closed between
    readings (a file being written at the sampling instant) is named, not counted."""
    kept = (tmp_path / "kept").open("w")
    passing = (tmp_path / "passing").open("w")
    real = sample.open_fds
    calls = []

    def reading(pids: list[int]) -> set[tuple[int, int, str]]:
        found = real(pids)
        calls.append(len(found))
        if not passing.closed:
            passing.close()  # written and closed after the first reading
        return found

    monkeypatch.setattr(sample, "open_fds", reading)
    held, transient = sample.held_fds([os.getpid()])
    kept.close()
    targets = {target for _, _, target in held}
    assert str(tmp_path / "kept") in targets and str(tmp_path / "passing") not in targets
    assert transient == [str(tmp_path / "passing")] and len(calls) == sample.FD_READINGS
