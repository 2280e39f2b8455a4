"""First boot for real: the shipped ``scripts/pi/user-data.yaml`` drives a fresh machine's
first boot through cloud-init, as on a Raspberry Pi OS trixie card, and a second boot
changes nothing.

The VM (tests/vm.py) stands in for the Pi: Debian trixie with cloud-init configured as
Pi OS configures it (NoCloud from the FAT boot partition at /boot/firmware), x86_64
instead of arm64, and Pi-only packages skipped as the installer skips them on Debian.
The boot partition holds what docs/how-to/raspberry-pi.md tells a user to put there:
Imager's user-data with the template's ``runcmd`` entry added at the end, meta-data,
and ``da3-edge/`` (the installer, requirements, units, docs, one wheel, the models).
The network is qemu's user-mode NAT: apt and PyPI are the real ones.

The Pi's camera is absent here, so the user-data also writes a config choosing the fake
camera that ships with the kit (``write_files``, before ``runcmd``: the installer keeps
a config it finds). Everything else is the default: the unit as shipped, with its
``MemoryMax=1G`` enforced by cgroup v2 here.

Boot 1, then boot 2 of the same disk; each runs CHECK after cloud-init has finished
and records what it saw in /job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from . import vm
from .conftest import ROOT

pytestmark = [pytest.mark.vm, pytest.mark.firstboot]

USER = "pi5user"
INSTANCE = "da3-edge-first-boot-1"
FRAMES = 1  # a boot's frames: each costs 21-280 s under TCG
# Start-up (the model loaded, emulated), then a frame of the small model: 21-280 s
# under TCG, machine by machine (tests/test_vm.py).
FRAME_WAIT_S = 300 + 300 * FRAMES
INSTALL_S = 900  # apt, PyPI, the ExecuTorch runner compiled: minutes, more under TCG

# What Raspberry Pi Imager writes for a trixie card (a hostname, one user with an SSH
# key and no password, SSH key-only, a timezone), then what the how-to adds: the
# template's ``runcmd`` (appended below, verbatim) and, because this machine has no
# Pi camera and emulates its CPU, a config naming the fake camera and a longer watchdog.
IMAGER_USER_DATA = f"""#cloud-config
hostname: da3-edge-pi
manage_etc_hosts: true
timezone: Europe/London
users:
  - name: {USER}
    groups: users,adm,dialout,audio,netdev,video,plugdev,input
    shell: /bin/bash
    lock_passwd: true
    sudo: ALL=(ALL) NOPASSWD:ALL
    ssh_authorized_keys:
      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheFirstBootTestOnlyNotARealKey00 test
ssh_pwauth: false
write_files:
  - path: /etc/da3-edge/da3-edge.toml
    permissions: "0644"
    content: |
      # No Pi camera in this machine: the fake camera that ships with da3-edge.
      [camera]
      source = "fake"
      width = 640
      height = 480
      [daemon]
      # Emulated (TCG), one forward takes 21-280 s: not stuck (a Pi: the default, 20).
      stuck_after = 600.0
  # Emulated only, as tests/vm.py's daemon job does: the watchdog and the start wait
  # stretched for a forward of minutes. MemoryMax= and the rest stay as shipped.
  - path: /etc/systemd/system/da3-edge.service.d/emulated.conf
    permissions: "0644"
    content: |
      [Service]
      WatchdogSec=900
      TimeoutStartSec=600

"""
META_DATA = f"instance-id: {INSTANCE}\nlocal-hostname: da3-edge-pi\n"

# Run in the VM after each boot, as root: cloud-init's verdict, then what the boot left.
CHECK = f"""
out=/job
timeout {INSTALL_S} cloud-init status --wait --long >$out/cloud-init.txt 2>&1
echo $? >$out/cloud-init.rc  # 124: cloud-init had not finished (or never started)
n=0
until [ "$(ls /run/da3-edge/frames 2>/dev/null | wc -l)" -ge {FRAMES} ] || [ $n -ge {FRAME_WAIT_S} ]; do
    sleep 1; n=$((n + 1))
