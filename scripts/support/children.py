"""Programs the tests run in a fresh interpreter, for what only a new process shows
(what an import loads, a native crash, the export environment's torch, a second
process's view of a store or a socket): each one a function here, run from the
checkout as

    python -m scripts.support.children NAME [ARG...]

by ``run`` (any Python: this one, the export environment's, the aarch64 root's). The
module imports nothing at the top but the standard library, so a child's imports are
its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from . import ROOT

Child = Callable[[list[str]], int]
CHILDREN: dict[str, Child] = {}


def child(fn: Child) -> Child:
    CHILDREN[fn.__name__.replace("_", "-")] = fn
    return fn


def run(
    name: str,
    *args: object,
    python: Path | str = sys.executable,
    env: dict[str, str] | None = None,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess[str]:
    """The child ``name`` in a fresh ``python`` (``env``: the whole environment when
    given), from the checkout; exit code, stdout and stderr as text."""
    argv = [str(python), "-m", "scripts.support.children", name, *map(str, args)]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout, check=False
    )


@child
def litert_weight_cache_fp16(argv: list[str]) -> int:
    """LiteRT alone: MODEL opened with XNNPACK's fp16 flags and a weight cache at CACHE
    (the crash Core avoids by dropping the cache under fp16 arithmetic)."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import CpuOptions, Options

    model, cache = argv
    cpu = CpuOptions(num_threads=1, xnnpack_flags=7, xnnpack_weight_cache_path=cache)
    options = Options(hardware_accelerators=HardwareAccelerator.CPU, cpu_options=cpu)
    CompiledModel.from_file(model, options=options)
    print("loaded")
    return 0


@child
def runtime_imports(argv: list[str]) -> int:
    """``import edge`` loads no LiteRT; a Core's load and run (MODEL, H, W) no torch."""
    import numpy as np

    import edge  # noqa: F401

    assert "ai_edge_litert" not in sys.modules, "import edge loaded LiteRT"
    from edge.core import Core

    model, h, w = argv[0], int(argv[1]), int(argv[2])
    with Core(model, threads=1) as core:
        core.run(np.zeros((1, 3, h, w), np.float32))
    bad = [
        m for m in sys.modules if m.split(".")[0] in ("torch", "litert_torch", "depth_anything_3")
    ]
    assert not bad, bad
    print("ok")
    return 0


@child
def serve_imports(argv: list[str]) -> int:
    """What serve imports: no numpy, no LiteRT, no Pillow (prints those loaded)."""

    print([m for m in ("numpy", "ai_edge_litert", "PIL") if m in sys.modules])
    return 0


@child
def whole_frames(argv: list[str]) -> int:
    """A reader following STORE's ``latest`` until it has read N distinct frames whole
    (or DEADLINE seconds pass): a frame that vanishes between the link and its files is
    pruned, and read again; one that is there must be complete. Prints how many."""
    import json
    import time

    import numpy as np

    store, wanted, end = Path(argv[0]), int(argv[1]), time.monotonic() + float(argv[2])
    seen: set[int] = set()
    while len(seen) < wanted and time.monotonic() < end:
        try:
            frame = (store / "latest").resolve(strict=True)
            meta = json.loads((frame / "frame.json").read_text())
            with np.load(frame / "frame.npz") as f:
                assert f["depth"].size
            seen.add(meta["store_seq"])
        except FileNotFoundError:
            pass  # not there yet, or pruned between resolve and open: retry
    print(len(seen))
    return 0


@child
def notify(argv: list[str]) -> int:
    """sd_notify from another process: READY with its pid, then a watchdog ping."""
    import os

    from edge.systemd import Notifier

    n = Notifier.from_env()
    assert n.enabled and n.watchdog_interval == 5.0, (n.enabled, n.watchdog_interval)
    ok = n.ready(f"pid {os.getpid()}") and n.watchdog()
    n.close()
    print(os.getpid())
    return 0 if ok else 3


@child
def watchdog_interval(argv: list[str]) -> int:
    from edge.systemd import Notifier

    print(Notifier.from_env().watchdog_interval)
    return 0


