"""python -m scripts.compare_pytorch: see the package's docstring (``--help``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from edge import bench
from edge.commands import options
from edge.models import LONGEST_SIDE
from scripts.support import ROOT, compare_pytorch
from scripts.support.measured import refuse_dirty

from . import peer, report
from .measure import core_latency, daemon_rounds, gemm_peak, network_flops, still, tool

Contenders = dict[str, tuple[list[str], dict[str, str], bool]]  # name -> argv, env, traced


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=(compare_pytorch.__doc__ or "").splitlines()[0],
        epilog="See `python -c 'import scripts.support.compare_pytorch as c; print(c.__doc__)'`.",
    )
    p.add_argument("--weights", required=True, type=Path)
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--image", type=Path)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--size",
        type=options.size,
        default=LONGEST_SIDE,
        metavar="N",
        help=f"the core's long side for both contenders (DA3's process_res; da3-edge's "
        f"--size, its models exported at N; default {LONGEST_SIDE})",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runtime-python", type=Path, default=ROOT / ".venv" / "bin" / "python")
    p.add_argument("--json", type=Path, help="write the raw results here")
    add_beside(p)
    return p


def add_beside(p: argparse.ArgumentParser) -> None:
    """The options of what is measured beside the stills: the daemon, serve, publish, the
    peer, an earlier revision."""
    p.add_argument(
        "--daemon-frames",
        type=int,
        default=30,
        help="frames to time `da3-edge run` on replayed photos (0: skip)",
    )
    p.add_argument("--daemon-fps", type=float, default=10.0, help="replay rate (camera fps)")
    p.add_argument(
        "--daemon-rounds", type=int, default=3, help="daemon runs, each after its own core timing"
    )
    p.add_argument(
        "--daemon-workers",
        default=[1],
        type=lambda text: sorted({int(w) for w in text.split(",")}),
        help="model.workers values to time the daemon with, comma-separated (1: the default "
        "config, the target's; the threads are shared among the workers)",
    )
    p.add_argument(
        "--serve-rounds", type=int, default=5, help="paired rounds for serve's cost (0: skip)"
    )
    p.add_argument(
        "--no-publish",
        dest="publish",
        action="store_false",
        help="skip the MQTT publisher's figures (they need mosquitto)",
    )
    p.add_argument(
        "--peer",
        type=Path,
        metavar="CLI",
        help="depth-anything.cpp's da3-cli, built locally (scripts/peer/README.md): timed "
        "beside da3-edge in the same rounds",
    )
    p.add_argument(
        "--peer-gguf",
        action="append",
        default=[],
        metavar="PRECISION=FILE",
        help="a GGUF for --peer, e.g. f16=da3-small-f16.gguf (repeat for q8_0)",
    )
    p.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="a checkout of an earlier da3-edge revision: its snap alternates with this one's",
    )


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Path]]:
    """The arguments, checked; the peer's GGUFs by precision."""
    p = parser()
    ns = p.parse_args(argv)
    if 1 not in ns.daemon_workers:
        p.error("--daemon-workers must include 1 (the default config)")
    # Absolute (not resolved: a venv's python is a symlink that must stay one), since
    # the stills run in the work directory.
    for attr in ("weights", "models", "image", "runtime_python", "peer", "before"):
        if getattr(ns, attr) is not None:
            setattr(ns, attr, getattr(ns, attr).absolute())
    ggufs: dict[str, Path] = {}
    for item in ns.peer_gguf:
        precision, sep, file = item.partition("=")
        if not sep or not Path(file).is_file():
            p.error(f"--peer-gguf {item}: expected PRECISION=FILE of an existing file")
        ggufs[precision] = Path(file).absolute()
    if ns.peer and not (ns.peer.is_file() and os.access(ns.peer, os.X_OK)):
        p.error(f"--peer {ns.peer}: not an executable")
    if bool(ns.peer) != bool(ggufs):
        p.error("--peer and --peer-gguf go together")
    if ns.before and not (ns.before / "edge" / "__init__.py").is_file():
        p.error(f"--before {ns.before}: not a da3-edge checkout (no edge/__init__.py)")
    return ns, ggufs


def pytorch_argv(ns: argparse.Namespace, image: Path, work: Path) -> list[str]:
    """The baseline's still, run from the checkout in this (the export) environment."""
    out = str(work / "ref.png")
    module = "scripts.support.compare_pytorch.baseline"
    args = [str(ns.weights), str(image), out, str(ns.threads), str(ns.size)]
    return [sys.executable, "-m", module, *args]


