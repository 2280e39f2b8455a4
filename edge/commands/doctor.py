"""``da3-edge doctor``: is this machine ready to run da3-edge, and if not, why.

Checks, each OK / WARN / FAIL with one line of detail: platform and CPU features,
the fp16 policy, the kernel families the CPU can use and the precision recommended
there, LiteRT (imports, and a model loads with XNNPACK), ExecuTorch's runner
(optional: installed for this da3-edge, and it loads), the model directory (manifest,
sizes, hashes, and the stages ``auto`` runs with it), cameras (picamera2 importable,
/dev/video* and /dev/media* present and openable), the store and state directories
(writable, free space), and on a Raspberry Pi the temperature and throttling flags.
Exit 1 when a FAIL blocks running (no LiteRT, no usable model, unwritable store);
WARNs (no camera here, no ExecuTorch) do not.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge.commands import options
from edge.errors import first_line, printable

if TYPE_CHECKING:
    from edge.models import Manifest
    from edge.platform import CpuFeatures

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    name: str
    status: str
    detail: str


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge doctor",
        description="Check that this machine can run da3-edge: CPU, LiteRT, models, "
        "cameras, store; exit 1 if something blocks running.",
    )
    options.add_models(p)
    p.add_argument(
        "--store", metavar="DIR", help="frame store directory (default: as `da3-edge run`)"
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    return p


def check_platform() -> list[Check]:
    from edge import platform

    f = platform.cpu_features()
    feats = (
        ", ".join(k for k in ("fp16", "dotprod", "i8mm", "sme", "lse") if getattr(f, k)) or "none"
    )
    policy = platform.fp16_arithmetic(precision="fp16")
    if os.environ.get(platform.ENV_FP16, "").strip():
        why = f"set by {platform.ENV_FP16}"
    elif policy:
        why = "this CPU has native FP16 arithmetic"
    else:
        why = "no native FP16 arithmetic on this CPU"
    return [
        Check("cpu", OK, f"{f.model} ({f.machine}, {f.cores} cores); Arm features: {feats}"),
        Check(
            "fp16 policy",
            OK,
            f"fp16 arithmetic on for fp16 models (XNNPACK FORCE_FP16; {why}); "
            "fp32 and int8 models run as exported"
            if policy
            else f"fp16 arithmetic off ({why}): fp16 models compute in fp32",
        ),
        check_kernels(f),
    ]


def check_kernels(f: CpuFeatures) -> Check:
    """The kernel families this CPU can use and the precision recommended here."""
    from edge import platform

    families = platform.kernel_families(f)
    precision, why = platform.recommended_precision(f)
    where = (
        "; ".join(families)
        if families
        else "not an Arm CPU: XNNPACK's own kernels for it (KleidiAI is Arm's)"
    )
    return Check("kernels", OK, f"{where}. Recommended precision: {precision} ({why})")


def check_litert() -> Check:
    if importlib.util.find_spec("ai_edge_litert") is None:
        return Check(
            "litert",
            FAIL,
            "ai_edge_litert is not installed: reinstall da3-edge (uv sync / pip install da3-edge)",
        )
    from importlib.metadata import version

    from edge import platform

    blocker = platform.litert_blocker()
    if blocker:
        return Check("litert", FAIL, f"ai-edge-litert {version('ai-edge-litert')}: {blocker}")
    return Check("litert", OK, f"ai-edge-litert {version('ai-edge-litert')}")


def check_executorch() -> Check:
    """The torch-free runner for the ExecuTorch stages: installed, and it loads."""
    from edge import etrunner

    usable, detail = etrunner.status()
    if usable:
        return Check("executorch", OK, f"the ExecuTorch stages can run: {detail}")
    return Check("executorch", WARN, f"optional, without it the numpy stages run: {detail}")


def check_stages(manifest: Manifest) -> Check:
    """What ``--stages auto`` (the default) runs with this model folder, and why."""
    from edge import stages

    backend = stages.choose(manifest=manifest, threads=1)
    backend.close()
    return Check("stages", OK, f"auto runs {backend.name} ({backend.reason})")


def check_models(directory: Path) -> list[Check]:
    from edge.core import Core
    from edge.errors import EdgeError
    from edge.models import Manifest

    try:
        manifest = Manifest.load(directory)
    except EdgeError as exc:
        return [Check("models", FAIL, str(exc))]
    cores = manifest.cores()
    if not cores:
        return [Check("models", FAIL, f"{directory}: the manifest lists no core models")]
    out = []
    bad = 0
    for artifact in cores:
        try:
            manifest.verify(artifact)
        except EdgeError as exc:
            bad += 1
            out.append(Check(f"model {artifact.name}", FAIL, str(exc)))
    loaded = ""
    good = [a for a in cores if not any(c.name == f"model {a.name}" for c in out)]
    if good:
        first = good[0]
        try:
            with Core(manifest.artifact_path(first), threads=1, precision=first.precision) as core:
                loaded = f"; LiteRT loads {first.file} ({core.shape[0]}x{core.shape[1]})"
        except EdgeError as exc:
            out.append(Check(f"model {first.name}", FAIL, str(exc)))
            bad += 1
    flag = " — RANDOM-INIT (not a real model)" if any(a.random_init for a in cores) else ""
    status = OK if bad == 0 else (WARN if good else FAIL)
    out.append(check_stages(manifest))
    out.insert(
        0,
        Check(
            "models",
            status,
            f"{directory}: {len(cores) - bad}/{len(cores)} intact, sizes "
            f"{', '.join(map(str, manifest.sizes()))}{loaded}{flag}",
        ),
    )
    return out


def check_cameras() -> list[Check]:
    if importlib.util.find_spec("cv2") is not None:
        opencv = Check("opencv", OK, "importable (opencv and video replay sources available)")
    else:
        why = "not importable (USB cameras: pip install opencv-python-headless)"
        opencv = Check("opencv", WARN, why)
    return [_camera_devices(), _picamera2(), opencv]


def _camera_devices() -> Check:
    video = sorted(str(p) for p in Path("/dev").glob("video*"))
    media = sorted(str(p) for p in Path("/dev").glob("media*"))
    if not (video or media):
        why = "no /dev/video* or /dev/media*: no camera here (replay and fake sources still work)"
        return Check("camera devices", WARN, why)
    unreadable = [p for p in video + media if not os.access(p, os.R_OK | os.W_OK)]
    detail = f"{len(video)} /dev/video*, {len(media)} /dev/media*"
    if unreadable:
        return Check(
            "camera devices",
            WARN,
            f"{detail}; no read/write access to {', '.join(unreadable[:3])} "
            "(add the user to the video group)",
        )
    return Check("camera devices", OK, detail)


def _picamera2() -> Check:
    if importlib.util.find_spec("picamera2") is None:
        return Check(
            "picamera2",
            WARN,
            "not importable (Pi camera: sudo apt install python3-picamera2, "
            "venv with --system-site-packages)",
        )
    # Really import it: on bookworm a numpy 2 in the venv makes the import fail
    # although the package is there (its apt-built extensions need numpy 1).
    try:
        importlib.import_module("picamera2")
    except Exception as exc:
        return Check(
            "picamera2",
            WARN,
            f"installed but fails to import ({type(exc).__name__}: {first_line(exc)}); "
            "bookworm needs numpy<2 in the venv (scripts/install-pi.sh pins it)",
        )
    return Check("picamera2", OK, "importable")


def check_dir(name: str, directory: Path, blocking: bool) -> Check:
    probe_dir = directory
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    try:
        free = shutil.disk_usage(probe_dir).free
    except OSError as exc:
        return Check(name, FAIL if blocking else WARN, f"{directory}: {exc.strerror or exc}")
    writable = os.access(probe_dir, os.W_OK)
    detail = (
        f"{directory}: {'writable' if writable else 'NOT writable'}, {free / 2**20:.0f} MiB free"
    )
    if not writable:
        return Check(name, FAIL if blocking else WARN, detail)
    if free < 64 * 2**20:
        return Check(name, WARN, detail + " (under 64 MiB)")
    return Check(name, OK, detail)


def check_store(given: Path | None) -> Check:
    """The store ``da3-edge run`` would use: there is a private place for it, and one
    that exists already can be trusted (edge.store.trust.check_root)."""
    from edge.errors import ConfigError, UnsafeStore
    from edge.store.layout import default_store_dir
    from edge.store.trust import refuse_unsafe

    try:
        store = given or default_store_dir()
    except ConfigError as exc:  # as a service user outside its unit, say
        return Check("store", WARN, f"{exc} (under its unit the service's is /run/da3-edge)")
    try:
        refuse_unsafe(store)
    except UnsafeStore as exc:
        return Check("store", FAIL, str(exc))
    st = store.stat() if store.is_dir() else None
    if st is not None and st.st_uid != os.geteuid() and not os.access(store, os.W_OK):
        return check_readers_store(store, st)
    return check_dir("store", store, blocking=True)


def check_readers_store(store: Path, st: os.stat_result) -> Check:
    """A store another user's daemon writes (the service's, for the Pi's owner): ready
    when it can be read here, which is all its readers need."""
    import grp
    import pwd

    try:
        owner, group = pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        owner, group = str(st.st_uid), str(st.st_gid)
    if os.access(store, os.R_OK | os.X_OK):
        return Check("store", OK, f"{store}: {owner}'s daemon writes it; readable here")
    return Check(
        "store",
        FAIL,
        f"{store}: {owner}'s daemon writes it, and you cannot read it: join its group "
        f"(sudo usermod -aG {group} $USER), then log in again",
    )


def check_camera_controls(store: Path | None) -> list[Check]:
    """What the running daemon's camera did of its [camera] controls, as its source read
    them back (status.json in the store), when a daemon has run there."""
    from edge.errors import ConfigError
    from edge.store import layout
    from edge.store.read import read_json

    try:
        status = read_json(store or _default_store(), layout.STATUS)
    except ConfigError:
        return []
    camera = (status or {}).get("camera")
    if not isinstance(camera, dict) or not isinstance(camera.get("controls"), dict):
        return []  # none, or not what a daemon writes: nothing to show
    shown = ", ".join(f"{k} {v}" for k, v in sorted(camera["controls"].items()))
    return [Check("camera controls", OK, f"{camera.get('source')}: {shown} (read back)")]


def _default_store() -> Path:
    from edge.store.layout import default_store_dir

    return default_store_dir()


def check_pi() -> list[Check]:
    out = []
    temp = Path("/sys/class/thermal/thermal_zone0/temp")
    if temp.exists():
        try:
            celsius = int(temp.read_text().strip()) / 1000
            out.append(Check("temperature", WARN if celsius >= 80 else OK, f"{celsius:.1f} C"))
        except (OSError, ValueError):
            pass
    if shutil.which("vcgencmd"):
        res = subprocess.run(
            ["vcgencmd", "get_throttled"], capture_output=True, text=True, check=False
        )
        value = res.stdout.strip()
        try:
            bits = int(value.split("=")[1], 16)
        except (IndexError, ValueError):
            bits = -1
        out.append(Check("throttling", OK if bits == 0 else WARN, value or "unknown"))
    return out


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    from edge.models import resolve_models_dir

    checks = check_platform()
    litert = check_litert()
    checks += [litert, check_executorch()]
    if litert.status != FAIL:  # the model check loads one with LiteRT
        checks += check_models(resolve_models_dir(ns.models))
    checks += check_cameras()
    store = Path(ns.store) if ns.store else None
    checks.append(check_store(store))
    checks += check_camera_controls(store)
    checks += check_pi()
    failed = [c for c in checks if c.status == FAIL]
    if ns.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for c in checks:
            print(f"{c.status:>4}  {c.name:<16} {printable(c.detail)}")
        print(
            f"\n{'not ready: ' + str(len(failed)) + ' blocking problem(s)' if failed else 'ready'}"
        )
    sys.stdout.flush()
    return 1 if failed else 0
