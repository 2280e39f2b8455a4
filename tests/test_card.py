"""``da3-edge card`` on a real FAT boot partition, as Raspberry Pi Imager leaves it.

Each card is a FAT image made with mkfs.vfat, Imager's files put on it with mtools, then
mounted with fusefat (this machine's kernel has no vfat) for ``da3-edge card`` to work
on, as it would on the mounted card of a laptop. What a Pi's first boot does with the
card is tests/test_vm.py's; here: what the card holds afterwards, and the refusals,
each one line with nothing written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path, PureWindowsPath

import pytest
import yaml

from edge import card, deploy, packs
from edge import config as config_mod
from scripts.support import ROOT, fat
from scripts.support.httpfile import Server
from scripts.support.tools import UV_CACHE, require_tool, run_cli, tool_install
from scripts.support.units import parse_unit

# What Raspberry Pi Imager (2.x) writes for a trixie card with every customisation set:
# hostname, user with a password hash and an SSH key, locale, Wi-Fi, SSH, its `rpi:`
# settings and its own runcmd entries.
IMAGER_USER_DATA = """#cloud-config
# This file was written by Raspberry Pi Imager.
hostname: depthcam
manage_etc_hosts: true
packages:
- avahi-daemon
apt:
  conf: |
    Acquire {
      Check-Date "false";
    };

timezone: Europe/London
keyboard:
  model: pc105
  layout: "gb"

users:
- name: owner
  groups: users,adm,dialout,audio,netdev,video,plugdev,cdrom,games,input,gpio,spi,i2c,render,sudo
  shell: /bin/bash
  lock_passwd: false
  passwd: $5$Zq0m8cXKe1$6pQ0sL0F0eWJ8wVq1jJxgDn7l2L2U4g1d4uCq9Yy0Y7
  ssh_authorized_keys:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOwnerKeyForTheCardTestOnly0000000000000000 owner@laptop
  sudo: ALL=(ALL) NOPASSWD:ALL

enable_ssh: true
ssh_pwauth: false

rpi:
  interfaces:
    serial: true
    i2c: true

runcmd:
- localectl set-x11-keymap "gb" pc105
- setupcon -k --force || true
"""
IMAGER_NETWORK_CONFIG = """network:
  version: 2
  wifis:
    renderer: NetworkManager
    wlan0:
      dhcp4: true
      regulatory-domain: "GB"
      access-points:
        "HomeNet":
          password: "correct-horse-battery"
      optional: true
"""
IMAGER_META_DATA = "instance-id: rpi-imager-1764816000000\n"
FIRMWARE = {  # what makes a partition a Pi OS boot partition
    "config.txt": "[all]\ndtparam=audio=on\ncamera_auto_detect=1\n",
    "cmdline.txt": "console=serial0,115200 console=tty1 root=PARTUUID=1234-02 rootwait\n",
    "kernel_2712.img": "not a kernel\n",
    "issue.txt": "Raspberry Pi reference 2025-11-24\n",
}


def imager_files(**changes: str | None) -> dict[str, bytes]:
    """What Imager leaves on a trixie card's boot partition; ``changes`` replace files
    (None: leave one out)."""
    files: dict[str, str | None] = {
        **FIRMWARE,
        "user-data": IMAGER_USER_DATA,
        "network-config": IMAGER_NETWORK_CONFIG,
        "meta-data": IMAGER_META_DATA,
    }
    files.update(changes)
    return {k: v.encode() for k, v in files.items() if v is not None}


def imager_card(tmp_path: Path, size_mib: int = 128, /, **changes: str | None) -> Path:
    return fat.image(tmp_path / "bootfs.img", imager_files(**changes), size_mib)


def tree_digest(top: Path) -> dict[str, str]:
    """Every file under ``top``: relative path (in lower case: FAT's names are
    case-insensitive, and fusefat shows 8.3 names in capitals) -> SHA-256."""
    return {
        str(p.relative_to(top)).casefold(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(top.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def card_models(small_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small models, int8 only (26 MB): a model directory as a user carries it."""
    out = tmp_path_factory.mktemp("card-models")
    manifest = json.loads((small_models / "manifest.json").read_text())
    keep = [a for a in manifest["artifacts"] if a["kind"] != "core" or a["precision"] == "int8"]
    for a in keep:
        shutil.copyfile(small_models / a["file"], out / a["file"])
    (out / "manifest.json").write_text(json.dumps({**manifest, "artifacts": keep}, indent=2))
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel of this checkout for the module's cards (building it costs ~1 s each)."""
    return deploy.build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


INT8 = '[model]\nprecision = "int8"\n'  # what the card's models hold (card_models)


def card_cli(
    boot: Path, models: Path | str, wheel: Path | None, *more: str
) -> subprocess.CompletedProcess[str]:
    """``da3-edge card``; without ``--config`` in ``more``, with a config that runs the
    int8 models (the default fp16 one would be refused: the models lack fp16)."""
    if "--config" not in more:
        config = boot.parent / "int8.toml"
        config.write_text(INT8)
        more = (*more, "--config", str(config))
    args = ["card", str(boot), "--models", str(models), *more]
    return run_cli([*args, "--wheel", str(wheel)] if wheel else args)


