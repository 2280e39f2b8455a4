"""The price of each core size (python -m scripts.price_sizes): its rounds summed up,
per size, into the rows docs/performance.md's size table renders."""

from __future__ import annotations

import statistics
from typing import Any

from edge.models import da3_shape
from scripts.support.compare_pytorch.measure import median_round

PRECISIONS = ("fp16", "int8")
IMAGE = (1200, 1600)  # (H, W) of the synthetic photo: each size's 4:3 shape


def summarise(sizes: list[int], rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size (the first the base): medians over the rounds, and their ratios to the first size's; for the
    daemon, its median round (by frames/s x the core's time), as compare_pytorch's."""

    def median(size: int, precision: str, key: str) -> float:
        return float(statistics.median(r[f"{size}/{precision}"][key] for r in rounds))

    base = sizes[0]
    rows = []
    for size in sizes:
        shape = da3_shape(*IMAGE, size)
        row: dict[str, Any] = {
            "size": size,
            "shape": list(shape),
            "tokens": (shape[0] // 14) * (shape[1] // 14),
        }
        for key in ("core_ms", "still_s", "still_peak_rss_mib"):
            row[key] = {p: median(size, p, key) for p in PRECISIONS}
        for key, ratio in (("core_ms", "core_ratio"), ("still_s", "still_ratio")):
            row[ratio] = {p: median(size, p, key) / median(base, p, key) for p in PRECISIONS}
        daemons = [r[f"{size}/daemon"] for r in rounds if f"{size}/daemon" in r]
        if daemons:
            row["daemon"] = median_round(daemons)
        rows.append(row)
    return rows
