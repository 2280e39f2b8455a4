"""A real Linux in a virtual machine, for what this machine's kernel cannot run.

Debian trixie's kernel (6.12: dma-buf heaps, udmabuf), systemd and libcamera 0.4 with
its virtual camera, from Debian's packages with mmdebstrap, in an ext4 image kept per
machine beside the container's root (a week, like it; ~2 min to build). Each ``run``
boots it from that image with a throw-away overlay (``-snapshot``), or from a disk of
its own (``overlay``) that the next boot sees: the host's job (a shell script and its
files) reaches it over 9p, a unit in the image runs it, writes its output and exit
status back, and powers off. The VM never outlives ``run``: on a timeout qemu is killed
and the console's last lines are in the failure. The image also has cloud-init, set up
as Raspberry Pi OS trixie sets it up, for a first boot from a FAT ``bootfs`` partition
(scripts/support/fat.py makes one); other boots turn it off on the kernel command line.

qemu runs with TCG, not KVM: this machine's ``/dev/kvm`` opens, but its instruction
emulator stops Debian's kernel early ("KVM internal error ... emulation failure" on a
VEX ``shlx`` in the kernel's decompressor, and on ``lock cmpxchg16b`` when booted from
the uncompressed image). Why: the KVM here is PVM (``/sys/module/kvm_pvm``; shadow
paging, ``kvm.tdp_mmu=N``), made to run guest kernels built for it (PVM guests);
Debian's is not one, and stops in KVM's instruction emulator as above. Under TCG the
same image boots, runs a job and powers off in ~30 s. ``DA3_EDGE_VM_ACCEL=kvm`` tries
KVM where it works; ``DA3_EDGE_VM_CPU`` picks qemu's CPU model (default ``max``; under
``Nehalem`` the runtime's wheels stop on an illegal instruction).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import ROOT
from .container import CACHE, MAX_AGE_S, daemon_models, install_locked, uv_target

PACKAGES = (
    "systemd,systemd-sysv,udev,kmod,linux-image-amd64,initramfs-tools,"
    "python3,python3-libcamera,libcamera-ipa,libcamera-tools,"
    # picamera2's one dependency with a C part that PyPI has no wheel of (prctl: its
    # ffmpeg output imports it at package import).
    "python3-prctl,"
    # First boot as on Raspberry Pi OS trixie: cloud-init (off unless a boot asks for
    # it: ``cloud-init=disabled`` on the kernel command line), its network as Pi OS has
    # it (netplan, which cloud-init renders Imager's network-config to, for
    # NetworkManager, which also brings the wired port up by itself), and what Pi OS Lite
    # has that cloud-init and Imager's user-data rely on (SSH, sudo, time zones, D-Bus for
    # systemd-run, resize2fs for cloud-init's resizefs).
    "cloud-init,network-manager,netplan.io,ca-certificates,openssh-server,sudo,tzdata,dbus,"
    "e2fsprogs,"
    # The installer's own apt packages, there already: installing them emulated costs a
    # first boot minutes (its apt path runs for real in the aarch64 lane's installer step).
    "python3-venv,g++"
)
# Unmodified picamera2 from PyPI and what it imports, pinned; wheels for the VM's
# Python 3.13 except pidng (an sdist: its pure-Python part is all picamera2 imports).
PICAMERA2 = ("picamera2==0.3.38", "videodev2==0.0.4", "simplejpeg==1.9.0", "piexif==1.1.3")
PIDNG = "pidng==4.0.9"
VM_PYTHON = "3.13"
IMAGE_BYTES = 3 << 30  # sparse
# The unit that runs the host's job: /job (9p, tag "job") holds run.sh; its output and
# exit status go back there, then the machine powers off whatever happened.
JOB_UNIT = """[Unit]
Description=Run the host's job from the 9p share, then power off
After=multi-user.target

[Service]
Type=oneshot
ExecStartPre=/bin/mkdir -p /job
ExecStartPre=/bin/mount -t 9p -o trans=virtio,version=9p2000.L job /job
ExecStart=/bin/sh -c '/bin/sh /job/run.sh >/job/out.txt 2>&1; echo $? >/job/rc; sync'
ExecStopPost=/bin/systemctl poweroff --no-block

