"""Make the core templates ``da3-edge models build`` fills (edge/data/cores/).

Run in the export environment, from a clean tree (each template records the commit):

    .venv-export/bin/python -m scripts.core_templates --size 504 --size 280 --shape 42x56

Per shape: seeded random weights in which no two tensors are alike (seed ``SEED``, not
the tests' 0, so the tests' byte comparison is a build from other weights), converted
the way ``da3-edge export`` converts (fp32, then fp16 from its bytes); each float
constant of the file is traced to the release tensor it equals (cast, transposed or
sliced) or to the resampled position embedding, and cut out. A constant that matches
nothing must be one the shape alone makes (the RoPE tables, the head's UV embeddings,
or a small literal of the graph); any other stops the tool. Each template is then
checked: built from the same weights it gives the exported file byte for byte.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import struct
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from edge import corebuild, graphs
from edge.models import DEFAULT_SHAPES, parse_shape, size_shapes
from edge.release import Release, fold_norm, resample_pos_embed
from scripts.support.tflite import FLOAT_TYPES, spans

SEED = 7
SMALL = 64  # elements: an unmatched constant below this is a literal of the graph


def candidates(release: dict[str, np.ndarray]) -> dict[bytes, list[tuple[str, Any]]]:
    """Every recipe's bytes, for the dtypes a core holds: tensor, take, permutation."""
    table: dict[bytes, list[tuple[str, Any]]] = defaultdict(list)
    for name, tensor in release.items():
        takes: list[Any] = [None]
        if tensor.size <= 1 << 16:
            takes += [(a, i) for a in range(tensor.ndim) for i in range(tensor.shape[a])]
        for take in takes:
            for perm in itertools.permutations(range(tensor.ndim)):
                recipe = {"tensor": name, "perm": list(perm), "take": take}
                for dtype in FLOAT_TYPES.values():
                    value = corebuild.apply({**recipe, "dtype": dtype.str}, tensor)
                    table[value.tobytes()].append((name, recipe))
    return table


def recipe_for(
    raw: bytes,
    dtype: np.dtype[Any],
    table: dict[bytes, list[tuple[str, Any]]],
    computed: dict[bytes, dict[str, Any]],
) -> dict[str, Any] | None:
    if raw in computed:
        return dict(computed[raw], dtype=dtype.str)
    hits = table.get(raw)
    if not hits:
        return None
    names = {name for name, _ in hits}
    if len(names) > 1:
        raise SystemExit(f"a constant equals several release tensors ({sorted(names)}): reseed")
    recipe = dict(hits[0][1], dtype=dtype.str)
    if recipe["perm"] == sorted(recipe["perm"]):
        recipe.pop("perm")
    if recipe["take"] is None:
        recipe.pop("take")
    return recipe


def make(
    data: bytes,
    shape: tuple[int, int],
    precision: str,
    release: dict[str, np.ndarray],
    table: dict[bytes, list[tuple[str, Any]]],
    known: set[bytes],
    made_with: dict[str, str],
) -> bytes:
    """The template (uncompressed) of ``data``."""
    computed = computed_constants(release, shape)
    regions, skeleton, at, unexplained = [], bytearray(), 0, []
    for start, size, dtype, tshape in spans(data):
        raw = data[start : start + size]
        recipe = recipe_for(raw, dtype, table, computed)
        if recipe is None:
            literal = size // dtype.itemsize < SMALL or not any(raw)  # zeros: no bias
            if not literal and raw not in known:
                unexplained.append(f"{dtype} {tshape} at {start}")
            continue
        regions.append((start, size, recipe))
        skeleton += data[at:start]
        at = start + size
    if unexplained:
        raise SystemExit(f"{shape} {precision}: constants that match nothing: {unexplained}")
    skeleton += data[at:]
    used = {name for _, _, recipe in regions for name in corebuild.inputs(recipe)}
    header = {
        "format": corebuild.FORMAT,
        "shape": list(shape),
        "precision": precision,
        "size": len(data),
        "tensors": {name: list(release[name].shape) for name in sorted(used)},
        "regions": regions,
        "made_with": made_with,
    }
    blob = json.dumps(header, separators=(",", ":")).encode()
    return corebuild.MAGIC + struct.pack("<I", len(blob)) + blob + bytes(skeleton)


