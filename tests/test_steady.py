"""Steady depth for live views (edge.steady): on the replayed sequences of
scripts/support/sequences.py, and through the daemon (its npz untouched, the scale
beside it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from edge.frames import inverse_in_range, inverse_normalised
from edge.steady import Steady
from scripts.support import sequences
from scripts.support.daemon import FAKE_CORES, DaemonProcess, frame_dirs, write_config

FRAMES = 40


def test_a_still_scene_flickers_at_most_half_as_much() -> None:
    """The preview's mean absolute change from frame to frame on a still scene: steady
    at most half of today's (each preview on its own range)."""
    today = sequences.changes(sequences.previews(sequences.still(FRAMES), steady=False)[0])
    shown, made = sequences.previews(sequences.still(FRAMES), steady=True)
    steady = sequences.changes(shown)
    print(f"still: today {np.mean(today):.2f} levels a frame, steady {np.mean(steady):.2f}")
    assert np.mean(steady) <= 0.5 * np.mean(today)
    assert [n for n, a in enumerate(made) if a.new_scene] == [0]


def test_a_pan_is_one_scene() -> None:
    """The camera turning 2 pixels a frame: no scene change taken, and steadier."""
    today = sequences.changes(sequences.previews(sequences.pan(FRAMES), steady=False)[0])
    shown, made = sequences.previews(sequences.pan(FRAMES), steady=True)
    steady = sequences.changes(shown)
    print(f"pan: today {np.mean(today):.2f} levels a frame, steady {np.mean(steady):.2f}")
    assert [n for n, a in enumerate(made) if a.new_scene] == [0]
    assert np.mean(steady) < np.mean(today)


def test_a_cut_starts_again_at_once() -> None:
    """Another scene at frame 20: a new reference at that frame, none before or after,
    and the preview steady again from the next frame; the rule's agreement is low
    there and high elsewhere."""
    shown, made = sequences.previews(sequences.cut(FRAMES, 20), steady=True)
    change = sequences.changes(shown)
    recovered = sequences.recovery(change, 20)
    print(f"cut: agreement at the cut {made[20].agreement:.2f}, recovered in {recovered}")
    assert [n for n, a in enumerate(made) if a.new_scene] == [0, 20]
    assert recovered == 1
    assert made[20].agreement < 0.5 < min(a.agreement for a in made[1:20] + made[21:])


def test_a_scale_is_all_it_takes_away() -> None:
    """A frame that is the last one times k comes back at scale 1/k (within float32),
    and the range does not move; a frame with nothing usable is left as it is."""
    rng = np.random.default_rng(0)
    depth = (1 + rng.random((120, 160))).astype(np.float32)
    conf = (1 + rng.random((120, 160))).astype(np.float32)
    steady = Steady()
    first = steady.step(depth, conf)
    again = steady.step(depth * np.float32(3.0), conf)
    assert first.scale == 1.0 and first.new_scene and not again.new_scene
    assert again.scale == pytest.approx(1 / 3, rel=1e-6)
    assert (again.low, again.high) == pytest.approx((first.low, first.high), rel=1e-5)
    empty = steady.step(np.full((120, 160), np.nan, np.float32), conf)
    assert empty.scale == 1.0 and not empty.new_scene and empty.agreement == 0.0
    assert steady.step(depth, conf).scale == pytest.approx(1.0, rel=1e-6)  # state kept


def test_an_overflowing_frame_never_makes_the_scale_nan() -> None:
    """A frame whose aligned depth overflows float32 (a pixel near its largest, as a core
    that overflowed leaves after edge.pipeline.finite_maps) must not leave infinity in
    the reference: every later frame's scale and range stay finite."""
    rng = np.random.default_rng(0)
    depth = (1 + rng.random((120, 160))).astype(np.float32)
    conf = (1 + rng.random((120, 160))).astype(np.float32)
    steady = Steady()
    steady.step(depth, conf)
    huge = depth * np.float32(0.25)  # scale 4 brings it to the reference: overflows
    huge[::2, ::2] = np.finfo(np.float32).max  # a quarter of the grid, some confident
    assert np.isfinite(steady.step(huge, conf).scale)
    after = [steady.step(depth * np.float32(k), conf) for k in (1.0, 1.1, 0.9)]
    for a in after:
        assert np.isfinite([a.scale, a.low, a.high]).all(), a
    assert steady.reference is not None and np.isfinite(steady.reference).all()


def _written(store: Path) -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """Each frame's record, npz depth and preview indices."""
    out = []
    for frame_dir in frame_dirs(store):
        with (
            np.load(frame_dir / "frame.npz") as npz,
            Image.open(frame_dir / "frame.preview.png") as png,
        ):
            record = json.loads((frame_dir / "frame.json").read_text())
            out.append((record, npz["depth"], np.asarray(png).astype(np.int16)))
    return out


@pytest.mark.parametrize("steady", [True, False])
def test_the_daemon_writes_the_scale_beside_the_raw_depth(
    fake_models: Path, tmp_path: Path, steady: bool
) -> None:
    """depth.steady (on by default): each frame.json says the scale and the preview's
    range, and the preview is the npz's depth coloured on them, so the npz holds the
    frame's own depth; off: no ``steady`` in the record, each preview on its own range."""
    store = tmp_path / "store"
    section: dict[str, object] = {} if steady else {"steady": False}
    cfg = write_config(tmp_path / "c.toml", "fake", store, fake_models, depth=section)
    with DaemonProcess(
        tmp_path, ["--config", str(cfg), "--max-frames", "4"], command=FAKE_CORES
    ) as d:
        assert d.proc.wait(60) == 0, d.log[-2000:]
    written = _written(store)
    assert len(written) == 4
    scales = []
    for record, depth, preview in written:
        assert record["depth"]["min"] == float(depth.min())  # the summary of the same map
        if steady:
            said = record["steady"]
            scales.append(said["scale"])
            inv = inverse_in_range(depth, said["scale"], *said["preview_range"])
        else:
            assert "steady" not in record
            inv = inverse_normalised(depth)
        off = np.abs(np.rint(inv * 255) - preview)
        assert off.max() <= 1 and (off == 0).mean() > 0.99, (off.max(), (off == 0).mean())
    print(f"steady {steady}: scales {scales}")
    assert not steady or len(set(scales)) > 1  # the frames differ: so do their scales