[Install]
WantedBy=multi-user.target
"""


# Raspberry Pi OS trixie's cloud-init set-up (pi-gen, stage2/04-cloud-init): NoCloud
# seeded from the FAT boot partition at /boot/firmware, which cloud-init waits for.
PI_CLOUD_CFG = """# As Raspberry Pi OS trixie (pi-gen's 99_raspberry-pi.cfg): NoCloud from the boot partition.
datasource_list: [ NoCloud, None ]
datasource:
  NoCloud:
    seedfrom: file:///boot/firmware
# Host keys: made once by the image's own service, not by cloud-init.
ssh_deletekeys: false
ssh_genkeytypes: []
"""
# nofail: the other boots have no such disk. A long device timeout: on a loaded machine
# an emulated boot's udev can take well over 10 s to announce it (seen: a first boot
# beside the aarch64 lane timed out at 10 s, and cloud-init never ran).
PI_FSTAB = "LABEL=bootfs /boot/firmware vfat defaults,nofail,x-systemd.device-timeout=5min 0 2\n"
PI_FIRMWARE_MOUNT = "[Unit]\nRequiresMountsFor=/boot/firmware\n"


def host_cas() -> list[Path]:
    """The host's own CA certificates (a TLS-intercepting proxy's): the image trusts them
    too, and cloud-init's stages pass ``SSL_CERT_FILE`` to what they run (uv reads its
    own roots otherwise), as scripts/arm/installer-check.sh does for its chroot."""
    return sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))


@dataclass
class Result:
    rc: int
    out: str
    console: str
    job: Path  # the job directory, with whatever the job wrote there
    seconds: float = 0.0  # the host's wall time from starting qemu to its exit


def _key() -> str:
    made_from = (PACKAGES + JOB_UNIT + PI_CLOUD_CFG + PI_FSTAB + PI_FIRMWARE_MOUNT).encode()
    return hashlib.sha256(made_from + b"".join(c.read_bytes() for c in host_cas())).hexdigest()[:12]


def image() -> Path:
    """The VM's directory (root.img, vmlinuz, initrd.img), built if missing or stale."""
    vm = CACHE / f"trixie-amd64-vm-{_key()}"
    done = vm / "root.img"
    if done.exists() and time.time() - done.stat().st_mtime > MAX_AGE_S:
        shutil.rmtree(vm)
    if done.exists():
        return vm
    vm.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=vm) as tmp:
        tar, root = Path(tmp) / "root.tar", Path(tmp) / "root"
        log = vm / "mmdebstrap.log"
        with log.open("w") as f:
            made = subprocess.run(
                ["mmdebstrap", "--variant=minbase", f"--include={PACKAGES}", "trixie", str(tar)],
                stdout=f,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if made.returncode != 0:
            raise AssertionError(f"mmdebstrap trixie failed: {log.read_text()[-2000:]}")
        root.mkdir()
        subprocess.run(["tar", "-xf", str(tar), "-C", str(root)], check=True)
        units = root / "etc/systemd/system"
        (units / "vm-job.service").write_text(JOB_UNIT)
        wants = units / "multi-user.target.wants"
        wants.mkdir(exist_ok=True)
        (wants / "vm-job.service").symlink_to("/etc/systemd/system/vm-job.service")
        (root / "etc/hostname").write_text("da3-edge-vm\n")
        _pi_first_boot(root)
        (kernel,) = (root / "boot").glob("vmlinuz-*")
        (initrd,) = (root / "boot").glob("initrd.img-*")
        shutil.copy(kernel, vm / "vmlinuz")
        shutil.copy(initrd, vm / "initrd.img")
        partial = vm / "root.img.partial"
        with partial.open("wb") as f:
            f.truncate(IMAGE_BYTES)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(root), str(partial)], check=True)
        partial.rename(done)
    # Images made from other inputs (1.2 GB each) go once this one is built: the cache
    # holds the image of the checkout that ran last.
    for stale in CACHE.glob("trixie-amd64-vm-*"):
        if stale != vm:
            shutil.rmtree(stale, ignore_errors=True)
    return vm


