"""The ExecuTorch stages: pre- and post-processing as ``.pte`` programs (XNNPACK).

Chosen with ``--stages executorch``. The programs run on da3-edge's own runner over
ExecuTorch's C++ runtime (``edge.etrunner``; installed by ``da3-edge install-executorch``),
so this path imports neither torch nor the ``executorch`` Python package: on a Pi the
runtime install has neither. (ExecuTorch's Python bindings link libtorch: ~1 GB and
~2 s of import; the export environment still uses them to check what it writes.)

Preprocess is DA3's own, step for step, as banded matrix products (``edge.stages.bands``
builds the weights from ``edge.stages.resample``'s, per image size, cached; the program
does the products, DA3's uint8 roundings and the normalisation). Split with numpy (see
``edge.export.stages``): numpy gathers step 1's input rows and casts them to float32 in
one pass, takes DA3's first step itself for images over ``MAX_SIDE`` a side
(``pre_input``), and does what the writers need (min/max, colour lookup).

Postprocess is the numpy stages' (Pillow's bilinear, its taps from ``bands.post_plan``)
in the same banded form: columns on the small map, then rows, written in the output's
layout. A resize outside the program's bounds (a strong shrink, an output over
``MAX_SIDE``) is the numpy stages' own.
"""

from __future__ import annotations

import numpy as np

from edge import etrunner
from edge.errors import EdgeError, ModelCorrupt
from edge.models import STAGE_KINDS, Artifact, Manifest
from edge.stages import bands, resample

