"""python -m scripts.soak: see the package's docstring (``--help``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from scripts.support import ROOT
from scripts.support import soak as package
from scripts.support.soak.report import plot, recheck, verdict
from scripts.support.soak.rules import check
from scripts.support.soak.run import Soak
from scripts.support.soak.schedule import STORE_MIB, windows


def size(text: str) -> tuple[int, int]:
    w, sep, h = text.partition("x")
    if not sep or not w.isdigit() or not h.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected WxH, e.g. 640x480")
    return int(w), int(h)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=(package.__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join((package.__doc__ or "").split("\n\n")[1:]),
    )
    ap.add_argument("--minutes", type=float, default=60.0, help="length of the run (default 60)")
    ap.add_argument("--out", type=Path, default=Path("soak"), help="(default ./soak)")
    ap.add_argument(
        "--models",
        type=Path,
        help="model directory (default: the small random-weight test models, built if missing)",
    )
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp32", "int8"))
    ap.add_argument("--fps", type=float, default=2.0, help="camera frames/s (default 2)")
    ap.add_argument("--size", type=size, default=(640, 480), help="WxH (default 640x480)")
    ap.add_argument("--threads", type=int, default=1, help="core threads (default 1)")
    ap.add_argument("--sample-every", type=float, help="seconds (default: 5, 10 past 10 min)")
    ap.add_argument("--plots", action="store_true", help="also draw OUT/soak.png")
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="judge the finished run in OUT again by these rules (no run)",
    )
    return ap


def soak_run(args: argparse.Namespace) -> int:
    """The run itself, in a private mount namespace: the report, its files, the verdict."""
    models = args.models
    if models is None:
        from scripts.support.models import build_small_models

        models = build_small_models()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("daemon.log", "samples.jsonl", "events.jsonl", "report.json"):
        (out / name).unlink(missing_ok=True)
    seconds, every = args.minutes * 60, args.sample_every or (5.0 if args.minutes <= 10 else 10.0)
    soak = Soak(
        out, seconds, models.resolve(), args.precision, args.fps, args.size, args.threads, every
    )
    soak.mount.mkdir(exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={STORE_MIB}m", "soak", str(soak.mount)], check=True
    )
    try:
        soak.run()
    finally:
        subprocess.run(["umount", "-l", str(soak.mount)], check=False)
    report = check(soak)
    report["setup"] = {
        "minutes": args.minutes,
        "models": str(models),
        "precision": args.precision,
        "fps": args.fps,
        "size": list(args.size),
        "threads": args.threads,
        "faults": [asdict(f) for f in soak.faults],
        "windows_s": windows(soak.seconds),
    }
    for name, rows in (("samples.jsonl", soak.samples), ("events.jsonl", soak.events)):
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.plots:
        plot(soak, out / "soak.png")
    return verdict(report, out)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.recheck:
        out = args.out.resolve()
        report = recheck(out)
        (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        return verdict(report, out)
    if args.minutes < 2:
        ap.error("--minutes must be at least 2 (the schedule needs room)")
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        print("soak: needs Linux and root (a tmpfs store, remounted read-only)", file=sys.stderr)
        return 2
    if os.environ.get("SOAK_NAMESPACE") != "1":
        # A private mount namespace: the tmpfs goes with the process, however it ends.
        env = {**os.environ, "SOAK_NAMESPACE": "1"}
        again = [sys.executable, "-m", "scripts.soak", *sys.argv[1:]]
        private = ["unshare", "--mount", "--propagation", "private", *again]
        return subprocess.call(private, env=env, cwd=ROOT)
    return soak_run(args)


if __name__ == "__main__":
    raise SystemExit(main())
