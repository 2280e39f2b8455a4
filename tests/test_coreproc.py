"""ProcessCore: the daemon's core in a worker process, against the in-process Core."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edge.core import Core
from edge.coreproc import ProcessCore
from edge.errors import EdgeError, ModelCorrupt, ModelNotFound, ShapeError
from scripts.support import processes
from scripts.support.models import SMALL_SHAPE, Plain
from scripts.support.photos import normalised_photo


@pytest.mark.arm  # the rest is process plumbing in Python: x86_64 (docs/arm.md)
def test_same_answer_as_in_process(fp16_path: Path, plain: Plain) -> None:
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    # The in-process Core's answer is conftest's ``plain`` (same options). fp32
    # arithmetic: emulated, fp16 arithmetic doubles a forward's cost (conftest.py), and
    # the worker gets the flag as it gets the others (checked below).
    opts = {"threads": 2, "precision": "fp16", "fp16_arithmetic": False}
    expected = plain["chelsea.png"]
    attrs = (SMALL_SHAPE, (1, 3, *SMALL_SHAPE), 2, False)
    with ProcessCore(fp16_path, **opts) as there:
        assert (there.shape, there.input_shape, there.threads, there.fp16_arithmetic) == attrs
        assert there.pid != os.getpid()
        for _ in range(2):
            got = there.run(x)
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])
        with pytest.raises(ShapeError):
            there.run(np.zeros((1, 3, 14, 14), np.float32))
    with pytest.raises(EdgeError, match="closed"):
        there.run(x)


def _spin_rate(seconds_of: object) -> float:
    """How fast a Python thread counts while ``seconds_of()`` runs (counts per second)."""
    count, stop = [0], threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin)
    thread.start()
    time.sleep(0.05)
    start, t0 = count[0], time.perf_counter()
    seconds_of()  # type: ignore[operator]
    rate = (count[0] - start) / (time.perf_counter() - t0)
    stop.set()
    thread.join()
    return rate


def test_other_threads_run_during_inference(fp16_path: Path) -> None:
    """Why ProcessCore exists: LiteRT keeps the GIL for a whole run in-process."""
    x = normalised_photo("coffee.png", SMALL_SHAPE)
    with Core(fp16_path, threads=1) as here, ProcessCore(fp16_path, threads=1) as there:
        here.run(x)
        there.run(x)
        idle = _spin_rate(lambda: time.sleep(0.2))
        blocked = _spin_rate(lambda: [here.run(x) for _ in range(3)])
        free = _spin_rate(lambda: [there.run(x) for _ in range(3)])
    print(f"spinner: idle {idle:.0f}/s, in-process core {blocked:.0f}/s, worker {free:.0f}/s")
    # In-process the spinner only runs in the gaps between runs (the switch interval);
    # with the worker it keeps most of a core.
    assert free > 0.3 * idle
    assert blocked < 0.5 * free


@pytest.mark.parametrize(
    ("sig", "survives"),
    [
        (signal.SIGKILL, False),  # a dead worker is replaced at the next frame
        # systemd's stop sends SIGTERM to the worker too: it lives on (the daemon shuts
        # it down), so the frame it is computing is not lost as a failed inference.
        (signal.SIGTERM, True),
    ],
    ids=["SIGKILL-replaced", "SIGTERM-ignored"],
)
def test_a_signalled_worker(fp16_path: Path, sig: signal.Signals, survives: bool) -> None:
    x = normalised_photo("coffee.png", SMALL_SHAPE)
    with ProcessCore(fp16_path, threads=1) as core:
        first = core.run(x)[0].copy()
        old = core.pid
        os.kill(old, sig)
        time.sleep(0.5)
        if survives:  # alive, not a zombie waiting for its parent
            assert processes.alive(old), f"the worker died of {sig.name}"
        np.testing.assert_array_equal(core.run(x)[0], first)
        assert (core.pid == old) == survives


def test_load_errors_keep_their_type(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        ProcessCore(tmp_path / "nope.tflite")
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer" * 100)
    with pytest.raises(ModelCorrupt, match=r"bad\.tflite"):
        ProcessCore(bad)


def test_submit_returns_while_the_worker_computes(fp16_path: Path) -> None:
    """The daemon's overlap rests on this: submit hands the image over and returns;
    collect gets the same answer run() gives."""
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with ProcessCore(fp16_path, threads=1, precision="fp16") as core:
        expected = [a.copy() for a in core.run(x)]
        assert core.last_ms > 0
        with pytest.raises(EdgeError, match="nothing was submitted"):
            core.collect()
        t0 = time.perf_counter()
        core.submit(x)
        submitted = time.perf_counter() - t0
        with pytest.raises(EdgeError, match="already being computed"):
            core.submit(x)
        depth, conf = core.collect()
        total = time.perf_counter() - t0
        print(
            f"submit {submitted * 1000:.1f} ms, submit+collect {total * 1000:.1f} ms, "
            f"worker's LiteRT time {core.last_ms:.1f} ms"
        )
        np.testing.assert_array_equal(depth, expected[0])
        np.testing.assert_array_equal(conf, expected[1])
        assert core.last_ms < total * 1000
        # After a worker death the next submit starts a new one; the lost frame is an error.
        core.submit(x)
        os.kill(core.pid, signal.SIGKILL)
        with pytest.raises(EdgeError, match="died during inference"):
            core.collect()
        np.testing.assert_array_equal(core.run(x)[0], expected[0])


def test_in_process_core_has_the_same_two_halves(fp16_path: Path) -> None:
    x = normalised_photo("chelsea.png", SMALL_SHAPE)
    with Core(fp16_path, threads=1, precision="fp16") as core:
        expected = core.run(x)[0].copy()
        with pytest.raises(EdgeError, match="nothing was submitted"):
            core.collect()
        with pytest.raises(ShapeError):
            core.submit(np.zeros((1, 3, 14, 14), np.float32))
        core.submit(x)
        np.testing.assert_array_equal(core.collect()[0], expected)
        assert core.last_ms > 0


def test_without_memfd_an_unlinked_file_is_shared(
    fp16_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS has no memfd_create: the worker shares an unlinked temporary file."""
    x = normalised_photo("coffee.png", SMALL_SHAPE)
    with ProcessCore(fp16_path, threads=1) as core:
        expected = core.run(x)[0].copy()
    monkeypatch.delattr(os, "memfd_create")
    fds_before = set(processes.fds("self"))
    with ProcessCore(fp16_path, threads=1) as core:
        np.testing.assert_array_equal(core.run(x)[0], expected)
    assert set(processes.fds("self")) <= fds_before  # nothing left open


def test_a_parent_gone_mid_image_leaves_the_worker_quiet() -> None:
    """The parent closes while an image is in flight (every daemon stop): the worker's
    reply meets a closed pipe, and what it buffered must not be flushed again at exit
    (Python 3.13 printed that BrokenPipeError as a traceback at every stop)."""
    from edge import coreproc

    class Answering:
        last_ms = 1.0

        def run(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return image[0, 0], image[0, 1]

    class Maps:
        image = np.zeros((1, 3, 2, 2), np.float32)
        depth = np.zeros((2, 2), np.float32)
        conf = np.zeros((2, 2), np.float32)

    import io

    read_end, write_end = os.pipe()
    os.close(read_end)  # the parent is gone
    out = os.fdopen(write_end, "wb")
    stdin = io.BytesIO(coreproc._GO * 2)
    assert coreproc._answer(Answering(), Maps(), stdin, out) == 0  # type: ignore[arg-type]
    out.close()  # what exit does: nothing left to flush into the closed pipe
