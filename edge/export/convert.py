"""Convert the wrapped network to LiteRT, verify each artifact, update the manifest.

Per input shape: ``torch.export`` + litert-torch conversion to an fp32 flatbuffer
(~25 s and ~1.3 GB here), then fp16 and int8 derived from those bytes with the same
ai-edge-quantizer recipes litert-torch applies when given a ``quant_config``
(``full_fp16_recipe``: fp16 weights; ``full_dynamic_recipe``: dynamic-range int8),
so one conversion serves all three precisions.

Each artifact is then run through the LiteRT runtime and compared with the official
network's own PyTorch forward on a fixed input; one that drifts past its tolerance
is not written and the export fails.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edge import atomic
from edge.corebuild import artifact_name, stage_name
from edge.errors import EdgeError
from edge.export.mono import MonoDepth
from edge.export.weights import MODEL_NAME, Weights
from edge.models import Artifact, Manifest, check_same_weights, sha256_file
from edge.parity import TOLERANCES, compare

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExportResult:
    artifacts: list[Artifact]
    seconds: float


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__, "python": platform.python_version()}
    for dist in ("litert-torch", "ai-edge-quantizer", "ai-edge-litert", "depth-anything-3"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _quantize(fp32: bytes, precision: str) -> bytes:
    from litert_torch.generative.quantize import quant_recipes
    from litert_torch.quantize import translate_recipe

    recipe = {
        "fp16": quant_recipes.full_fp16_recipe,
        "int8": quant_recipes.full_dynamic_recipe,
    }[precision]()
    ai_edge_recipe = translate_recipe.translate_to_ai_edge_recipe(recipe.generative_recipe)
    # ai-edge-quantizer prints progress bars and size reports; ours says enough.
    with (
        open(os.devnull, "w") as sink,
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        return bytes(translate_recipe.quantize_model(fp32, ai_edge_recipe))


def _convert_fp32(module: torch.nn.Module, sample: torch.Tensor, workdir: Path) -> bytes:
    import litert_torch

    litert_torch.config.show_progress = False
    edge_model = litert_torch.convert(module, (sample,))
    tmp = workdir / ".convert.tflite"
    edge_model.export(str(tmp))
    try:
        return tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)


def verification_input(shape: tuple[int, int], seed: int = 1234) -> np.ndarray:
    """A smooth, structured, normalised image (1, 3, h, w) for export checks."""
    h, w = shape
    rng = np.random.default_rng(seed)
    ys = np.linspace(-1, 1, h, dtype=np.float32)[:, None]
    xs = np.linspace(-1, 1, w, dtype=np.float32)[None, :]
    chans = []
    for _ in range(3):
        a, b, p = rng.uniform(1, 4, 3)
        chans.append(np.sin(a * xs + b * ys * xs + p) + 0.3 * np.cos(5 * a * ys))
    img = np.stack(chans)[None].astype(np.float32)
    return (img + rng.normal(0, 0.05, img.shape).astype(np.float32)) * 1.2


def run_litert(path: Path, image: np.ndarray, threads: int = 2) -> tuple[np.ndarray, np.ndarray]:
    from edge.core import Core

    with Core(path, threads=threads, fp16_arithmetic=False) as core:
        return core.run(image)


def export(
    weights: Weights,
    out: Path,
    shapes: Sequence[tuple[int, int]],
    precisions: Sequence[str],
    *,
    verify: bool = True,
    with_stages: bool = True,
    progress: Progress | None = None,
) -> ExportResult:
    """Convert ``weights`` for every shape and precision into ``out``."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.load_or_new(out)
    check_same_weights(manifest, weights.provenance)
    versions = _versions()
    start = time.monotonic()
    written: list[Artifact] = []
    programs: dict[str, bytes] = {}  # the stage programs, built at the first shape
    net = weights.net.eval()
    for n, shape in enumerate(shapes, 1):
        prefix = f"[{n}/{len(shapes)}] {shape[0]}x{shape[1]}"
        t0 = time.monotonic()
        say(f"{prefix}: torch.export + LiteRT conversion (fp32; about half a minute)...")
        fp32, sample, reference = _convert(net, shape, out, verify)
        say(f"{prefix}: converted in {time.monotonic() - t0:.1f} s")
        for precision in precisions:
            t1 = time.monotonic()
            data = fp32 if precision == "fp32" else _quantize(fp32, precision)
            name = artifact_name(shape, precision)
            check = _write_verified(out / name, data, precision, sample, reference)
            artifact = Artifact(
                file=name,
                kind="core",
                shape=shape,
                precision=precision,
                bytes=len(data),
                sha256=sha256_file(out / name),
                provenance=_core_provenance(weights, versions, check),
            )
            manifest.upsert(artifact)
            manifest.save()
            written.append(artifact)
            verdict = (
                f"pearson {check['pearson']:.7f}, rel-L2 {check['rel_l2']:.2e}"
                if check
                else "not verified"
            )
            say(
                f"{prefix}: {precision} {len(data) / 1e6:.1f} MB, {verdict} "
                f"({time.monotonic() - t1:.1f} s)"
            )
        del fp32
        if with_stages:
            written += _export_stages(shape, out, manifest, programs, versions, prefix, say)
    return ExportResult(written, time.monotonic() - start)


