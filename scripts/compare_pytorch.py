#!/usr/bin/env python3
"""da3-edge against the PyTorch reference, side by side, in one run.

Run it with the export environment (it needs torch and depth_anything_3):

    .venv-export/bin/python scripts/compare_pytorch.py --weights DIR --models DIR \\
        [--image photo.jpg] [--threads 2] [--rounds 3] [--json out.json]

DIR for --weights is a release-layout folder (config.json + model.safetensors: the real
release, or seeded random weights from `da3-edge export --random-init 0 --save-weights
DIR --weights-only`); --models holds da3-edge models exported from the same weights.

Measured, alternating the contenders round by round, each in a fresh process:

- baseline (a): the depth_anything_3 network built with cfg.create_object, weights
  from the safetensors file, DA3's own preprocessing (its InputProcessor), a plain
  fp32 forward (no autocast), depth resized to the photo and written as a 16-bit PNG,
  torch.set_num_threads(--threads). Reports its forward time too (best of 3).
- da3-edge (b): `da3-edge snap` in its default configuration (numpy stages, fp16,
  default outputs) from the runtime env (--runtime-python, default .venv), and the same
  with `--stages executorch` (the torch-free runner: `da3-edge install-executorch`).
- stages: scripts/bench-stages.py in the runtime env, numpy and ExecuTorch stages
  alternating call by call, at 1 thread and at --threads.
- core: LiteRT fp32 / fp16 / int8 core latency (best of 5 after warm-up) in this process,
  against the baseline's forward time, at the same thread count.
- daemon: `da3-edge run` on replayed 1200x1600 JPEGs (default config, and each other
  --daemon-workers value), sustained frames/s against 1 / the fp16 core's latency
  timed just before (--daemon-rounds rounds, the median reported).
- serve: scripts/bench-serve.py in the runtime env: the daemon with `da3-edge serve`
  and a page-like client against the daemon alone (--serve-rounds paired rounds),
  serve's CPU-ms per frame, peak RSS, and the `latest` switch to /events delay.
- publish: scripts/bench-publish.py (needs mosquitto): `da3-edge publish`'s CPU-ms per
  message with the preview off and on, and the `latest` switch to `state` delay.
- start-up: every da3-edge still is traced (DA3_EDGE_TRACE), so its model load (core
  open -> ready) is reported; the XNNPACK weight cache lives in this run's own directory,
  built by one still per precision before the rounds (its "first" load reported apart),
  and `snap --weight-cache off` and `snap --precision int8` run in the rounds too.
- peer (--peer CLI --peer-gguf PRECISION=FILE ...): depth-anything.cpp's `da3-cli depth`
  (a C++/ggml port; build and GGUFs: scripts/peer/README.md) in the same rounds: its
  still (PFM + PNG at the processing size, which is less than da3-edge writes) and, in a
  process of its own, its model load and first inference as it reports them (`--repeat
  1`; beside da3-edge's trace from the pipeline loaded to the core's run); its depth is
  checked against da3-edge's (log-depth Pearson), so both ran the same weights. Without
  --peer the JSON says the peer was not measured.
- before (--before DIR): `da3-edge snap` from a checkout of an earlier revision
  (PYTHONPATH=DIR, same runtime env) alternating with this one: the per-round ratio
  new / before and its median.

Prints a table; --json writes the raw numbers (scripts/gen-performance-table.py turns
that JSON into the table in docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINE = r"""
import json, sys, time
t0 = time.perf_counter()
import cv2, numpy as np, torch
sys.path.insert(0, sys.argv[5])
import importlib.util
spec = importlib.util.spec_from_file_location("refpre", sys.argv[5] + "/reference-preprocess.py")
refpre = importlib.util.module_from_spec(spec); spec.loader.exec_module(refpre)
refpre.ensure_torchvision()
from depth_anything_3.cfg import create_object, load_config
from depth_anything_3.registry import MODEL_REGISTRY
from depth_anything_3.utils.io.input_processor import InputProcessor
from safetensors.torch import load_file
weights, image, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
net = create_object(load_config(MODEL_REGISTRY["da3-small"])).eval()
state = {k.removeprefix("model."): v for k, v in load_file(weights + "/model.safetensors").items()}
net.load_state_dict(state, strict=False)
t_loaded = time.perf_counter()
bgr = cv2.imread(image, cv2.IMREAD_COLOR)
rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
x, _, _, _ = InputProcessor()._process_one(rgb, process_res=504, process_res_method="upper_bound_resize")
with torch.no_grad():
    t1 = time.perf_counter()
    depth = net(x[None, None]).depth[0, 0].numpy()
    first = time.perf_counter() - t1
