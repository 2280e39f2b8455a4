#!/usr/bin/env python3
"""Which micro-kernels one forward runs on the emulated Cortex-A76, per precision.

    python -m scripts.support.kernels run MODELS OUT [--configs fp32,fp16,int8,stages]   # in the arm64 root,
    python -m scripts.support.kernels run MODELS OUT --configs build --weights DIR [--shapes ...]
                     # under qemu-aarch64 -plugin kcount.so,out=OUT/counts.txt (arm-lane.sh)
    python -m scripts.support.kernels report OUT... --root ROOT [--json FILE]   # on the host: name the code
    python -m scripts.support.kernels check FILE [--cpu a76|i8mm|sme]   # the lane's rule: int8 reaches KleidiAI
    python -m scripts.support.kernels table FILE         # the markdown table docs/arm.md carries

``run`` opens each core the way da3-edge does (``edge.core.Core``, one thread), runs
one forward to warm it, then one more between two markers that scripts/arm/kcount.c
(a qemu TCG plugin) turns into a count of every translated block that ran; the
ExecuTorch stages (pre and post on da3-edge's runner) the same way. ``--cold`` (the
lane's check) counts the first forward instead, without the warm one. ``build`` counts
`da3-edge models build` from the release in ``--weights`` (the fp16 cores of
``--shapes``, default the 504 set the daemon's default config needs, and the stage
programs), once, as an owner runs it: the release hashed and checked, the cores written. ``report`` maps
the blocks to the guest's libraries (its /proc/self/maps) and to their ELF symbols:
a function's calls are the runs of the block at its entry; its instructions are those
of every block inside it. Instruction counts are qemu's guest instructions: a relative
cost, not a time (emulated time is never reported).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER_WHENCE = 0x6B63  # scripts/arm/kcount.c
CONFIGS = ("fp32", "fp16", "fp16-off", "int8", "stages", "build")


# ---- in the guest ----------------------------------------------------------------


def marker(n: int) -> None:
    """0: reset the plugin's counters; n > 0: write segment n."""
    # EBADF is the kernel's answer; the plugin saw the call first.
    with contextlib.suppress(OSError):
        os.lseek(-1, n, MARKER_WHENCE)


def run(
    models: Path,
    out: Path,
    configs: list[str],
    warm: bool = True,
    shapes: list[tuple[int, int]] | None = None,
    weights: Path | None = None,
) -> None:
    import numpy as np

    from edge.models import Manifest

    out.mkdir(parents=True, exist_ok=True)
    counts = out / "counts.txt"
    counts.unlink(missing_ok=True)
    manifest = Manifest.load(models)
    segments: dict[str, dict[str, Any]] = {}
    rng = np.random.default_rng(0)

    def measure(label: str, step: Any, cold: bool = not warm, **facts: Any) -> None:
        if not cold:
            step()  # weights packed, buffers planned: the count is a steady forward's
        n = len(segments) + 1
        marker(0)
        step()
        marker(n)
        segments[str(n)] = {"config": label, "warm": not cold, **facts}

    for config in configs:
        if config == "build":
            if weights is None:
                raise SystemExit("kernels.py: --configs build needs --weights DIR (a release)")
            measure_build(weights, shapes, out / "built", measure)
        elif config == "stages":
            measure_stages(manifest, measure, rng)
        elif shapes:  # each core size's cost: "fp16@378x504", ...
            for shape in shapes:
                measure_core(manifest, measure, rng, config, shape)
        else:
            measure_core(manifest, measure, rng, config)
    (out / "maps.txt").write_text(Path("/proc/self/maps").read_text())
    (out / "segments.json").write_text(json.dumps(segments, indent=1) + "\n")
    text = counts.read_text() if counts.exists() else ""
    missing = [n for n in segments if f"end {n}\n" not in text]
    if missing:
        raise SystemExit(
            f"kernels.py: no counts for segments {missing} in {counts}: "
            "run under qemu-aarch64 -plugin kcount.so,out=... (scripts/arm-lane.sh kernels)"
        )
    print(f"kernels.py: {len(segments)} segments counted in {counts}")


