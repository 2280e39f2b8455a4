"""``da3-edge export``: DA3-small weights -> LiteRT models + manifest.

Needs the export environment (torch, litert-torch, depth-anything-3); everything
torch-related is imported inside ``main`` so ``da3-edge --help`` stays light.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edge.commands import options
from edge.commands.options import split_list
from edge.errors import UsageError
from edge.models import DEFAULT_SHAPES, PRECISIONS, parse_shape, resolve_models_dir, size_shapes

if TYPE_CHECKING:
    from edge.export.quiet import Console


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge export",
        description=(
            "Convert DA3-small to LiteRT models (.tflite), one per input shape and "
            "precision, verify each against the official PyTorch forward, and record "
            "them in OUT/manifest.json. Needs the export environment "
            "(scripts/setup-export-env.sh)."
        ),
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--weights",
        metavar="PATH",
        help="official release folder (config.json + model.safetensors) or the "
        ".safetensors file; default: download depth-anything/da3-small from the hub",
    )
    src.add_argument(
        "--random-init",
        metavar="SEED",
        type=int,
        help="seeded random weights instead of real ones (tests, benchmarks); "
        "every artifact and result made from them is flagged",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="model directory to write (default: $DA3_EDGE_MODELS, else "
        "~/.local/share/da3-edge/models)",
    )
    _what_options(p)
    _how_options(p)
    return p


def _what_options(p: argparse.ArgumentParser) -> None:
    """Which artifacts: precisions and shapes."""
    p.add_argument(
        "--precision",
        default="fp32,fp16,int8",
        help="comma-separated subset of fp32,fp16,int8 (default: all three; "
        "fp16 = fp16 weights, int8 = dynamic-range int8)",
    )
    p.add_argument(
        "--size",
        action="append",
        type=options.size,
        metavar="N",
        help="the four shapes (4:3, 3:4, 16:9, 9:16) whose long side is N, a multiple of 14: "
        "504 (DA3's own) is 378x504, 504x378, 280x504 and 504x280, 280 is 210x280, "
        "280x210, 154x280 and 280x154; repeatable; the default (with no --shape) is 504",
    )
    p.add_argument(
        "--shape",
        action="append",
        metavar="HxW",
        help="one input shape, sides multiples of 14; repeatable; 'default' stands for "
        "378x504, 504x378, 280x504 and 504x280 (--size 504)",
    )


def _how_options(p: argparse.ArgumentParser) -> None:
    """What else is written, and what is checked and shown."""
    p.add_argument(
        "--save-weights",
        metavar="DIR",
        help="also write the weights used, in the official release layout (for "
        "--random-init: hand the same random weights to other tools)",
    )
    p.add_argument(
        "--weights-only",
        action="store_true",
        help="with --save-weights: write the weights and stop, converting nothing",
    )
    p.add_argument(
        "--no-stages",
        action="store_true",
        help="skip the ExecuTorch pre/post-processing programs (.pte) for --stages executorch",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show what torch, litert-torch, ExecuTorch and the reference package print "
        "(by default kept in a log, named only if the export fails)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip running each artifact against the official forward",
    )


def parse_shapes(
    values: Sequence[str] | None, sizes: Sequence[int] | None = None
) -> list[tuple[int, int]]:
    """The shapes to export: each --size's four, then each --shape (the default's four
    when neither is given), in order, without repeats."""
    shapes: list[tuple[int, int]] = []
    for size in sizes or []:
        shapes += [s for s in size_shapes(size) if s not in shapes]
    for value in values or ([] if sizes else ["default"]):
        for item in value.split(","):
            item = item.strip()
            new = list(DEFAULT_SHAPES) if item == "default" else [parse_shape(item)]
            shapes += [s for s in new if s not in shapes]
    return shapes


def main(args: Sequence[str] | None = None) -> int:
    p = parser()
    ns = p.parse_args(args)
    try:
        shapes = parse_shapes(ns.shape, ns.size)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    precisions = split_list(ns.precision, PRECISIONS, "precision")
    if ns.weights_only and not ns.save_weights:
        raise UsageError("--weights-only needs --save-weights DIR")
    out = resolve_models_dir(ns.out)

    from edge.export.quiet import everything_shown, third_party_output_to_log

    with everything_shown() if ns.verbose else third_party_output_to_log() as console:
        return _export(ns, shapes, precisions, out, console)


def _export(
    ns: argparse.Namespace,
    shapes: list[tuple[int, int]],
    precisions: list[str],
    out: Path,
    console: Console,
) -> int:
    from edge.export import require_export_env

    require_export_env()
    from edge.export import convert, weights
    from edge.models import Manifest, check_same_weights, sha256_file

    file = None
    if ns.random_init is None:
        file = weights.resolve_weights_file(
            Path(ns.weights) if ns.weights else weights.download_weights()
        )
    digest = sha256_file(file) if file is not None else None
    if not ns.weights_only:  # a folder of other weights: refused before any work
        provenance = f"sha256:{digest}" if digest else f"random-init:{ns.random_init}"
        check_same_weights(Manifest.load_or_new(out), provenance)
    if file is None:
        console.say(f"weights: random-init:{ns.random_init} (NOT a real model)")
        filled = weights.random_init(ns.random_init)
    else:
        filled = weights.load_official(file, digest=digest)
        console.say(f"weights: {filled.source} ({filled.provenance})")
    if ns.save_weights:
        target = weights.save_official_layout(
            filled.net, Path(ns.save_weights), random_seed=ns.random_init
        )
        console.say(f"saved weights: {target}")
        if ns.weights_only:
            return 0
    result = convert.export(
        filled,
        out,
        shapes,
        precisions,
        verify=not ns.no_verify,
        with_stages=not ns.no_stages,
        progress=console.say,
    )
    console.result(
        f"wrote {len(result.artifacts)} artifacts to {out} in {result.seconds:.0f} s"
        + (" (random-init: not a real model)" if filled.random_init else "")
    )
    return 0
