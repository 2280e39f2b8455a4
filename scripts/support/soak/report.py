"""The soak's verdict: the rules printed, a finished run judged again from its files,
and the plot of its samples."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .rules import Run, check
from .run import Soak
from .schedule import Fault


def recheck(out: Path) -> dict[str, Any]:
    """The rules again over a finished run's files (report.json, samples.jsonl): a run
    judged by rules written after it."""
    report = json.loads((out / "report.json").read_text())
    setup = report["setup"]
    rows = {row["pid"]: row for row in report["accounting"]}
    runs = []
    for r in report["runs"]:
        row = rows[r["pid"]]
        status = {"counters": row} if "captured" in row else None
        life = (r["pid"], r["started"], r["ended"], r["how"], r["exit_code"])
        runs.append(Run(*life, status, r.get("orphans")))
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    soak = SimpleNamespace(
        seconds=setup["minutes"] * 60,
        samples=samples,
        runs=runs,
        faults=[Fault(**f) for f in setup["faults"]],
        consumer=report["rules"]["consumer"]["measured"],
    )
    return {**check(soak), "setup": setup}


def verdict(report: dict[str, Any], out: Path) -> int:
    """Print each rule's result; 0 if all hold."""
    for name, rule in report["rules"].items():
        said = {True: "ok  ", False: "FAIL", None: "n/a "}[rule["ok"]]
        print(f"{said} {name}: {rule['measured']}")
    minutes = report["setup"]["minutes"]
    print(f"soak: {'passed' if report['ok'] else 'FAILED'} ({minutes:g} min; {out}/report.json)")
    return 0 if report["ok"] else 1


def rates(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Frames written per second between consecutive samples of one process."""
    out = []
    for a, b in itertools.pairwise(samples):
        if a["pid"] == b["pid"] and a["written"] is not None and b["written"] is not None:
            out.append((b["t"], (b["written"] - a["written"]) / max(b["t"] - a["t"], 1e-6)))
    return out


def plot(soak: Soak, path: Path) -> None:
    """Four panels against time (RSS, fds and threads, the store, frames/s), faults
    marked: drawn with Pillow, no plotting library."""
    from PIL import Image, ImageDraw, ImageFont

    s = soak.samples
    rss = [(r["t"], r["rss_kib"] / 1024) for r in s]
    fds, threads = [(r["t"], r["fds"]) for r in s], [(r["t"], r["threads"]) for r in s]
    store_mib = [(r["t"], r["store_bytes"] / 2**20) for r in s]
    store_frames = [(r["t"], r["store_frames"]) for r in s]
    panels = [
        ("summed RSS, MiB (daemon + core worker)", [rss]),
        ("open fds (blue), threads (orange)", [fds, threads]),
        ("store: MiB (blue), frames (orange)", [store_mib, store_frames]),
        ("frames written per second", [rates(s)]),
    ]
    colours = ("#1f77b4", "#ff7f0e")
    width, height, left, top, gap = 1200, 900, 70, 30, 24
    ph = (height - top - len(panels) * gap) // len(panels)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    span = max(soak.seconds, 1.0)
    heading = f"da3-edge soak: {soak.seconds / 60:g} min, {soak.size[0]}x{soak.size[1]} at "
    heading += f"{soak.fps:g} frames/s, {soak.precision}; faults marked (grey)"
    draw.text((left, 6), heading, fill="black", font=font)
    for i, (title, series) in enumerate(panels):
        y0 = top + i * (ph + gap) + gap
        y1 = y0 + ph
        values = [v for line in series for _, v in line] or [0.0]
        lo, hi = min(values), max(values)
        pad = (hi - lo) * 0.1 or max(abs(hi) * 0.05, 1.0)
        lo, hi = lo - pad, hi + pad

        def x(t: float) -> float:
            return left + (width - left - 20) * t / span

        def y(v: float, y0: float = y0, y1: float = y1, lo: float = lo, hi: float = hi) -> float:
            return y1 - (y1 - y0) * (v - lo) / (hi - lo)

        draw.rectangle((left, y0, width - 20, y1), outline="black")
        draw.text((left + 4, y0 - 14), title, fill="black", font=font)
        for v in (lo + pad, hi - pad):
            draw.text((4, y(v) - 6), f"{v:.1f}", fill="black", font=font)
            draw.line((left - 4, y(v), left, y(v)), fill="black")
        for fault in soak.faults:
            draw.line((x(fault.at), y0, x(fault.at), y1), fill="#bbbbbb")
            if i == 0:
                draw.text((x(fault.at) + 2, y0 + 2), fault.kind, fill="#888888", font=font)
        for colour, line in zip(colours, series, strict=False):
            if len(line) > 1:
                draw.line([(x(t), y(v)) for t, v in line], fill=colour, width=2)
    for t in range(0, int(span) + 1, max(60, int(span) // 12 // 60 * 60)):
        at = (left + (width - left - 20) * t / span - 8, height - 14)
        draw.text(at, f"{t // 60} min", fill="black", font=font)
    img.save(path)