MAX_SIDE = 2048
# The pre program's dynamic bounds, per run (a strip of bands.STRIP row bands of
# bands.PRE_ROWS rows; its intermediates are memory-planned at these, a run touches ~3 MB):
# step-1 row bands a strip reads (STRIP plus what step 2's scale and taps add), column
# bands (132 x 4 covers 528 >= any core side), taps per band in step 1 (area 2048 -> 504
# needs 19, the one-step fallback to a core of another aspect up to ~24) and step 2 (DA3's
# second step changes a side by a few rows: <= 8).
BOUNDS = {"bands1": 32, "bands2": bands.STRIP, "columns": 132, "taps1": 28, "taps2": 12}
CORE_SIDE = 528
# The post program's: up to MAX_SIDE out of a core side up to CORE_SIDE, in bands of
# bands.POST_ROWS; taps per band (enlarging needs ~POST_ROWS * in/out + 2 <= 18; a slight
# shrink fits too, a strong one goes to numpy).
POST_BOUNDS = {"bands": MAX_SIDE // bands.POST_ROWS, "taps": 20}
_F32, _I64 = np.dtype(np.float32), np.dtype(np.int64)
# What each program's forward takes (dtype, rank per input): a model folder exported for
# another layout of the stages is refused with the way out, not run into garbage.
_STEP = ((_F32, 3), (_I64, 2), (_F32, 3))  # a step's weights, column indices, column weights
SIGNATURES = {
    "pre": ((_F32, 3), *_STEP, (_I64, 2), *_STEP),
    "pre1": ((_F32, 3), *_STEP),
    "post": ((_F32, 2), (_I64, 2), (_F32, 3), (_I64, 2), (_F32, 3)),
}
assert tuple(SIGNATURES) == STAGE_KINDS


def _fits(plan: bands.Plan) -> bool:
    t = plan.taps()
    return (
        max(t[:2]) <= BOUNDS["taps1"]
        and max(t[2:], default=1) <= BOUNDS["taps2"]
        and plan.bands1() <= BOUNDS["bands1"]
    )


def pre_input(rgb: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, bands.Plan]:
    """What the pre program starts from, and its plan (two banded steps, in strips).

    Within ``MAX_SIDE`` and the program's bounds: the image itself, both steps in the
    program. Over them (a 12 MP photo): numpy takes DA3's first step (``resample``, the
    numpy stages' own: within a uint8 level of DA3's, 30 ms at 4032x3024 here) and the
    program the second. (k x k block means first, then the program, were exact when
    DA3's factor is a multiple of k, but took 84 ms for the means alone.)"""
    size = (int(rgb.shape[0]), int(rgb.shape[1]))
    if max(size) <= MAX_SIDE:
        plan = bands.plan(size, shape)
        if _fits(plan):
            return rgb, plan
    # numpy's first resize: DA3's step 1 (or the one step of a non-DA3 core shape).
    first = bands.first_size(size, shape)
    return resample.resize(rgb, first), bands.plan(first, shape, original=size)


def _rows_match(program: etrunner.Program, kind: str) -> bool:
    """The program's bands are as high as ours (fixed at export: its first weights'
    second dimension)."""
    pre = kind != "post"
    weights = program.inputs[1 if pre else 2]
    return weights.shape[1] == (bands.PRE_ROWS if pre else bands.POST_ROWS)


class ExecuTorchStages:
    name = "executorch"
    reason = ""

    def __init__(self, manifest: Manifest, threads: int | None = None) -> None:
        self.manifest = manifest
        self.runtime = etrunner.Runtime.get(threads)
        self._programs: dict[str, etrunner.Program] = {}

    def program(self, kind: str, shape: tuple[int, int]) -> etrunner.Program:
        """The open ``kind`` program (``STAGE_KINDS``), opened and checked on first use."""
        # Each program is the same for every core shape (the resize comes as inputs):
        # any of the directory's serves a shape exported without one.
        if kind not in self._programs:
            found = [a for a in self.manifest.stage_programs() if a.kind == kind]
            artifact: Artifact = found[0] if found else self.manifest.find_stage(kind, shape)
            path = self.manifest.verify(artifact)
            program = etrunner.Program(path, self.runtime)
            takes = tuple((m.dtype, len(m.shape)) for m in program.inputs)
            if (
                takes != SIGNATURES[kind]
                or len(program.outputs) != 1
                or not _rows_match(program, kind)
            ):
                program.close()
                raise ModelCorrupt(
                    f"{path}: a {kind} program of another da3-edge version (it takes "
                    f"{len(takes)} inputs of other types or shapes): re-export the model directory "
                    "(da3-edge export)"
                )
            self._programs[kind] = program
        return self._programs[kind]

    def preprocess(self, rgb: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        image, plan = pre_input(rgb, shape)
        program = self.program(plan.program, shape)
        x = plan.run(image, lambda inputs: program.run(inputs, copy=False)[0])
        program.release()  # see postprocess
        return x

    def postprocess(
        self, depth: np.ndarray, conf: np.ndarray, size: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        h, w = depth.shape
        axes = bands.post_plan((h, w), size)
        taps = max(axis.weights.shape[2] for axis in axes)
        if max(size) > MAX_SIDE or max(h, w) > CORE_SIDE or taps > POST_BOUNDS["taps"]:
            # Over the program's bounds (a source much smaller than the core, or over
            # MAX_SIDE): the numpy postprocess, which the program equals.
            from edge.stages.numpy import _resize_float

            return _resize_float(depth, size), _resize_float(conf, size)
        program = self.program("post", (h, w))
        (out,) = program.run(bands.post_inputs(depth, conf, axes), copy=False)
        both = out.reshape(2, -1, out.shape[2])  # depth over confidence, bands' tails
        # Copies (never views: the program's memory is reused), the tails cut.
        result = both[0, : size[0], : size[1]].copy(), both[1, : size[0], : size[1]].copy()
        # Each program's planned memory goes back to the kernel after its run: its
        # intermediates would otherwise stay resident through the core's next peak (the
        # pre program's: +25 MB on a still's peak RSS, measured). The runner maps it in
        # huge pages, so touching it anew costs ~2 ms a run, not ~15 (4 KiB faults).
        program.release()
        return result

    def close(self) -> None:
        for program in self._programs.values():
            program.close()
        self._programs.clear()


def open_stages(
    manifest: Manifest | None = None, threads: int | None = None, **_: object
) -> ExecuTorchStages:
    if manifest is None:
        raise EdgeError("the executorch stages need a model directory with .pte programs")
    return ExecuTorchStages(manifest, threads=threads)


def open_checked(
    manifest: Manifest | None = None, threads: int | None = None, **_: object
) -> ExecuTorchStages:
    """``open_stages`` with both programs opened and checked now (``auto`` decides on
    it): a missing runner, a missing, tampered or older program is an EdgeError here,
    not at the first frame."""
    backend = open_stages(manifest, threads)
    try:
        shape = backend.manifest.stage_programs()[0].shape
        for kind in STAGE_KINDS:
            backend.program(kind, shape)
    except BaseException:
        backend.close()
        raise
    return backend
