"""systemd/da3-edge.service and da3-edge-serve.service, checked by systemd's own tools
and against what the daemon and serve need.

No systemd runs as PID 1 in CI, so the checks use the offline modes of
``systemd-analyze`` (systemd 252 in Debian bookworm, the same major version as Raspberry
Pi OS bookworm): ``verify`` loads and validates the unit, ``security --offline=true``
scores its sandbox.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.support import ROOT
from scripts.support.tools import require_tool, skip_or_fail
from scripts.support.units import parse_unit

UNIT = ROOT / "systemd" / "da3-edge.service"
SERVE_UNIT = ROOT / "systemd" / "da3-edge-serve.service"
PUBLISH_UNIT = ROOT / "systemd" / "da3-edge-publish.service"
UNITS = [UNIT, SERVE_UNIT, PUBLISH_UNIT]
README = ROOT / "systemd" / "README.md"
# Where systemd/README.md justifies each unit's flagged items.
HARDENING = {
    UNIT.name: "## Hardening and what remains exposed",
    SERVE_UNIT.name: "## serve: hardening and what remains exposed",
    PUBLISH_UNIT.name: "## publish: hardening and what remains exposed",
}
MAX_EXPOSURE = 1.5


def systemd_analyze() -> str:
    return require_tool("systemd-analyze", "scripts/install-host-packages.sh systemd")


def list_setting(values: list[str]) -> list[str]:
    """A list-valued setting's final items: an empty assignment resets the list."""
    items: list[str] = []
    for value in values:
        items = [] if value == "" else [*items, *value.split()]
    return items


def device_rules(values: list[str]) -> dict[str, str]:
    rules: dict[str, str] = {}
    for value in values:
        if value == "":
            rules.clear()
            continue
        spec, _, access = value.partition(" ")
        rules[spec] = rules.get(spec, "") + access.strip()
    return rules


def is_true(value: str) -> bool:
    return value.lower() in ("1", "yes", "y", "true", "t", "on")


def size_bytes(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", value)
    assert match, f"not a plain size: {value!r}"
    power: int = "_KMGT".index(match[2] or "_")
    return float(match[1]) * float(1024**power)


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m)?", value)
    assert match, f"not a plain time span: {value!r}"
    return float(match[1]) * (60 if match[2] in ("min", "m") else 1)


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return parse_unit(UNIT.read_text())


LAN_DROP_IN = UNIT.parent / "serve-lan.conf"  # install-pi.sh --serve-users


