"""``da3-edge update``: a Pi installs a new da3-edge beside the running one, from the Pi.

What refuses an update is checked here, before anything changes: root, the wheel's
SHA-256, its Python tags and Requires-Python, its version (no downgrade unless asked).
The work is the new wheel's own installer (``edge/data/deploy/scripts/install-pi.sh``
in it): a venv of its own beside the running one, the start-up checks and its own
``doctor`` with it (a blocking problem: nothing switched), then the switch and the
units restarted; the old venv and units are back in one step when the daemon does not
reach READY in time. The config, credentials, models and store
stay; models brought with ``--models`` are put back with the rest on a rollback. See
docs/how-to/raspberry-pi.md (Later).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from edge import deploy
from edge.errors import DeployError
from edge.version import version

# How long the daemon has to say READY after the switch; a Pi 5 takes seconds.
READY_TIMEOUT_S = 180


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge update",
        description="Install another da3-edge wheel on this machine, as root: beside the "
        "running version, checked with the installed config and models and by its own doctor "
        "before the switch; "
        "the units are restarted, and the running version comes back in one step when the "
        "daemon does not reach READY in time. /etc/da3-edge, the models and the store stay.",
    )
    p.add_argument("wheel", metavar="WHEEL|URL", help="the da3_edge-*.whl file, or its URL")
    p.add_argument(
        "--sha256",
        metavar="HEX",
        help="the wheel's SHA-256 (needed with a URL; checked when given with a file)",
    )
    p.add_argument(
        "--models",
        metavar="DIR|URL",
        help="also replace the models (put back if the update is rolled back): a model "
        "directory, or a pack's URL (`da3-edge models pack`) with --models-sha256",
    )
    p.add_argument("--models-sha256", metavar="HEX", help="with --models URL: the pack's SHA-256")
    p.add_argument(
        "--allow-downgrade", action="store_true", help="install an older version than this one"
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=READY_TIMEOUT_S,
        metavar="S",
        help=f"seconds the daemon has to reach READY after the switch (default: {READY_TIMEOUT_S})",
    )
    return p


def _hex(value: str, flag: str) -> str:
    text = value.strip().lower()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise DeployError(f"{flag} must be 64 hex digits")
    return text


def _fetch(ns: argparse.Namespace, into: Path) -> Path:
    """The wheel, copied (or downloaded) into root's own folder and its SHA-256 checked
    there: what is installed is what was checked, whoever can write where it came from."""
    from edge import packs
    from edge.models import sha256_file

    want = _hex(ns.sha256, "--sha256") if ns.sha256 else None
    if "://" in ns.wheel:
        if want is None:
            raise DeployError("a wheel's URL needs --sha256 HEX")
        name = unquote(urlsplit(ns.wheel).path.rsplit("/", 1)[-1])
        if not name.endswith(".whl") or not name.isprintable() or "/" in name or "\\" in name:
            raise DeployError(f"{ns.wheel}: the URL must end in the wheel's file name (*.whl)")
        dest = into / name
        meter = packs.Meter("wheel: download", lambda s: print(s, file=sys.stderr, flush=True))
        packs.download(ns.wheel, want, dest, meter)
        return dest
    src = Path(str(ns.wheel))
    if not src.is_file():
        raise DeployError(f"{src}: no such file")
    dest = into / src.name
    shutil.copyfile(src, dest)
    if want is not None and (got := sha256_file(dest)) != want:
        raise DeployError(f"{src}: SHA-256 {got}, expected {want}: not the wheel asked for")
    return dest


def _check(wheel_path: Path, running: str, allow_downgrade: bool) -> deploy.Wheel:
    """The refusals, one line each; the wheel when it may go on."""
    wheel = deploy.Wheel.read(wheel_path)
    why = wheel.why_not_here()
    if why is not None:
        raise DeployError(f"{wheel_path.name}: {why}: nothing changed")
    if deploy.version_key(wheel.version) < deploy.version_key(running) and not allow_downgrade:
        raise DeployError(
            f"{wheel_path.name}: version {wheel.version} is older than the installed "
            f"{running}: nothing changed (--allow-downgrade installs it)"
        )
    return wheel


def _installer_args(ns: argparse.Namespace, wheel: Path) -> list[str]:
    args = ["--from", str(wheel), "--ready-timeout", f"{ns.ready_timeout:g}"]
    url = bool(ns.models) and "://" in ns.models
    if ns.models_sha256 and not url:
        raise DeployError("--models-sha256 goes with --models URL")
    if url:
        if not ns.models_sha256:
            raise DeployError("--models URL needs --models-sha256 HEX")
        sha = _hex(ns.models_sha256, "--models-sha256")
        args += ["--models-url", ns.models, "--models-sha256", sha]
    elif ns.models:
        args += ["--models", str(Path(ns.models).resolve())]
    return args


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    if ns.ready_timeout <= 0:
        raise DeployError("--ready-timeout must be more than 0 seconds")
    if os.geteuid() != 0:
        raise DeployError("run as root: sudo da3-edge update ...")
    # Root's own folder (0700): the wheel and the installer run from here, not from a
    # folder another user can write.
    with tempfile.TemporaryDirectory(prefix="da3-edge-update-") as name:
        tmp = Path(name)
        path = _fetch(ns, tmp)
        running = version()
        wheel = _check(path, running, ns.allow_downgrade)
        more = _installer_args(ns, path)
        tree = wheel.extract_tree(tmp / "deploy")
        print(f"da3-edge update: {running} -> {wheel.version} ({path.name})", flush=True)
        installer = tree / "scripts" / "install-pi.sh"
        proc = subprocess.run(["bash", str(installer), *more], check=False)
    return 0 if proc.returncode == 0 else 1