def test_card_keeps_imagers_keys_and_adds_one_install_step(
    tmp_path: Path, card_models: Path
) -> None:
    """On Imager's card: the bundle copied (the wheel built from this checkout), one
    runcmd entry added after Imager's own, every other byte of Imager's files kept;
    cloud-init's own schema check passes; the second run changes no file."""
    image = imager_card(tmp_path)
    config = tmp_path / "my.toml"
    config.write_text('[camera]\nsource = "picamera2"\nwidth = 1536\nheight = 864\n' + INT8)
    with fat.mounted(image) as boot:
        before = tree_digest(boot)
        first = card_cli(boot, card_models, None, "--config", str(config))
        print(first.stderr)
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith(f"{boot}: ready; at first boot the Pi installs da3-edge")
        after = tree_digest(boot)
        for name in ("network-config", "meta-data", *FIRMWARE):
            assert after[name] == before[name], name
        text = (boot / "user-data").read_text()
        assert text.startswith(IMAGER_USER_DATA), "Imager's text is not kept as it was"
        assert text[len(IMAGER_USER_DATA) :] == f"- {card.ENTRY_TEXT}\n"
        data, imager = yaml.safe_load(text), yaml.safe_load(IMAGER_USER_DATA)
        assert data == {**imager, "runcmd": [*imager["runcmd"], card.ENTRY]}
        bundle = boot / card.BUNDLE
        assert len(list((bundle / "dist").glob("da3_edge-*.whl"))) == 1
        assert (bundle / "da3-edge.toml").read_text() == config.read_text()
        assert tree_digest(bundle / "models") == tree_digest(card_models)
        for rel in deploy.FILES:
            assert (boot / card.bundle_name(rel)).read_bytes() == (ROOT / rel).read_bytes(), rel
        schema = subprocess.run(
            [
                require_tool("cloud-init", "scripts/install-host-packages.sh cloud-init"),
                "schema",
                "--config-file",
                str(boot / "user-data"),
            ],
            capture_output=True,
            text=True,
        )
        assert schema.returncode == 0 and "Valid cloud-config" in schema.stdout, (
            schema.stdout + schema.stderr
        )

        second = card_cli(boot, card_models, None, "--config", str(config))
        assert second.returncode == 0, second.stderr
        assert second.stdout == f"{boot}: ready already, nothing changed\n"
        assert tree_digest(boot) == after
    # Unmounted, the FAT image holds it: read back with mtools, not through fusefat.
    models = fat.listing(image, "::/da3-edge/models")
    assert models is not None and "manifest.json" in models
    assert fat.read(image, "user-data") == text.encode()


def test_the_deploy_tree_links_each_deployed_file_to_its_source(wheel: Path) -> None:
    """edge/data/deploy/ holds deploy.FILES and nothing else, each a link to the file of
    the same path at the top level (one source, no copy to drift); the wheel carries
    each with its source's bytes."""
    tree = ROOT / "edge" / "data" / "deploy"
    found = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if not p.is_dir())
    assert found == sorted(deploy.FILES)
    for rel in deploy.FILES:
        assert (tree / rel).is_symlink(), f"{tree / rel}: a copy, not a link to {rel}"
        assert (tree / rel).resolve() == (ROOT / rel).resolve(), rel
    with zipfile.ZipFile(wheel) as archive:
        for rel in deploy.FILES:
            assert archive.read(f"edge/data/deploy/{rel}") == (ROOT / rel).read_bytes(), rel


def wheel_files(path: Path) -> dict[str, bytes]:
    """A wheel's files (no folder entries), RECORD as its sorted lines (their order is
    the writer's)."""
    with zipfile.ZipFile(path) as archive:
        files = {n: archive.read(n) for n in archive.namelist() if not n.endswith("/")}
    return {
        n: b"\n".join(sorted(data.splitlines())) if n.endswith(".dist-info/RECORD") else data
        for n, data in files.items()
    }