h, w = rgb.shape[:2]
depth = cv2.resize(depth, (w, h), interpolation=cv2.INTER_LINEAR)
inv = 1.0 / np.maximum(depth, 1e-12)
inv = (inv - inv.min()) / max(inv.max() - inv.min(), 1e-12)
cv2.imwrite(out, np.round(inv * 65535).astype(np.uint16))
t_done = time.perf_counter()
forwards = []
if len(sys.argv) > 6 and sys.argv[6] == "forward":
    with torch.no_grad():
        for _ in range(3):
            t = time.perf_counter(); net(x[None, None]); forwards.append(time.perf_counter() - t)
print(json.dumps({"total_in_process_s": t_done - t0, "load_s": t_loaded - t0, "first_forward_s": first,
                  "forward_s": min(forwards) if forwards else None, "shape": list(x.shape)}))
"""


def _with_env(
    argv: list[str], env: dict[str, str], trace: bool = False, cwd: Path | None = None
) -> dict[str, Any]:
    """``bench.cold_still`` with ``env`` added. ``cwd``: run there (``python -m edge``
    puts its working directory first on sys.path, ahead of PYTHONPATH)."""
    from edge import bench

    old = dict(os.environ)
    os.environ.update(env)
    try:
        return bench.cold_still(argv, cwd=cwd, trace=trace)
    finally:
        os.environ.clear()
        os.environ.update(old)


def peer_first_depth(cli: Path, gguf: Path, image: Path, threads: int) -> dict[str, float]:
    """depth-anything.cpp's model load and first depth map, as its bench hook prints
    them (``--repeat 1``: ``load=...ms infer=...ms/iter``). Its load reads the GGUF and
    places the weights; its graphs are built inside each inference, so ``to_depth_ms``
    (load + the first inference, which decodes and preprocesses the image) is the
    like-for-like figure to da3-edge's."""
    argv = [str(cli), "depth", "--model", str(gguf), "--input", str(image),
            "--threads", str(threads), "--repeat", "1"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    found = {}
    for word in proc.stdout.split():
        key, _, value = word.partition("=")
        if key in ("load", "infer") and value.endswith(("ms", "ms/iter")):
            found[f"{key}_ms"] = float(value.split("ms")[0])
    if len(found) != 2:
        raise SystemExit(f"{cli}: no load=/infer= in its output ({proc.stderr.strip()[-300:]})")
    return {**found, "to_depth_ms": found["load_ms"] + found["infer_ms"]}


def read_pfm(path: Path) -> Any:
    """A PFM file (greyscale ``Pf``) as a top-down float32 array."""
    import numpy as np

    with path.open("rb") as fh:
        kind = fh.readline().strip()
        w, h = (int(v) for v in fh.readline().split())
        scale = float(fh.readline())
        data = np.frombuffer(fh.read(), dtype="<f4" if scale < 0 else ">f4")
    if kind != b"Pf" or data.size != w * h:
        raise SystemExit(f"{path}: not a greyscale PFM")
    return data.reshape(h, w)[::-1].astype(np.float32)


def peer_agreement(peer_pfm: Path, ours_npz: Path) -> float:
    """Pearson correlation of log-depth, the peer's map (at the processing size)
    resized to ours with Pillow's bilinear filter (what da3-edge's postprocess uses)."""
    import numpy as np
    from PIL import Image

    ours = np.load(ours_npz)["depth"]
    theirs = read_pfm(peer_pfm)
    up = Image.fromarray(theirs, mode="F").resize(ours.shape[::-1], Image.Resampling.BILINEAR)
    a = np.log(np.maximum(ours, 1e-12)).ravel()
    b = np.log(np.maximum(np.asarray(up), 1e-12)).ravel()
    return float(np.corrcoef(a, b)[0, 1])


def git_revision(directory: Path) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return proc.stdout.strip() or None


def peer_source(cli: Path) -> str | None:
    """What scripts/peer/build.sh recorded the CLI was built from (``CLI.source``)."""
    record = cli.with_name(cli.name + ".source")
    return record.read_text().strip() if record.is_file() else git_revision(cli.parent)


def core_latency(
    models: Path, threads: int, shape: tuple[int, int], only: str | None = None
) -> dict[str, float]:
    """Best of 5 runs after 2 warm-ups, per precision (or ``only`` that one)."""
    import numpy as np

    from edge.core import Core
    from edge.models import Manifest

    manifest = Manifest.load(models)
    x = np.random.default_rng(0).standard_normal((1, 3, *shape)).astype(np.float32)
    out = {}
    for artifact in manifest.cores():
        if artifact.shape != shape or (only and artifact.precision != only):
            continue
        with Core(manifest.verify(artifact), threads=threads, precision=artifact.precision) as core:
            core.run(x)
            core.run(x)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                core.run(x)
                times.append(time.perf_counter() - t)
        out[artifact.precision] = min(times)
    return out


def network_flops(shape: tuple[int, int]) -> dict[str, float]:
    """FLOPs (2 per multiply-add) of what the core computes: the export wrapper
    (edge/export/mono.py) at ``shape``, counted by torch's FlopCounterMode with the
    math attention kernel (the fused CPU kernel is not counted: 17 GFLOP missing at
    378x504); and of the reference forward, which also computes DA3's ray head."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from edge.export.mono import MonoDepth
    from edge.export.weights import build_network

    net = build_network()
    x = torch.zeros(1, 3, *shape)
    out = {}
    for name, module, arg in (
        ("core", MonoDepth(net, *shape).eval(), x),
        ("reference", net, x[None]),
    ):
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
            module(arg)
        out[name] = float(c.get_total_flops())
    return out


def gemm_peak(threads: int) -> dict[str, float]:
    """This machine's fp32 GEMM rate at ``threads``: XNNPACK (through LiteRT: what the
    core uses) on a 1024x2048x2048 product, and torch.mm on squares; best of 10."""
    import torch

    torch.set_num_threads(threads)
    best_mm = 0.0
    for n in (1024, 2048, 4096):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        for _ in range(3):
            t = time.perf_counter()
            torch.mm(a, b)
            best_mm = max(best_mm, 2 * n**3 / (time.perf_counter() - t))

    import litert_torch
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import CpuOptions, Options

    m, k, n = 1024, 2048, 2048
    x = torch.randn(m, k)
    path = Path(tempfile.mkdtemp(prefix="da3-gemm-")) / "gemm.tflite"
    litert_torch.config.show_progress = False
    litert_torch.convert(torch.nn.Linear(k, n, bias=False).eval(), (x,)).export(str(path))
    cpu = CpuOptions(num_threads=threads)
    model = CompiledModel.from_file(
        str(path), options=Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=cpu)
    )
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    inputs[0].write(x.numpy())
    best_xnn = 0.0
    for _ in range(10):
        t = time.perf_counter()
        model.run_by_index(0, inputs, outputs)
        best_xnn = max(best_xnn, 2 * m * k * n / (time.perf_counter() - t))
    return {"xnnpack": best_xnn, "torch_mm": best_mm, "peak": max(best_xnn, best_mm)}


def daemon_fps(
    python: Path,
    models: Path,
    threads: int,
    work: Path,
    frames: int,
    warmup: int,
    fps: float,
    workers: int = 1,
) -> dict[str, float]:
    """`da3-edge run` (default config: fp16, numpy stages, all four outputs) on replayed
    1200x1600 JPEGs delivered at ``fps``; sustained frames/s over the frames written
    after ``warmup``, from the store's own frame.json timestamps. With ``workers`` > 1
    (``model.workers``), the ``threads`` are shared among the workers."""
    from edge import bench

    replay = work / "replay"
    replay.mkdir()
    for i in range(4):
        (replay / f"{i:02d}.jpg").write_bytes(bench.synthetic_jpeg(seed=i))
    # The store on a tmpfs, as the daemon's default store is (/run/da3-edge, systemd's
    # RuntimeDirectory) when one is at hand; else the work directory (said in the JSON).
    tmpfs = bench.tmpfs_dir()
    store = Path(tempfile.mkdtemp(prefix="da3-compare-store-", dir=tmpfs or work)) / "store"
    # The default config, except a ring big enough to keep every frame for counting
    # (the default 256 MiB holds ~13 of these 19 MB frames).
    config = work / "daemon.toml"
    config.write_text(
        f"[model]\nworkers = {workers}\n"
        f"[store]\nkeep_frames = {warmup + frames}\nmax_bytes = {(warmup + frames) << 25}\n"
    )
    argv = [
        str(python),
        "-m",
        "edge",
        "run",
        "--config",
        str(config),
        "--source",
        f"replay:{replay}@{fps:g}",
        "--store",
        str(store),
        "--models",
        str(models),
        "--threads",
        str(max(1, threads // workers)),
        "--max-frames",
        str(warmup + frames),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"da3-edge run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    records = sorted(
        (json.loads(p.read_text()) for p in (store / "frames").glob("*/frame.json")),
        key=lambda r: r["store_seq"],
    )
    shutil.rmtree(store.parent, ignore_errors=True)
    steady = [r for r in records if r["store_seq"] >= warmup]
    if len(steady) < 2:
        raise SystemExit(f"da3-edge run wrote {len(records)} frames; too few to measure")
    span = steady[-1]["t_written"] - steady[0]["t_written"]
    return {
        "frames": len(steady),
        "replay_fps": fps,
        "fps": (len(steady) - 1) / span,
        "latency_p50_ms": statistics.median(r["latency_ms"] for r in steady),
        "dropped_stale": steady[-1]["dropped_stale_total"],
        "precision": steady[-1]["precision"],
        "workers": steady[-1]["workers"],
        "threads_per_worker": steady[-1]["threads"],
        "store": "tmpfs" if tmpfs else "disk",
    }


def daemon_rounds(
    ns: argparse.Namespace, work: Path, shape: tuple[int, int]
) -> dict[int, dict[str, Any]]:
    """The daemon target: sustained frames/s >= 0.8 x (1 / core latency), same precision
    and threads; per ``--daemon-workers`` value (1 is the default config).

    Each round measures the core's latency right before its daemon runs, so the ratio
    compares them in the same minute (this machine's speed drifts by several % over
    minutes); the summary is the median round."""
    rounds: dict[int, list[dict[str, Any]]] = {w: [] for w in ns.daemon_workers}
    for r in range(ns.daemon_rounds):
        print(f"daemon round {r + 1}/{ns.daemon_rounds}", file=sys.stderr, flush=True)
        core_s = core_latency(ns.models, ns.threads, shape, only="fp16")["fp16"]
        for workers in ns.daemon_workers:
            run = work / f"daemon{r}-{workers}"
            run.mkdir()
            d = daemon_fps(
                ns.runtime_python, ns.models, ns.threads, run, ns.daemon_frames, 3,
                ns.daemon_fps, workers,
            )  # fmt: skip
            if d["precision"] != "fp16":
                raise SystemExit(f"the daemon ran {d['precision']}, not its default fp16")
            rounds[workers].append({**d, "core_s": core_s, "ratio_to_core_rate": d["fps"] * core_s})
    out = {}
    for workers, runs in rounds.items():
        ratios = [r["ratio_to_core_rate"] for r in runs]
        middle = sorted(runs, key=lambda r: r["ratio_to_core_rate"])[len(runs) // 2]
        out[workers] = {**middle, "rounds": runs, "ratio_range": [min(ratios), max(ratios)]}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", required=True, type=Path)
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--image", type=Path)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runtime-python", type=Path, default=ROOT / ".venv" / "bin" / "python")
    p.add_argument("--json", type=Path, help="write the raw results here")
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
        type=lambda text: sorted({int(w) for w in text.split(",")}),
        default=[1],
        help="model.workers values to time the daemon with, comma-separated (1: the default "
        "config, the target's; the threads are shared among the workers)",
    )
    p.add_argument(
        "--serve-rounds", type=int, default=5, help="paired rounds for serve's cost (0: skip)"
    )
    p.add_argument(
        "--no-publish", dest="publish", action="store_false",
        help="skip the MQTT publisher's figures (they need mosquitto)",
    )  # fmt: skip
    p.add_argument(
        "--peer", type=Path, metavar="CLI",
        help="depth-anything.cpp's da3-cli, built locally (scripts/peer/README.md): timed "
        "beside da3-edge in the same rounds",
    )  # fmt: skip
    p.add_argument(
        "--peer-gguf", action="append", default=[], metavar="PRECISION=FILE",
        help="a GGUF for --peer, e.g. f16=da3-small-f16.gguf (repeat for q8_0)",
    )  # fmt: skip
    p.add_argument(
        "--before", type=Path, metavar="DIR",
        help="a checkout of an earlier da3-edge revision: its snap alternates with this one's",
    )  # fmt: skip
    ns = p.parse_args()
    if 1 not in ns.daemon_workers:
        p.error("--daemon-workers must include 1 (the default config)")
    # Absolute (not resolved: a venv's python is a symlink that must stay one), since
    # the stills run in the work directory.
    for attr in ("weights", "models", "image", "runtime_python", "peer", "before"):
        if getattr(ns, attr) is not None:
            setattr(ns, attr, getattr(ns, attr).absolute())
    peer_ggufs: dict[str, Path] = {}
    for item in ns.peer_gguf:
        precision, sep, file = item.partition("=")
        if not sep or not Path(file).is_file():
            p.error(f"--peer-gguf {item}: expected PRECISION=FILE of an existing file")
        peer_ggufs[precision] = Path(file).absolute()
    if ns.peer and not (ns.peer.is_file() and os.access(ns.peer, os.X_OK)):
        p.error(f"--peer {ns.peer}: not an executable")
    if bool(ns.peer) != bool(peer_ggufs):
        p.error("--peer and --peer-gguf go together")
    if ns.before and not (ns.before / "edge" / "__init__.py").is_file():
        p.error(f"--before {ns.before}: not a da3-edge checkout (no edge/__init__.py)")

    from edge import bench

    work = Path(tempfile.mkdtemp(prefix="da3-compare-"))
    image = ns.image or work / "photo.jpg"
    if ns.image is None:
        image.write_bytes(bench.synthetic_jpeg())
    threads_env = {"OMP_NUM_THREADS": str(ns.threads)}
    # da3-edge's weight cache in this run's own directory: built once per precision
    # below, before the rounds, so every round's still finds it warm.
    edge_env = {**threads_env, "DA3_EDGE_WEIGHT_CACHE": str(work / "xnnpack")}

    def snap(out: str, *extra: str) -> list[str]:
        return [
            str(ns.runtime_python), "-m", "edge", "snap", str(image), "-o", str(work / out),
            "--models", str(ns.models), "--threads", str(ns.threads), *extra,
        ]  # fmt: skip

    pytorch = [
        sys.executable, "-c", BASELINE, str(ns.weights), str(image), str(work / "ref.png"),
        str(ns.threads), str(ROOT / "scripts"),
    ]  # fmt: skip
    # name -> (argv, environment, traced)
    contenders: dict[str, tuple[list[str], dict[str, str], bool]] = {
        "pytorch": (pytorch, threads_env, False),
        "da3-edge": (snap("edge"), edge_env, True),
        "da3-edge-executorch": (snap("et", "--stages", "executorch"), edge_env, True),
        "da3-edge-cache-off": (snap("off", "--weight-cache", "off"), edge_env, True),
        "da3-edge-int8": (snap("int8", "--precision", "int8"), edge_env, True),
    }
    if ns.before:
        before_env = {**edge_env, "PYTHONPATH": str(ns.before.resolve())}
        contenders["da3-edge-before"] = (snap("before"), before_env, True)
    for precision, gguf in peer_ggufs.items():
        argv = [str(ns.peer), "depth", "--model", str(gguf), "--input", str(image),
                "--pfm", str(work / f"peer-{precision}.pfm"),
                "--png", str(work / f"peer-{precision}.png"), "--threads", str(ns.threads)]  # fmt: skip
        contenders[f"depth-anything.cpp-{precision}"] = (argv, threads_env, False)

    first_build = {}
    for precision in ("fp16", "int8"):
        print(f"weight cache: first still, {precision}", file=sys.stderr, flush=True)
        argv = snap(f"first-{precision}", "--precision", precision)
        first_build[precision] = _with_env(argv, edge_env, trace=True, cwd=work)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in contenders}
    peer_firsts: dict[str, list[dict[str, float]]] = {k: [] for k in peer_ggufs}
    for r in range(ns.rounds):
        for name, (argv, env, traced) in contenders.items():
            print(f"round {r + 1}/{ns.rounds}: {name}", file=sys.stderr, flush=True)
            results[name].append(_with_env(argv, env, trace=traced, cwd=work))
        for precision, gguf in peer_ggufs.items():
            peer_firsts[precision].append(peer_first_depth(ns.peer, gguf, image, ns.threads))
    # The baseline's own forward timing (best of 3, after its first run).
    proc = subprocess.run(
        [*pytorch, "forward"],
        capture_output=True,
        text=True,
        env={**os.environ, **threads_env},
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    baseline = json.loads(proc.stdout.strip().splitlines()[-1])
    shape = (baseline["shape"][-2], baseline["shape"][-1])
    cores = core_latency(ns.models, ns.threads, shape)
    flops = network_flops(shape)
    gemm = gemm_peak(ns.threads)
    daemon: dict[int, dict[str, Any]] = {}
    if ns.daemon_frames:
        daemon = daemon_rounds(ns, work, shape)

    # The two stage backends side by side (scripts/bench-stages.py, runtime env: the
    # ExecuTorch stages on da3-edge's runner), at 1 thread and at --threads.
    stage_costs: dict[str, Any] = {}
    for threads in sorted({1, ns.threads}):
        argv = [
            str(ns.runtime_python), str(ROOT / "scripts" / "bench-stages.py"),
            "--models", str(ns.models), "--shape", f"{shape[0]}x{shape[1]}",
            "--threads", str(threads), "-n", "30", "--json",
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench-stages.py failed: {proc.stderr[-2000:]}")
        stage_costs[str(threads)] = json.loads(proc.stdout)

    serve: dict[str, Any] | None = None
    if ns.serve_rounds:
        out = work / "serve.json"
        argv = [
            str(ns.runtime_python), str(ROOT / "scripts" / "bench-serve.py"),
            "--models", str(ns.models), "--rounds", str(ns.serve_rounds),
            "--frames", str(ns.daemon_frames or 30), "--fps", f"{ns.daemon_fps:g}",
            "--json", str(out),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench-serve.py failed: {proc.stderr[-2000:]}")
        serve = json.loads(out.read_text())
    publish: dict[str, Any] | None = None
    if ns.publish and shutil.which("mosquitto"):
        out = work / "publish.json"
        argv = [
            str(ns.runtime_python), str(ROOT / "scripts" / "bench-publish.py"),
            "--models", str(ns.models), "--frames", str(ns.daemon_frames or 30),
            "--fps", f"{ns.daemon_fps:g}", "--json", str(out),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench-publish.py failed: {proc.stderr[-2000:]}")
        publish = json.loads(out.read_text())

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    summary = {
        "threads": ns.threads,
        "rounds": ns.rounds,
        "image": str(ns.image or "synthetic 1200x1600 JPEG"),
        "core_shape": list(shape),
        "machine": bench.machine_info(),
        "pytorch_forward_s": baseline["forward_s"],
        "flops": flops["core"],
        "reference_flops": flops["reference"],
        "gemm_flops_per_s": gemm,
        "gemm_peak_flops_per_s": gemm["peak"],
        "core_flops_per_s": {k: flops["core"] / v for k, v in cores.items()},
        # The default config (one worker) is the target's; other --daemon-workers beside.
        "daemon": daemon.get(1),
        "daemon_workers": {str(w): d for w, d in daemon.items() if w != 1},
        "serve": serve,
        "publish": publish,
        "stages": stage_costs,
        "core_s": cores,
        "core_ratio": {k: v / baseline["forward_s"] for k, v in cores.items()},
        "still_s": {k: med(k, "seconds") for k in results},
        "still_peak_rss_mib": {k: med(k, "peak_rss_mib") for k in results},
        "raw": results,
    }
    for span in ("load_ms", "to_depth_ms"):
        got = {k: [r[span] for r in v if r.get(span) is not None] for k, v in results.items()}
        summary[span] = {k: statistics.median(v) for k, v in got.items() if v}
    summary["weight_cache_first"] = first_build
    summary["peer"] = {"measured": False, "reason": "no --peer given"}
    if ns.peer:
        summary["peer"] = {
            "measured": True,
            "cli": str(ns.peer),
            "source": peer_source(ns.peer),
            "ggufs": {
                k: {"file": str(v), "bytes": v.stat().st_size} for k, v in peer_ggufs.items()
            },
            **{
                span: {k: statistics.median(r[span] for r in v) for k, v in peer_firsts.items()}
                for span in ("load_ms", "to_depth_ms")
            },
            "first_depth_raw": peer_firsts,
            # The same weights on both sides, shown: the last round's outputs.
            "log_depth_pearson": {
                k: peer_agreement(work / f"peer-{k}.pfm", work / "edge" / f"{image.stem}.npz")
                for k in peer_ggufs
            },
        }
    if ns.before:
        pairs = [
            new["seconds"] / old["seconds"]
            for new, old in zip(results["da3-edge"], results["da3-edge-before"], strict=True)
        ]
        summary["before"] = {
            "dir": str(ns.before),
            "revision": git_revision(ns.before),
            "ratios": pairs,
            "median_ratio": statistics.median(pairs),
        }
    summary["still_ratio"] = {
        k: summary["still_s"][k] / summary["still_s"]["pytorch"] for k in results
    }
    summary["rss_ratio"] = {
        k: summary["still_peak_rss_mib"][k] / summary["still_peak_rss_mib"]["pytorch"]
        for k in results
    }
    if ns.json:
        ns.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(render(summary))
    if serve is not None:
        delay = serve["event_delay_ms"]
        print(
            f"serve: daemon frames/s with serve / alone {serve['median_fps_ratio']:.3f} "
            f"(median of {len(serve['rounds'])} rounds); serve "
            f"{serve['serve_cpu_ms_per_frame']:.1f} CPU-ms/frame, peak RSS "
            f"{serve['serve_peak_rss_mib']:.1f} MiB; latest -> event p50 {delay['p50']} ms, "
            f"p99 {delay['p99']} ms"
        )
    if publish is not None:
        for r in publish["runs"]:
            print(
                f"publish (preview {'on' if r['preview'] else 'off'}): "
                f"{r['cpu_ms_per_message']:.2f} CPU-ms/message, latest -> state p50 "
                f"{r['delay_ms']['p50']} ms, p99 {r['delay_ms']['p99']} ms"
            )
    return 0


def render(s: dict) -> str:  # type: ignore[type-arg]
    lines = [
        f"threads {s['threads']}, {s['rounds']} alternating rounds, core {s['core_shape'][0]}x{s['core_shape'][1]}",
        f"PyTorch reference forward (fp32, best of 3): {s['pytorch_forward_s'] * 1000:.0f} ms",
    ]
    peak = s["gemm_peak_flops_per_s"]
    g = s["gemm_flops_per_s"]
    lines.append(
        f"core network: {s['flops'] / 1e9:.1f} GFLOP per forward (reference forward with its "
        f"ray head: {s['reference_flops'] / 1e9:.1f}); fp32 GEMM peak, {s['threads']} threads: "
        f"{peak / 1e9:.0f} GFLOP/s (XNNPACK {g['xnnpack'] / 1e9:.0f}, torch.mm {g['torch_mm'] / 1e9:.0f})"
    )
    for k, v in s["core_s"].items():
        gf = s["core_flops_per_s"][k]
        lines.append(
            f"LiteRT core {k}: {v * 1000:.0f} ms = {s['core_ratio'][k]:.2f}x the reference forward, "
            f"{gf / 1e9:.0f} GFLOP/s ({gf / peak:.0%} of GEMM peak)"
        )
    for k in s["still_s"]:
        lines.append(
            f"one still, fresh process, {k}: {s['still_s'][k]:.2f} s ({s['still_ratio'][k]:.2f}x), "
            f"peak RSS {s['still_peak_rss_mib'][k]:.0f} MiB ({s['rss_ratio'][k]:.2f}x)"
        )
    for k, v in s.get("load_ms", {}).items():
        to_depth = s.get("to_depth_ms", {}).get(k)
        lines.append(
            f"model load (open -> ready), {k}: {v:.0f} ms"
            + (f"; to the first depth map {to_depth:.0f} ms" if to_depth else "")
        )
    for k, v in (s.get("weight_cache_first") or {}).items():
        lines.append(
            f"first still with an empty weight cache, {k}: {v['seconds']:.2f} s, load "
            f"{v['load_ms']:.0f} ms (the cache built in a child process first)"
        )
    peer = s.get("peer") or {}
    if not peer.get("measured"):
        lines.append(f"depth-anything.cpp: not measured ({peer.get('reason', 'no --peer given')})")
    else:
        for k, v in peer["load_ms"].items():
            r = peer["log_depth_pearson"][k]
            lines.append(
                f"depth-anything.cpp {k}: model load {v:.0f} ms (its own report), to the "
                f"first depth map {peer['to_depth_ms'][k]:.0f} ms; "
                f"log-depth Pearson against da3-edge's fp16 {r:.6f} (1 - r = {1 - r:.1e})"
            )
    before = s.get("before")
    if before:
        lines.append(
            f"still, this revision / {before['revision']}: median {before['median_ratio']:.3f} "
            f"over {len(before['ratios'])} paired rounds "
            f"({min(before['ratios']):.3f}-{max(before['ratios']):.3f})"
        )
    for d in [s.get("daemon"), *s.get("daemon_workers", {}).values()]:
        if not d:
            continue
        lines.append(
            f"daemon ({d['precision']}, {d['workers']} worker(s) x {d['threads_per_worker']} "
            f"thread(s), replay {d['replay_fps']:g} fps, {d['frames']} frames): "
            f"{d['fps']:.2f} frames/s = {d['ratio_to_core_rate']:.2f}x (1 / core latency "
            f"{d['core_s'] * 1000:.0f} ms), latency p50 {d['latency_p50_ms']:.0f} ms; "
            f"median of {len(d['rounds'])} rounds, "
            f"{d['ratio_range'][0]:.2f}-{d['ratio_range'][1]:.2f}x"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