def _pi_first_boot(root: Path) -> None:
    """What a Raspberry Pi OS trixie image has for its first boot: cloud-init reading
    NoCloud from the boot partition (label ``bootfs``, mounted at /boot/firmware)."""
    (root / "etc/cloud/cloud.cfg.d/99_raspberry-pi.cfg").write_text(PI_CLOUD_CFG)
    (root / "boot/firmware").mkdir(parents=True, exist_ok=True)
    with (root / "etc/fstab").open("a") as f:
        f.write(PI_FSTAB)
    env = ""
    if cas := host_cas():
        for ca in cas:
            shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
        subprocess.run(
            ["chroot", str(root), "update-ca-certificates"], check=True, capture_output=True
        )
        env = "[Service]\nEnvironment=SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n"
    for unit in ("cloud-init-main", "cloud-init-local", "cloud-final"):
        drop_in = root / f"etc/systemd/system/{unit}.service.d"
        drop_in.mkdir(parents=True, exist_ok=True)
        (drop_in / "da3-edge-vm.conf").write_text(PI_FIRMWARE_MOUNT + env)


def picamera2_deps() -> Path:
    """Unmodified picamera2 from PyPI and what it imports, for the VM's Python: on a Pi
    these come from apt (python3-picamera2) into the system's site-packages, which the
    installer's venv sees. Kept beside the image, named by the pins."""
    pins = hashlib.sha256(repr((*PICAMERA2, PIDNG)).encode()).hexdigest()[:12]

    def build(deps: Path) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            _must([*uv_target(deps, VM_PYTHON), "--no-deps", "--only-binary", ":all:", *PICAMERA2])
            # pidng's sdist, built for the host's Python: its .py files are what picamera2
            # imports (the C part is for DNG compression, loaded only then).
            pidng = ["--target", f"{tmp}/pidng", "--python", sys.executable, "--no-deps", PIDNG]
            _must(["uv", "pip", "install", "-q", *pidng])
            shutil.copytree(
                Path(tmp) / "pidng/pidng",
                deps / "pidng",
                ignore=shutil.ignore_patterns("*.so", "__pycache__"),
            )

    return _kept(CACHE / f"vm-python{VM_PYTHON}-picamera2-{pins}", build)


def runtime_deps() -> Path:
    """da3-edge's runtime dependencies from the lock, for the VM's Python, where no
    installer has made a venv (``LAY_OUT``): the checkout's da3-edge runs with them.
    Kept beside the image, named by the lock."""
    lock = hashlib.sha256((ROOT / "uv.lock").read_bytes()).hexdigest()[:12]
    return _kept(
        CACHE / f"vm-python{VM_PYTHON}-deps-{lock}", lambda deps: install_locked(deps, VM_PYTHON)
    )


def _kept(deps: Path, build: Callable[[Path], None]) -> Path:
    """``deps`` as ``build`` fills it, built once: a directory without its ``.done``
    mark (a build that stopped half-way) is built again from nothing."""
    if (deps / ".done").exists():
        return deps
    shutil.rmtree(deps, ignore_errors=True)
    build(deps)
    (deps / ".done").touch()
    return deps


# libcamera's virtual camera fed /job/photo.jpg (scaled to the stream's size), and the
# real daemon, ``source = "picamera2"``, under the unmodified unit: shell set-up and
# functions for a job (``virtual_camera``, then ``part daemon daemon FRAMES WAIT``), its
# files from ``camera_job``, its shares from ``camera_shares``. On a machine the Pi
# installer has set up, the daemon is the installed one; elsewhere ``LAY_OUT`` first
# lays the checkout out as the installer would.
VIRTUAL_YAML = """%YAML 1.1
---
"Virtual0":
  supported_formats:
  - width: {width}
    height: {height}
{more}  frames:
    path: "/job/photo.jpg"
  model: "da3-edge test photo"
"""
DAEMON_CONFIG = """\
[camera]
source = "picamera2:0"
width = {width}
height = {height}
timeout = 5.0
fps = 4.0

[daemon]
stuck_after = 600.0
status_every = 1.0

[model]
size = {model_size}
"""
GUEST = Path(__file__).parent / "vm_guest"


def guest(name: str) -> str:
    """A shell program of scripts/support/vm_guest: a job's run.sh is such programs one
    after the other, after the variables they read (``variables``)."""
    return (GUEST / name).read_text()


# The top of every run.sh: ``mark WHAT`` adds the guest's uptime (s) and WHAT to
# /job/timeline.txt, which tests print: where a boot's minutes went, step by step;
# ``published`` counts the daemon's frames, which boots wait for.
PRELUDE = """mark() { echo "$(cut -d' ' -f1 /proc/uptime) $*" >>/job/timeline.txt; }
# Frames the store has published (frames/<10 digits>), not those being written (.tmp-*).
published() { ls -A /run/da3-edge/frames 2>/dev/null | grep -cE '^[0-9]{10}$'; }
mark "job started"
"""