def snap_argv(ns: argparse.Namespace, image: Path, out: Path, *extra: str) -> list[str]:
    """`da3-edge snap` of ``image`` into ``out`` with the runtime environment's Python."""
    argv = [str(ns.runtime_python), "-m", "edge", "snap", str(image), "-o", str(out)]
    argv += ["--models", str(ns.models), "--threads", str(ns.threads), "--size", str(ns.size)]
    return [*argv, *extra]


def contenders(
    ns: argparse.Namespace, ggufs: dict[str, Path], image: Path, work: Path
) -> tuple[Contenders, dict[str, str]]:
    """Every still of a round, and da3-edge's environment (its weight cache in this
    run's own directory)."""
    threads_env = {"OMP_NUM_THREADS": str(ns.threads)}
    edge_env = {**threads_env, "DA3_EDGE_WEIGHT_CACHE": str(work / "xnnpack")}

    def snap(out: str, *extra: str) -> list[str]:
        return snap_argv(ns, image, work / out, *extra)

    found: Contenders = {
        "pytorch": (pytorch_argv(ns, image, work), threads_env, False),
        "da3-edge": (snap("edge"), edge_env, True),
        "da3-edge-numpy": (snap("numpy", "--stages", "numpy"), edge_env, True),
        "da3-edge-cache-off": (snap("off", "--weight-cache", "off"), edge_env, True),
        "da3-edge-int8": (snap("int8", "--precision", "int8"), edge_env, True),
    }
    if ns.before:
        before_env = {**edge_env, "PYTHONPATH": str(ns.before.resolve())}
        found["da3-edge-before"] = (snap("before"), before_env, True)
    for precision, gguf in ggufs.items():
        pfm, png = work / f"peer-{precision}.pfm", work / f"peer-{precision}.png"
        argv = [str(ns.peer), "depth", "--model", str(gguf), "--input", str(image)]
        argv += ["--pfm", str(pfm), "--png", str(png), "--threads", str(ns.threads)]
        found[f"depth-anything.cpp-{precision}"] = (argv, threads_env, False)
    return found, edge_env


def stills(
    ns: argparse.Namespace, ggufs: dict[str, Path], image: Path, work: Path
) -> dict[str, Any]:
    """The weight cache's first stills, then ``--rounds`` rounds of every contender in
    turn (and the peer's first depth map, in a process of its own)."""
    runs, edge_env = contenders(ns, ggufs, image, work)
    first_build = {}
    for precision in ("fp16", "int8"):
        print(f"weight cache: first still, {precision}", file=sys.stderr, flush=True)
        argv = snap_argv(ns, image, work / f"first-{precision}", "--precision", precision)
        first_build[precision] = still(argv, edge_env, trace=True, cwd=work)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    peer_firsts: dict[str, list[dict[str, float]]] = {k: [] for k in ggufs}
    for r in range(ns.rounds):
        for name, (argv, env, traced) in runs.items():
            print(f"round {r + 1}/{ns.rounds}: {name}", file=sys.stderr, flush=True)
            results[name].append(still(argv, env, trace=traced, cwd=work))
        for precision, gguf in ggufs.items():
            peer_firsts[precision].append(peer.peer_first_depth(ns.peer, gguf, image, ns.threads))
    # The stages the default config ran (auto: ExecuTorch where its runner is installed).
    record = json.loads((work / "edge" / f"{image.stem}.json").read_text())
    return {
        "results": results,
        "first_build": first_build,
        "peer_firsts": peer_firsts,
        "default_stages": record["stages"],
    }


def baseline_forward(ns: argparse.Namespace, image: Path, work: Path) -> dict[str, Any]:
    """The baseline's own forward timing (best of 3, after its first run)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(ns.threads)}
    argv = [*pytorch_argv(ns, image, work), "forward"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def companions(ns: argparse.Namespace, work: Path, shape: tuple[int, int]) -> dict[str, Any]:
    """The stage backends side by side at 1 thread and at --threads, serve's and
    publish's costs: each a tool of its own in the runtime environment."""
    python, models = ns.runtime_python, ("--models", str(ns.models))
    stages = {}
    for threads in sorted({1, ns.threads}):
        timed = ("--shape", f"{shape[0]}x{shape[1]}", "--threads", str(threads), "-n", "30")
        stages[str(threads)] = tool(python, "bench_stages", *models, *timed, "--json")
    frames, fps = str(ns.daemon_frames or 30), f"{ns.daemon_fps:g}"
    replayed = ("--frames", frames, "--fps", fps)
    serve = None
    if ns.serve_rounds:
        rounds, out = ("--rounds", str(ns.serve_rounds)), work / "serve.json"
        serve = tool(
            python, "bench_serve", *models, *rounds, *replayed, "--json", str(out), out=out
        )
    publish = None
    if ns.publish and shutil.which("mosquitto"):
        out = work / "publish.json"
        publish = tool(python, "bench_publish", *models, *replayed, "--json", str(out), out=out)
    return {"stages": stages, "serve": serve, "publish": publish}