def measure_core(
    manifest: Any, measure: Any, rng: Any, config: str, shape: tuple[int, int] | None = None
) -> None:
    """One forward of the core of ``config`` (fp32, fp16, fp16-off, int8), one thread; at
    ``shape`` (labelled ``config@HxW``), else the smallest."""
    from edge.core import Core, CoreSpec

    precision = config.split("-")[0]
    if shape is not None:
        artifact = manifest.find(shape, precision)
        label = f"{config}@{shape[0]}x{shape[1]}"
    else:
        # The smallest shape: the small test model's one, or for the full-size models
        # 280x504, a 1280x720 camera frame's (the daemon's default).
        cores = (a for a in manifest.cores() if a.precision == precision)
        artifact, label = min(cores, key=lambda a: a.shape), config
    core = Core(
        CoreSpec(
            manifest.verify(artifact),
            threads=1,
            fp16_arithmetic=(config == "fp16"),
            precision=artifact.precision,
            shape=artifact.shape,
        )
    )
    image = rng.standard_normal(core.input_shape).astype("float32")
    measure(
        label,
        lambda: core.run(image),
        precision=precision,
        fp16_arithmetic=core.fp16_arithmetic,
        shape=list(artifact.shape),
        model=artifact.file,
        random_init=artifact.random_init,
    )
    core.close()


def measure_build(
    weights: Path, shapes: list[tuple[int, int]] | None, built: Path, measure: Any
) -> None:
    """`models build --weights WEIGHTS` of the fp16 cores at ``shapes`` (default: the
    set of size 504, four aspects), with the stage programs, into ``built``: once, cold
    (a second build of the same folder would be an owner's second run, not the first)."""
    import shutil

    from edge.corebuild import build_models
    from edge.models import size_shapes

    wanted = list(shapes or size_shapes(504))
    shutil.rmtree(built, ignore_errors=True)
    made: list[Any] = []

    def build() -> None:
        made[:] = build_models(weights, built, wanted, ["fp16"], progress=lambda _: None)

    measure("build", build, cold=True, shapes=[list(s) for s in wanted], precision="fp16")
    release = weights / "model.safetensors"
    print(
        f"kernels.py: built {len(made)} files, {sum(a.bytes for a in made) / 1e6:.1f} MB, "
        f"from {release.stat().st_size / 1e6:.1f} MB"
    )


def measure_stages(manifest: Any, measure: Any, rng: Any) -> None:
    import numpy as np

    from edge import etrunner
    from edge.models import da3_shape
    from edge.stages import bands

    shape = min(a.shape for a in manifest.stage_programs())
    runtime = etrunner.Runtime.get(threads=1)
    h, w = 2 * shape[0], 2 * shape[1]  # a frame twice the model's size, which it shrinks to
    rgb = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    plan = bands.plan((h, w), da3_shape(h, w))
    pre = etrunner.Program(manifest.verify(manifest.find_stage(plan.program, shape)), runtime)
    measure(
        "stages-pre",
        lambda: plan.run(rgb, lambda inputs: pre.run(inputs, copy=False)[0]),
        shape=list(shape),
        input=[h, w],
        program=plan.program,
    )
    post = etrunner.Program(manifest.verify(manifest.find_stage("post", shape)), runtime)
    depth, conf = (rng.random(shape, dtype=np.float32) + 0.5 for _ in range(2))
    post_inputs = bands.post_inputs(depth, conf, bands.post_plan(shape, (h, w)))
    measure("stages-post", lambda: post.run(post_inputs), shape=list(shape), output=[h, w])
    pre.close()
    post.close()


# ---- on the host -----------------------------------------------------------------