done
ls /run/da3-edge/frames >$out/frames.txt 2>&1
cp /run/da3-edge/status.json $out/status.json 2>/dev/null
systemctl show -p ActiveState -p NRestarts -p MemoryMax -p MemoryPeak -p User da3-edge >$out/unit.txt
systemctl is-enabled da3-edge da3-edge-serve da3-edge-publish >$out/enabled.txt 2>&1
systemctl is-active da3-edge da3-edge-serve >$out/active.txt 2>&1
cg=/sys/fs/cgroup/system.slice/da3-edge.service
{{
    echo "fs: $(stat -fc %T /sys/fs/cgroup)"
    for f in memory.max memory.peak memory.events; do echo "$f: $(tr '\\n' ' ' <$cg/$f)"; done
}} >$out/cgroup.txt 2>&1
# Is MemoryMax= enforced at all? A transient unit asks for 256 MiB under a 64 MiB limit.
systemd-run --wait -p MemoryMax=64M -p MemorySwapMax=0 /usr/bin/python3 -c \\
    'x = b"1" * (256 << 20); print("allocated", len(x))' >$out/oom.txt 2>&1
echo $? >$out/oom.rc
runuser -u da3-edge -- env DA3_EDGE_MODELS=/var/lib/da3-edge/models \\
    /opt/da3-edge/venv/bin/da3-edge doctor >$out/doctor.txt 2>&1
