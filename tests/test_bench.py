"""`da3-edge bench` on the small random-init models, short settings, both envs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge import bench
from scripts.support.replay import counting_config, daemon_summary
from scripts.support.tools import run_cli, run_main


def test_bench_json_runtime_env(small_models: Path) -> None:
    proc = run_cli(
        [
            "bench",
            "--models",
            str(small_models),
            "-n",
            "3",
            "--warmup",
            "1",
            "--threads",
            "1,2",
            "--json",
        ],
        extra_env={"DA3_EDGE_EXECUTORCH": "/nonexistent"},
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["random_init"] is True
    cpu = data["machine"]["cpu"]
    assert set(cpu) >= {"model", "fp16", "dotprod", "i8mm", "sme", "cores"}
    assert data["machine"]["git_revision"]
    numpy_runs = [r for r in data["runs"] if r["stages"] == "numpy"]
    assert {(r["precision"], r["threads"]) for r in numpy_runs} == {
        (p, t) for p in ("fp32", "fp16", "int8") for t in (1, 2)
    }
    # The small models' one size, and the shape the 1200x1600 image ran at.
    assert {(r["size"], tuple(r["shape"])) for r in numpy_runs} == {(182, (140, 182))}
    for run in numpy_runs:
        assert len(run["samples_ms"]["total"]) == 3
        assert run["total_ms"]["p50"] > 0 and run["images_per_s"] > 0
        stages = run["stage_p50_ms"]
        assert set(stages) == set(bench.STAGES)
        assert sum(stages.values()) <= run["total_ms"]["p50"] * 1.5
    # No ExecuTorch runner installed: reported, not fatal.
    et = [r for r in data["runs"] if r["stages"] == "executorch"]
    assert et and all("install-executorch" in r.get("error", "") for r in et)
    for precision in ("fp32", "fp16", "int8"):
        modes = data["cold_still"]["182"][precision]
        assert list(modes) == ["off", "first", "warm"]
        for cold in modes.values():
            assert cold["seconds"] > 0 and 50 < cold["peak_rss_mib"] < 4096
            assert 0 < cold["load_ms"] < cold["seconds"] * 1000
        # The first run builds the cache in a child process: the slowest load of the three.
        assert modes["first"]["load_ms"] > modes["warm"]["load_ms"]


def test_bench_table_and_executorch(executorch_runtime: Path, small_models: Path) -> None:
    proc = run_cli(
        [
            "bench",
            "--models",
            str(small_models),
            "-n",
            "2",
            "--warmup",
            "1",
            "--threads",
            "2",
            "--precision",
            "fp16",
            "--no-cold",
        ],
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("da3-edge ") and "cores" in lines[0]
    assert "RANDOM-INIT models (speed only)" in lines[1]
    rows = [ln for ln in lines if ln.startswith("140x182 fp16 ")]
    assert len(rows) == 2 and not any("unavailable" in r for r in rows), proc.stdout
    assert any(" executorch " in r for r in rows)


def test_bench_usage_errors(small_models: Path) -> None:
    proc = run_cli(["bench", "--models", str(small_models), "--precision", "fp8"])
    assert proc.returncode == 2
    assert "unknown precision 'fp8' (choose from fp32, fp16, int8)" in proc.stderr
    proc = run_cli(["bench", "--models", str(small_models), "--threads", "0"])
    assert proc.returncode == 2 and "--threads must be positive" in proc.stderr
    for sizes, message in (
        ("182,281", "--size: size 281: the core's long side must be a multiple of 14"),
        ("", "--size: '' is not a number, e.g. 280"),
        ("280,182", "size 280 is not exported in"),
    ):
        proc = run_main(["bench", "--models", str(small_models), "--size", sizes])
        assert proc.returncode == 2 and message in proc.stderr, (sizes, proc.stderr)


def test_counting_config_is_the_default_but_a_ring_for_every_frame(tmp_path: Path) -> None:
    from edge import config

    default = config.parse("")
    plain = config.load(counting_config(tmp_path / "a.toml", 40))
    assert (plain.store.keep_frames, plain.store.max_bytes) == (40, 40 << 25)
    assert plain.model == default.model and plain.store.size == default.store.size
    both = config.load(counting_config(tmp_path / "b.toml", 3, workers=2, size=280))
    assert (both.model.workers, both.model.size, both.store.keep_frames) == (2, 280, 3)


def test_daemon_summary_leaves_out_the_warmup_and_names_what_ran() -> None:
    def record(seq: int, t: float, core: float) -> dict[str, object]:
        return {
            "store_seq": seq,
            "t_written": t,
            "latency_ms": 100.0 + seq,
            "timings_ms": {"core": core, "preprocess": 10.0 * seq},
            "dropped_stale_total": seq,
            "precision": "fp16",
            "stages": "executorch",
            "workers": 1,
            "threads": 2,
        }

    # A slow warm-up frame (seq 0) that the steady rate and the medians must not see.
    records = [
        record(0, 0.0, 900.0),
        record(1, 5.0, 300.0),
        record(2, 5.5, 310.0),
        record(3, 6.0, 320.0),
    ]
    got = daemon_summary(records, warmup=1)
    assert got["frames"] == 3 and got["fps"] == 2.0
    assert (got["core_in_daemon_p50_ms"], got["preprocess_in_daemon_p50_ms"]) == (310.0, 20.0)
    assert got["latency_p50_ms"] == 102.0 and got["dropped_stale"] == 3
    assert (got["precision"], got["stages"], got["threads_per_worker"]) == ("fp16", "executorch", 2)
    with pytest.raises(SystemExit, match="too few to measure"):
        daemon_summary(records[:2], warmup=1)
