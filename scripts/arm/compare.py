#!/usr/bin/env python3
"""The aarch64 lane's checks: x86_64 against emulated Cortex-A76 outputs, the fp16 proof.

    python -m scripts.arm.compare photos DIR   # the lane's input photos (real, small)
    python -m scripts.arm.compare stages MODELS OUT.npz   # the ExecuTorch stages, seeded inputs
    python -m scripts.arm.compare check OUT    # compare the snap outputs under OUT

``check`` reads what scripts/arm-lane.sh wrote (`da3-edge snap` outputs, one directory
per run: x86_64-<p>, a76-<p>, a76-fp16-policy-off, a76-fp16-built; a72-*.txt;
doctor-*.json), prints
a table, writes OUT/report.json and exits 1 if any check fails:

- the same model on x86_64 and on the A76 agrees per precision (limits: ARCH below);
- the ExecuTorch stages (da3-edge's runner, no torch in the arm64 root) give the same
  numbers on both, max |d| <= STAGES_MAX_ABS on seeded inputs, and `snap --stages
  executorch` agrees end to end like fp32 does;
- fp16 on the A76 ran with fp16 arithmetic (its JSON says so) and gave outputs that
  differ from the same artifact with the policy off (so FORCE_FP16 engaged), both
  within Pearson >= 0.999 of the x86_64 fp32 reference;
- on the A72 (Pi 4: no FP16 arithmetic, no LSE atomics) LiteRT itself dies with
  SIGILL, and `da3-edge snap` says why in one line and exits 1 instead;
- the fp16 core `models build` made on the A76 gives the exported core's depth exactly;
- `doctor` reports the A76 as Cortex-A76 with fp16 on, KleidiAI's dotprod kernels and
  LiteRT usable, the A72 as Cortex-A72 with fp16 off, no KleidiAI and LiteRT blocked.

Depth is compared as written in photo.npz (float32, at the photo's size).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from edge import parity

# One real photo: every kernel runs on every photo, so a second one only repeats the
# comparison (measured on two, 2026-12-03: their worst-case numbers agreed to within
# 3e-7 Pearson for fp32/fp16 and 2e-4 for int8) at ten more emulated forwards.
PHOTOS = ("astronaut.png",)
PHOTO_SIZE = (364, 280)  # (w, h): twice the small test model's 182x140
# Same artifact, different CPU (XNNPACK picks other micro-kernels): per precision,
# (min Pearson, max rel-L2). int8 quantises activations at run time; its rounding may
# differ per kernel, so it gets int8's own limit.
ARCH: dict[str, tuple[float, float | None]] = {
    "fp32": (0.99999, 1e-4),
    "fp16": (0.9999, 5e-3),
    "int8": (0.99, None),
}
FP16_VS_FP32 = 0.999  # the bar for fp16 arithmetic against the fp32 reference
STAGES_MAX_ABS = 1e-4  # ExecuTorch stage outputs, x86_64 vs cortex-a76 (normalised / depth units)
STAGE_SHAPE = (140, 182)  # the small test model's


def _first(program: Any, inputs: list[np.ndarray]) -> np.ndarray:
    out: np.ndarray = program.run(inputs)[0]
    return out


def run_stages(models: Path, out: Path) -> None:
    """The stage programs on seeded inputs through da3-edge's runner: two steps at 280x364
    and 97x131, one (pre1) at 252x336."""
    from edge import etrunner
    from edge.models import STAGE_KINDS, Manifest, da3_shape
    from edge.stages import bands

    manifest = Manifest.load(models)
    runtime = etrunner.Runtime.get(threads=2)
    programs = {
        kind: etrunner.Program(manifest.verify(manifest.find_stage(kind, STAGE_SHAPE)), runtime)
        for kind in STAGE_KINDS
    }
    rng = np.random.default_rng(7)
    results = {}
    for h, w in ((280, 364), (97, 131), (252, 336)):
        rgb = (rng.random((h, w, 3)) * 255).astype(np.uint8)
        plan = bands.plan((h, w), da3_shape(h, w))
        results[f"pre_{h}x{w}"] = plan.run(rgb, functools.partial(_first, programs[plan.program]))
    depth, conf = (rng.random(STAGE_SHAPE, dtype=np.float32) + 0.5 for _ in range(2))
    axes = bands.post_plan(STAGE_SHAPE, (280, 364))
    results["post_280x364"] = programs["post"].run(bands.post_inputs(depth, conf, axes))[0]
    np.savez(out, **results)  # type: ignore[arg-type]


def make_photos(out: Path) -> None:
    from scripts.support.photos import photo_path  # on the host only: the guest lacks skimage

    out.mkdir(parents=True, exist_ok=True)
    for name in PHOTOS:
        with Image.open(photo_path(name)) as im:
            im.convert("RGB").resize(PHOTO_SIZE, Image.Resampling.LANCZOS).save(out / name)


def load(run: Path) -> dict[str, tuple[np.ndarray, dict[str, object]]]:
    out = {}
    for name in PHOTOS:
        stem = Path(name).stem
        with np.load(run / f"{stem}.npz") as npz:
            depth = npz["depth"].copy()
        meta = json.loads((run / f"{stem}.json").read_text())
        out[stem] = (depth, meta)
    return out


Runs = dict[str, dict[str, tuple[np.ndarray, dict[str, object]]]]  # run -> photo -> depth, meta


class Report:
    """The checks' rows (report.json) and which failed."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self.rows: list[dict[str, object]] = []
        self.failures: list[str] = []

    def record(self, what: str, ok: bool, **numbers: object) -> None:
        self.rows.append({"check": what, "ok": ok, **numbers})
        if not ok:
            self.failures.append(what)

    def worst(self, a: str, b: str) -> dict[str, float]:
        """The worst agreement over the photos between runs ``a`` and ``b``."""
        per = [parity.metrics(self.runs[a][s][0], self.runs[b][s][0]) for s in self.runs[a]]
        return {
            "pearson": min(m["pearson"] for m in per),
            "rel_l2": max(m["rel_l2"] for m in per),
            "max_abs": max(m["max_abs"] for m in per),
        }

    def flags(self, run: str, key: str) -> set[object]:
        return {meta[key] for _, meta in self.runs[run].values()}


