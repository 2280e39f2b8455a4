"""``da3-edge bench``: how fast and how big, on this machine, with these models.

Per configuration (precision x stages backend x threads): warm-up, then N full
passes over one image (decode, preprocess, core, postprocess, write), p50/p90/p99,
images/s and the per-stage p50; the load time (manifest, hash check, model open);
and once per precision the cold start and peak RSS of a fresh ``da3-edge snap``
process on the same image. ``--json`` adds the raw samples, the machine (CPU model
and features; on a Pi, temperature and throttling), versions and git revision.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edge.commands import options
from edge.errors import UsageError
from edge.models import PRECISIONS, Manifest, resolve_models_dir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge bench",
        description="Benchmark the pipeline: latency per stage, load and cold start, "
        "peak RSS, for every exported size and precision, both stage backends and a thread sweep.",
    )
    options.add_models(p)
    p.add_argument(
        "--image", metavar="PATH", help="input image (default: a synthetic 1200x1600 JPEG)"
    )
    p.add_argument(
        "-n",
        "--iterations",
        type=int,
        default=10,
        metavar="N",
        help="timed runs per configuration (default 10)",
    )
    p.add_argument(
        "--warmup", type=int, default=2, metavar="N", help="untimed runs first (default 2)"
    )
    p.add_argument(
        "--threads",
        default=None,
        metavar="LIST",
        help="thread counts to sweep, e.g. 1,2,4 (default: 1 and all cores up to 4)",
    )
    p.add_argument(
        "--precision",
        default=None,
        metavar="LIST",
        help="precisions (default: every one installed)",
    )
    p.add_argument(
        "--size",
        default=None,
        metavar="LIST",
        help="core sizes (long sides), e.g. 504,280 (default: every one exported)",
    )
    p.add_argument(
        "--stages",
        default="numpy,executorch",
        metavar="LIST",
        help="stage backends (default: numpy,executorch; unavailable ones are reported, not fatal)",
    )
    p.add_argument(
        "--no-cold",
        action="store_true",
        help="skip the fresh-process cold start / peak RSS measurement",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON with raw samples instead of the table"
    )
    return p


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{what} must be a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{what} must be positive")
    return values


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    from edge import bench, platform

    if ns.iterations < 1 or ns.warmup < 0:
        raise UsageError("--iterations must be at least 1 and --warmup at least 0")
    models = resolve_models_dir(ns.models)
    manifest = Manifest.load(models)
    precisions, sizes = _installed(manifest, models, ns.precision, ns.size)
    cores = platform.cpu_features().cores
    threads = _ints(ns.threads, "--threads") if ns.threads else sorted({1, min(4, cores)})
    stage_names = options.split_list(ns.stages, options.STAGES, "stages backend")
    if ns.image:
        image = Path(ns.image).read_bytes()
        image_label = ns.image
    else:
        image = bench.synthetic_jpeg()
        image_label = "synthetic 1200x1600 JPEG"
    random_init = any(a.random_init for a in manifest.cores())

    runs: list[bench.RunResult] = []
    configs = [
        (z, p, st, t) for z in sizes for p in precisions for st in stage_names for t in threads
    ]
    for n, (size, precision, stages, t) in enumerate(configs, 1):
        print(
            f"[{n}/{len(configs)}] size {size} {precision} {stages} threads={t}...",
            file=sys.stderr,
            flush=True,
        )
        runs.append(
            bench.run_pipeline(
                models, image, precision, stages, t, ns.iterations, ns.warmup, size=size
            )
        )
    cold = {} if ns.no_cold else _cold(models, image, sizes, precisions)
    data: dict[str, Any] = {
        "image": image_label,
        "models": str(models),
        "random_init": random_init,
        "iterations": ns.iterations,
        "warmup": ns.warmup,
        "machine": bench.machine_info(),
        "runs": [r.summary() | ({"samples_ms": r.samples_ms} if ns.json else {}) for r in runs],
        "cold_still": cold,
    }
    if ns.json:
        sys.stdout.write(bench.to_json(data))
        return 0
    print(render_table(data))
    return 0


def _installed(
    manifest: Manifest, models: Path, precision: str | None, size: str | None
) -> tuple[list[str], list[int]]:
    """The precisions and sizes asked for (all installed ones when not), largest size
    first; UsageError naming what is installed when one is not."""
    installed = sorted({a.precision for a in manifest.cores()}, key=PRECISIONS.index)
    precisions = installed
    if precision is not None:
        precisions = options.split_list(precision, PRECISIONS, "precision")
    for p in precisions:
        if p not in installed:
            raise UsageError(
                f"precision {p!r} is not installed in {models} (have {', '.join(installed)})"
            )
    sizes = manifest.sizes()
    if size is None:
        return precisions, sorted(sizes, reverse=True)
    asked = options.split_sizes(size)
    missing = [str(v) for v in asked if v not in sizes]
    if missing:
        raise UsageError(
            f"size {', '.join(missing)} is not exported in {models} "
            f"(have {', '.join(map(str, sizes))}; `da3-edge models build --size N` makes one)"
        )
    return precisions, sorted(asked, reverse=True)


def _cold(
    models: Path, image: bytes, sizes: list[int], precisions: list[str]
) -> dict[str, dict[str, Any]]:
    """Fresh ``snap`` processes per size and precision: the weight cache off, then its
    first run (building it, in a directory of its own) and a warm one (the default from
    then on). Keyed by size (a string: JSON's keys are), then precision, then mode."""
    from edge import bench

    cold: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="da3-edge-cold-") as tmp:
        src = Path(tmp) / "image.jpg"
        src.write_bytes(image)
        for size in sizes:
            for precision in precisions:
                print(
                    f"cold start: snap --size {size} --precision {precision}...",
                    file=sys.stderr,
                    flush=True,
                )
                flags = ["--models", str(models), "--precision", precision, "--size", str(size)]
                argv = [sys.executable, "-m", "edge", "snap", str(src), "-o", tmp, *flags]
                fresh = str(Path(tmp) / f"cache-{size}-{precision}")
                cold.setdefault(str(size), {})[precision] = {
                    mode: bench.cold_still([*argv, "--weight-cache", cache], trace=True)
                    for mode, cache in (("off", "off"), ("first", fresh), ("warm", fresh))
                }
    return cold


