"""The soak's judgement: each rule over the samples, the daemon's lives and the faults,
with what was measured and its threshold. Pure: no clock, no files, no processes (the
unit tests feed it made-up runs)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from .schedule import (
    IN_FLIGHT_WORKERS,
    KEEP_FRAMES,
    RESTARTS,
    RING_BYTES,
    SETTLE,
    Fault,
    windows,
)

RSS_FLAT_MIB = 5.0
Sample = dict[str, Any]
Rule = dict[str, Any]


@dataclass
class Run:
    """One life of the daemon process."""

    pid: int
    started: float
    ended: float | None = None
    how: str = "running"  # stopped (SIGTERM), killed (SIGKILL), watchdog, exited N
    exit_code: int | None = None
    last_status: dict[str, Any] | None = None
    # Its workers alive 5 s after it ended (None: not recorded, a run from before the rule).
    orphans: list[int] | None = field(default_factory=list)


class Judged(Protocol):
    """What the rules read of a run (a finished soak, or one read back from its files)."""

    @property
    def seconds(self) -> float: ...
    @property
    def samples(self) -> list[Sample]: ...
    @property
    def runs(self) -> list[Run]: ...
    @property
    def faults(self) -> list[Fault]: ...
    @property
    def consumer(self) -> dict[str, int]: ...


def accounting(run: Run, workers: int = IN_FLIGHT_WORKERS) -> dict[str, Any]:
    """One row of the accounting table: where the run's captured frames went."""
    c = (run.last_status or {}).get("counters")
    row: dict[str, Any] = {"pid": run.pid, "how": run.how, "exit_code": run.exit_code}
    if not c:
        return {**row, "ok": False, "why": "no status.json from this run"}
    parts = ("written", "dropped_stale", "dropped_write", "failed_inference", "failed_write")
    accounted = sum(c[p] for p in parts) + c["in_flight"]
    capacity = 1 + (workers + 1) + 2 + 1
    row.update({p: c[p] for p in ("captured", *parts, "in_flight")}, capacity=capacity)
    if run.how == "stopped":
        row["ok"] = c["captured"] == accounted
        row["why"] = f"captured {c['captured']} {'=' if row['ok'] else '!='} {accounted} accounted"
    else:
        # Read while running: the parts may be a frame apart; the in-flight bound holds.
        row["ok"] = c["in_flight"] <= capacity and abs(c["captured"] - accounted) <= 1
        row["why"] = (
            f"last status before the {run.how}: {c['in_flight']} in flight (at most "
            f"{capacity} can be: the most the kill lost), captured {c['captured']} vs "
            f"{accounted} accounted"
        )
    return row


def no_orphans(runs: list[Run]) -> Rule:
    recorded = all(r.orphans is not None for r in runs)
    return {
        "ok": not any(r.orphans for r in runs) if recorded else None,
        "measured": {f"{r.pid} ({r.how})": r.orphans for r in runs}
        if recorded
        else "not recorded (a run from before this rule)",
        "threshold": "no core worker alive 5 s after its daemon ended",
    }


def rss_flat(seconds: float, samples: list[Sample], runs: list[Run]) -> Rule:
    (a0, a1), (b0, b1) = windows(seconds)
    first = [s["rss_kib"] for s in samples if a0 <= s["t"] < a1]
    last = [s["rss_kib"] for s in samples if b0 <= s["t"] <= b1]
    restarts = [r.started for r in runs[1:] if r.started >= a0]
    if not (first and last):
        return {"ok": False, "measured": "no samples in a window"}
    diff = (statistics.median(last) - statistics.median(first)) / 1024
    return {
        "ok": abs(diff) < RSS_FLAT_MIB and not restarts,
        "measured": f"median RSS {statistics.median(first) / 1024:.1f} MiB at "
        f"{a0:.0f}-{a1:.0f} s, {statistics.median(last) / 1024:.1f} MiB at "
        f"{b0:.0f}-{b1:.0f} s: {diff:+.2f} MiB; restarts in between: {len(restarts)}",
        "threshold": f"|difference| < {RSS_FLAT_MIB} MiB, no restart",
    }


def quiet_samples(samples: list[Sample], faults: list[Fault], runs: list[Run]) -> list[Sample]:
    """Samples at least SETTLE seconds after every fault's end and every start."""
    marks = [f.end for f in faults] + [r.started for r in runs]
    out = []
    for s in samples:
        before = [m for m in marks if m <= s["t"]]
        during = any(f.at <= s["t"] <= f.end for f in faults)
        if not during and before and s["t"] - max(before) >= SETTLE:
            out.append(s)
    return out


def steady(key: str, quiet: list[Sample]) -> Rule:
    values = sorted({s[key] for s in quiet})
    return {
        "ok": len(values) == 1,
        "measured": f"{len(quiet)} samples {SETTLE:g} s or more after a fault: {values}",
        "threshold": "one value",
    }


