"""Pre- and post-processing as ExecuTorch programs (``.pte``, XNNPACK delegate).

The Arm-style pipeline: the stages around the LiteRT core run as ExecuTorch programs.
Per core shape (h, w) (each program is the same for every shape: its resize comes as
inputs):

- ``da3-small_pre_<h>x<w>.pte``: DA3's preprocessing, step for step: its two resizes
  (longest side to 504, then to the multiples of 14; area when shrinking, cubic when
  enlarging, OpenCV's weights) as banded matrix products, each rounded to uint8 as DA3
  does, then the ImageNet normalisation -> (3, >=rows, >=w), one strip of output rows
  a run (``bands.Plan.run``: the caller cuts the bands' tail and places the strip).
  Inputs: the strip's step-1 row bands of the image (gathered and cast to float32 in
  numpy), and per axis and step the band weights and the indices the program gathers
  (``edge.stages.bands``). The products, roundings, transposes and the normalisation
  delegate to XNNPACK; the gathers run on the portable kernels.
- ``da3-small_pre1_<h>x<w>.pte``: the same, for a plan whose second step is the
  identity (``bands.Plan.one_step``: a 4:3 photo at 504, a core that is not the image's
  DA3 shape): step 1, its rounding and the normalisation, nothing after. It takes step
  1's four inputs; the identity it skips cost ~1 ms of ~9 a 1200x1600 frame.
- ``da3-small_post_<h>x<w>.pte``: the numpy stages' postprocess (Pillow's bilinear)
  as banded products, columns on the small map first, then rows, both maps in one pass
  (``bands.post_inputs``): -> depth over confidence in the output's layout. Delegated
  but for the two gathers.

What stays in numpy (it lowers badly or not at all, measured with executorch 1.5.1):
the uint8 -> float cast and step 1's row gather (casts are not delegated; one pass in
numpy), DA3's first step for images over ``MAX_SIDE`` a side or the tap bounds
(``edge.stages.executorch.pre_input``), colour lookup and min/max normalisation for the
PNGs. Graph inputs are not memory-planned (the caller's buffers are used in place);
intermediates are planned at the bounds below (the runner maps them lazily: only what a
run touches is resident).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edge.stages import MEAN, STD, bands
from edge.stages.executorch import (  # the runtime's bounds are the programs'
    BOUNDS,
    CORE_SIDE,
    MAX_SIDE,
    POST_BOUNDS,
)

# Adding and subtracting 1.5 * 2**23 rounds a float32 in [0, 2**22) to an integer, half
# to even (np.rint's rule): two additions XNNPACK runs, where aten.round is not delegated.
MAGIC = 12582912.0


def _uint8(x: torch.Tensor) -> torch.Tensor:
    """DA3's uint8 between and after its resizes: round half to even, saturate."""
    return torch.clamp((x + MAGIC) - MAGIC, 0.0, 255.0)


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` (bands x taps) of ``x`` (rows x n) -> (bands, taps, n)."""
    return torch.index_select(x, 0, index.reshape(-1)).reshape(index.shape[0], index.shape[1], -1)


class Pre(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        std = torch.tensor(STD)
        self.register_buffer("scale", (1.0 / (255.0 * std)).view(3, 1, 1))
        self.register_buffer("shift", (torch.tensor(MEAN) / std).view(3, 1, 1))

    def forward(
        self,
        rows1: torch.Tensor,  # (B1, K1, W*3): the image's rows for the strip's row bands
        rw1: torch.Tensor,  # (B1, PRE_ROWS, K1)
        ci1: torch.Tensor,  # (C1, L1) column indices of step 1's column bands
        cw1: torch.Tensor,  # (C1, PRE_ROWS, L1)
        ri2: torch.Tensor,  # (B2, K2) the strip's row indices into step 1's rows
        rw2: torch.Tensor,  # (3*B2, PRE_ROWS, K2): its weights, once per channel
        ci2: torch.Tensor,
        cw2: torch.Tensor,
    ) -> torch.Tensor:
        width3 = rows1.shape[2]
        y = torch.bmm(rw1, rows1)  # step 1, rows: (B1, PRE_ROWS, W*3)
        h1 = y.shape[0] * y.shape[1]
        # Plain 2D transposes of float32 only (a pixel's three values never move as one
        # 12-byte element: XNNPACK transposes those far slower), and the channels end
        # outermost, the core's layout, with no transpose of their own:
        y = y.reshape(h1, width3).permute(1, 0).reshape(width3 // 3, 3 * h1)  # (W, 3, h1)
        z = torch.bmm(cw1, _gather(y, ci1))  # step 1, columns: (C1, PRE_ROWS, 3*h1)
        w1 = z.shape[0] * z.shape[1]
        z = _uint8(z).reshape(w1, 3 * h1)
        z = torch.bmm(cw2, _gather(z, ci2))  # step 2, columns first in this layout
        w2 = z.shape[0] * z.shape[1]
        z = z.reshape(w2, 3 * h1).permute(1, 0).reshape(3, h1, w2)
        b2, k2 = ri2.shape
        rows = torch.index_select(z, 1, ri2.reshape(-1)).reshape(3 * b2, k2, w2)
        z = torch.bmm(rw2, rows)  # step 2, rows, per channel and band: (3*B2, PRE_ROWS, w2)
        z = _uint8(z).reshape(3, b2 * z.shape[1], w2)
        return z * self.scale - self.shift


class Pre1(Pre):
    """``Pre`` where DA3's second step is the identity: step 1 only."""

    def forward(  # type: ignore[override]
        self,
        rows1: torch.Tensor,  # (B1, K1, W*3)
        rw1: torch.Tensor,  # (B1, PRE_ROWS, K1)
        ci1: torch.Tensor,  # (C1, L1)
        cw1: torch.Tensor,  # (C1, PRE_ROWS, L1)
    ) -> torch.Tensor:
        width3 = rows1.shape[2]
        y = torch.bmm(rw1, rows1)
        h1 = y.shape[0] * y.shape[1]
        y = y.reshape(h1, width3).permute(1, 0).reshape(width3 // 3, 3 * h1)  # (W, 3, h1)
        z = torch.bmm(cw1, _gather(y, ci1))  # (C1, PRE_ROWS, 3*h1)
        w1 = z.shape[0] * z.shape[1]
        z = _uint8(z).reshape(w1, 3 * h1).permute(1, 0).reshape(3, h1, w1)
        return z * self.scale - self.shift


class Post(torch.nn.Module):
    def forward(
        self,
        both: torch.Tensor,  # (w, 2h): depth and confidence side by side, transposed
        ci: torch.Tensor,  # (C, L) column indices of the column bands
        cw: torch.Tensor,  # (C, POST_ROWS, L)
        ri: torch.Tensor,  # (2B, K) row indices: depth's bands, then confidence's
        rw: torch.Tensor,  # (2B, POST_ROWS, K)
    ) -> torch.Tensor:
        z = torch.bmm(cw, _gather(both, ci))  # columns: (C, POST_ROWS, 2h)
        z = z.reshape(z.shape[0] * z.shape[1], z.shape[2]).permute(1, 0)  # (2h, W')
        return torch.bmm(rw, _gather(z, ri))  # rows: (2B, ROWS, W'), the output's layout


def _lower(module: torch.nn.Module, args: tuple[torch.Tensor, ...], dynamic: object) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from torch.export import export

    program = export(module.eval(), args, dynamic_shapes=dynamic)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    # Inputs are the caller's buffers, used in place: no planned copy of the image.
    config = ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)
    )
    return bytes(lowered.to_executorch(config).buffer)


def _pre_args(size: tuple[int, int], core: tuple[int, int], kind: str) -> tuple[torch.Tensor, ...]:
    """The first strip's inputs at ``size`` -> ``core`` (a plan for ``kind``): a sample
    for the export."""
    plan = bands.plan(size, core)
    if plan.program != kind:
        raise AssertionError(f"{size} -> {core} is a {plan.program} plan, not {kind}")
    rgb = np.zeros((*size, 3), dtype=np.uint8)
    buffer = np.empty(plan.strips[0].rows.size * size[1] * 3, dtype=np.float32)
    return tuple(torch.from_numpy(a) for a in plan.inputs(rgb, plan.strips[0], buffer))


def _pre_dims(step: int) -> tuple[dict[int, object], ...]:
    """The dynamic sizes of one step's four inputs (step 1's start with the image rows)."""
    from torch.export import Dim

    n, taps = step, BOUNDS[f"taps{step}"]
    b = Dim(f"B{n}", min=1, max=BOUNDS[f"bands{n}"])
    k = Dim(f"K{n}", min=1, max=taps)
    c = Dim(f"C{n}", min=1, max=BOUNDS["columns"])
    taps_c = Dim(f"L{n}", min=1, max=taps)
    if step == 1:
        rows: tuple[dict[int, object], ...] = (
            {0: b, 1: k, 2: 3 * Dim("W", min=1, max=MAX_SIDE)},
            {0: b, 2: k},
        )
    else:
        rows = ({0: b, 1: k}, {0: 3 * b, 2: k})
    return (*rows, {0: c, 1: taps_c}, {0: c, 2: taps_c})


def _two_steps(shape: tuple[int, int]) -> tuple[int, int]:
    """An image DA3 takes to ``shape`` in two steps: three times the core with its short
    side 15 longer, so the first step lands 5 rows (or columns) off the core."""
    h, w = shape
    return (3 * (h + 5), 3 * w) if w >= h else (3 * h, 3 * (w + 5))


def pre_program(shape: tuple[int, int]) -> bytes:
    """Both steps."""
    dims = (*_pre_dims(1), *_pre_dims(2))
    return _lower(Pre(), _pre_args(_two_steps(shape), shape, "pre"), dims)


def pre1_program(shape: tuple[int, int]) -> bytes:
    """Step 1 only; its sample three times the core, which DA3 shrinks to it in one."""
    size = (3 * shape[0], 3 * shape[1])
    return _lower(Pre1(), _pre_args(size, shape, "pre1"), _pre_dims(1))


def post_program(shape: tuple[int, int]) -> bytes:
    from torch.export import Dim

    w = Dim("w", min=2, max=CORE_SIDE)
    h = Dim("h", min=2, max=CORE_SIDE)
    c = Dim("C", min=1, max=POST_BOUNDS["bands"])
    taps_c = Dim("L", min=1, max=POST_BOUNDS["taps"])
    b = Dim("B", min=1, max=POST_BOUNDS["bands"])
    taps_r = Dim("K", min=1, max=POST_BOUNDS["taps"])
    dynamic = (
        {0: w, 1: 2 * h},
        {0: c, 1: taps_c},
        {0: c, 2: taps_c},
        {0: 2 * b, 1: taps_r},
        {0: 2 * b, 2: taps_r},
    )
    return _lower(Post(), _post_args(shape, (2 * shape[0] + 3, 2 * shape[1] + 5)), dynamic)


def _post_args(core: tuple[int, int], size: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(0)
    depth, conf = (rng.random(core, dtype=np.float32) + 0.5 for _ in range(2))
    inputs = bands.post_inputs(depth, conf, bands.post_plan(core, size))
    return tuple(torch.from_numpy(a) for a in inputs)


LEVEL = 1.0 / (255.0 * min(STD))  # one uint8 level, normalised: the most a rounding flip moves


def check(path: Path, kind: str, shape: tuple[int, int]) -> float:
    """Run a written program with the ExecuTorch runtime against its reference on
    odd-sized inputs; return the error (the export refuses it over 1e-3).

    pre, pre1: against the numpy stages (DA3's resize in numpy), on the shrinks,
    enlargements and cores that are not the image's DA3 shape below that are plans for
    it (at least two each): the mean |d|, or infinity if any value is off by more than
    one uint8 level (float32 sums in another order may round a value to the
    neighbouring level, never further). post: max |d| of its depth against the numpy
    stages' (Pillow's bilinear), enlarging and slightly shrinking."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    from edge.models import da3_shape
    from edge.stages.numpy import NumpyStages, _resize_float

    program = _load_for_executorch(str(path))
    worst = 0.0
    with torch.no_grad():
        if kind in ("pre", "pre1"):
            rng = np.random.default_rng(0)
            checked = 0
            h, w = shape
            two, one = _two_steps(shape), (3 * h, 3 * w)
            for size, core in (
                (two, None),  # DA3 shrinks it in two steps
                ((two[0] // 2, two[1] // 2), None),  # ... enlarges it in two
                (one, None),  # ... shrinks it to the core in one
                ((h // 2, w // 2), None),  # ... enlarges it in one
                ((3 * h + 5, 3 * w + 1), None),
                ((h // 3 + 3, w // 3 - 7), None),
                ((h + 31, w - 17), shape),  # not its DA3 shape: one step to it
            ):
                core = core or da3_shape(*size, max(shape))
                plan = bands.plan(size, core)
                if plan.program != kind:
                    continue
                rgb = (rng.random((*size, 3)) * 255).astype(np.uint8)
                out = plan.run(
                    rgb, lambda ins: program.forward([torch.from_numpy(a) for a in ins])[0].numpy()
                )
                diff = np.abs(out - NumpyStages().preprocess(rgb, core))
                bad = float(diff.max()) > LEVEL + 1e-4
                worst = max(worst, float("inf") if bad else float(diff.mean()))
                checked += 1
            if checked < 2:
                raise AssertionError(f"{kind} at {shape}: {checked} check(s) ran, not 2")
        else:
            for size in ((401, 599), (shape[0] + 1, shape[1] * 2), (shape[0] - 5, shape[1])):
                args = _post_args(shape, size)
                out = program.forward(list(args))[0].numpy()
                both = out.reshape(2, -1, out.shape[2])[:, : size[0], : size[1]]
                depth = args[0].numpy()[:, : shape[0]].T
                diff = np.abs(both[0] - _resize_float(depth, size))
                worst = max(worst, float(diff.max()))
    return worst