@child
def export_console(argv: list[str]) -> int:
    """An export's console: third-party chatter (C stdout, absl stderr, prints, foreign
    warnings) to the log, the kit's lines and its own warnings to the terminal; ``fail``
    ends inside it with exit 3."""
    import os
    import warnings

    import edge.models
    from edge.export.quiet import third_party_output_to_log

    warnings.simplefilter("always")
    with third_party_output_to_log() as console:
        os.write(1, b"C library on stdout\n")  # as the reference package's logger
        os.write(2, b"I0000 absl on stderr\n")  # as LiteRT's converter
        print("python print to stderr", file=sys.stderr)
        warnings.warn_explicit("a FutureWarning", FutureWarning, "/elsewhere/torch.py", 1)
        warnings.warn_explicit("a real warning", UserWarning, edge.models.__file__, 1)
        console.say("[1/1] the kit's progress")
        console.result("wrote 1 artifacts")
        if argv[0] == "fail":
            raise SystemExit(3)
    print("after")
    return 0


@child
def etrunner_status(argv: list[str]) -> int:
    """``etrunner.status()`` as a fresh process sees it (``message``: its text only)."""
    from edge import etrunner

    status = etrunner.status()
    print(status[1] if argv == ["message"] else status)
    return 0


@child
def etrunner_threads(argv: list[str]) -> int:
    """ExecuTorch's pool resized under an open program (MODELS' pre at H x W): refused;
    a reload's other ask kept; resized once the program is closed."""
    from edge import etrunner
    from edge.errors import StagesUnavailable
    from edge.models import Manifest

    m = Manifest.load(argv[0])
    rt = etrunner.Runtime.get(threads=1)
    assert rt.threads == 1, rt.threads
    p = etrunner.Program(m.verify(m.find_stage("pre", (int(argv[1]), int(argv[2])))), rt)
    try:
        rt.set_threads(2)
    except StagesUnavailable as exc:
        print("refused:", exc)
    print("kept", etrunner.Runtime.get(threads=3).threads)  # a reload's ask: warned, kept
    p.close()
    rt.set_threads(2)
    print("threads", rt.threads)
    return 0


@child
def executorch_bindings(argv: list[str]) -> int:
    """ExecuTorch's own Python bindings (export environment) on PRE and POST with the
    13 arrays of INPUTS.npz: their outputs to OUT.npz, for the runner to match."""
    import numpy as np
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    pre, post, inputs, out = argv
    x = np.load(inputs)
    args = [torch.from_numpy(x[f"arr_{i}"]) for i in range(13)]
    a = _load_for_executorch(pre).forward(args[:8])[0]
    b = _load_for_executorch(post).forward(args[8:])[0]
    np.savez(out, pre=a.numpy(), post=b.numpy())
    return 0


@child
def torch_free_stages(argv: list[str]) -> int:
    """Where torch and executorch are installed (the export environment), a pipeline on
    the ExecuTorch stages (MODELS, PHOTO 640x480) loads neither: da3-edge's runner."""
    import importlib.util
    import os
    import re

    assert importlib.util.find_spec("torch") is not None, "torch must be installed for this test"
    assert importlib.util.find_spec("executorch") is not None
    from edge.pipeline import Pipeline, PipelineSpec

    spec = PipelineSpec(models=argv[0], stages="executorch", threads=2)
    with Pipeline.load(spec) as pipe:
        frame = pipe.run(argv[1])
    assert frame.depth.shape == (480, 640), frame.depth.shape
    loaded = [m for m in sys.modules if m == "torch" or m.startswith(("torch.", "executorch"))]
    with open("/proc/self/maps") as maps_file:
        maps = {line.split()[-1] for line in maps_file if "/" in line}
    libs = sorted(p for p in maps if re.match(r"lib(torch|c10)", os.path.basename(p)))
    runner = sorted(os.path.basename(p) for p in maps if "da3-edge/executorch-" in p)
    print("modules:", loaded, "libs:", libs, "stages:", frame.stages, "runner:", runner)
    assert not loaded and not libs and frame.stages == "executorch" and "runner.so" in runner
    return 0