@dataclass
class Elf:
    """The FUNC symbols of one ELF file and its loadable segments (file offset -> address)."""

    loads: list[tuple[int, int, int]]  # (p_offset, p_vaddr, p_filesz)
    starts: list[int] = field(default_factory=list)
    symbols: list[tuple[int, int, str]] = field(default_factory=list)  # (value, size, name)

    @classmethod
    def read(cls, path: Path) -> Elf:
        data = path.read_bytes()
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError(f"{path}: not a little-endian ELF64 file")
        phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
        loads = []
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
                "<IIQQQQ", data, phoff + i * phentsize
            )
            if p_type == 1:  # PT_LOAD
                loads.append((p_offset, p_vaddr, p_filesz))
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
        ]
        # .symtab (every function, local ones too) where the file keeps it, else .dynsym.
        kinds = {s[1] for s in sections}
        want = 2 if 2 in kinds else 11
        symbols: dict[int, tuple[int, int, str]] = {}
        for s in sections:
            if s[1] != want:
                continue
            strtab = sections[s[6]]
            for off in range(s[4], s[4] + s[5], 24):
                st_name, st_info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
                if st_info & 0xF != 2 or shndx == 0 or value == 0:  # FUNC, defined
                    continue
                start = strtab[4] + st_name
                name = data[start : data.index(b"\0", start)].decode()
                symbols.setdefault(value, (value, size, name))
        elf = cls(loads)
        elf.symbols = sorted(symbols.values())
        elf.starts = [s[0] for s in elf.symbols]
        return elf

    def address(self, file_offset: int) -> int | None:
        for p_offset, p_vaddr, p_filesz in self.loads:
            if p_offset <= file_offset < p_offset + p_filesz:
                return file_offset - p_offset + p_vaddr
        return None

    def symbol(self, address: int) -> tuple[str, int] | None:
        """(name, start) of the function holding ``address``."""
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        value, size, name = self.symbols[i]
        if size and address >= value + size:
            return None
        return name, value


def read_maps(text: str) -> list[tuple[int, int, int, str]]:
    """The executable file mappings: (start, end, file offset, path)."""
    maps = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
            start, end = (int(x, 16) for x in parts[0].split("-"))
            maps.append((start, end, int(parts[2], 16), parts[5]))
    return sorted(maps)


def read_counts(text: str) -> dict[str, list[tuple[int, int, int]]]:
    segments: dict[str, list[tuple[int, int, int]]] = {}
    current: list[tuple[int, int, int]] | None = None
    for line in text.splitlines():
        if line.startswith("segment "):
            fields = line.split()
            if fields[5] != "0":
                raise SystemExit("kcount's block table filled up: counts are incomplete")
            current = segments[fields[1]] = []
        elif line.startswith("end "):
            current = None
        elif current is not None:
            vaddr, runs, insns = line.split()
            current.append((int(vaddr, 16), int(runs), int(insns)))
    return segments


# XNNPACK's micro-kernels: xnn_<types>_<op>_..._ukernel_<tile>__<isa>; KleidiAI's: kai_*.
UKERNEL = re.compile(r"^xnn_.*ukernel")


def kind_of(name: str) -> str:
    if name.startswith("kai_"):
        return "kleidiai"
    if UKERNEL.match(name):
        return "xnnpack"
    return "other"