def test_card_from_a_wheel_installed_outside_any_checkout(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """The wheel installed with ``uv tool install``, run from a folder outside the
    checkout: card readies Imager's card with the deploy files from the package and a
    wheel of the installed files, the same files as the wheel installed; a second run
    changes nothing (the same install packs to the same bytes). An installed file
    changed since: refused in one line, naming it."""
    python = tool_install(wheel, tmp_path / "tool")
    where = subprocess.run(
        [python, "-c", "import edge.deploy as d; print(d.__file__, d.checkout_root())"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert not where.stdout.startswith(str(ROOT)) and where.stdout.split()[1] == "None"
    config = tmp_path / "int8.toml"
    config.write_text(INT8)
    args = ["card", "BOOT", "--models", str(card_models), "--config", str(config)]
    with fat.mounted(imager_card(tmp_path)) as boot:
        args[1] = str(boot)
        first = run_cli(args, python=python, cwd=tmp_path)
        print(first.stderr)
        assert first.returncode == 0, first.stderr
        bundled = list((boot / card.BUNDLE / "dist").glob("da3_edge-*.whl"))
        assert [p.name for p in bundled] == [wheel.name]
        assert wheel_files(bundled[0]) == wheel_files(wheel)
        for rel in deploy.FILES:
            assert (boot / card.bundle_name(rel)).read_bytes() == (ROOT / rel).read_bytes(), rel
        again = run_cli(args, python=python, cwd=tmp_path)
        assert again.returncode == 0 and again.stdout == f"{boot}: ready already, nothing changed\n"
        site = Path(where.stdout.split()[0]).parent
        # A new file in its place: uv installs by hard links into its cache, and an
        # edit in place would change the cached wheel every later install takes.
        page = site / "data" / "live.html"
        text = page.read_bytes()
        page.unlink()
        page.write_bytes(text + b"<!-- changed -->\n")
        changed = run_cli(args, python=python, cwd=tmp_path)
    assert changed.returncode != 0
    assert changed.stderr.strip().splitlines()[-1] == (
        f"da3-edge: error: {site / 'data' / 'live.html'}: differs from what was installed (its "
        "RECORD hash): reinstall da3-edge, or pass --wheel"
    ), changed.stderr


WINDOWS = {
    "sys_platform": "win32",
    "platform_machine": "AMD64",
    "platform_system": "Windows",
    "os_name": "nt",
}
INTEL_MAC = {
    "sys_platform": "darwin",
    "platform_machine": "x86_64",
    "platform_system": "Darwin",
    "os_name": "posix",
}


def runtime_set(environment: dict[str, str]) -> dict[str, str]:
    """requirements/runtime.txt's pins (uv.lock's) that a machine of ``environment`` takes."""
    from packaging.markers import Marker

    text = (ROOT / "requirements" / "runtime.txt").read_text().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)(?: ; ([^-]*?))?\s*(?:--hash|$)", line)
        if found and (not found[3] or Marker(found[3]).evaluate(environment)):
            pins[found[1]] = found[2]
    return pins


@pytest.mark.models  # the install may ask the index (tool_install's note)
@pytest.mark.root
def test_card_on_a_laptop_without_the_depth_runtime(tmp_path: Path, wheel: Path) -> None:
    """Windows and an Intel Mac get no LiteRT (it has no wheels there); with what Windows
    gets but numpy and Pillow too, installed with the wheel, `card --view lan --set`
    readies Imager's card (the Pi builds its models), and a depth command says in one
    line what is missing."""
    pi = {
        "sys_platform": "linux",
        "platform_machine": "aarch64",
        "platform_system": "Linux",
        "os_name": "posix",
    }
    assert "ai-edge-litert" in runtime_set(pi)
    for laptop in (WINDOWS, INTEL_MAC):
        assert "ai-edge-litert" not in runtime_set(laptop) and "numpy" in runtime_set(laptop)
    pins = {k: v for k, v in runtime_set(WINDOWS).items() if k not in ("numpy", "pillow")}
    uv = require_tool("uv", "python3 -m pip install uv (the version in requirements/uv.txt)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_CACHE_DIR=UV_CACHE)
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], env=env, check=True)
    reqs = tmp_path / "windows.txt"
    reqs.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    python = venv / "bin" / "python"
    install = [uv, "pip", "install", "-q", "--python", str(python), "--no-deps"]
    install += ["-r", str(reqs), str(wheel)]
    proc = subprocess.run([*install, "--offline"], env=env, capture_output=True, text=True)
    if proc.returncode != 0 and "network was disabled" in proc.stderr:
        proc = subprocess.run(install, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for module in ("numpy", "PIL", "ai_edge_litert"):
        absent = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert absent.returncode != 0, module
    with fat.mounted(imager_card(tmp_path)) as boot:
        args = ["card", str(boot), "--view", "lan", "--set", "camera.fps=4"]
        proc = run_cli(args, python=python, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "builds its models from DA3's release" in proc.stdout
        carried = (boot / card.BUNDLE / "da3-edge.toml").read_text()
        assert config_mod.parse(carried, "card", parts=()).camera.fps == 4.0
    snap = run_cli(["snap", str(tmp_path / "x.jpg")], python=python, cwd=tmp_path)
    assert snap.returncode == 1 and snap.stderr.strip().splitlines() == [
        "da3-edge: error: numpy is not installed: depth needs LiteRT, numpy and Pillow, and "
        "LiteRT has wheels only for Linux (x86_64, aarch64) and macOS on Apple Silicon; "
        "elsewhere da3-edge readies cards (`da3-edge card`) and builds models"
    ], snap.stderr


@pytest.mark.models  # uvx resolves da3-edge's dependencies from the index
@pytest.mark.root
def test_card_in_one_command_with_uvx_from_a_git_url(tmp_path: Path) -> None:
    """The owner's second command (raspberry-pi.md, "Counted"): ``uvx --from
    git+URL da3-edge card BOOTFS --view lan`` with no checkout and nothing installed
    before. The card carries a wheel of exactly the commit the URL names."""
    uv = require_tool("uv", "python3 -m pip install uv (the version in requirements/uv.txt)")
    git = require_tool("git", "apt install git")
    clone = tmp_path / "published"
    subprocess.run([git, "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_CACHE_DIR=UV_CACHE)
    env.update(UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"))
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    with fat.mounted(imager_card(tmp_path)) as boot:
        uvx = [uv, "tool", "run", "--python", sys.executable, "--from", f"git+file://{clone}"]
        args = [*uvx, "da3-edge", "card", str(boot), "--view", "lan", "--set", "camera.fps=4"]
        proc = subprocess.run(args, env=env, cwd=laptop, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"{boot}: ready; at first boot the Pi installs da3-edge")
        bundled = list((boot / card.BUNDLE / "dist").glob("da3_edge-*.whl"))
        assert len(bundled) == 1
        built = deploy.build_wheel(clone, tmp_path / "dist")
        assert wheel_files(bundled[0]) == wheel_files(built)
        carried = (boot / card.BUNDLE / "da3-edge.toml").read_text()
        assert config_mod.parse(carried, "card", parts=()).camera.fps == 4.0
    assert list(laptop.iterdir()) == []  # nothing left where the owner ran it


def test_card_without_runcmd_gets_one(tmp_path: Path, card_models: Path, wheel: Path) -> None:
    """A user-data without ``runcmd`` (Imager without the keyboard settings) gets the key."""
    plain = IMAGER_USER_DATA.split("\nruncmd:")[0]
    changes: dict[str, str | None] = {"user-data": plain}
    with fat.mounted(imager_card(tmp_path, **changes)) as boot:
        proc = card_cli(boot, card_models, wheel)
        assert proc.returncode == 0, proc.stderr
        data = yaml.safe_load((boot / "user-data").read_text())
        assert data == {**yaml.safe_load(plain), "runcmd": [card.ENTRY]}
        assert (boot / "user-data").read_text().startswith(plain)


REFUSALS: dict[str, tuple[dict[str, str | None], str]] = {
    "not a boot partition": (
        {"config.txt": None, "cmdline.txt": None},
        "not a Raspberry Pi OS boot partition (no config.txt and cmdline.txt)",
    ),
    "bookworm": (
        {
            "user-data": None,
            "network-config": None,
            "meta-data": None,
            "firstrun.sh": "#!/bin/bash\n# Imager's bookworm customisation\n",
        },
        "a bookworm card (no cloud-init user-data): the first boot cannot install there; "
        "boot it and run scripts/install-pi.sh over SSH (docs/how-to/raspberry-pi.md, 3b)",
    ),
    "user-data unparseable": (
        {"user-data": "#cloud-config\nhostname: pi\nusers:\n- name: a\n  groups: [x\n"},
        "/user-data: cannot parse it: line 6: expected ',' or ']', but got '<stream end>'",
    ),
    "user-data not cloud-config": (
        {"user-data": "hostname: pi\n"},
        "/user-data: not cloud-config (its first line is not #cloud-config)",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_card_refusals_are_one_line_and_write_nothing(
    tmp_path: Path, card_models: Path, wheel: Path, case: str
) -> None:
    changes, message = REFUSALS[case]
    with fat.mounted(imager_card(tmp_path, **changes)) as boot:
        before = tree_digest(boot)
        proc = card_cli(boot, card_models, wheel)
        assert proc.returncode == 1 and proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("da3-edge: error: ") and proc.stderr.rstrip().endswith(
            message
        ), proc.stderr
        assert tree_digest(boot) == before


def test_card_without_room_refuses_before_the_first_byte(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """A 16 MB partition cannot take 26 MB of models: refused from the free space the
    file system reports, with nothing copied."""
    with fat.mounted(imager_card(tmp_path, 16)) as boot:
        before = tree_digest(boot)
        proc = card_cli(boot, card_models, wheel)
        assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "MB free, the bundle needs" in proc.stderr and "nothing written" in proc.stderr
        assert tree_digest(boot) == before
        assert not (boot / card.BUNDLE).exists()


def test_card_refuses_models_that_fail_verification(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    bad = tmp_path / "models"
    shutil.copytree(card_models, bad)
    core = next(bad.glob("*.tflite"))
    data = bytearray(core.read_bytes())
    data[len(data) // 2] ^= 0xFF
    core.write_bytes(bytes(data))
    with fat.mounted(imager_card(tmp_path)) as boot:
        before = tree_digest(boot)
        proc = card_cli(boot, bad, wheel)
        assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"--models {bad}: " in proc.stderr and "SHA-256" in proc.stderr, proc.stderr
        assert tree_digest(boot) == before


def test_template_entry_is_the_one_card_adds() -> None:
    template = yaml.safe_load((ROOT / "scripts/pi/user-data.yaml").read_text())
    assert template == {"runcmd": [card.ENTRY]}


def first_boot(
    tmp_path: Path,
    installer_rc: int,
    *,
    wait_s: int = 300,
    netns: bool = False,
    card_made: float | None = None,
    models_url: str | None = None,
    models_build: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """scripts/pi/first-boot.sh from a bundle on a stand-in boot partition, the installer
    replaced by a stub that exits ``installer_rc``; /var/log, /etc/systemd/system
    (``tmp_path/units``) and /run of its own (a mount namespace), so the log and the
    resume unit it writes are the test's, and no systemd is reached. ``netns``: in a network namespace
    of its own (no route); ``card_made``: the bundle's files' time (the card's)."""
    boot = tmp_path / "firmware"
    bundle = boot / card.BUNDLE
    (bundle / "scripts").mkdir(parents=True)
    (bundle / "dist").mkdir()
    (bundle / "models").mkdir()
    (bundle / "dist" / "da3_edge-0.1.0-py3-none-any.whl").write_bytes(b"")
    (bundle / "da3-edge.toml").write_text("")
    shutil.copy(ROOT / "scripts/pi/first-boot.sh", bundle / "first-boot.sh")
    (bundle / "scripts" / "install-pi.sh").write_text(
        f'printf "%s\\n" "$@" > {tmp_path}/args\necho "${{HF_ENDPOINT:-}}" > {tmp_path}/endpoint\n'
        f'echo "==> a step"\necho "stub installer" >&2\nexit {installer_rc}\n'
    )
    if card_made is not None:
        os.utime(bundle / "first-boot.sh", (card_made, card_made))
    if models_url is not None:
        (bundle / card.MODELS_URL).write_text(models_url + "\n")
    if models_build is not None:
        (bundle / card.MODELS_BUILD).write_text(models_build + "\n")
        shutil.rmtree(bundle / "models")
    logs = tmp_path / "log"
    logs.mkdir()
    (tmp_path / "units").mkdir()
    mounts = (
        f"mount --bind {logs} /var/log && mount --bind {tmp_path}/units /etc/systemd/system"
        " && mount -t tmpfs tmpfs /run"
    )
    isolated = ["--mount", "--propagation", "private", *(["--net"] if netns else [])]
    script = f"{mounts} && exec bash {bundle}/first-boot.sh"
    proc = subprocess.run(
        ["unshare", *isolated, "--", "bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "DA3_EDGE_FIRST_BOOT_WAIT": str(wait_s)},
    )
    return proc, boot, logs / "da3-edge-install.log"


@pytest.mark.root
def test_first_boot_removes_the_bundle_after_an_install(tmp_path: Path) -> None:
    proc, boot, log = first_boot(tmp_path, 0)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().splitlines()
    bundle = boot / card.BUNDLE
    assert args == [
        "--models",
        f"{bundle}/models",
        "--from",
        f"{bundle}/dist/da3_edge-0.1.0-py3-none-any.whl",
        "--config",
        f"{bundle}/da3-edge.toml",
    ]
    assert not bundle.exists() and not (boot / "da3-edge-install-failed.txt").exists()
    assert "stub installer" in log.read_text() and "the bundle is removed" in log.read_text()
    assert list((tmp_path / "units").iterdir()) == []  # nothing left to resume


@pytest.mark.root
def test_first_boot_runs_again_at_each_boot_until_it_has_installed(tmp_path: Path) -> None:
    """cloud-init runs runcmd once: a reboot or a power cut during the install would
    leave it half done. So the script leaves a unit that runs it at each boot while its
    bundle is there (cut short here by a failing install)."""
    proc, boot, _ = first_boot(tmp_path, 3)
    assert proc.returncode == 3
    unit = parse_unit((tmp_path / "units" / "da3-edge-first-boot.service").read_text())
    script = f"{boot}/{card.BUNDLE}/first-boot.sh"
    print(unit)
    assert unit["Service"]["ExecStart"] == [f"/bin/bash {script}"]
    assert unit["Unit"]["ConditionPathExists"] == [script]
    assert unit["Unit"]["RequiresMountsFor"] == [str(boot)]  # not before the card is mounted
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    analyze = require_tool("systemd-analyze", "apt install systemd")
    verify = subprocess.run(
        [analyze, "verify", str(tmp_path / "units" / "da3-edge-first-boot.service")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr


@pytest.mark.root
def test_first_boot_leaves_the_bundle_and_a_note_after_a_failure(tmp_path: Path) -> None:
    proc, boot, log = first_boot(tmp_path, 3)
    assert proc.returncode == 3
    assert (boot / card.BUNDLE / "first-boot.sh").exists()
    note = (boot / "da3-edge-install-failed.txt").read_text()
    print(note)
    assert note.startswith("da3-edge: the install at first boot failed (exit 3)")
    assert "==> a step" in note and "stub installer" in note
    assert f"sudo bash {boot}/{card.BUNDLE}/first-boot.sh" in note
    assert "FAILED (exit 3)" in log.read_text()


REFUSED_CONFIGS = {
    "a size the models lack": (
        INT8 + "size = 280\n",
        ":3: model.size: {models}: no int8 models of size 280 (have 182); make them with "
        "`da3-edge export --size 280` (nothing written)",
    ),
    "a precision the models lack": (
        "",
        ":{default_dir_line}: model.dir: {models}: no fp16 models (have: int8); make them with "
        "`da3-edge models build --weights hub --precision fp16` or pick --precision (nothing written)",
    ),
    "serve on the LAN without credentials": (
        INT8 + '[serve]\nhost = "0.0.0.0"\n',
        ":4: serve.host is 0.0.0.0, beyond this machine: it needs serve.basic_auth_file or "
        "serve.token_file (a file only serve's user can read), or use 127.0.0.1 "
        "(`da3-edge card --view lan` brings a login) (nothing written)",
    ),
    "a credentials file the card does not carry": (
        INT8 + '[serve]\nhost = "0.0.0.0"\nbasic_auth_file = "/home/pi/users"\n',
        ":5: serve.basic_auth_file names /home/pi/users, a file this card does not carry: serve "
        "would fail at every boot on the Pi (leave it empty; `--view lan` brings a login, and "
        "the config that uses it) (nothing written)",
    ),
    "a model folder of this machine": (
        INT8 + 'dir = "/home/me/models"\n',
        ":3: model.dir names a folder of this machine: on the Pi the daemon runs the card's "
        "models (leave it empty) (nothing written)",
    ),
}


@pytest.mark.parametrize("case", REFUSED_CONFIGS)
def test_card_refuses_a_config_the_pi_would_refuse(
    tmp_path: Path, card_models: Path, wheel: Path, case: str
) -> None:
    """What the Pi would refuse 10-20 minutes into its first boot, refused on the laptop
    in one line, the card untouched."""
    text, message = REFUSED_CONFIGS[case]
    config = tmp_path / "pi.toml"
    config.write_text(text)
    more = ("--config", str(config)) if text else ()  # none: the installer's default
    with fat.mounted(imager_card(tmp_path)) as boot:
        before = tree_digest(boot)
        args = ["card", str(boot), "--models", str(card_models), "--wheel", str(wheel), *more]
        proc = run_cli(args)
        print(proc.stderr)
        assert proc.returncode == 1
        where = str(config) if text else "the default config"
        line = config_mod.where(None, config_mod.default_text(), "model", "dir").split(":")[1]
        assert proc.stderr.splitlines() == [
            f"da3-edge: error: {where}{message.format(models=card_models, default_dir_line=line)}"
        ]
        assert tree_digest(boot) == before


@pytest.mark.parametrize("how", ["the bundle gone", "the installed marker"])
def test_card_refuses_a_card_that_has_booted(
    tmp_path: Path, card_models: Path, wheel: Path, how: str
) -> None:
    """cloud-init runs runcmd once per instance: a card whose first boot ran would
    never install a new bundle, so card says so instead of copying 180 MB."""
    with fat.mounted(imager_card(tmp_path)) as boot:
        assert card_cli(boot, card_models, wheel).returncode == 0
        shutil.rmtree(boot / card.BUNDLE)  # as first-boot.sh leaves it
        if how == "the installed marker":
            (boot / card.INSTALLED).write_text("da3-edge installed at first boot\n")
            (boot / "user-data").write_text(IMAGER_USER_DATA)  # and Imager's own user-data
        before = tree_digest(boot)
        proc = card_cli(boot, card_models, wheel)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            f"da3-edge: error: {boot}: this card has booted already (da3-edge's first boot "
            "ran, and cloud-init runs it once): write it anew with Raspberry Pi Imager, or "
            "install on the running Pi over SSH (docs/how-to/raspberry-pi.md, 3b); nothing "
            "written"
        ]
        assert tree_digest(boot) == before


def test_card_view_lan_carries_only_a_hash_of_the_password_it_prints(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """``--view lan``: the password is made on the laptop and printed once; the card
    carries ``viewer:scrypt$...`` and a config that serves the LAN with it. A second run
    keeps that login (and changes nothing)."""
    from edge import config as config_mod
    from edge import passwords

    with fat.mounted(imager_card(tmp_path)) as boot:
        first = card_cli(boot, card_models, wheel, "--view", "lan")
        assert first.returncode == 0, first.stderr
        print(first.stdout)
        lines = first.stdout.splitlines()
        assert lines[2] == (
            "  http://depthcam.local:8000/  (or http://ADDRESS:8000/: the address your router "
            "lists for depthcam, or `hostname -I` on the Pi)"
        )
        user, _, password = lines[3].removeprefix("  user ").partition(", password ")
        assert user == "viewer" and len(password) == 24
        bundle = boot / card.BUNDLE
        line = (bundle / card.SERVE_USERS).read_bytes().strip()
        assert line.startswith(b"viewer:scrypt$") and password.encode() not in line
        assert passwords.matches(password.encode(), line.partition(b":")[2])
        served = config_mod.parse((bundle / "da3-edge.toml").read_text(), parts=("serve",))
        assert served.serve.host == "0.0.0.0"
        assert served.serve.basic_auth_file == "/etc/da3-edge/serve-users"
        assert served.model.precision == "int8"  # the rest of the owner's config kept
        before = tree_digest(boot)
        second = card_cli(boot, card_models, wheel, "--view", "lan")
        assert second.returncode == 0, second.stderr
        assert second.stdout.splitlines()[0] == f"{boot}: ready already, nothing changed"
        assert password not in second.stdout and "first made" in second.stdout
        assert tree_digest(boot) == before


@pytest.mark.root
def test_first_boot_waits_for_the_network_then_gives_up_with_a_note(tmp_path: Path) -> None:
    """No default route (a network namespace of its own: Wi-Fi not up yet), a bound of
    2 s: the installer never starts, and the note on the partition says what was
    missing."""
    proc, boot, _log = first_boot(tmp_path, 0, wait_s=2, netns=True)
    assert proc.returncode == 1
    assert not (tmp_path / "args").exists()  # the installer did not run
    note = (boot / "da3-edge-install-failed.txt").read_text()
    assert "da3-edge first boot: no network (a default route) after 2 s" in note
    assert (boot / card.BUNDLE / "first-boot.sh").exists()


@pytest.mark.root
def test_first_boot_waits_for_a_clock_that_is_not_older_than_the_card(tmp_path: Path) -> None:
    """A clock two days behind the card's files (a Pi without a clock battery, before
    NTP answers; NTP is not synchronised on this host's view of timedatectl)."""
    proc, _boot, log = first_boot(tmp_path, 0, wait_s=2, card_made=time.time() + 2 * 86400)
    assert proc.returncode == 1, proc.stdout
    assert not (tmp_path / "args").exists()
    text = log.read_text()
    # Found at the first try: bash's SECONDS ticks on whole seconds, so a check that
    # takes a millisecond can still straddle one and read "after 1 s" (it did in CI).
    assert re.search(r"da3-edge first boot: network \(a default route\) after [01] s\n", text)
    assert "da3-edge first boot: no clock not earlier than the card (" in text


def test_card_with_a_models_url_carries_the_url_not_the_models(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """``--models URL --sha256 HEX`` (a pack served here on loopback): the pack is
    fetched once to check the config against it, and only the URL goes on the card;
    first-boot.sh then passes it to the installer's --models-url."""
    pack = tmp_path / "pack.tar.gz"
    sha = packs.pack(card_models, pack)
    server = Server(pack)
    try:
        with fat.mounted(imager_card(tmp_path)) as boot:
            too_big = tmp_path / "280.toml"
            too_big.write_text(INT8 + "size = 280\n")
            refused = card_cli(boot, server.url, wheel, "--sha256", sha, "--config", str(too_big))
            assert refused.returncode == 1 and "no int8 models of size 280" in refused.stderr
            proc = card_cli(boot, server.url, wheel, "--sha256", sha)
            assert proc.returncode == 0, proc.stderr
            bundle = boot / card.BUNDLE
            assert not (bundle / "models").exists()
            assert (bundle / card.MODELS_URL).read_text() == f"{server.url} {sha}\n"
            wrong = card_cli(boot, server.url, wheel, "--sha256", "0" * 64)
            assert wrong.returncode == 1 and f"SHA-256 {sha}, expected" in wrong.stderr
    finally:
        server.close()


@pytest.mark.root
def test_first_boot_passes_the_cards_models_url_to_the_installer(tmp_path: Path) -> None:
    sha = "ab" * 32
    proc, _boot, _log = first_boot(tmp_path, 0, models_url=f"https://example.org/m.tar.gz {sha}")
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:4] == ["--models-url", "https://example.org/m.tar.gz", "--models-sha256", sha]


def test_card_never_writes_through_a_link_in_its_place(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """A boot folder (not a FAT card: a directory a user can plant links in) whose
    da3-edge/ is a link elsewhere: refused, the elsewhere untouched."""
    boot = tmp_path / "boot"
    boot.mkdir()
    for name, data in imager_files().items():
        (boot / name).write_bytes(data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me")
    (boot / card.BUNDLE).symlink_to(elsewhere)
    proc = card_cli(boot, card_models, wheel)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"da3-edge: error: {boot / card.BUNDLE}: a symbolic link (a FAT card has none): "
        "remove it; nothing written"
    ]
    assert [p.name for p in elsewhere.iterdir()] == ["precious"]


def build_cli(boot: Path, wheel: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``da3-edge card`` with no models: the Pi builds them."""
    return run_cli(["card", str(boot), *more, "--wheel", str(wheel)])


@pytest.mark.root
def test_card_without_models_lets_the_pi_build_them(tmp_path: Path, wheel: Path) -> None:
    """No --models: nothing of the models on the card, one line telling the Pi to build
    them from the hub's release (a pinned SHA-256 and a mirror when given); the config is
    checked against the graphs the build has, not against models."""
    with fat.mounted(imager_card(tmp_path)) as boot:
        odd = tmp_path / "odd.toml"
        odd.write_text("[model]\nsize = 98\n")
        refused = build_cli(boot, wheel, "--config", str(odd))
        assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
        assert "model.size 98: no fp16 graph ships at that size" in refused.stderr
        assert "nothing written" in refused.stderr and not (boot / card.BUNDLE).exists()
        int8 = tmp_path / "int8.toml"
        int8.write_text(INT8)
        refused = build_cli(boot, wheel, "--config", str(int8))
        assert refused.returncode == 1 and "the build makes fp16 and fp32" in refused.stderr
        proc = build_cli(
            boot, wheel, "--weights-sha256", "AB" * 32, "--hub", "http://10.0.2.2:8123/"
        )
        assert proc.returncode == 0, proc.stderr
        assert "builds its models from DA3's release (downloaded: 137 MB)" in proc.stdout
        bundle = boot / card.BUNDLE
        assert not (bundle / "models").exists() and not (bundle / card.MODELS_URL).exists()
        line = (bundle / card.MODELS_BUILD).read_text()
        assert line == f"hub {'ab' * 32} http://10.0.2.2:8123\n"
        again = build_cli(
            boot, wheel, "--weights-sha256", "AB" * 32, "--hub", "http://10.0.2.2:8123/"
        )
        assert again.returncode == 0 and "nothing changed" in again.stdout, again.stdout
        plain = build_cli(boot, wheel)
        assert plain.returncode == 0 and (bundle / card.MODELS_BUILD).read_text() == "hub - -\n"


@pytest.mark.root
def test_card_sets_config_keys_without_a_toml_file(tmp_path: Path, wheel: Path) -> None:
    """`--set KEY=VALUE` (repeated) over the default config, as `config set` takes them:
    the card's config has them, the shipped comments kept; a bad one is refused in one
    line naming it, with nothing written."""
    with fat.mounted(imager_card(tmp_path)) as boot:
        for item, why in (
            ("camera.fps=fast", "--set camera.fps=fast: camera.fps must be a number, not 'fast'"),
            ("camera.fps=-2", "the default config with --set:"),
            ("camera.fps", "--set camera.fps: give KEY=VALUE"),
            ("camera.speed=5", "camera.speed: unknown key (known in [camera]:"),
            ("model.size=98", "model.size 98: no fp16 graph ships at that size"),
        ):
            refused = build_cli(boot, wheel, "--set", "camera.fps=5", "--set", item)
            assert refused.returncode != 0, item
            assert len(refused.stderr.splitlines()) == 1 and why in refused.stderr, refused.stderr
            assert not (boot / card.BUNDLE).exists()
        proc = build_cli(boot, wheel, "--set", "camera.fps=5", "--set", "model.size=392")
        assert proc.returncode == 0, proc.stderr
        carried = (boot / card.BUNDLE / "da3-edge.toml").read_text()
        parsed = config_mod.parse(carried, "card", parts=tuple(config_mod.SECTIONS))
        assert (parsed.camera.fps, parsed.model.size) == (5.0, 392)
        default = config_mod.default_text()
        comments = [line for line in default.splitlines() if line.startswith("#")]
        assert comments and all(line in carried.splitlines() for line in comments)


@pytest.mark.root
def test_card_with_weights_carries_the_release(tmp_path: Path, wheel: Path) -> None:
    """--weights DIR: the release goes on the card (checked: every tensor the build reads
    for the config's cores, by its header), and no download is asked for."""
    from scripts.support.release import tensors_for, write_release

    release = write_release(tmp_path / "release", tensors_for([(42, 56)]), seed=2)
    config = tmp_path / "vm.toml"
    config.write_text("[camera]\nwidth = 640\nheight = 480\n[model]\nsize = 56\n")
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    data = (release / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with fat.mounted(imager_card(tmp_path)) as boot:
        bad = build_cli(boot, wheel, "--weights", str(truncated), "--config", str(config))
        assert bad.returncode == 1 and "--weights: " in bad.stderr and "truncated" in bad.stderr
        assert not (boot / card.BUNDLE).exists()
        both = build_cli(boot, wheel, "--weights", str(release), "--hub", "http://x")
        assert both.returncode == 1 and "--weights carries the release" in both.stderr
        proc = build_cli(boot, wheel, "--weights", str(release), "--config", str(config))
        assert proc.returncode == 0, proc.stderr
        assert "builds its models from DA3's release on the card" in proc.stdout
        bundle = boot / card.BUNDLE
        assert (bundle / card.RELEASE / "model.safetensors").read_bytes() == data
        assert (bundle / card.RELEASE / "config.json").is_file()
        assert not (bundle / card.MODELS_BUILD).exists()


@pytest.mark.root
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("hub - -", ["--build-models", "hub", "--from"]),
        (
            f"hub {'cd' * 32} http://10.0.2.2:8123",
            ["--build-models", "hub", "--weights-sha256", "cd" * 32],
        ),
    ],
    ids=["hub", "pinned, a mirror"],
)
def test_first_boot_passes_the_build_to_the_installer(
    tmp_path: Path, line: str, expected: list[str]
) -> None:
    proc, _boot, _log = first_boot(tmp_path, 0, models_build=line)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[: len(expected)] == expected, args
    endpoint = (tmp_path / "endpoint").read_text().strip()
    assert endpoint == (line.split()[2] if line.split()[2] != "-" else ""), endpoint


def test_card_view_lan_takes_a_config_that_listens_on_the_lan(
    tmp_path: Path, card_models: Path, wheel: Path
) -> None:
    """``host = "0.0.0.0"`` and no login in the owner's config: with ``--view lan`` the
    card brings the login, so the config is checked as the Pi will read it, with it."""
    config = tmp_path / "lan.toml"
    config.write_text(INT8 + '[serve]\nhost = "0.0.0.0"\n')
    with fat.mounted(imager_card(tmp_path)) as boot:
        proc = card_cli(boot, card_models, wheel, "--config", str(config), "--view", "lan")
        assert proc.returncode == 0, proc.stderr
        carried = (boot / card.BUNDLE / "da3-edge.toml").read_text()
        assert f'basic_auth_file = "{card.LAN_LOGIN}"' in carried, carried


def test_the_bundle_the_guide_lists_is_the_one_card_writes() -> None:
    """raspberry-pi.md's list of the bundle's folders names only folders card writes."""
    text = " ".join((ROOT / "docs/how-to/raspberry-pi.md").read_text().split())
    listed = re.search(r"copies the bundle into `da3-edge/` on the partition \((.*?)\) and", text)
    assert listed, "the guide no longer lists the bundle"
    folders = set(re.findall(r"`([\w.-]+)/`", listed.group(1)))
    written = {card.bundle_name(rel).split("/")[1] for rel in deploy.FILES}
    assert folders and folders <= written, folders - written


@pytest.mark.parametrize("runcmd", [True, False])
def test_user_data_written_on_windows_keeps_its_line_ends(runcmd: bool) -> None:
    """Imager on Windows may write CRLF: the entry card adds uses the file's own line
    end, the rest stays byte for byte, and a second merge finds the entry there."""
    text = "#cloud-config\r\nhostname: pi\r\n" + ("runcmd:\r\n- [echo, hi]\r\n" if runcmd else "")
    merged = card.merge_user_data(text, "user-data")
    assert merged is not None and merged.startswith(text.rstrip("\r\n"))
    assert "\n" not in merged.replace("\r\n", "")
    assert "- [bash, /boot/firmware/da3-edge/first-boot.sh]\r\n" in merged
    assert yaml.safe_load(merged)["runcmd"][-1] == ["bash", "/boot/firmware/da3-edge/first-boot.sh"]
    assert card.merge_user_data(merged, "user-data") is None


@pytest.mark.parametrize(
    "flags",
    [
        ["--models", "https://owner:secret@example.org/m.tar.gz", "--sha256", "0" * 64],
        ["--hub", "https://token@hub.example.org"],
    ],
)
def test_a_url_with_a_login_never_goes_on_the_card(tmp_path: Path, flags: list[str]) -> None:
    """The card's bundle and the Pi's first-boot log are readable: a URL that carries
    a password or token is refused in one line, before anything is read or written."""
    proc = run_cli(["card", str(tmp_path), *flags])
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the URL carries a login" in proc.stderr and "secret" not in proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_bare_windows_drive_names_the_top_of_the_card() -> None:
    """On Windows ``E:`` is the drive's current folder (not absolute), so BOOTFS ``E:``
    is taken as ``E:\\``; every other form, and every form elsewhere, as typed."""
    assert not PureWindowsPath("E:").is_absolute() and PureWindowsPath("E:\\").is_absolute()
    for typed in ("E:", "e:"):
        assert card.partition(typed, windows=True) == Path(typed + "\\")
        assert card.partition(typed, windows=False) == Path(typed)
    for typed in ("E:\\", "E:\\bootfs", "/media/owner/bootfs", "bootfs", "1:"):
        assert card.partition(typed, windows=True) == Path(typed)
