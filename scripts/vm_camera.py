#!/usr/bin/env python3
"""Try the daemon without a camera: libcamera's virtual camera in a VM, the real
picamera2 path, the real unit. Maintainer tool (the VM harness of scripts/support/vm.py).

    uv run python -m scripts.vm_camera [--photo PATH] [--models DIR] [--frames N]
        [--size WxH] [--out DIR]

Boots Debian trixie under qemu (TCG; the image is built on first use, ~80 s, and kept a
week), puts PATH behind libcamera 0.4's virtual camera (scaled to WxH), runs da3-edge's
daemon with ``source = "picamera2"`` under the unmodified systemd unit until N frames
are written, stops it, and copies the frames, the last status.json and the journal to
DIR. Under emulation one frame of the small test model takes 21-280 s (machine by
machine): the timings mean nothing, the path is what is real. Needs root (mmdebstrap),
qemu-system-x86 and uv: requirements/apt.txt. Step by step: docs/how-to/virtual-camera.md.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from pathlib import Path

from PIL import Image

from scripts.support import vm


def size(text: str) -> tuple[int, int]:
    w, sep, h = text.partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 64 or int(h) < 64:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WxH, e.g. 640x480 (each >= 64)")
    return int(w), int(h)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--photo",
        type=Path,
        help="the image the virtual camera shows "
        "(default: a photograph from scikit-image's test data)",
    )
    ap.add_argument(
        "--models",
        type=Path,
        help="a model directory with fp16 cores "
        "(default: the VM's random-weight test models, 42x56, built if missing)",
    )
    ap.add_argument("--frames", type=int, default=3, help="frames to write (default 3)")
    ap.add_argument("--size", type=size, default=(640, 480), help="WxH (default 640x480)")
    ap.add_argument("--out", type=Path, default=Path("vm-camera"), help="(default ./vm-camera)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.frames < 1:
        ap.error("--frames must be at least 1")
    for tool in vm.missing_tools():
        ap.error(
            f"{tool} not found: install requirements/apt.txt (scripts/install-host-packages.sh)"
        )
    from scripts.support.models import build_vm_models
    from scripts.support.photos import photo_path

    photo = args.photo or photo_path("coffee.png")
    try:
        with Image.open(photo) as img:
            buf = io.BytesIO()
            img.convert("RGB").save(buf, "JPEG", quality=95)
    except (OSError, ValueError) as e:
        ap.error(f"--photo {photo}: {e}")
    models = args.models or build_vm_models()
    if not (models / "manifest.json").is_file():
        ap.error(f"--models {models}: no manifest.json there")
    width, height = args.size
    files = vm.camera_job(buf.getvalue(), width, height, models, lay_out=True)
    # Start-up, then each frame: tens of seconds under TCG at the VM's core, minutes at a
    # bigger one (--models).
    wait = 120 + 300 * args.frames
    job = vm.CAMERA_JOB + vm.LAY_OUT + f"virtual_camera\npart daemon daemon {args.frames} {wait}\n"
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    print(
        f"booting the VM: {photo.name} at {width}x{height}, {args.frames} frames "
        f"(emulated: 21-280 s a frame; at most {wait} s)",
        flush=True,
    )
    shares = vm.camera_shares(lay_out=True)
    result = vm.run(job, files, timeout=wait + 300, memory_mib=2048, job=out, shares=shares)
    log = (out / "daemon.txt").read_text(errors="replace") if (out / "daemon.txt").exists() else ""
    rc = int((out / "daemon.rc").read_text()) if (out / "daemon.rc").exists() else result.rc
    if rc != 0 or not (out / "status.json").exists():
        print(log or result.out, file=sys.stderr)
        print(
            f"vm-camera: the daemon part failed (exit {rc}); console: {out / 'console.txt'}",
            file=sys.stderr,
        )
        return 1
    status = json.loads((out / "status.json").read_text())
    frames = sorted((out / "daemon-frames").iterdir()) if (out / "daemon-frames").exists() else []
    print(f"state: {status['state']}; counters: {json.dumps(status['counters'])}")
    if status.get("model", {}).get("random_init"):
        print("model: random-init weights (test models): the depth is not DA3's")
    print(
        f"{len(frames)} frames in {out / 'daemon-frames'}; status.json, the journal "
        f"(daemon.txt) and the console beside them"
    )
    return 0 if frames else 1


if __name__ == "__main__":
    raise SystemExit(main())
