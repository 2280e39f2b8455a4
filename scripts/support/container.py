"""A real systemd, in a Debian bookworm container, for the unit's end-to-end test.

The root filesystem comes from Debian's packages with mmdebstrap (a tarball kept per
machine under $DA3_EDGE_ROOTFS_CACHE, default ~/.cache/da3-edge/rootfs; ~20 s to
build); each run extracts a fresh copy, installs da3-edge into it (wheels for the
container's Python 3.11, from the project's lock), the unmodified unit, a config and a
small model, and boots it with systemd-nspawn.
Commands run inside through nsenter (machinectl needs a host systemd, and there is
none here). What nspawn leaves on the host (its cgroups, /run/systemd/nspawn) is
cleaned up after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from . import ROOT

PACKAGES = "systemd,systemd-sysv,dbus,python3,passwd,procps"  # procps: /bin/kill, as on Pi OS
# Kept per machine, not per checkout (scripts/arm-lane.sh keeps its root there too), named
# by what it is made from, and made anew after a week (Debian's updates).
CACHE = Path(
    os.environ.get("DA3_EDGE_ROOTFS_CACHE", Path.home() / ".cache" / "da3-edge" / "rootfs")
)
MAX_AGE_S = 7 * 86400


def rootfs_tarball() -> Path:
    tar = CACHE / f"bookworm-{os.uname().machine}-minbase-{PACKAGES.replace(',', '+')}.tar"
    if tar.exists() and time.time() - tar.stat().st_mtime > MAX_AGE_S:
        tar.unlink()
    if not tar.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = tar.with_suffix(".partial.tar")
        subprocess.run(
            ["mmdebstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(tmp)],
            check=True,
            capture_output=True,
        )
        tmp.rename(tar)
    return tar


def uv_target(target: Path, python_version: str) -> list[str]:
    """``uv pip install`` into ``target`` for another Python on x86_64 Linux."""
    platform = ["--python-version", python_version, "--python-platform", "x86_64-manylinux_2_28"]
    return ["uv", "pip", "install", "-q", "--target", str(target), *platform]


def install_locked(target: Path, python_version: str) -> None:
    """da3-edge's runtime dependencies, as locked (not the project itself), into
    ``target`` for ``python_version``: what the container and the VM run it with."""
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "requirements.txt"
        export = ["uv", "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes"]
        install = [*uv_target(target, python_version), "-r", str(reqs)]
        for cmd in ([*export, "-o", str(reqs)], install):
            proc = _run(cmd, cwd=ROOT)
            assert proc.returncode == 0, f"{' '.join(cmd[:4])}...: {proc.stderr}"


def daemon_models(models: Path) -> list[Path]:
    """What the unit's daemon needs of a model directory: the manifest and the fp16
    cores (the default precision)."""
    return [
        f
        for f in sorted(models.iterdir())
        if f.name == "manifest.json" or f.name.endswith("_fp16.tflite")
    ]


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]


class Container:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1 = 0
        self._had_nspawn_run = Path("/run/systemd/nspawn").exists()

    @classmethod
    def build(cls, root: Path, models: Path, config: str) -> Container:
        with tarfile.open(rootfs_tarball()) as tar:
            tar.extractall(root, filter="fully_trusted")
        lib = root / "opt/da3-edge/lib"
        install_locked(lib, "3.11")
        proc = _run([*uv_target(lib, "3.11"), "--no-deps", str(ROOT)], cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        # The unit runs /opt/da3-edge/venv/bin/da3-edge; here that is the container's
        # own python3 with the packages above (the Pi installer makes a real venv).
        bin_dir = root / "opt/da3-edge/venv/bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "da3-edge").write_text(
            '#!/bin/sh\nPYTHONPATH=/opt/da3-edge/lib exec /usr/bin/python3 -m edge "$@"\n'
        )
        (bin_dir / "da3-edge").chmod(0o755)
        for unit in ("da3-edge.service", "da3-edge-serve.service", "da3-edge-publish.service"):
            shutil.copy(ROOT / "systemd" / unit, root / "etc/systemd/system" / unit)
        (root / "etc/da3-edge").mkdir()
        (root / "etc/da3-edge/da3-edge.toml").write_text(config)
        target = root / "opt/da3-edge/models"
        target.mkdir(parents=True)
        for f in daemon_models(models):
            shutil.copy(f, target / f.name)
        # The users as scripts/install-pi.sh makes them: the daemon's (its home is its state
        # folder), and serve's and publish's in its group.
        for user in (
            ["--user-group", "--home-dir", "/var/lib/da3-edge", "da3-edge"],
            ["--gid", "da3-edge", "--home-dir", "/nonexistent", "da3-edge-serve"],
            ["--gid", "da3-edge", "--home-dir", "/nonexistent", "da3-edge-publish"],
        ):
            system = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
            made = _run(["chroot", str(root), "useradd", *system, *user])
            assert made.returncode == 0, made.stderr
        return cls(root)

    def drop_in(self, name: str, text: str) -> None:
        d = self.root / "etc/systemd/system/da3-edge.service.d"
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)

    def boot(self, timeout: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [
                "systemd-nspawn",
                "-D",
                str(self.root),
                "-b",
                "--register=no",
                "--keep-unit",
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            children = _run(["pgrep", "-P", str(self.proc.pid)]).stdout.split()
            if children:
                self.pid1 = int(children[0])
                state = self.sh("systemctl is-system-running").stdout.strip()
                if state in ("running", "degraded"):
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"systemd-nspawn exited with {self.proc.returncode}")
            time.sleep(0.3)
        raise AssertionError("the container's systemd did not come up")

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return _run(["nsenter", "-t", str(self.pid1), "-a", "--", "sh", "-c", command])

    def show(self, *props: str, unit: str = "da3-edge") -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def wait(self, check: object, timeout: float, what: str) -> object:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = check()  # type: ignore[operator]
            if value:
                return value
            time.sleep(0.5)
        journal = self.sh("journalctl -u 'da3-edge*' --no-pager -n 40").stdout
        raise AssertionError(f"timed out waiting for {what}\n{journal}")

    def shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.sh("systemctl poweroff")
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # nspawn leaves its cgroups at the root of the host hierarchies.
        hierarchies = Path("/sys/fs/cgroup")
        for payload in [*sorted(hierarchies.glob("*/payload")), hierarchies / "payload"]:
            if payload.is_dir():
                for d in sorted(
                    (p for p in payload.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
                ):
                    with contextlib.suppress(OSError):
                        d.rmdir()
                with contextlib.suppress(OSError):
                    payload.rmdir()
        if not self._had_nspawn_run:
            shutil.rmtree("/run/systemd/nspawn", ignore_errors=True)