@child
def with_aliases(argv: list[str]) -> int:
    """A release file SRC rewritten to DST with every alias of each shared tensor stored
    as its own copy (as ``save_file(dict(model.state_dict()))`` after cloning does);
    TAMPER=1 changes one. Prints the aliases added."""
    from safetensors.torch import load_file, save_file

    from edge.export.weights import _Release, build_network

    src, dst, tamper = argv
    state = load_file(src)
    groups: dict[tuple[int, tuple[int, ...]], list[str]] = {}
    for name, tensor in _Release(build_network()).state_dict().items():
        groups.setdefault((tensor.data_ptr(), tuple(tensor.shape)), []).append(name)
    added = []
    for names in groups.values():
        stored = [n for n in names if n in state]
        for name in names:
            if len(names) > 1 and name not in state:
                state[name] = state[stored[0]].clone()
                added.append(name)
    added.sort()
    if tamper == "1":
        state[added[0]] = state[added[0]] + 1e-3
    save_file(state, dst, metadata={"format": "pt"})
    print("ALIASES", " ".join(added))
    return 0


@child
def same_keys(argv: list[str]) -> int:
    """Whether two safetensors files A and B hold the same tensor names (prints it)."""
    from safetensors import safe_open

    a, b = (sorted(safe_open(p, "pt").keys()) for p in argv)
    print(a == b)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in CHILDREN:
        print(
            f"usage: python -m scripts.support.children {{{','.join(CHILDREN)}}} [ARG...]",
            file=sys.stderr,
        )
        return 2
    return CHILDREN[argv[0]](argv[1:])


@child
def pos_embed_against_torch(argv: list[str]) -> int:
    """The numpy position-embedding resample against DINOv2's own torch one, on the
    seeded network, at each HxW of ARGV: the largest difference, a line each."""
    import numpy as np
    import torch

    from edge.export.weights import random_state
    from edge.release import resample_pos_embed

    vit = random_state(0).backbone.pretrained
    pos = vit.pos_embed.detach().numpy()
    for text in argv:
        h, w = (int(n) for n in text.split("x"))
        with torch.no_grad():
            tokens = torch.zeros(1, 1 + (h // 14) * (w // 14), pos.shape[-1])
            ref = vit.interpolate_pos_encoding(tokens, h, w).numpy()
        ours = resample_pos_embed(pos, h, w)
        print(f"POS {text} {ref.shape == ours.shape} {float(np.abs(ref - ours).max()):.3e}")
    return 0


@child
def shape_constants_against_torch(argv: list[str]) -> int:
    """edge.release's RoPE tables and UV embedding parts against DA3's own torch
    functions, at each HxW of ARGV: the largest difference of each, a line each."""
    import numpy as np
    import torch
    from depth_anything_3.model.utils.head_utils import create_uv_grid, position_grid_to_embed

    from edge.export.weights import random_state
    from edge.release import rope_tables, uv_embedding_parts

    rope = random_state(0).backbone.pretrained.rope
    for text in argv:
        h, w = (int(n) for n in text.split("x"))
        ph, pw = h // 14, w // 14
        grid = torch.cartesian_prod(torch.arange(ph), torch.arange(pw)) + 1
        positions = torch.cat([torch.zeros(1, 2, dtype=grid.dtype), grid])
        cos, sin = rope._compute_frequency_components(
            32, int(positions.max()) + 1, "cpu", torch.float32
        )
        ref = [t[positions[:, axis]].numpy() for axis in (0, 1) for t in (cos, sin)]
        ours = rope_tables(positions.numpy(), 64, float(rope.base_frequency))
        d_rope = max(float(np.abs(r - o[0, 0]).max()) for r, o in zip(ref, ours, strict=True))
        d_uv = 0.0
        for channels, gh, gw in ((64, ph, pw), (128, ph * 14, pw * 14)):
            uv = create_uv_grid(gw, gh, aspect_ratio=w / h, dtype=torch.float32)
            pe = (position_grid_to_embed(uv, channels) * 0.1).permute(2, 0, 1).numpy()
            cols, rows = uv_embedding_parts(channels, gh, gw, h, w)
            whole = np.concatenate(
                [
                    np.broadcast_to(cols[0], (channels // 2, gh, gw)),
                    np.broadcast_to(rows[0], (channels // 2, gh, gw)),
                ]
            )
            d_uv = max(d_uv, float(np.abs(pe - whole).max()))
        print(f"SHAPE {text} {d_rope:.3e} {d_uv:.3e}")
    return 0


@child
def build_imports(argv: list[str]) -> int:
    """`da3-edge models build ARGV...` in this process, then which of the export's
    packages it loaded (none, on the owner's path)."""
    from edge import cli

    code = cli.main(["models", "build", *argv])
    heavy = ("torch", "safetensors", "flatbuffers", "litert_torch", "executorch", "tflite")
    print("LOADED", " ".join(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
