"""The one percentile the kit reports: nearest rank.

status.json's latency, ``da3-edge bench`` and the maintainer's benchmarks all say "p50"
or "p99" and mean this: the smallest sample with at least q% of the samples at or
below it, so always a value that was measured. p50 of 4 samples is the 2nd.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def nearest_rank(samples: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) of ``samples`` by nearest rank: the
    ceil(q/100 * n)-th smallest. ``ValueError`` for no samples."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is not in (0, 100]")
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]