def store_in_ring(samples: list[Sample], faults: list[Fault]) -> Rule:
    max_bytes = RING_BYTES
    reload = next(f.at for f in faults if f.kind == "reload-good") + SETTLE
    over = [
        s
        for s in samples
        if s["store_frames"] > KEEP_FRAMES[s["t"] >= reload] or s["store_bytes"] > max_bytes
    ]
    after = [s["store_frames"] for s in samples if s["t"] >= reload]
    return {
        "ok": not over,
        "measured": f"most frames {max(s['store_frames'] for s in samples)} "
        f"({max(after, default=0)} after the reload), most bytes "
        f"{max(s['store_bytes'] for s in samples) / 2**20:.1f} MiB",
        "threshold": f"<= {KEEP_FRAMES[0]} frames, {KEEP_FRAMES[1]} from {SETTLE:g} s after "
        f"the good reload; <= {max_bytes / 2**20:g} MiB",
    }


def frames_after_every_fault(samples: list[Sample], faults: list[Fault]) -> Rule:
    """The daemon's written count grew between the first sample after the fault ended
    and the last one from the same process 2 x SETTLE or more later; after a fault that
    ends the process, between the restarted process's first sample and its last."""
    recovered = {}
    for fault in faults:
        after = [s for s in samples if s["t"] >= fault.end and s["written"] is not None]
        if fault.kind in RESTARTS:
            ended = [s["pid"] for s in samples if s["t"] < fault.at][-1:]
            after = [s for s in after if s["pid"] not in ended]
            later = [s for s in after[1:] if s["pid"] == after[0]["pid"]]
        else:
            later = [
                s
                for s in after[1:]
                if s["pid"] == after[0]["pid"] and s["t"] >= fault.end + 2 * SETTLE
            ]
        grew = later[-1]["written"] - after[0]["written"] if later else 0
        recovered[f"{fault.kind}@{fault.at:.0f}s"] = grew
    return {
        "ok": all(n > 0 for n in recovered.values()),
        "measured": {k: f"+{n} frames" for k, n in recovered.items()},
        "threshold": "more than none",
    }


def frames_while_fsync_stalls(faults: list[Fault]) -> Rule:
    """While every fsync stalls (an SD card that hangs), frames keep being written: at
    least one every 2 s of the stall. Persistence copies to that card off the writer's
    thread; a writer that waited for it would write one every fsync or slower. The
    stall is shown to bite: persistence, a copy a second otherwise, copies fewer."""
    stalls = [f for f in faults if f.kind == "slow-fsync"]
    if not stalls or any(f.during is None or f.copied is None for f in stalls):
        return {"ok": None, "measured": "not measured (no status.json around the stall)"}
    return {
        "ok": all((f.during or 0) >= f.hold / 2 > (f.copied or 0) for f in stalls),
        "measured": {
            f"slow-fsync@{f.at:.0f}s": f"{f.during} frames written, {f.copied} persisted in "
            f"{f.hold:g} s"
            for f in stalls
        },
        "threshold": "written: at least one every 2 s of the stall; persisted: fewer (it bit)",
    }


def frames_of_an_overflowing_core(faults: list[Fault], consumer: dict[str, int]) -> Rule:
    """While the core overflows (infinite pixels), frames keep coming and say so
    (non_finite_pixels), and no record the consumer read, then or ever, holds NaN or
    Infinity, which a browser's JSON.parse refuses."""
    bad = [f for f in faults if f.kind == "core-overflow"]
    if not bad or "not_strict" not in consumer or any(f.during is None for f in bad):
        return {"ok": None, "measured": "not measured (a run from before this rule)"}
    return {
        "ok": all((f.during or 0) > 0 for f in bad) and consumer["not_strict"] == 0,
        "measured": {
            **{
                f"core-overflow@{f.at:.0f}s": f"{f.during} frames with non-finite pixels read"
                for f in bad
            },
            "records not strict JSON": consumer["not_strict"],
        },
        "threshold": "frames said to have non-finite pixels while it holds; none with NaN in JSON",
    }


def check(soak: Judged) -> dict[str, Any]:
    """The rules, each with what was measured and its threshold."""
    samples, runs, faults = soak.samples, soak.runs, soak.faults
    table = [accounting(r) for r in runs]
    quiet = quiet_samples(samples, faults, runs)
    rules: dict[str, Rule] = {
        "accounting": {
            "ok": all(r["ok"] for r in table) and runs[-1].how == "stopped",
            "measured": [r["why"] for r in table],
        },
        "no_orphans": no_orphans(runs),
        "rss_flat": rss_flat(soak.seconds, samples, runs),
        "fds_steady": steady("fds", quiet),
        "threads_steady": steady("threads", quiet),
        "store_in_ring": store_in_ring(samples, faults),
        "consumer": {
            "ok": soak.consumer["torn"] == 0 and soak.consumer["read"] > 0,
            "measured": dict(soak.consumer),
            "threshold": "no half-written frame",
        },
        "frames_after_every_fault": frames_after_every_fault(samples, faults),
        "frames_while_fsync_stalls": frames_while_fsync_stalls(faults),
        "frames_of_an_overflowing_core": frames_of_an_overflowing_core(faults, soak.consumer),
    }
    return {  # a rule whose ok is None was not measured: it neither passes nor fails
        "ok": all(r["ok"] is not False for r in rules.values()),
        "rules": rules,
        "accounting": table,
        "runs": [asdict(r) | {"last_status": None} for r in runs],  # its counters: accounting
    }