def check_arithmetic(report: Report) -> None:
    """Same artifact, same arithmetic, other CPU; then the fp16 policy's proof. (fp16
    with the A76's default policy computes in fp16, x86_64 in fp32: like for like is
    the A76 run with the policy off.)"""
    pairs = [("fp32", "a76-fp32"), ("fp16", "a76-fp16-policy-off"), ("int8", "a76-int8")]
    for p, run in pairs:
        min_r, max_rel = ARCH[p]
        m = report.worst(f"x86_64-{p}", run)
        ok = m["pearson"] >= min_r and (max_rel is None or m["rel_l2"] <= max_rel)
        report.record(f"{p}: cortex-a76 ({run}) vs x86_64, same arithmetic", ok, **m)
    flag = report.flags
    report.record(
        "fp16 arithmetic on for a76-fp16 (JSON)", flag("a76-fp16", "fp16_arithmetic") == {True}
    )
    off = flag("a76-fp16-policy-off", "fp16_arithmetic") == {False}
    report.record("fp16 arithmetic off for a76-fp16-policy-off (JSON)", off)
    report.record(
        "fp16 arithmetic off on x86_64 (JSON)", flag("x86_64-fp16", "fp16_arithmetic") == {False}
    )
    on_off = report.worst("a76-fp16-policy-off", "a76-fp16")
    what = "fp16 policy on vs off: outputs differ (FORCE_FP16 engaged)"
    report.record(what, on_off["max_abs"] > 0, **on_off)
    for run in ("a76-fp16", "a76-fp16-policy-off"):
        m = report.worst("x86_64-fp32", run)
        report.record(
            f"{run} vs x86_64 fp32: Pearson >= {FP16_VS_FP32}", m["pearson"] >= FP16_VS_FP32, **m
        )


def check_a72(report: Report, out: Path) -> None:
    """A Pi 4: LiteRT dies with SIGILL; da3-edge says why in one line instead."""
    litert = (out / "a72-litert.txt").read_text(errors="replace")
    report.record(
        "cortex-a72: LiteRT itself dies with SIGILL (no LSE atomics)",
        "exit=132" in litert and "lse enabled" in litert,
        detail=[ln for ln in litert.splitlines() if "FATAL" in ln or "exit=" in ln],
    )
    snap = (out / "a72-snap.txt").read_text(errors="replace")
    report.record(
        "cortex-a72: da3-edge snap says why in one line, exit 1",
        "exit=1" in snap and "lacks Armv8.1 atomics (LSE)" in snap,
        detail=[ln for ln in snap.splitlines() if "LSE" in ln][:1],
    )


def check_doctor(report: Report, out: Path) -> None:
    """``doctor --json`` on each CPU names it, its fp16 policy and its kernels."""
    cpus = (("a76", "Cortex-A76", "on", True), ("a72", "Cortex-A72", "off", False))
    for cpu, model, fp16, usable in cpus:
        doctor = json.loads((out / f"doctor-{cpu}.json").read_text())
        checks = {c["name"]: c for c in doctor["checks"]}
        detail = " | ".join(
            checks[k]["detail"] for k in ("cpu", "fp16 policy", "kernels", "litert")
        )
        kernels = checks["kernels"]["detail"]
        ok = (
            model in checks["cpu"]["detail"]
            # The A76 has dotprod, neither i8mm nor SME (docs/arm.md's kernel table);
            # the A72 none of KleidiAI's features.
            and ("KleidiAI int8 matmul, dotprod" in kernels) == usable
            and "i8mm" not in kernels
            and "SME" not in kernels
            and "Recommended precision: fp16" in kernels
            and "aarch64" in checks["cpu"]["detail"]
            and checks["fp16 policy"]["detail"].startswith(f"fp16 arithmetic {fp16}")
            and (checks["litert"]["status"] == "ok") == usable
            and (checks.get("models", {}).get("status") == "ok") == usable
            and doctor["ok"] == usable
        )
        verdict = "LiteRT and models ok" if usable else "LiteRT blocked, not ok"
        report.record(f"doctor on {cpu}: {model}, fp16 {fp16}, {verdict}", ok, detail=detail)


