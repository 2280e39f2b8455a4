"""scripts/soak.py's rules, on made-up samples: each rule fails on the fault it is for.
(The soak itself runs in .ci/run, three minutes beside the aarch64 lane.)"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from .conftest import load_script


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    return load_script("scripts/soak.py", "soak")


def status(captured: int, written: int, in_flight: int = 0, **parts: int) -> dict[str, Any]:
    counters = dict.fromkeys(
        ("dropped_stale", "dropped_write", "failed_inference", "failed_write"), 0
    )
    counters.update(parts, captured=captured, written=written, in_flight=in_flight)
    return {"counters": counters}


@pytest.mark.parametrize("minutes", [3, 60])
def test_schedule_leaves_the_windows_quiet(soak: ModuleType, minutes: int) -> None:
    seconds = minutes * 60.0
    faults = soak.schedule(seconds)
    (a0, _), (b0, _) = soak.windows(seconds)
    assert [f.at for f in faults] == sorted(f.at for f in faults)
    kills = [f for f in faults if f.kind == "kill"]
    # The restart (RestartSec and a start) is over before the first memory window.
    assert kills and all(f.at + soak.RESTART_SEC + soak.SETTLE < a0 for f in kills)
    assert max(f.end for f in faults) + soak.SETTLE < b0
    assert {f.kind for f in faults} >= {
        "kill", "camera-error", "camera-hang", "disk-full", "read-only", "reload-good",
        "reload-bad",
    }  # fmt: skip
    hang = next(f for f in faults if f.kind == "camera-hang")
    assert hang.hold < 20.0  # shorter than daemon.stuck_after: a camera hang, not a stuck daemon


def test_accounting(soak: ModuleType) -> None:
    Run = soak.Run
    exact = soak.accounting(
        Run(1, 0.0, how="stopped", last_status=status(10, 6, 1, dropped_stale=3))
    )
    assert exact["ok"], exact
    short = soak.accounting(
        Run(1, 0.0, how="stopped", last_status=status(10, 6, 0, dropped_stale=3))
    )
    assert not short["ok"] and "10 != 9" in short["why"]
    capacity = 1 + 2 + 2 + 1  # one worker
    killed = soak.accounting(
        Run(2, 0.0, how="killed", last_status=status(20, 20 - capacity, capacity))
    )
    assert killed["ok"], killed
    too_many = soak.accounting(
        Run(2, 0.0, how="killed", last_status=status(20, 19 - capacity, capacity + 1))
    )
    assert not too_many["ok"]
    assert not soak.accounting(Run(3, 0.0, how="killed"))["ok"]  # no status.json at all


def made_up(soak: ModuleType, **change: Any) -> SimpleNamespace:
    """A clean three-minute soak: flat, steady, within the ring, every fault recovered."""
    seconds = 180.0
    faults = soak.schedule(seconds)
    restart = faults[0].at + soak.RESTART_SEC
    samples = []
    for i in range(37):
        t = i * 5.0
        pid = 1 if t < faults[0].at else 2
        samples.append(
            {"t": t, "pid": pid, "rss_kib": 240 * 1024, "fds": 13, "threads": 7,
             "store_frames": 5, "store_bytes": 20 << 20, "written": int(2 * t) + 1}
        )  # fmt: skip
    runs = [
        soak.Run(1, 0.0, faults[0].at, "killed", -9, status(40, 38, 2)),
        soak.Run(2, restart, seconds, "stopped", 0, status(300, 280, 0, failed_write=20)),
    ]
    fake = SimpleNamespace(
        seconds=seconds, samples=samples, runs=runs, faults=faults,
        consumer={"seen": 300, "read": 300, "pruned": 0, "torn": 0},
    )  # fmt: skip
    for key, value in change.items():
        setattr(fake, key, value)
    return fake


def failing(soak: ModuleType, fake: SimpleNamespace) -> set[str]:
    report = soak.check(fake)
    return {name for name, rule in report["rules"].items() if not rule["ok"]}


def test_clean_run_passes(soak: ModuleType) -> None:
    fake = made_up(soak)
    report = soak.check(fake)
    assert report["ok"], report["rules"]


def test_each_rule_fails_on_its_fault(soak: ModuleType) -> None:
    fake = made_up(soak)
    for s in fake.samples[-4:]:
        s["rss_kib"] += 6 * 1024  # grew 6 MiB by the end
    assert failing(soak, fake) == {"rss_flat"}

    fake = made_up(soak)
    fake.samples[-1]["fds"] += 1  # one descriptor leaked
    assert failing(soak, fake) == {"fds_steady"}

    fake = made_up(soak)
    fake.samples[-3]["threads"] += 1
    assert failing(soak, fake) == {"threads_steady"}

    fake = made_up(soak)
    fake.samples[10]["store_frames"] = soak.KEEP_FRAMES[0] + 1
    assert failing(soak, fake) == {"store_in_ring"}

    fake = made_up(soak)  # the good reload lowered keep_frames; the ring must follow
    fake.samples[-1]["store_frames"] = soak.KEEP_FRAMES[1] + 1
    assert failing(soak, fake) == {"store_in_ring"}

    fake = made_up(soak, consumer={"seen": 10, "read": 9, "pruned": 0, "torn": 1})
    assert failing(soak, fake) == {"consumer"}

    fake = made_up(soak)
    fake.runs[-1].how = "did not stop within 15 s"
    assert "accounting" in failing(soak, fake)

    fake = made_up(soak)
    late = soak.Run(3, 100.0, None, "stopped", 0, status(5, 5))  # a restart inside the windows
    fake.runs.insert(2, late)
    assert "rss_flat" in failing(soak, fake)

    fake = made_up(soak)
    fake.runs[0].orphans = [4242]  # the killed daemon's worker lived on
    assert failing(soak, fake) == {"no_orphans"}

    fake = made_up(soak)
    stalled_from = fake.faults[3].at  # nothing written after the disk filled
    for s in fake.samples:
        if s["t"] >= stalled_from:
            s["written"] = int(2 * stalled_from)
    assert "frames_after_every_fault" in failing(soak, fake)


def test_recheck_judges_a_finished_run_from_its_files(soak: ModuleType, tmp_path: Path) -> None:
    fake = made_up(soak)
    setup = {"minutes": fake.seconds / 60, "faults": [asdict(f) for f in fake.faults]}

    report = soak.check(fake) | {"setup": setup}
    (tmp_path / "report.json").write_text(json.dumps(report))

    def write(samples: list[dict[str, Any]]) -> None:
        (tmp_path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))

    write(fake.samples)
    again = soak.recheck(tmp_path)
    assert again["ok"] and again["rules"] == report["rules"]
    fake.samples[-1]["fds"] += 1  # the samples on file are what is judged, not the old verdict
    write(fake.samples)
    assert not soak.recheck(tmp_path)["rules"]["fds_steady"]["ok"]


def test_fds_counts_what_stays_open_and_names_the_rest(
    soak: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A descriptor open at every reading counts (a leak stays open); one closed between
    readings (a file being written at the sampling instant) is named, not counted."""
    kept = (tmp_path / "kept").open("w")
    passing = (tmp_path / "passing").open("w")
    real = soak.open_fds
    calls = []

    def reading(pids: list[int]) -> set[tuple[int, int, str]]:
        found = real(pids)
        calls.append(len(found))
        if not passing.closed:
            passing.close()  # written and closed after the first reading
        return found

    monkeypatch.setattr(soak, "open_fds", reading)
    held, transient = soak.held_fds([os.getpid()])
    kept.close()
    targets = {target for _, _, target in held}
    assert str(tmp_path / "kept") in targets and str(tmp_path / "passing") not in targets
    assert transient == [str(tmp_path / "passing")] and len(calls) == soak.FD_READINGS