def computed_constants(
    release: dict[str, np.ndarray], shape: tuple[int, int]
) -> dict[bytes, dict[str, Any]]:
    """The bytes of each computation on the release a core holds, and its recipe."""
    found: dict[bytes, dict[str, Any]] = {}
    pos = resample_pos_embed(release[corebuild.POS_EMBED], *shape)
    values: list[tuple[np.ndarray, dict[str, Any]]] = [(pos, {"compute": "pos_embed"})]
    i = 0
    while corebuild._block(i, "norm1.weight") in release:
        for linear in corebuild.FOLDS:
            recipe = {"compute": "fold", "block": i, "linear": linear}
            arrays = [release[n] for n in corebuild.inputs(recipe)]
            folded = fold_norm(*arrays)
            values += [(folded[0], dict(recipe, part="w")), (folded[1], dict(recipe, part="b"))]
        i += 1
    for value, recipe in values:
        for d in FLOAT_TYPES.values():
            found[value.astype(d).tobytes()] = recipe
    return found


def shape_constants(module: Any) -> set[bytes]:
    """The bytes of what MonoDepth computes from the shape alone, in each float dtype and
    axis order (the converter stores images channels-last)."""
    return {
        buf.numpy().transpose(perm).astype(d).tobytes()
        for name, buf in module.named_buffers()
        if not name.startswith(("pos_embed", "fold"))
        for perm in itertools.permutations(range(buf.ndim))
        for d in FLOAT_TYPES.values()
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--size", action="append", type=int, default=[])
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--out", type=Path, default=graphs.templates_dir())
    p.add_argument(
        "--stages",
        type=Path,
        metavar="DIR",
        help="also write the ExecuTorch stage programs (pre, pre1, post: the same for "
        "every shape) into DIR, each checked as the export checks it (edge/data/stages)",
    )
    p.add_argument("--allow-dirty", action="store_true", help="for trying the tool only")
    return p


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    shapes = [s for n in ns.size for s in size_shapes(n)] + [parse_shape(s) for s in ns.shape]
    shapes = list(dict.fromkeys(shapes or DEFAULT_SHAPES))
    import torch

    from edge.bench import git_revision
    from edge.export import convert
    from edge.export.mono import MonoDepth
    from edge.export.weights import _dedup_state, _Release, random_state, save_official_layout

    commit = git_revision()
    if commit.endswith("+dirty") and not ns.allow_dirty:
        raise SystemExit(f"this checkout has uncommitted changes (git {commit}): commit first")
    made_with = {"commit": commit, **convert._versions()}
    net = random_state(SEED)
    release = {k: v.numpy() for k, v in _dedup_state(_Release(net)).items()}
    table = candidates(release)
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.stages:
        write_stages(ns.stages, shapes[0])
    with tempfile.TemporaryDirectory() as tmp:
        weights = save_official_layout(net, Path(tmp) / "release", random_seed=SEED)
        for n, shape in enumerate(shapes, 1):
            t0 = time.monotonic()
            module = MonoDepth(net, *shape).eval()
            sample = torch.from_numpy(convert.verification_input(shape))
            with torch.no_grad():
                fp32 = convert._convert_fp32(module, sample, Path(tmp))
            known = shape_constants(module)
            for precision in ("fp32", "fp16"):
                data = fp32 if precision == "fp32" else convert._quantize(fp32, precision)
                raw = make(data, shape, precision, release, table, known, made_with)
                path = ns.out / graphs.template_name(shape, precision)
                path.write_bytes(lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME))
                check(path, weights, data)
                print(
                    f"[{n}/{len(shapes)}] {shape[0]}x{shape[1]} {precision}: "
                    f"{path.stat().st_size / 1e3:.0f} kB template, same bytes "
                    f"({time.monotonic() - t0:.0f} s)",
                    flush=True,
                )
    return 0


def write_stages(folder: Path, shape: tuple[int, int]) -> None:
    """The stage programs, built and checked at ``shape`` as the export does."""
    from edge.export import stages
    from edge.export.convert import STAGE_TOLERANCE

    folder.mkdir(parents=True, exist_ok=True)
    builds = {"pre": stages.pre_program, "pre1": stages.pre1_program, "post": stages.post_program}
    for kind, build in builds.items():
        path = folder / f"{kind}.pte"
        path.write_bytes(build(shape))
        worst = stages.check(path, kind, shape)
        if worst > STAGE_TOLERANCE:
            path.unlink()
            raise SystemExit(f"{path}: differs from its reference by {worst:.2e}")
        print(f"{path}: {path.stat().st_size / 1e3:.1f} kB, max |d| {worst:.1e}", flush=True)


def check(path: Path, weights: Path, data: bytes) -> None:
    """A build from the template's own weights must give the exported bytes."""
    template = corebuild.Template.read(path)
    with tempfile.TemporaryDirectory() as tmp, Release(weights) as release:
        built = corebuild.build_core(template, release, Path(tmp) / "core.tflite")
        if built.path.read_bytes() != data:
            path.unlink()
            raise SystemExit(f"{path.name}: a build from its own weights differs from the export")


if __name__ == "__main__":
    sys.exit(main())