Reference = tuple[np.ndarray, np.ndarray]  # the official forward's depth and confidence


def _convert(
    net: Any, shape: tuple[int, int], out: Path, verify: bool
) -> tuple[bytes, np.ndarray, Reference | None]:
    """The fp32 core at ``shape``, the input it is verified on, and the official
    forward's output on that input (when ``verify``)."""
    module = MonoDepth(net, *shape).eval()
    sample = torch.from_numpy(verification_input(shape))
    with torch.no_grad():
        fp32 = _convert_fp32(module, sample, out)
        reference = None
        if verify:
            official = net(sample[:, None])
            reference = (
                official.depth[0, 0].numpy().astype(np.float32),
                official.depth_conf[0, 0].numpy().astype(np.float32),
            )
    return fp32, sample.numpy(), reference


def _write_verified(
    path: Path, data: bytes, precision: str, sample: np.ndarray, reference: Reference | None
) -> dict[str, float]:
    """``data`` written at ``path`` once LiteRT's output on ``sample`` matches the
    reference within the precision's tolerances (EdgeError, nothing written, when it
    does not); the comparison's figures, none without a reference."""
    tmp = path.with_name(f".{path.name}.verify")
    atomic.write_bytes(tmp, data)
    check: dict[str, float] = {}
    try:
        if reference is not None:
            depth, conf = run_litert(tmp, sample)
            check = compare(reference[0], depth, precision)
            check["conf_pearson"] = compare(reference[1], conf, precision)["pearson"]
            if not check["ok"]:
                raise EdgeError(
                    f"{path.name}: drifted from the official forward "
                    f"(pearson {check['pearson']:.6f}, rel-L2 {check['rel_l2']:.2e}; "
                    f"limits {TOLERANCES[precision]})"
                )
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return check


def _core_provenance(
    weights: Weights, versions: dict[str, str], check: dict[str, float]
) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "weights": weights.provenance,
        "random_init": weights.random_init,
        "source": weights.source,
        "versions": versions,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verify": {k: v for k, v in check.items() if k != "ok"},
    }


STAGE_TOLERANCE = 1e-3  # a .pte against its reference (stages.check; normalised units / depth)


def _export_stages(
    shape: tuple[int, int],
    out: Path,
    manifest: Manifest,
    programs: dict[str, bytes],
    versions: dict[str, str],
    prefix: str,
    say: Progress,
) -> list[Artifact]:
    """The stage programs (``STAGE_KINDS``) for ``shape``, each checked at it. A program is the
    same for every shape (its resize comes as inputs, its sizes are dynamic): it is
    built once per export, into ``programs``, and written for each shape."""
    from edge.export import stages

    made = []
    builds = {"pre": stages.pre_program, "pre1": stages.pre1_program, "post": stages.post_program}
    for kind, build in builds.items():
        t0 = time.monotonic()
        if kind not in programs:
            programs[kind] = build(shape)
        data = programs[kind]
        name = stage_name(kind, shape)
        tmp = out / f".{name}.verify"
        atomic.write_bytes(tmp, data)
        try:
            worst = stages.check(tmp, kind, shape)
            if worst > STAGE_TOLERANCE:
                raise EdgeError(
                    f"{name}: differs from its reference by {worst:.2e} (limit {STAGE_TOLERANCE})"
                )
            tmp.replace(out / name)
        finally:
            tmp.unlink(missing_ok=True)
        artifact = Artifact(
            file=name,
            kind=kind,
            shape=shape,
            precision="fp32",
            bytes=len(data),
            sha256=sha256_file(out / name),
            provenance={
                "model": MODEL_NAME,
                # Stage programs hold no weights; they are tied to the core shape only.
                "weights": "none",
                "random_init": False,
                "max_side": stages.MAX_SIDE,
                "versions": versions,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "verify": {"max_abs": worst},
            },
        )
        manifest.upsert(artifact)
        manifest.save()
        made.append(artifact)
        seconds = time.monotonic() - t0
        say(
            f"{prefix}: {kind} program {len(data) / 1e3:.1f} kB, "
            f"max |d| {worst:.1e} ({seconds:.1f} s)"
        )
    return made