def report(out: Path, root: Path, also: str | None = None) -> dict[str, Any]:
    """The counts under ``out`` (one ``run``) by function: XNNPACK's and KleidiAI's
    micro-kernels, and the functions whose names match ``also``; instructions by
    library for all."""
    maps = read_maps((out / "maps.txt").read_text())
    starts = [m[0] for m in maps]
    segments = json.loads((out / "segments.json").read_text())
    counts = read_counts((out / "counts.txt").read_text())
    elves: dict[str, Elf | None] = {}

    def locate(vaddr: int) -> tuple[str, str | None, bool]:
        """(library, function, block at the function's entry)"""
        i = bisect.bisect_right(starts, vaddr) - 1
        if i < 0 or vaddr >= maps[i][1]:
            return "[anonymous]", None, False
        start, _, offset, path = maps[i]
        if path not in elves:
            try:
                elves[path] = Elf.read(root / path.lstrip("/"))
            except (OSError, ValueError):
                elves[path] = None
        elf = elves[path]
        lib = Path(path).name
        address = elf.address(vaddr - start + offset) if elf else None
        found = elf.symbol(address) if elf and address is not None else None
        if found is None:
            return lib, None, False
        return lib, found[0], found[1] == address

    result: dict[str, Any] = {}
    for n, facts in segments.items():
        blocks = counts.get(n)
        if blocks is None:
            raise SystemExit(f"no counts for segment {n} ({facts['config']})")
        total = 0
        functions: dict[str, dict[str, Any]] = {}
        libraries: dict[str, int] = {}
        for vaddr, runs, insns in blocks:
            lib, name, entry = locate(vaddr)
            total += runs * insns
            libraries[lib] = libraries.get(lib, 0) + runs * insns
            if name is None or (kind_of(name) == "other" and not (also and re.match(also, name))):
                continue
            f = functions.setdefault(
                name, {"kind": kind_of(name), "library": lib, "calls": 0, "instructions": 0}
            )
            f["instructions"] += runs * insns
            if entry:
                f["calls"] += runs
        result[facts["config"]] = {
            **facts,
            "instructions": total,
            "by_library": dict(sorted(libraries.items(), key=lambda kv: -kv[1])),
            "kernels": dict(sorted(functions.items(), key=lambda kv: -kv[1]["instructions"])),
        }
    return result


