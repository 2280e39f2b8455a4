"""The steady view's figures (docs/performance.md, "Steady depth"), from one run:

    uv run python -m scripts.steady --json docs/bench/steady-x86_64.json

On the replayed sequences of scripts/support/sequences.py (a still scene, a pan, a cut:
synthetic DA3-like streams, the noise model stated there), the preview's mean absolute
change from frame to frame today (each preview on its own range: depth.steady off) and
steady (edge.steady), the frames the cut takes to recover, and what the steady view
costs the daemon's writer a frame: ``Steady.step``, and rendering the PNG and the
preview with and without it, at the core's output size and a camera's, the variants
alternating round by round (medians).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edge import frames
from edge.bench import git_revision, machine_info, to_json
from edge.config import StoreConfig
from edge.steady import Steady
from scripts.support import sequences
from scripts.support.measured import refuse_dirty
from scripts.support.store import depth_frame

FRAMES, CUT_AT = 60, 30
SIZES = {"core": sequences.SIZE, "camera": (720, 1280)}
FORMATS = ("png", "preview")  # the outputs the steady range touches (the PNG does not move)
PREVIEW = StoreConfig().preview_max_side  # the daemon's preview, as it ships


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=30, help="timing rounds (default: 30)")
    p.add_argument("--json", type=Path, help="write the results here")
    return p


def flicker() -> dict[str, Any]:
    """Each sequence's mean change today and steady; the cut's recovery and new scenes."""
    out: dict[str, Any] = {}
    makers: dict[str, Callable[[], sequences.Frames]] = {
        "still": lambda: sequences.still(FRAMES),
        "pan": lambda: sequences.pan(FRAMES),
        "cut": lambda: sequences.cut(FRAMES, CUT_AT),
    }
    for name, make in makers.items():
        today = sequences.changes(sequences.previews(make(), steady=False)[0])
        shown, made = sequences.previews(make(), steady=True)
        steady = sequences.changes(shown)
        row: dict[str, Any] = {
            "today": float(np.mean(today)),
            "steady": float(np.mean(steady)),
            "ratio": float(np.mean(steady) / np.mean(today)),
            "new_scenes": [n for n, a in enumerate(made) if a.new_scene],
        }
        if name == "cut":
            row["recovery_today"] = sequences.recovery(today, CUT_AT)
            row["recovery_steady"] = sequences.recovery(steady, CUT_AT)
        out[name] = row
    return out


def cost(rounds: int) -> dict[str, Any]:
    """ms a frame at each size: Steady.step, and rendering the PNG and the preview (at
    store.preview_max_side) without and with the steady range, alternating."""
    out: dict[str, Any] = {}
    for name, size in SIZES.items():
        depth, conf = next(sequences.still(1, size))
        frame = depth_frame(0, size)
        frame.depth, frame.conf = depth, conf
        steady = Steady()
        alignment = steady.step(depth, conf)
        times: dict[str, list[float]] = {"step": [], "render": [], "render_steady": []}
        for _ in range(rounds):
            t0 = time.perf_counter()
            alignment = steady.step(depth, conf)
            t1 = time.perf_counter()
            frames.render(frame, FORMATS, preview_max_side=PREVIEW)
            t2 = time.perf_counter()
            frames.render(frame, FORMATS, preview_max_side=PREVIEW, steady=alignment)
            t3 = time.perf_counter()
            for key, seconds in (
                ("step", t1 - t0),
                ("render", t2 - t1),
                ("render_steady", t3 - t2),
            ):
                times[key].append(seconds * 1000)
        ms = {key: float(np.median(values)) for key, values in times.items()}
        ms["extra"] = ms["step"] + ms["render_steady"] - ms["render"]
        out[name] = {"size": list(size), "ms": ms}
    return out


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    refuse_dirty(ns.json)
    revision = git_revision()
    data = {
        "machine": {**machine_info(), "git_revision": revision},
        "frames": FRAMES,
        "cut_at": CUT_AT,
        "rounds": ns.rounds,
        "flicker": flicker(),
        "cost": cost(ns.rounds),
    }
    from scripts.support.performance_tables import render_steady

    print(render_steady(data))
    if ns.json:
        ns.json.write_text(to_json(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