def check_stages(report: Report, out: Path) -> None:
    """The ExecuTorch stages alone, then a still through them, on both CPUs."""
    with np.load(out / "stages-x86_64.npz") as a, np.load(out / "stages-a76.npz") as b:
        diffs = {k: float(np.abs(a[k] - b[k]).max()) for k in a.files}
    report.record(
        f"executorch stages: cortex-a76 vs x86_64, max |d| <= {STAGES_MAX_ABS}",
        set(diffs) == {"pre_280x364", "pre_97x131", "pre_252x336", "post_280x364"}
        and max(diffs.values()) <= STAGES_MAX_ABS,
        **{f"max_abs {k}": v for k, v in diffs.items()},
    )
    m = report.worst("x86_64-fp32-executorch", "a76-fp32-executorch")
    min_r, max_rel = ARCH["fp32"]
    assert max_rel is not None
    ok = m["pearson"] >= min_r and m["rel_l2"] <= max_rel
    ok = ok and report.flags("a76-fp32-executorch", "stages") == {"executorch"}
    report.record("snap --stages executorch: cortex-a76 vs x86_64 (fp32)", ok, **m)
    # The default config (stages = "auto") with the runner installed, as the Pi
    # installer leaves it: every still's record and doctor name the ExecuTorch stages.
    ran = {p: sorted(map(str, report.flags(f"a76-{p}", "stages"))) for p in ARCH}
    doctor = json.loads((out / "doctor-a76.json").read_text())
    auto = next((c["detail"] for c in doctor["checks"] if c["name"] == "stages"), "")
    report.record(
        "default config on cortex-a76: the ExecuTorch stages (records and doctor)",
        all(r == ["executorch"] for r in ran.values()) and auto.startswith("auto runs executorch"),
        **{f"stages {p}": ",".join(r) for p, r in ran.items()},
        doctor=auto,
    )


def check_built(report: Report) -> None:
    """The core `models build` made on the A76 is the export's: the same depth."""
    m = report.worst("a76-fp16-built", "a76-fp16")
    ok = m["max_abs"] == 0.0 and report.flags("a76-fp16-built", "stages") == {"executorch"}
    report.record("models build on cortex-a76: snap gives the exported core's depth", ok, **m)


def check_built_verify(report: Report, out: Path) -> None:
    """`models --verify` on the A76's build passed, its forward check included."""
    text = (out / "built-a76-verify.txt").read_text()
    forward = [line.split() for line in text.splitlines() if line.strip().startswith("forward")]
    ok = bool(forward) and all(words[-1] == "ok" for words in forward) and "FAILED" not in text
    pearson = float(forward[0][4].rstrip(",")) if ok else float("nan")
    report.record("models --verify on cortex-a76: the built core computes DA3", ok, pearson=pearson)


def check(out: Path) -> int:
    """Every check on the snap outputs under ``out``: report.json, a line each."""
    names = [f"{arch}-{p}" for arch in ("x86_64", "a76") for p in ARCH] + ["a76-fp16-policy-off"]
    names += ["x86_64-fp32-executorch", "a76-fp32-executorch", "a76-fp16-built"]
    report = Report({name: load(out / name) for name in names})
    check_arithmetic(report)
    check_a72(report, out)
    check_doctor(report, out)
    check_stages(report, out)
    check_built(report)
    check_built_verify(report, out)
    (out / "report.json").write_text(json.dumps(report.rows, indent=2) + "\n")
    for row in report.rows:
        numbers = ", ".join(
            f"{k} {v:.7f}" if isinstance(v, float) else f"{k}: {v}"
            for k, v in row.items()
            if k not in ("check", "ok")
        )
        print(
            f"{'ok  ' if row['ok'] else 'FAIL'} {row['check']}"
            + (f"  [{numbers}]" if numbers else "")
        )
    if report.failures:
        print(f"{len(report.failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"all {len(report.rows)} checks passed ({', '.join(PHOTOS)})")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "stages":
        run_stages(Path(argv[1]), Path(argv[2]))
        return 0
    if len(argv) != 2 or argv[0] not in ("photos", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "photos":
        make_photos(Path(argv[1]))
        return 0
    return check(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