@pytest.mark.parametrize(
    ("path", "drop_in"),
    [*((p, None) for p in UNITS), (UNIT.parent / "da3-edge-serve.service", LAN_DROP_IN)],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_verify(tmp_path: Path, path: Path, drop_in: Path | None) -> None:
    """``systemd-analyze verify`` has nothing to say about the unit (and serve's with
    the LAN view's drop-in).

    verify also insists that ExecStart=/ExecReload= name executables, and the unit's
    (/opt/da3-edge/venv/bin/da3-edge) exists only once installed. Rather than rewrite the
    unit, verify runs with ``--root`` on a scratch root holding the unit byte for byte,
    executable stand-ins at those paths, and a copy of the host's system unit directory
    (the unit pulls in sysinit.target, modprobe@.service, ... which --root resolves
    inside the root only).
    """
    analyze = systemd_analyze()
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    shutil.copy(path, root / "etc" / "systemd" / "system" / path.name)
    if drop_in is not None:
        d = root / "etc" / "systemd" / "system" / f"{path.name}.d"
        d.mkdir()
        shutil.copy(drop_in, d / "lan.conf")
    candidates = [Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")]
    found = [path for path in candidates if (path / "sysinit.target").exists()]
    if not found:
        skip_or_fail(
            "no systemd system unit directory (sysinit.target) to verify against", host_tool=True
        )
    system_units = found[0]
    shutil.copytree(system_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "usr" / "bin").mkdir()
    (root / "lib").symlink_to("usr/lib")  # merged /usr, as on bookworm and Pi OS
    (root / "bin").symlink_to("usr/bin")
    service = parse_unit(path.read_text())["Service"]
    for command in ("ExecStart", "ExecReload"):
        if command not in service:
            continue
        executable = service[command][-1].split()[0]
        stand_in = root / executable.lstrip("/")
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
    proc = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", path.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    print(output)
    about_unit = [line for line in output.splitlines() if "da3-edge" in line]
    assert proc.returncode == 0, output
    assert about_unit == [], "\n".join(about_unit)


def test_verify_catches_mistakes(tmp_path: Path) -> None:
    """The check above is not vacuous: verify does complain about a broken unit here."""
    analyze = systemd_analyze()
    broken = tmp_path / UNIT.name
    broken.write_text(UNIT.read_text().replace("Type=notify\n", "Type=notfy\n"))
    proc = subprocess.run(
        [analyze, "verify", "--man=no", str(broken)], capture_output=True, text=True
    )
    output = proc.stdout + proc.stderr
    assert "Failed to parse service type" in output, output


def security_report(path: Path = UNIT) -> list[dict[str, str | bool | None]]:
    analyze = systemd_analyze()
    proc = subprocess.run(
        [analyze, "security", "--offline=true", "--json=short", "--no-pager", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    report: list[dict[str, str | bool | None]] = json.loads(proc.stdout)
    return report


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_security_exposure(path: Path) -> None:
    analyze = systemd_analyze()
    proc = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout)
    assert match, proc.stdout
    exposure = float(match[1])
    print(f"systemd-analyze security exposure: {exposure}")
    assert exposure <= MAX_EXPOSURE, proc.stdout


def test_security_sees_the_camera_devices() -> None:
    """systemd's own reading of DeviceAllow=, not ours: the camera's devices, and no others."""
    (device_allow,) = [item for item in security_report() if item["name"] == "DeviceAllow="]
    description = str(device_allow["description"])
    granted = set(description.split(":", 1)[1].split())
    # char-rtc:r comes from ProtectClock=yes.
    expected = {"char-video4linux:rw", "char-media:rw", "char-dma_heap:rw", "char-rtc:r"}
    assert granted == expected, description


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_readme_justifies_every_exposed_item(path: Path) -> None:
    """Each setting systemd-analyze flags is explained in the unit's hardening section
    of systemd/README.md."""
    readme = README.read_text()
    section = readme.split(HARDENING[path.name], 1)
    assert len(section) == 2, f"systemd/README.md lacks {HARDENING[path.name]!r}"
    section[1] = section[1].split("\n## ", 1)[0]  # this unit's section only
    flagged = [str(item["name"]) for item in security_report(path) if item["exposure"]]
    assert flagged, "nothing flagged: is the report being parsed?"
    missing = [name for name in flagged if f"`{name}`" not in section[1]]
    assert missing == [], f"flagged by systemd-analyze security, not justified: {missing}"


def test_unit_is_a_notify_service_with_a_watchdog(
    unit: dict[str, dict[str, list[str]]],
) -> None:
    service = unit["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert seconds(service["WatchdogSec"][-1]) > 0
    assert service["Restart"] == ["on-failure"]
    assert seconds(service["RestartSec"][-1]) > 0
    assert service["ExecReload"][-1] == "/bin/kill -HUP $MAINPID"
    argv = service["ExecStart"][-1].split()
    assert argv[0].endswith("/bin/da3-edge") and argv[1] == "run"
    assert argv[argv.index("--config") + 1] == "/etc/da3-edge/da3-edge.toml"
    # Start-rate limits are [Unit] settings; in [Service] systemd ignores them.
    assert "StartLimitIntervalSec" not in service and "StartLimitBurst" not in service
    assert unit["Unit"]["StartLimitBurst"] and unit["Unit"]["StartLimitIntervalSec"]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_unit_reaches_the_camera(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    assert not is_true(service.get("PrivateDevices", ["no"])[-1])
    assert not is_true(service.get("PrivateUsers", ["no"])[-1])  # would unmap group video
    assert not is_true(service.get("PrivateNetwork", ["no"])[-1])  # would cut udev events
    assert "video" in list_setting(service["SupplementaryGroups"])
    assert service["DevicePolicy"][-1] in ("closed", "strict")
    rules = device_rules(service["DeviceAllow"])
    assert set("rw") <= set(rules.get("char-video4linux", "")), rules
    media = rules.get("char-media", "") or rules.get("/dev/media0", "")
    assert set("rw") <= set(media), rules
    dma_heap = rules.get("char-dma_heap", "") or rules.get("/dev/dma_heap/linux,cma", "")
    assert set("rw") <= set(dma_heap), rules
    families = list_setting(service["RestrictAddressFamilies"])
    assert "AF_UNIX" in families  # the notify socket
    assert "AF_NETLINK" in families  # libcamera's udev monitor
    assert not {"AF_INET", "AF_INET6"} & set(families)
    # The device groups must exist at start, so the modules providing them load first.
    assert "modprobe@videodev.service" in list_setting(unit["Unit"]["Wants"])
    assert "modprobe@videodev.service" in list_setting(unit["Unit"]["After"])


def test_unit_paths_and_limits(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    assert service["RuntimeDirectory"] == ["da3-edge"]
    # The store readable by group da3-edge only (serve's and publish's users are in it).
    assert service["RuntimeDirectoryMode"] == ["0750"] and service["UMask"] == ["0027"]
    assert service["StateDirectory"] == ["da3-edge"]
    # The weight cache: systemd's CACHE_DIRECTORY, which edge.models.cache_dir reads.
    assert service["CacheDirectory"] == ["da3-edge/daemon"]
    assert service["CacheDirectoryMode"] == ["0700"]
    environment = dict(item.split("=", 1) for item in list_setting(service["Environment"]))
    # The models live in the StateDirectory, the one place besides /run it may write.
    assert environment["DA3_EDGE_MODELS"] == "/opt/da3-edge/models"
    assert environment["PYTHONUNBUFFERED"] == "1"
    memory_max = size_bytes(service["MemoryMax"][-1])
    assert 0.75 * 2**30 <= memory_max <= 1.5 * 2**30, memory_max
    assert service["User"] == ["da3-edge"] and service["Group"] == ["da3-edge"]
    assert service["ProtectSystem"] == ["strict"]
    assert list_setting(service.get("CapabilityBoundingSet", ["CAP_SYS_ADMIN"])) == []


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_no_unit_reads_a_user_site(path: Path) -> None:
    """A service user's user site is under its home (the daemon's: its state folder,
    which it writes): a .pth there would run at every start. Under a real systemd:
    tests/test_systemd_container.py::test_unit_lifecycle."""
    service = parse_unit(path.read_text())["Service"]
    environment = dict(item.split("=", 1) for item in list_setting(service["Environment"]))
    assert environment.get("PYTHONNOUSERSITE") == "1"


def test_parser_reads_repeated_and_reset_keys() -> None:
    parsed = parse_unit(
        "[Service]\n# comment\nDeviceAllow=char-a rw\nDeviceAllow=char-b r\n"
        "Environment=A=1 \\\n  B=2\n"
    )
    assert device_rules(parsed["Service"]["DeviceAllow"]) == {"char-a": "rw", "char-b": "r"}
    assert device_rules(["char-a rw", "", "char-b r"]) == {"char-b": "r"}
    assert list_setting(parsed["Service"]["Environment"]) == ["A=1", "B=2"]
    assert list_setting(["video", "", "render"]) == ["render"]


def test_serve_unit_reads_the_store_beside_the_daemon() -> None:
    """serve: its own process, after the daemon but not bound to it; the store only
    read (no RuntimeDirectory= of its own, which would delete the store when it stops);
    IP from localhost only as shipped."""
    unit = parse_unit(SERVE_UNIT.read_text())
    service = unit["Service"]
    assert "da3-edge.service" in list_setting(unit["Unit"]["After"])
    assert not {"Requires", "BindsTo", "PartOf", "Requisite"} & set(unit["Unit"])
    assert "RuntimeDirectory" not in service and "StateDirectory" not in service
    assert service["ProtectSystem"] == ["strict"] and "ReadWritePaths" not in service
    argv = service["ExecStart"][-1].split()
    assert argv[0].endswith("/bin/da3-edge") and argv[1] == "serve"
    assert argv[argv.index("--store") + 1] == "/run/da3-edge"
    assert argv[argv.index("--config") + 1] == "/etc/da3-edge/da3-edge.toml"
    assert service["Type"] == ["notify"] and service["Restart"] == ["on-failure"]
    # Its own user (owns the credentials files, mode 0600; cannot read publish's or signal
    # the daemon) in the daemon's group (reads the store).
    assert service["User"] == ["da3-edge-serve"] and service["Group"] == ["da3-edge"]
    families = set(list_setting(service["RestrictAddressFamilies"]))
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert list_setting(service["IPAddressAllow"]) == ["localhost"]
    assert list_setting(service["IPAddressDeny"]) == ["any"]
    assert size_bytes(service["MemoryMax"][-1]) <= 512 * 2**20
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_publish_unit_connects_out_and_never_listens() -> None:
    """publish: after the daemon (and the network: the broker may be elsewhere), not
    bound to it; the store only read; IP to anywhere but no port ever bound."""
    unit = parse_unit(PUBLISH_UNIT.read_text())
    service = unit["Service"]
    after = list_setting(unit["Unit"]["After"])
    assert "da3-edge.service" in after and "network-online.target" in after
    assert not {"Requires", "BindsTo", "PartOf", "Requisite"} & set(unit["Unit"])
    assert "RuntimeDirectory" not in service and "ReadWritePaths" not in service
    assert service["ProtectSystem"] == ["strict"]
    argv = service["ExecStart"][-1].split()
    assert argv[1] == "publish" and argv[argv.index("--store") + 1] == "/run/da3-edge"
    assert service["User"] == ["da3-edge-publish"] and service["Group"] == ["da3-edge"]
    assert set(list_setting(service["RestrictAddressFamilies"])) == {
        "AF_UNIX",
        "AF_INET",
        "AF_INET6",
    }
    assert list_setting(service["SocketBindDeny"]) == ["any"]
    assert "IPAddressAllow" not in service  # the broker may be on any address
