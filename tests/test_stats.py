"""The one percentile: nearest rank, the same in status.json and in the benchmarks."""

from __future__ import annotations

import pytest

from edge.bench import percentiles
from edge.daemon.writer import Window
from edge.stats import nearest_rank


def test_nearest_rank_is_a_sample_at_the_ceiling_rank() -> None:
    four = [40.0, 10.0, 30.0, 20.0]
    assert nearest_rank(four, 50) == 20.0  # ceil(0.5 * 4) = 2nd, not the median 25
    assert nearest_rank(four, 51) == 30.0
    assert nearest_rank(four, 100) == 40.0 and nearest_rank(four, 1) == 10.0
    hundred = list(range(1, 101))
    assert [nearest_rank(hundred, q) for q in (50, 90, 99)] == [50, 90, 99]
    assert nearest_rank([7.0], 99) == 7.0
    for bad in ([], [1.0]):
        with pytest.raises(ValueError):
            nearest_rank(bad, 0 if bad else 101)


def test_status_and_bench_say_the_same_p50() -> None:
    """status.json's latency window and ``da3-edge bench`` over the same samples."""
    samples = [12.0, 9.0, 30.0, 11.0]
    window = Window(seconds=60.0)
    for i, latency in enumerate(samples):
        window.add(100.0 + i, latency)
    latency = window.summary(now=104.0)["latency_ms"]
    bench = percentiles(samples)
    assert latency["p50"] == bench["p50"] == 11.0
    assert latency["p99"] == bench["p99"] == 30.0