def provenance(root: Path) -> dict[str, Any]:
    """What the counts were made with: this checkout, qemu, the root's LiteRT."""
    import subprocess

    from edge.bench import git_revision

    qemu = subprocess.run(
        [str(root / "usr/local/bin/qemu-aarch64-plugins"), "--version"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    site = root / "opt/da3-edge/site"
    litert = sorted(p.name for p in site.glob("ai_edge_litert-*.dist-info"))
    return {
        "revision": git_revision(),
        "qemu": qemu[0] if qemu else "unknown",
        "litert": litert[0].removesuffix(".dist-info") if litert else "unknown",
    }


def family(name: str) -> str:
    """A kernel's family: its name without the tile size (XNNPACK) or as it is (KleidiAI)."""
    m = re.match(r"^(xnn_.*?)_ukernel_[^_]*(__.*)?$", name)
    if m:
        return m.group(1) + (m.group(2) or "")
    return name


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def table(data: dict[str, Any], top: int = 4) -> str:
    lines = [
        "| run | guest instructions per forward | KleidiAI | kernels (calls; share of instructions) |",
        "| --- | ---: | ---: | --- |",
    ]
    for config, seg in data.items():
        if config.startswith("_"):
            continue
        total = seg["instructions"]
        kai = sum(k["instructions"] for k in seg["kernels"].values() if k["kind"] == "kleidiai")
        fams: dict[str, list[int]] = {}
        for name, k in seg["kernels"].items():
            f = fams.setdefault(family(name), [0, 0])
            f[0] += k["calls"]
            f[1] += k["instructions"]
        ranked = sorted(fams.items(), key=lambda kv: -kv[1][1])[:top]
        cells = "<br>".join(f"`{f}` ({c}; {share(i, total)})" for f, (c, i) in ranked)
        if not cells:  # a library that exports none of its micro-kernels' names
            lib, part = next(iter(seg["by_library"].items()))
            cells = f"unnamed code in `{lib}` ({share(part, total)}): it keeps no symbols for them"
        count = f"{total / 1e9:.2f} G" if total >= 1e9 else f"{total / 1e6:.1f} M"
        lines.append(f"| {config} | {count} | {share(kai, total)} | {cells} |")
    return "\n".join(lines)


# What a LiteRT upgrade must not lose, per emulated CPU: run -> (what, a kernel name
# pattern one of the run's kernels must match). The A76 (a Pi 5: dotprod, no i8mm, no
# SME): int8's matrix products on KleidiAI's dotprod kernels, fp16 with the fp16 policy
# on XNNPACK's fp16 GEMMs, fp32 (and fp16 with the policy off) on its fp32 GEMMs.
# qemu's `max` CPU with SME off has i8mm (as an Apple M2/M3 does), with SME on SME
# (as an M4 does): int8 must reach KleidiAI's i8mm and SME kernels there.
WANTED: dict[str, dict[str, tuple[str, str]]] = {
    "a76": {
        "int8": ("a KleidiAI dotprod matmul", r"^kai_(run|kernel)_matmul_.*_neon_dotprod$"),
        "fp16": ("an XNNPACK fp16 GEMM", r"^xnn_f16_i?gemm_"),
        "fp16-off": ("an XNNPACK fp32 GEMM", r"^xnn_f32_i?gemm_"),
        "fp32": ("an XNNPACK fp32 GEMM", r"^xnn_f32_i?gemm_"),
    },
    "i8mm": {"int8": ("a KleidiAI i8mm matmul", r"^kai_(run|kernel)_matmul_.*_neon_i8mm$")},
    "sme": {"int8": ("a KleidiAI SME matmul", r"^kai_(run|kernel)_matmul_.*_sme")},
}


def check(data: dict[str, Any], cpu: str = "a76") -> int:
    """WANTED[cpu] holds for the report ``data``; 0 if so, else 1 (each failure printed)."""
    wanted = WANTED[cpu]
    failures = [] if "int8" in data else ["no int8 run in the report"]
    for config, seg in data.items():
        if config.startswith("_"):
            continue
        ran = [name for name, k in seg["kernels"].items() if k["calls"]]
        print(f"{config}: {seg['instructions']} guest instructions, {len(ran)} kernels ran")
        if config in wanted:
            what, pattern = wanted[config]
            hits = [name for name in ran if re.match(pattern, name)]
            print(f"  {what}: {', '.join(hits) or 'NONE'}")
            if not hits:
                failures.append(f"{config} ran no {what.split(' ', 1)[1]}")
        if config == "fp16" and not seg.get("fp16_arithmetic"):
            failures.append("fp16 ran with the fp16 policy off")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("models", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument(
        "--shapes",
        help="core shapes to count each core config at, e.g. 378x504,294x392,210x280 (the "
        "price of each --size; default: the folder's smallest shape)",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="count each config's first forward, with no warm-up run before it: the lane's "
        "check (which kernel families are reached) at half the emulated forwards; the "
        "counts then include the first run's set-up",
    )
    p.add_argument("--weights", type=Path, help="the release folder --configs build reads")
    p = sub.add_parser("report")
    p.add_argument("out", type=Path, nargs="+", help="one or more run directories")
    p.add_argument("--root", type=Path, required=True, help="the arm64 root filesystem")
    p.add_argument("--json", type=Path, help="write the report here (default OUT/report.json)")
    p = sub.add_parser("check")
    p.add_argument("file", type=Path)
    p.add_argument("--cpu", choices=sorted(WANTED), default="a76")
    sub.add_parser("table").add_argument("file", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        configs = args.configs.split(",")
        bad = sorted(set(configs) - set(CONFIGS))
        if bad:
            ap.error(f"unknown configs {bad}; choose from {', '.join(CONFIGS)}")
        from edge.models import parse_shape

        shapes = [parse_shape(s) for s in args.shapes.split(",")] if args.shapes else None
        run(args.models, args.out, configs, not args.cold, shapes, args.weights)
        return 0
    if args.cmd == "report":
        from scripts.support.measured import refuse_dirty

        refuse_dirty(args.json)
        data: dict[str, Any] = {"_run": provenance(args.root)}
        for out in args.out:
            part = report(out, args.root)
            if set(part) & set(data):
                raise SystemExit(f"{out}: runs {sorted(set(part) & set(data))} twice")
            data.update(part)
        dest = args.json or args.out[0] / "report.json"
        dest.write_text(json.dumps(data, indent=1) + "\n")
        print(table(data))
        return 0
    data = json.loads(args.file.read_text())
    if args.cmd == "check":
        return check(data, args.cpu)
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
