"""scripts/compare_pytorch runs end to end in CI (one round of each; the numbers in
docs/performance.md come from a longer run on a quiet machine)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.support import ROOT
from scripts.support.compare_pytorch.measure import median_round
from scripts.support.compare_pytorch.peer import read_pfm
from scripts.support.tools import auto_stages

pytestmark = pytest.mark.parity


Compared = tuple[dict[str, Any], str]  # the JSON, the printed table


@pytest.fixture(scope="module")
def compared(
    export_env: Path,
    random_weights: Path,
    full_models: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Compared:
    """One short run of compare_pytorch, every part of it on: its JSON and its table."""
    out = tmp_path_factory.mktemp("compare") / "compare.json"
    argv = [str(export_env), "-m", "scripts.compare_pytorch", "--weights", str(random_weights)]
    argv += ["--models", str(full_models), "--rounds", "1", "--daemon-frames", "4"]
    argv += ["--daemon-rounds", "1", "--daemon-workers", "1,2", "--serve-rounds", "1"]
    argv += ["--before", str(ROOT)]  # this checkout against itself: the pairing, not a speed-up
    argv += ["--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    return json.loads(out.read_text()), proc.stdout


EDGE = {"da3-edge", "da3-edge-numpy", "da3-edge-cache-off", "da3-edge-int8"}


def test_compare_pytorch_stills(compared: Compared) -> None:
    data, printed = compared
    assert data["core_shape"] == [378, 504] and data["size"] == 504
    assert "core 378x504 (size 504)" in printed
    assert data["pytorch_forward_s"] > 0
    assert set(data["core_s"]) == {"fp32", "fp16", "int8"}
    assert set(data["still_s"]) == {"pytorch", "da3-edge-before", *EDGE}
    assert data["default_stages"] == auto_stages()  # what the default config ran
    for name in data["still_s"]:
        assert data["still_peak_rss_mib"][name] > 50
    assert data["still_ratio"]["pytorch"] == 1.0
    # Every da3-edge still is traced: its model load is reported (and the weight cache's
    # first build apart from the rounds, where it is warm).
    assert set(data["load_ms"]) == {"da3-edge-before", *EDGE}
    assert all(v > 0 for v in data["load_ms"].values())
    # ... and its time to the first depth map (decoding, that load, preprocessing, the run)
    assert set(data["to_depth_ms"]) == set(data["load_ms"])
    for name, to_depth in data["to_depth_ms"].items():
        assert data["load_ms"][name] < to_depth < data["still_s"][name] * 1000
    for precision in ("fp16", "int8"):
        first = data["weight_cache_first"][precision]
        assert first["load_ms"] > data["load_ms"]["da3-edge"] and first["seconds"] > 0
    assert data["peer"] == {"measured": False, "reason": "no --peer given"}
    assert "depth-anything.cpp: not measured (no --peer given)" in printed
    before = data["before"]
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    assert before["revision"] == (git or None) and len(before["ratios"]) == 1
    assert before["median_ratio"] > 0


def test_compare_pytorch_stages_and_flops(compared: Compared) -> None:
    data, _ = compared
    # Both stage backends, 1 thread and all threads, from the runtime env (no torch there).
    assert set(data["stages"]) == {"1", "2"}
    for st in data["stages"].values():
        for kind in ("pre", "post"):
            assert st["results"][f"ratio_{kind}_median"] > 0
            assert {"numpy", "executorch"} <= set(st["results"])
    # DA3-small's mono depth+conf path at 378x504: ~58 GFLOP of convolutions and linear
    # layers (the usual figure) plus ~17 GFLOP of attention.
    assert 70e9 < data["flops"] < 80e9, data["flops"]
    assert data["reference_flops"] > data["flops"]  # the reference also runs the ray head
    assert data["gemm_peak_flops_per_s"] > 1e9
    for precision, rate in data["core_flops_per_s"].items():
        assert 0 < rate < 3 * data["gemm_peak_flops_per_s"], (precision, rate)


def test_compare_pytorch_daemon(compared: Compared) -> None:
    data, printed = compared
    daemon = data["daemon"]
    assert daemon["frames"] == 4 and daemon["precision"] == "fp16"
    assert daemon["fps"] > 0 and daemon["ratio_to_core_rate"] > 0
    assert len(daemon["rounds"]) == 1 and daemon["store"] in ("tmpfs", "disk")
    assert daemon["ratio_range"] == [daemon["ratio_to_core_rate"]] * 2
    assert daemon["ratio_to_core_rate"] == daemon["fps"] * daemon["core_s"]
    assert daemon["workers"] == 1 and daemon["threads_per_worker"] == 2
    two = data["daemon_workers"]["2"]
    assert two["workers"] == 2 and two["threads_per_worker"] == 1
    assert two["frames"] == 4 and len(two["rounds"]) == 1
    # the round's two daemon runs are measured against the same core timing
    assert [r["core_s"] for r in two["rounds"]] == [r["core_s"] for r in daemon["rounds"]]
    assert "daemon (fp16, 1 worker(s) x 2 thread(s)" in printed


def test_compare_pytorch_serve_and_publish(compared: Compared) -> None:
    data, printed = compared
    serve = data["serve"]  # scripts/bench_serve.py, one paired round
    assert len(serve["rounds"]) == 1 and serve["median_fps_ratio"] > 0
    assert 0 < serve["serve_peak_rss_mib"] < 200 and serve["serve_cpu_ms_per_frame"] > 0
    assert serve["event_delay_ms"]["n"] >= 1 and serve["event_delay_ms"]["p50"] >= 0
    assert serve["rounds"][0]["with_serve"]["client_errors"] == []
    publish = data["publish"]  # scripts/bench_publish.py: preview off, then on
    assert [r["preview"] for r in publish["runs"]] == [False, True]
    for r in publish["runs"]:
        assert r["messages"] >= r["frames"] and r["cpu_ms_per_message"] > 0
        assert r["delay_ms"]["n"] >= 1
    assert "serve: daemon frames/s with serve / alone" in printed
    assert "publish (preview on)" in printed


def test_the_median_round_of_the_daemons_rounds() -> None:
    """Several rounds (the committed comparison runs five): the median round's figures,
    every round kept, the range of their ratios; an even count takes the upper middle."""
    runs = [{"fps": fps, "core_s": 0.5, "ratio_to_core_rate": fps / 2} for fps in (1.9, 1.6, 1.8)]
    summary = median_round(runs)
    assert summary["fps"] == 1.8 and summary["ratio_to_core_rate"] == 0.9
    assert summary["rounds"] == runs and summary["ratio_range"] == [0.8, 0.95]
    assert median_round(runs[:2])["fps"] == 1.9


def test_read_pfm_is_top_down(tmp_path: Path) -> None:
    """The peer's depth maps are PFM (greyscale ``Pf``, rows stored bottom-up, a negative
    scale for little-endian): read_pfm must give them top-down, or the agreement check
    would compare a map with its mirror image."""
    import numpy as np

    image = np.arange(12, dtype=np.float32).reshape(3, 4)  # row 0 is the top
    for scale, dtype in ((-1.0, "<f4"), (1.0, ">f4")):
        path = tmp_path / "depth.pfm"
        path.write_bytes(b"Pf\n4 3\n%g\n" % scale + image[::-1].astype(dtype).tobytes())
        np.testing.assert_array_equal(read_pfm(path), image)
    path.write_bytes(b"PF\n4 3\n-1\n" + np.zeros(36, "<f4").tobytes())  # colour: refused
    with pytest.raises(SystemExit, match="not a greyscale PFM"):
        read_pfm(path)


def test_compare_at_another_size_asks_both_contenders_for_it(tmp_path: Path) -> None:
    """--size N: DA3's process_res N for the reference, `snap --size N` for da3-edge (the
    daemon's model.size too); a size no core can have is a usage error."""
    from scripts.support.compare_pytorch.cli import parse, pytorch_argv, snap_argv

    ns, _ = parse(["--weights", str(tmp_path), "--models", str(tmp_path), "--size", "280"])
    assert ns.size == 280
    assert pytorch_argv(ns, tmp_path / "a.jpg", tmp_path)[-1] == "280"
    argv = snap_argv(ns, tmp_path / "a.jpg", tmp_path / "out")
    assert argv[argv.index("--size") + 1] == "280"
    default, _ = parse(["--weights", str(tmp_path), "--models", str(tmp_path)])
    assert default.size == 504
    with pytest.raises(SystemExit) as exc:
        parse(["--weights", str(tmp_path), "--models", str(tmp_path), "--size", "281"])
    assert exc.value.code == 2
