"""DA3's resize as banded matrix products: the weights the ExecuTorch programs take.

A separable resize is ``R @ X @ C^T``, with weight matrices that depend only on the two
sizes. Dense, at 1200x1600 -> 378x504 that is ~6 GFLOP; but each output row depends on a
few neighbouring input rows only (area: ~ceil(scale) + 1, cubic: 4). So the output rows
are cut into bands of a few rows and each band multiplies only the input rows it touches:

    rows[b * K + k] = start[b] + k         (input rows of band b; K per band)
    weights[b, j, k]                        (output row b * rows + j from input row start[b] + k)

The program gathers ``rows`` (``index_select``) and runs one batched matrix product (B
bands of rows x K against K x width): a GEMM XNNPACK delegates (KleidiAI on Arm). The
same form serves columns. The weights are exactly ``edge.stages.resample``'s (OpenCV's
INTER_AREA and INTER_CUBIC), folded into the bands, so the program computes what the numpy
stages compute, in float32.

A band of ``rows`` output rows spans K ~ rows * scale + 2 input rows, every one
multiplied for every output row: the pre program's bands are ``PRE_ROWS`` = 4 rows high
(at 1200 -> 378, 15 taps for ~4.2 real ones; 16-row bands took 53). The post program's
are ``POST_ROWS`` = 16: it enlarges, where K stays small.

``plan(src, core)`` gives the two steps DA3 takes (``resample.da3_resize``: longest side to
the core's, 504 at DA3's own size, with rounded sides, then to the multiples of 14,
through uint8), each as four arrays (a step that changes nothing is an identity band),
and cuts the output into strips of ``STRIP`` row bands: the program runs once per strip,
on the image rows that strip needs, so a run's intermediates (~3 MB at 1200x1600) stay in
the caches where the whole image's (~27 MB) did not. Where the first step already lands
on the core (a 4:3 photo at 504: 1200x1600 -> 378x504; a core that is not the image's
DA3 shape) the second is the identity: such a plan is ``one_step`` and runs on the pre1
program, which takes step 1's inputs only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edge.models import da3_shape
from edge.stages import resample

PRE_ROWS = 4  # output rows (or columns) per band, pre program
POST_ROWS = 16  # ... post program
STRIP = 12  # step 2's row bands per pre program run: 48 output rows


@dataclass(frozen=True)
class Axis:
    """One axis of one resize step, banded."""

    index: np.ndarray  # (B * K,) int64: the input rows (or columns) each band gathers
    weights: np.ndarray  # (B, rows, K) float32
    size: int  # output length (B * ROWS may be more: the tail is cut)


def band(idx: np.ndarray, w: np.ndarray, n_in: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-output taps (``idx``, ``w``: out x taps) -> (index (B*K,), weights (B, rows, K))."""
    out = idx.shape[0]
    bands = -(-out // rows)
    pad = bands * rows - out
    if pad:  # the last band's missing rows repeat its last one (cut off after)
        idx = np.concatenate([idx, np.repeat(idx[-1:], pad, axis=0)])
        w = np.concatenate([w, np.repeat(w[-1:], pad, axis=0)])
    idx = idx.reshape(bands, rows, -1)
    w = w.reshape(bands, rows, -1)
    lo = idx.min(axis=(1, 2))
    k = int((idx.max(axis=(1, 2)) - lo).max()) + 1
    lo = np.minimum(lo, n_in - k)
    weights = np.zeros((bands, rows, k), dtype=np.float64)
    b_i, r_i, t_i = np.indices(idx.shape)
    # Repeated taps (cubic at an edge, clamped) add up, as they do in resample.
    np.add.at(weights, (b_i, r_i, idx - lo[:, None, None]), w[b_i, r_i, t_i])
    index = (lo[:, None] + np.arange(k)[None, :]).ravel().astype(np.int64)
    return index, weights.astype(np.float32)


def _area(n_in: int, n_out: int, scale: float) -> Axis:
    idx, w = resample._area_weights(n_in, n_out)
    index, weights = band(idx, w.astype(np.float64) * scale, n_in, PRE_ROWS)
    return Axis(index, weights, n_out)


def _cubic(n_in: int, n_out: int) -> Axis:
    idx, w = resample._cubic_weights(n_out, n_in)
    index, weights = band(idx, w, n_in, PRE_ROWS)
    return Axis(index, weights, n_out)


@functools.lru_cache(maxsize=32)
def step(src: tuple[int, int], dst: tuple[int, int]) -> tuple[Axis, Axis]:
    """One resize (DA3's rule: cubic if any side grows, else area), rows and columns."""
    (h, w), (oh, ow) = src, dst
    if oh > h or ow > w:
        return _cubic(h, oh), _cubic(w, ow)
    # resample.area divides by the block area once, at the end: here the columns carry it.
    return _area(h, oh, 1.0), _area(w, ow, 1.0 / (h / oh * w / ow))


def first_size(size: tuple[int, int], core: tuple[int, int]) -> tuple[int, int]:
    """Where the first step goes: DA3's longest side to the core's (sides rounded), or
    straight to ``core`` when it is not the image's DA3 shape at that size (the one-step
    fallback)."""
    h, w = size
    longest = max(core)
    if da3_shape(h, w, longest) != core:
        return core
    if max(h, w) == longest:
        return size
    scale = longest / max(h, w)
    return (max(1, round(h * scale)), max(1, round(w * scale)))


Steps = tuple[tuple[Axis, Axis], tuple[Axis, Axis]]


@dataclass(frozen=True, eq=False)
class Strip:
    """One pre program run: ``stop - start`` output rows from the image rows it gathers."""

    rows: np.ndarray  # (B1 * K1,) the image rows step 1's bands of this strip take
    rw1: np.ndarray  # (B1, PRE_ROWS, K1)
    start: int  # the output rows [start, stop), the first stop - start rows of its run
    stop: int
    # Step 2's (None in a one-step plan): its row indices into this strip's step-1 rows,
    # (B2, K2), and their weights, (3 * B2, PRE_ROWS, K2): the row product runs per channel.
    ri2: np.ndarray | None = None
    rw2: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Plan:
    """DA3's two steps from one image size to one core shape, and the strips they run in
    (step 1's alone where step 2 is the identity: ``one_step``)."""

    steps: Steps
    strips: tuple[Strip, ...]
    one_step: bool = False

    @property
    def program(self) -> str:
        """The pre program this plan's inputs are for: "pre1" (one step) or "pre"."""
        return "pre1" if self.one_step else "pre"

    def taps(self) -> list[int]:
        """K (input rows per band) of each axis the program takes, in its input order."""
        steps = self.steps[:1] if self.one_step else self.steps
        return [axis.weights.shape[2] for pair in steps for axis in pair]

    def bands1(self) -> int:
        """The most step-1 row bands a strip takes."""
        return int(max(strip.rw1.shape[0] for strip in self.strips))

    def inputs(self, rgb: np.ndarray, strip: Strip, buffer: np.ndarray) -> list[np.ndarray]:
        """One run's inputs: the image's rows for the strip's step-1 bands, gathered and
        cast to float32 into ``buffer`` (one pass; gathers and casts are not delegated),
        then the weights and the other gathers' indices (band x taps): four for step 1,
        and four for step 2 unless the plan is ``one_step``."""
        (_, cols1), (_, cols2) = self.steps
        b1, _, k1 = strip.rw1.shape
        flat = rgb.reshape(rgb.shape[0], -1)
        gathered = buffer[: strip.rows.size * flat.shape[1]].reshape(b1, k1, flat.shape[1])
        np.copyto(gathered.reshape(-1, flat.shape[1]), flat[strip.rows], casting="unsafe")
        step1 = [
            gathered,
            strip.rw1,
            cols1.index.reshape(cols1.weights.shape[0], -1),
            cols1.weights,
        ]
        if strip.ri2 is None or strip.rw2 is None:
            return step1
        return [
            *step1,
            strip.ri2,
            strip.rw2,
            cols2.index.reshape(cols2.weights.shape[0], -1),
            cols2.weights,
        ]

    def run(self, rgb: np.ndarray, program: Callable[[list[np.ndarray]], np.ndarray]) -> np.ndarray:
        """The pre program over every strip: ``program(inputs)`` -> (3, >=rows, >=w); the
        bands' tails cut -> (1, 3, h, w) float32, a copy (the program's memory is reused)."""
        rows2, cols2 = self.steps[1]
        h, w = rows2.size, cols2.size
        out = np.empty((1, 3, h, w), dtype=np.float32)
        most = max(strip.rows.size for strip in self.strips) * rgb.shape[1] * rgb.shape[2]
        buffer = np.empty(most, dtype=np.float32)
        for strip in self.strips:
            y = program(self.inputs(rgb, strip, buffer))
            out[0, :, strip.start : strip.stop] = y[:, : strip.stop - strip.start, :w]
        return out


def _strips(steps: Steps, one_step: bool) -> tuple[Strip, ...]:
    """Cut step 2's row bands into strips of ``STRIP``; each takes the step-1 row bands
    its rows read (neighbouring strips share a band or two: computed in each). One step:
    step 1's row bands, ``STRIP`` to a strip."""
    (rows1, _), (rows2, _) = steps
    if one_step:
        idx = rows1.index.reshape(rows1.weights.shape[0], -1)
        return tuple(
            Strip(
                rows=idx[s0 : s0 + STRIP].ravel(),
                rw1=rows1.weights[s0 : s0 + STRIP],
                start=s0 * PRE_ROWS,
                stop=min(rows1.size, (s0 + STRIP) * PRE_ROWS),
            )
            for s0 in range(0, idx.shape[0], STRIP)
        )
    idx1 = rows1.index.reshape(rows1.weights.shape[0], -1)
    idx2 = rows2.index.reshape(rows2.weights.shape[0], -1)
    strips = []
    for s0 in range(0, idx2.shape[0], STRIP):
        s1 = min(idx2.shape[0], s0 + STRIP)
        lo, hi = int(idx2[s0:s1].min()) // PRE_ROWS, int(idx2[s0:s1].max()) // PRE_ROWS + 1
        strips.append(
            Strip(
                rows=idx1[lo:hi].ravel(),
                rw1=rows1.weights[lo:hi],
                start=s0 * PRE_ROWS,
                stop=min(rows2.size, s1 * PRE_ROWS),
                ri2=np.ascontiguousarray(idx2[s0:s1] - lo * PRE_ROWS),
                rw2=np.concatenate([rows2.weights[s0:s1]] * 3),
            )
        )
    return tuple(strips)


@functools.lru_cache(maxsize=32)
def plan(
    src: tuple[int, int], core: tuple[int, int], original: tuple[int, int] | None = None
) -> Plan:
    """DA3's two steps from ``src`` to ``core`` (``resample.da3_resize``); for a core shape
    that is not DA3's for this image, the one step ``resample.resize`` takes. A second
    step that changes nothing is an identity, and the plan ``one_step``. ``original``:
    the image's size before a pre-shrink to ``src`` (DA3's rule and its first step follow
    the original)."""
    first = first_size(original or src, core)
    steps = (step(src, first), step(first, core))
    return Plan(steps, _strips(steps, first == core), one_step=first == core)


def _bilinear_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's ``BILINEAR`` taps for one axis (``precompute_coeffs`` in its Resample.c):
    a triangle of support 1, widened by the scale when shrinking, normalised per output.
    -> (indices, weights), out x taps, float64."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    centers = (np.arange(n_out) + 0.5) * scale
    # C's (int) truncates toward zero; both ends are clamped to the input.
    xmin = np.maximum(np.trunc(centers - filterscale + 0.5).astype(np.int64), 0)
    count = np.minimum(np.trunc(centers + filterscale + 0.5).astype(np.int64), n_in) - xmin
    x = np.arange(int(count.max()))[None, :]
    t = np.abs((x + xmin[:, None] - centers[:, None] + 0.5) / filterscale)
    w = np.where((t < 1.0) & (x < count[:, None]), 1.0 - t, 0.0)
    total = w.sum(axis=1, keepdims=True)
    w = w / np.where(total == 0.0, 1.0, total)
    return np.minimum(xmin[:, None] + x, n_in - 1), w


@functools.lru_cache(maxsize=16)
def post_plan(core: tuple[int, int], size: tuple[int, int]) -> tuple[Axis, Axis]:
    """The post program's resize, ``core`` -> ``size``: Pillow's bilinear (the numpy
    stages' ``Image.resize``), columns then rows, as Pillow takes them."""
    (h, w), (oh, ow) = core, size
    rows = band(*_bilinear_weights(h, oh), h, POST_ROWS)
    cols = band(*_bilinear_weights(w, ow), w, POST_ROWS)
    return Axis(cols[0], cols[1], ow), Axis(rows[0], rows[1], oh)


def post_inputs(depth: np.ndarray, conf: np.ndarray, axes: tuple[Axis, Axis]) -> list[np.ndarray]:
    """The post program's five inputs: depth and confidence side by side and transposed,
    (w, 2h) (the column step runs first, on the small map, with columns leading), the
    column bands' indices and weights, then the row bands' for both maps: depth's, and
    confidence's (the same weights, the indices moved down by h). The program's output,
    (2 * row bands, ROWS, column bands * ROWS), holds depth over confidence, each with the
    bands' tails to cut."""
    cols, rows = axes
    h = depth.shape[0]
    both = np.empty((depth.shape[1], 2 * h), dtype=np.float32)
    both[:, :h] = depth.T
    both[:, h:] = conf.T
    b = rows.weights.shape[0]
    index = rows.index.reshape(b, -1)
    return [
        both,
        cols.index.reshape(cols.weights.shape[0], -1),
        cols.weights,
        np.concatenate([index, index + h]),
        np.concatenate([rows.weights, rows.weights]),
    ]