def summarise(
    ns: argparse.Namespace,
    rounds: dict[str, Any],
    forward: dict[str, Any],
    measured: dict[str, Any],
) -> dict[str, Any]:
    """The JSON: everything measured, and the medians and ratios the table shows."""
    results = rounds["results"]
    cores, flops = measured["cores"], measured["flops"]
    daemon = measured["daemon"]
    still_s = {k: statistics.median(r["seconds"] for r in v) for k, v in results.items()}
    rss = {k: statistics.median(r["peak_rss_mib"] for r in v) for k, v in results.items()}
    summary: dict[str, Any] = {
        "threads": ns.threads,
        "rounds": ns.rounds,
        "size": ns.size,
        "image": str(ns.image or "synthetic 1200x1600 JPEG"),
        "core_shape": list(measured["shape"]),
        "machine": measured["machine"],
        "pytorch_forward_s": forward["forward_s"],
        "flops": flops["core"],
        "reference_flops": flops["reference"],
        "gemm_flops_per_s": measured["gemm"],
        "gemm_peak_flops_per_s": measured["gemm"]["peak"],
        "core_flops_per_s": {k: flops["core"] / v for k, v in cores.items()},
        # The default config (one worker) is the target's; other --daemon-workers beside.
        "daemon": daemon.get(1),
        "daemon_workers": {str(w): d for w, d in daemon.items() if w != 1},
        **measured["companions"],
        "core_s": cores,
        "core_ratio": {k: v / forward["forward_s"] for k, v in cores.items()},
        "still_s": still_s,
        "still_peak_rss_mib": rss,
        "default_stages": rounds["default_stages"],
        "raw": results,
    }
    for span in ("load_ms", "to_depth_ms"):
        got = {k: [r[span] for r in v if r.get(span) is not None] for k, v in results.items()}
        summary[span] = {k: statistics.median(v) for k, v in got.items() if v}
    summary["weight_cache_first"] = rounds["first_build"]
    summary["still_ratio"] = {k: v / still_s["pytorch"] for k, v in still_s.items()}
    summary["rss_ratio"] = {k: v / rss["pytorch"] for k, v in rss.items()}
    return summary


def before(ns: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """This revision's still against ``--before``'s, round by round."""
    pairs = [
        new["seconds"] / old["seconds"]
        for new, old in zip(results["da3-edge"], results["da3-edge-before"], strict=True)
    ]
    revision = peer.git_revision(ns.before)
    return {
        "dir": str(ns.before),
        "revision": revision,
        "ratios": pairs,
        "median_ratio": statistics.median(pairs),
    }


def main(argv: list[str] | None = None) -> int:
    ns, ggufs = parse(argv)
    refuse_dirty(ns.json)
    machine = bench.machine_info()  # the checkout as measured: before, not after, the run
    work = Path(tempfile.mkdtemp(prefix="da3-compare-"))
    image = ns.image or work / "photo.jpg"
    if ns.image is None:
        image.write_bytes(bench.synthetic_jpeg())
    rounds = stills(ns, ggufs, image, work)
    forward = baseline_forward(ns, image, work)
    shape = (forward["shape"][-2], forward["shape"][-1])
    measured = {
        "machine": machine,
        "shape": shape,
        "cores": core_latency(ns.models, ns.threads, shape),
        "flops": network_flops(shape),
        "gemm": gemm_peak(ns.threads),
        "daemon": daemon_rounds(ns, work, shape) if ns.daemon_frames else {},
        "companions": companions(ns, work, shape),
    }
    summary = summarise(ns, rounds, forward, measured)
    summary["peer"] = {"measured": False, "reason": "no --peer given"}
    if ns.peer:
        summary["peer"] = peer.summary(ns.peer, ggufs, rounds["peer_firsts"], work, image)
    if ns.before:
        summary["before"] = before(ns, rounds["results"])
    if ns.json:
        ns.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(report.render(summary))
    return 0