def variables(**values: object) -> str:
    """Shell assignments for the top of a run.sh."""
    return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())


CAMERA_JOB = guest("camera-job.sh")
LAY_OUT = guest("lay-out.sh")


def core_size(models: Path, width: int, height: int) -> int:
    """The long side of the fp16 core of ``models`` (one size) the pipeline chooses for a
    ``width`` x ``height`` picture."""
    from edge.fakecore import FakeCore
    from edge.pipeline import Pipeline, PipelineSpec

    open_core, _ = FakeCore.opener()  # the choice reads the manifest; nothing runs
    with Pipeline.load(PipelineSpec(models, precision="fp16"), open_core=open_core) as pipe:
        return max(pipe.choose((height, width))[1])


def small_stream(models: Path, width: int, height: int) -> tuple[int, int] | None:
    """The small stream the daemon asks of a ``width`` x ``height`` camera for the fp16
    cores of ``models`` (edge.daemon.parts.camera_streams), which the virtual camera
    must offer: the long side of the core its pipeline chooses for that picture."""
    from edge.camera import Streams

    return Streams.for_core(width, height, core_size(models, width, height), full=False).small


def camera_job(
    photo_jpeg: bytes, width: int, height: int, models: Path, *, lay_out: bool = False
) -> dict[str, bytes]:
    """The files ``CAMERA_JOB`` needs in /job: the photo behind the virtual camera, its
    YAML (offering the small stream the daemon asks for ``models``' core too), the
    daemon's config; with ``lay_out`` (for ``LAY_OUT``), the models' fp16 files."""
    size = {"width": width, "height": height}
    small = small_stream(models, width, height)
    more = f"  - width: {small[0]}\n    height: {small[1]}\n" if small else ""
    files = {
        "photo.jpg": photo_jpeg,
        "virtual.yaml": VIRTUAL_YAML.format(**size, more=more).encode(),
        "da3-edge.toml": DAEMON_CONFIG.format(
            **size, model_size=core_size(models, width, height)
        ).encode(),
    }
    for f in daemon_models(models) if lay_out else ():
        files[f"models/{f.name}"] = f.read_bytes()
    return files


def camera_shares(lay_out: bool = False) -> dict[str, Path]:
    """The 9p shares ``CAMERA_JOB`` mounts (picamera2, the checkout for the patches),
    and with ``lay_out`` the locked dependencies ``LAY_OUT`` mounts."""
    shares = {"picamera2": picamera2_deps(), "src": ROOT}
    return shares | {"deps": runtime_deps()} if lay_out else shares


# From requirements/apt.txt; the last four for a first boot (overlay, scripts/support/fat.py).
TOOLS = (
    "qemu-system-x86_64",
    "mmdebstrap",
    "mkfs.ext4",
    "uv",
    "qemu-img",
    "mkfs.vfat",
    "mcopy",
    "fusefat",
)