COLUMNS = ("decode", "preprocess", "core", "postprocess", "write")


def _features(cpu: dict[str, Any]) -> str:
    names = [k for k in ("fp16", "dotprod", "i8mm", "sme") if cpu[k]]
    return ", ".join(names) or "none of fp16/dotprod/i8mm/sme"


def _row(run: dict[str, Any]) -> str:
    shape = "x".join(map(str, run["shape"])) if run.get("shape") else str(run["size"])
    key = f"{shape:<7} {run['precision']:<9} {run['stages']:<10} {run['threads']:>3}"
    if "error" in run:
        return f"{key}  unavailable: {run['error']}"
    t, st = run["total_ms"], run["stage_p50_ms"]
    totals = f"{run['load_ms']:>7.0f} {t['p50']:>7.1f} {t['p90']:>7.1f} {t['p99']:>7.1f}"
    stages = " ".join(f"{st[s]:>7.1f}" for s in COLUMNS)
    return f"{key} {totals} {run['images_per_s']:>6.2f}   {stages}"


def render_table(data: dict[str, Any]) -> str:
    m = data["machine"]
    cpu = m["cpu"]
    lines = [
        f"da3-edge {m['da3_edge']} ({m['git_revision']}) on {cpu['model']} "
        f"({cpu['machine']}, {cpu['cores']} cores; {_features(cpu)})",
        f"image: {data['image']}; {data['iterations']} runs after {data['warmup']} warm-up"
        + ("; RANDOM-INIT models (speed only)" if data["random_init"] else ""),
    ]
    if "temperature_c" in m:
        throttled = f", {m['throttled']}" if "throttled" in m else ""
        lines.append(f"temperature {m['temperature_c']:.1f} C{throttled}")
    lines.append("")
    head = (
        f"{'shape':<7} {'precision':<9} {'stages':<10} {'thr':>3} {'load':>7} {'p50':>7} "
        f"{'p90':>7} {'p99':>7}"
    )
    head += f" {'img/s':>6}   " + " ".join(
        f"{s[:7]:>7}" for s in ("decode", "pre", "core", "post", "write")
    )
    lines += [head + "   (ms)", "-" * len(head)]
    lines += [_row(run) for run in data["runs"]]
    if data["cold_still"]:
        lines += [
            "",
            "cold still (a fresh `da3-edge snap` process, one image; load: the model's",
            "open to ready, in that process; weight cache off, its first run, warm):",
            f"{'size':<5} {'precision':<9} {'cache':<6} {'seconds':>7} {'peak RSS':>9} {'load':>7}",
        ]
        for size, by_precision in data["cold_still"].items():
            for p, modes in by_precision.items():
                for mode, v in modes.items():
                    load = f"{v['load_ms']:>4.0f} ms" if v.get("load_ms") is not None else "-"
                    lines.append(
                        f"{size:<5} {p:<9} {mode:<6} {v['seconds']:>5.2f} s "
                        f"{v['peak_rss_mib']:>5.0f} MiB {load:>7}"
                    )
    return "\n".join(lines)