echo $? >$out/doctor.rc
python3 - >$out/healthz.txt 2>&1 <<'PY'
import urllib.error, urllib.request
try:  # 200, or 503 once the newest frame is older than serve.max_age (10 s; a frame takes longer here)
    print(urllib.request.urlopen("http://127.0.0.1:8000/healthz", timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
{{ id {USER}; hostname; ls /home; }} >$out/user.txt 2>&1
cp /var/log/da3-edge-install.log /var/log/cloud-init-output.log $out/ 2>/dev/null
journalctl -u da3-edge -b --no-pager -o cat | tail -n 40 >$out/journal.txt
# What the install owns: content, owner, mode, link target (scripts/arm/installer-check.sh).
cd /
{{
    find opt/da3-edge etc/da3-edge etc/systemd/system var/lib/da3-edge -type f -print0 \\
        | sort -z | xargs -0 sha256sum
    find opt/da3-edge etc/da3-edge etc/systemd/system var/lib/da3-edge -printf '%M %U:%G %p -> %l\\n' | sort
    grep -E '^(da3-edge|{USER}):' /etc/passwd /etc/group
}} >$out/snapshot.txt
"""


def user_data() -> str:
    """Imager's user-data with the template's ``runcmd:`` entry added at the end, as
    docs/how-to/raspberry-pi.md says (one ``runcmd:`` key per file)."""
    template = (ROOT / "scripts/pi/user-data.yaml").read_text()
    return IMAGER_USER_DATA + template[template.index("\nruncmd:") + 1 :]


def fp16_models(models: Path, out: Path) -> Path:
    """The model directory a user exporting fp16 only would carry: its manifest lists
    the fp16 core and the stages, nothing it does not hold."""
    out.mkdir()
    manifest = json.loads((models / "manifest.json").read_text())
    keep = [a for a in manifest["artifacts"] if a["kind"] != "core" or a["precision"] == "fp16"]
    for a in keep:
        shutil.copy(models / a["file"], out / a["file"])
    (out / "manifest.json").write_text(json.dumps({**manifest, "artifacts": keep}, indent=2))
    return out


def boot_files(tree: Path, models: Path) -> Path:
    """The boot partition's files: the NoCloud seed and ``da3-edge/`` beside it."""
    tree.mkdir()
    (tree / "user-data").write_text(user_data())
    (tree / "meta-data").write_text(META_DATA)
    bundle = tree / "da3-edge"
    (bundle / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/install-pi.sh", bundle / "scripts")
    for d in ("requirements", "systemd", "docs"):  # the how-to's `git archive` list
        shutil.copytree(ROOT / d, bundle / d)
    built = subprocess.run(
        ["uv", "build", "--quiet", "--wheel", "--out-dir", str(bundle / "dist"), str(ROOT)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert len(list((bundle / "dist").glob("da3_edge-*.whl"))) == 1
    fp16_models(models, bundle / "models")
    return tree


@pytest.fixture(scope="module")
def boots(small_models: Path, tmp_path_factory: pytest.TempPathFactory) -> list[vm.Result]:
    """Boot 1 (cloud-init's first boot: the install), then boot 2 of the same disk."""
    for tool in vm.missing_tools():
        pytest.fail(f"{tool} missing: .ci/run installs requirements/apt.txt")
    work = tmp_path_factory.mktemp("firstboot")
    tree = boot_files(work / "bootfs", small_models)
    seed = vm.boot_partition(work / "bootfs.img", tree, size_mib=192)
    disk = vm.overlay(work / "disk.qcow2")
    results = []
    for n in (1, 2):
        result = vm.run(
            CHECK,
            timeout=(INSTALL_S if n == 1 else 0) + FRAME_WAIT_S + 300,
            memory_mib=2048,
            job=work / f"boot{n}",
            disk=disk,
            drives=(seed,),
            network=True,
            cloud_init=True,
        )
        assert result.rc == 0, result.out + "\n--- console:\n" + result.console[-3000:]
        results.append(result)
    return results


def text(result: vm.Result, name: str) -> str:
    path = result.job / name
    return path.read_text(errors="replace") if path.exists() else f"({name}: not written)"


def rc(result: vm.Result, name: str) -> int:
    return int(text(result, f"{name}.rc"))


def test_first_boot_installs_and_writes_frames(boots: list[vm.Result]) -> None:
    """cloud-init's first boot: user, install, config, units enabled and started,
    doctor ready, frames written, serve answering."""
    first = boots[0]
    log = text(first, "da3-edge-install.log")
    print(log[-4000:])
    print(text(first, "cloud-init.txt"))
    assert rc(first, "cloud-init") == 0, text(first, "cloud-init.txt")
    assert "status: done" in text(first, "cloud-init.txt")
    assert "==> apt packages" in log and "skipped: python3-picamera2" in log, log[-3000:]
    assert "uid=" in text(first, "user.txt") and "da3-edge-pi" in text(first, "user.txt")
    # The config from user-data was kept (the installer never overwrites one).
    assert "exists: left as it is" in log
    assert text(first, "enabled.txt").split() == ["enabled", "enabled", "disabled"]
    assert text(first, "active.txt").split() == ["active", "active"], text(first, "journal.txt")
    doctor = text(first, "doctor.txt")
    print(doctor)
    assert rc(first, "doctor") == 0, doctor
    frames = text(first, "frames.txt").split()
    assert len(frames) >= FRAMES, text(first, "journal.txt")
    status = json.loads(text(first, "status.json"))
    assert status["camera"]["source"].startswith("fake") and status["model"]["random_init"]
    # serve answers on loopback: 200, or 503 when the newest frame is older than 10 s
    # (a frame takes longer than that emulated)
    assert text(first, "healthz.txt").strip() in ("200", "503"), text(first, "healthz.txt")


def test_memory_max_is_enforced_and_the_daemon_lives_under_it(boots: list[vm.Result]) -> None:
    """cgroup v2 here: the unit's MemoryMax=1G is the cgroup's memory.max, a process over
    a limit is killed, and the daemon ran its frames under the default with no OOM kill
    and no restart."""
    for result in boots:
        unit, cgroup = text(result, "unit.txt"), text(result, "cgroup.txt")
        print(unit, cgroup, text(result, "oom.txt"), sep="\n")
        assert "fs: cgroup2fs" in cgroup
        assert "MemoryMax=1073741824" in unit and "memory.max: 1073741824" in cgroup
        events = _events(cgroup)
        assert events["oom_kill"] == 0 and events["max"] == 0, events
        peak = int(cgroup.split("memory.peak: ")[1].split()[0])
        print(f"boot {boots.index(result) + 1}: the daemon's cgroup peaked at {peak / 2**20:.0f} MiB "
              "of its 1024 MiB MemoryMax")  # fmt: skip
        assert peak < 1 << 30
        assert "NRestarts=0" in unit
        # systemd-run --wait: "Finished with result: oom-kill", the process never got there.
        oom = text(result, "oom.txt")
        assert rc(result, "oom") != 0 and "result: oom-kill" in oom and "allocated" not in oom


def _events(cgroup: str) -> dict[str, int]:
    line = next(x for x in cgroup.splitlines() if x.startswith("memory.events: "))
    words = line.removeprefix("memory.events: ").split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2], strict=True)}


def test_second_boot_changes_nothing(boots: list[vm.Result]) -> None:
    """The same card booted again: cloud-init does not run the install again (runcmd is
    once per instance), nothing the install owns changed, and the daemon writes frames
    again from its enabled unit."""
    first, second = boots
    assert rc(second, "cloud-init") == 0 and "status: done" in text(second, "cloud-init.txt")
    assert text(second, "da3-edge-install.log") == text(first, "da3-edge-install.log")
    before, after = text(first, "snapshot.txt"), text(second, "snapshot.txt")
    print(f"{len(after.splitlines())} entries compared")
    assert before == after, "\n".join(
        sorted(set(before.splitlines()) ^ set(after.splitlines()))[:40]
    )
    assert len(text(second, "frames.txt").split()) >= FRAMES, text(second, "journal.txt")
    assert rc(second, "doctor") == 0, text(second, "doctor.txt")