def missing_tools() -> list[str]:
    """The host tools a VM job needs that are not on PATH."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _must(cmd: list[str], env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd[:4])}... failed:\n{proc.stdout}{proc.stderr}")


def qemu(
    job: Path,
    memory_mib: int,
    shares: dict[str, Path] | None,
    disk: Path | None,
    drives: tuple[Path, ...],
    *,
    network: bool,
    cloud_init: bool,
    forwards: dict[int, int] | None = None,
) -> list[str]:
    """The qemu command line of ``run``: the image's kernel, ``job`` and ``shares`` over
    9p, the disk (the image as built, in snapshot mode, or ``disk``) and ``drives``;
    ``forwards``: the host's 127.0.0.1:PORT to the guest's port, by host port."""
    vm = image()
    nic = "user,model=virtio-net-pci" + "".join(
        f",hostfwd=tcp:127.0.0.1:{host}-:{guest}" for host, guest in (forwards or {}).items()
    )
    accel = os.environ.get("DA3_EDGE_VM_ACCEL", "tcg")
    cmd = ["qemu-system-x86_64", "-accel", "tcg,thread=multi" if accel == "tcg" else accel]
    cmd += ["-cpu", os.environ.get("DA3_EDGE_VM_CPU", "max"), "-smp", "2", "-m", str(memory_mib)]
    cmd += ["-kernel", str(vm / "vmlinuz"), "-initrd", str(vm / "initrd.img")]
    append = "root=/dev/vda rw console=ttyS0 quiet" + ("" if cloud_init else " cloud-init=disabled")
    cmd += ["-append", append, "-virtfs", f"local,path={job},mount_tag=job,security_model=none"]
    cmd += ["-nographic", "-no-reboot", "-nic", nic if network else "none"]
    if disk is None:  # the image stays as built: every boot is a first one
        cmd += ["-drive", f"file={vm / 'root.img'},if=virtio,format=raw", "-snapshot"]
    else:
        cmd += ["-drive", f"file={disk},if=virtio,format=qcow2"]
    for drive in drives:
        cmd += ["-drive", f"file={drive},if=virtio,format=raw"]
    for tag, path in (shares or {}).items():
        cmd += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on"]
    return cmd


def run(
    script: str,
    files: dict[str, bytes] | None = None,
    *,
    timeout: float = 300,
    memory_mib: int = 1024,
    job: Path | None = None,
    shares: dict[str, Path] | None = None,
    disk: Path | None = None,
    drives: tuple[Path, ...] = (),
    network: bool = False,
    cloud_init: bool = False,
    forwards: dict[int, int] | None = None,
    ends_at: str | None = None,
) -> Result:
    """Boot the VM, run ``script`` (sh) in it with ``files`` beside it in /job, power off.
    ``shares`` are more host directories over 9p, by tag: the job mounts them
    (``mount -t 9p -o trans=virtio,version=9p2000.L,ro TAG DIR``).

    By default every boot is a first one on the image as built (``-snapshot``); with
    ``disk`` (from ``overlay``) the boot writes to that disk and the next boot of it
    sees what this one did. ``drives`` are more raw disks (a FAT boot partition);
    ``network`` gives the VM qemu's user-mode network (NAT to the host's; the guest
    reaches the host's 127.0.0.1 at 10.0.2.2), and ``forwards`` host ports (on
    127.0.0.1) to guest ports; cloud-init runs only with ``cloud_init``. ``ends_at``: a
    console line after which the guest restarts on its own (qemu's ``-no-reboot`` then
    ends the run): such a boot has no job result (rc -1). The script may call ``mark WHAT`` and ``published``
    (``PRELUDE``)."""
    job = job or Path(tempfile.mkdtemp(prefix="da3-edge-vm-"))
    job.mkdir(parents=True, exist_ok=True)
    (job / "run.sh").write_text(PRELUDE + script)
    for name, data in (files or {}).items():
        (job / name).parent.mkdir(parents=True, exist_ok=True)
        (job / name).write_bytes(data)
    for stale in ("rc", "out.txt"):
        (job / stale).unlink(missing_ok=True)
    machine = (job, memory_mib, shares, disk, drives)
    cmd = qemu(*machine, network=network, cloud_init=cloud_init, forwards=forwards)
    console = job / "console.txt"
    started = time.monotonic()
    qemu_rc = _boot(cmd, console, timeout)
    if ends_at is not None and ends_at in _text(console):
        return Result(-1, "", _text(console), job, time.monotonic() - started)
    if not (job / "rc").exists():
        raise AssertionError(
            f"the VM stopped (qemu exit {qemu_rc}) without finishing the job; "
            f"console:\n{_tail(console)}"
        )
    return Result(
        int((job / "rc").read_text()),
        (job / "out.txt").read_text(errors="replace"),
        console.read_text(errors="replace"),
        job,
        time.monotonic() - started,
    )


def overlay(path: Path) -> Path:
    """A disk for ``run(disk=...)``: a qcow2 overlay on the image (which stays as built),
    so that a second boot starts from where the first one left off."""
    backing = ["-b", str(image() / "root.img"), "-F", "raw"]
    _must(["qemu-img", "create", "-q", "-f", "qcow2", *backing, str(path)])
    return path


def _boot(cmd: list[str], console: Path, timeout: float) -> int:
    """qemu until it exits (the guest powered off, or rebooted: ``-no-reboot``), its
    console into ``console``; its exit status."""
    with console.open("wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"the VM did not power off within {timeout:g} s; console:\n" + _tail(console)
            ) from None


def _text(path: Path) -> str:
    return path.read_text(errors="replace")


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


if __name__ == "__main__":  # python -m scripts.support.vm: the image and picamera2, made ahead
    image()
    picamera2_deps()
