"""``FakeCore``: a core without a model, for testing what schedules cores.

It meets ``CoreLike`` like ``ProcessCore`` does: ``submit`` returns at once and the
answer is "computed" meanwhile, ``collect`` waits until ``delay`` seconds after the
submit (a sequence of delays: the images take them in turn). Its depth is the input's
channel mean plus 10 at every pixel, so a test that paints frame N with value N can
tell from a written frame which capture it came from; confidence is 1 + the 0-based
count of images this core was given.

With ``burn`` the wait is spent spinning on the CPU, as a core computing would: for
what reads the daemon's CPU use (the thermal controller's simulated SoC).

A scripted failure (``fail``: 0-based image numbers of this core) makes ``collect``
raise ``EdgeError`` for that image, as a dying worker would; ``non_finite`` images get
a NaN and an infinity in their depth and a NaN in their confidence. ``fake_models`` writes a
model directory whose artifacts are placeholders, so a ``Pipeline`` (with
``open_core=FakeCore.opener(...)``) runs without an exported model. Everything it
makes says ``random_init`` and ``fake-core``: nothing can pass it off as a model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge.core import CoreSpec, Halves, check_input
from edge.errors import EdgeError
from edge.models import Artifact, Manifest, sha256_file

FAKE_WEIGHTS = "fake-core"


class FakeCore(Halves):
    """A ``CoreLike`` that computes nothing, on a script."""

    def __init__(
        self,
        spec: CoreSpec,
        *,
        delay: float | Sequence[float] = 0.0,
        fail: Iterable[int] = (),
        log: list[tuple[str, int, int, float]] | None = None,
        index: int = 0,
        non_finite: Iterable[int] = (),
        burn: bool = False,
    ) -> None:
        if spec.shape is None:
            raise ValueError("a FakeCore needs the spec's shape (it has no model to read)")
        self.spec = spec
        h, w = spec.shape
        self.input_shape: tuple[int, int, int, int] = (1, 3, h, w)
        self.threads = spec.threads or 1
        self.fp16_arithmetic = bool(spec.fp16_arithmetic)
        self.last_ms = 0.0
        # Seconds per image; a sequence: image n takes delays[n % len], cycling.
        self.delays = (delay,) if isinstance(delay, (int, float)) else tuple(delay)
        self.fail = set(fail)
        self.non_finite = set(non_finite)  # images whose maps get a NaN and an inf
        self.burn = burn  # spin, not sleep, until an image is due
        self.given = 0  # images submitted so far
        self.index = index  # in its opener's order
        # (event, core index, image number, monotonic time), event "submit" /
        # "collect" / "fail"; shared by one opener's cores, to see their interleaving.
        self.log = log if log is not None else []
        self._due: tuple[int, float, np.ndarray] | None = None
        self.closed = False

    @classmethod
    def opener(
        cls,
        *,
        delay: float | Sequence[float] = 0.0,
        fail: Iterable[int] = (),
        non_finite: Iterable[int] = (),
        burn: bool = False,
    ) -> tuple[Callable[[CoreSpec], FakeCore], list[FakeCore]]:
        """A ``Pipeline`` ``open_core`` making FakeCores with this script, and the list
        of those it made (in opening order)."""
        made: list[FakeCore] = []
        log: list[tuple[str, int, int, float]] = []
        lock = threading.Lock()
        failing, bad = tuple(fail), tuple(non_finite)

        def open_core(spec: CoreSpec) -> FakeCore:
            with lock:
                core = cls(
                    spec,
                    delay=delay,
                    fail=failing,
                    log=log,
                    index=len(made),
                    non_finite=bad,
                    burn=burn,
                )
                made.append(core)
            return core

        return open_core, made

    def submit(self, image: np.ndarray) -> None:
        if self.closed:
            raise EdgeError("this Core is closed")
        if self._due is not None:
            raise EdgeError("an image is already being computed; collect it first")
        check_input(image, self.input_shape)
        n, self.given = self.given, self.given + 1
        self._due = (n, time.monotonic() + self.delay(n), image.mean(axis=1)[0])
        self.log.append(("submit", self.index, n, time.monotonic()))

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        if self._due is None:
            raise EdgeError("nothing was submitted to this Core")
        (n, due, mean), self._due = self._due, None
        wait = due - time.monotonic()
        if self.burn:
            while time.monotonic() < due:
                pass
        elif wait > 0:
            time.sleep(wait)
        self.last_ms = self.delay(n) * 1000
        if n in self.fail:
            self.log.append(("fail", self.index, n, time.monotonic()))
            raise EdgeError(f"scripted failure of image {n}")
        self.log.append(("collect", self.index, n, time.monotonic()))
        depth = (mean + 10.0).astype(np.float32)
        conf = np.full(self.shape, 1.0 + n, np.float32)
        if n in self.non_finite:  # a core whose arithmetic overflowed: NaN, inf
            depth.flat[0], depth.flat[-1], conf.flat[1] = np.nan, np.inf, np.nan
        return depth, conf

    def delay(self, n: int) -> float:
        """The seconds image ``n`` takes."""
        return self.delays[n % len(self.delays)]

    def close(self) -> None:
        self.closed = True
        self._due = None


def fake_models(
    directory: Path, shapes: Iterable[tuple[int, int]], precision: str = "fp16"
) -> Path:
    """A model directory of placeholder cores (one per shape), for ``FakeCore``."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(directory, model="da3-small")
    for h, w in shapes:
        path = directory / f"fake-{h}x{w}.{precision}.tflite"
        path.write_bytes(f"placeholder for FakeCore {h}x{w}; not a model\n".encode())
        provenance: dict[str, Any] = {"weights": FAKE_WEIGHTS, "random_init": True}
        size, digest = path.stat().st_size, sha256_file(path)
        manifest.upsert(Artifact(path.name, "core", (h, w), precision, size, digest, provenance))
    manifest.save()
    return directory
