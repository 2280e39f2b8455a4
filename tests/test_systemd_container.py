"""The real units under a real systemd: READY, frames, a watchdog restart, reload, stop;
serve beside the daemon.

Boots Debian bookworm with systemd-nspawn (see scripts/support/container.py), installs the
unmodified systemd/da3-edge.service plus one drop-in that shortens WatchdogSec to 6 s
(30 s in the shipped unit) so the restart is seen in seconds, and drives it with
systemctl from inside. Needs root, mmdebstrap and systemd-container (on
requirements/apt.txt, which .ci/run installs first).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.support.container import Container
from scripts.support.tools import skip_or_fail

pytestmark = pytest.mark.container

CONFIG = """\
[camera]
source = "{source}"
width = 320
height = 240
timeout = 1.0

[store]
keep_frames = 20

[daemon]
stuck_after = 3.0
status_every = 1.0
"""


@pytest.fixture(scope="module")
def container(small_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    for tool in ("mmdebstrap", "systemd-nspawn", "nsenter", "uv"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed (scripts/install-host-packages.sh)")
    root = tmp_path_factory.mktemp("container") / "root"
    box = Container.build(root, small_models, CONFIG.format(source="fake"))
    box.drop_in("ci.conf", "[Service]\nWatchdogSec=6\n")
    box.boot()
    try:
        yield box
    finally:
        box.shutdown()


def _frames(box: Container) -> list[str]:
    return box.sh("ls /run/da3-edge/frames 2>/dev/null").stdout.split()


def test_unit_lifecycle(container: Container) -> None:
    """The unit as systemd runs it, one step after the other on the same container:
    started (READY, frames, STATUS, its cache), a hung camera restarted by the watchdog,
    healed, reloaded, stopped clean."""
    box = container
    _starts(box)
    _the_watchdog_restarts_a_hung_daemon(box)
    _a_healed_camera_runs_clean(box)
    _a_reload_applies_the_config(box)
    _a_stop_is_clean(box)


# A .pth in the service user's user site (its home is its state folder, which it writes):
# Python runs it at every start unless the unit turns the user site off.
PLANT = "/var/lib/da3-edge/.local/lib/python3.11/site-packages/planted.pth"
PLANT_RAN = "/var/lib/da3-edge/pth-ran"


def _starts(box: Container) -> None:
    box.sh(f"mkdir -p {Path(PLANT).parent} && chown -R da3-edge: /var/lib/da3-edge")
    box.sh(f'echo \'import os; open("{PLANT_RAN}", "a").write("ran")\' > {PLANT}')
    ran = box.sh(f"runuser -u da3-edge -- python3 -c pass; cat {PLANT_RAN} && rm {PLANT_RAN}")
    assert ran.stdout == "ran", ran  # the plant works where the user site is on
    start = box.sh("systemctl start da3-edge")
    assert start.returncode == 0, (
        start.stderr + box.sh("journalctl -u da3-edge --no-pager -n 30").stdout
    )
    # READY=1 is what turns "activating" into "active" for Type=notify.
    props = box.show("ActiveState", "SubState", "Type", "StatusText", "User")
    assert props["ActiveState"] == "active" and props["Type"] == "notify", props
    box.wait(lambda: len(_frames(box)) >= 5, 30, "frames in /run/da3-edge/frames")
    status = box.wait(
        lambda: "camera ok" in box.show("StatusText")["StatusText"], 15, "STATUS text"
    )
    print("STATUS:", box.show("StatusText")["StatusText"])
    assert status
    owner = box.sh("stat -c %U /run/da3-edge/frames").stdout.strip()
    assert owner == "da3-edge"
    assert box.sh(f"test -e {PLANT_RAN}").returncode == 1, "the unit ran the user's .pth"
    # The weight cache ("auto"): built under the unit's CacheDirectory, the service
    # user's alone.
    cache = box.sh(
        "stat -c '%U %a %n' /var/cache/da3-edge/daemon /var/cache/da3-edge/daemon/xnnpack/*.xnnpack"
    )
    print("weight cache:", cache.stdout.strip())
    lines = cache.stdout.split("\n")
    assert lines[0] == "da3-edge 700 /var/cache/da3-edge/daemon", cache.stdout + cache.stderr
    assert lines[1].startswith("da3-edge 600 /var/cache/da3-edge/daemon/xnnpack/da3-small_")


def _the_watchdog_restarts_a_hung_daemon(box: Container) -> None:
    # Inject a hang: the camera script now hangs after three frames. The reload applies
    # it (ExecReload sends SIGHUP); the watchdog must then kill and restart the daemon.
    box.sh("sed -i 's/^source = .*/source = \"fake:ok*3,hang:600\"/' /etc/da3-edge/da3-edge.toml")
    reload = box.sh("systemctl reload da3-edge")
    assert reload.returncode == 0, reload.stderr
    box.wait(lambda: int(box.show("NRestarts")["NRestarts"]) >= 1, 60, "a watchdog restart")
    journal = box.sh("journalctl -u da3-edge --no-pager").stdout
    print(
        "\n".join(ln for ln in journal.splitlines() if "atchdog" in ln or "made no progress" in ln)
    )
    assert "Watchdog timeout" in journal
    assert "thread capture made no progress" in journal
    # (NRestarts is read here: `systemctl stop` would reset it.)


def _a_healed_camera_runs_clean(box: Container) -> None:
    # Heal the camera: the restarted daemon may still hang once more on the old script;
    # the first start after the fix runs clean.
    started = "running: store /run/da3-edge, source fake\n"

    def starts() -> int:
        return (box.sh("journalctl -u da3-edge --no-pager -o cat").stdout + "\n").count(started)

    clean_before = starts()
    box.sh("sed -i 's/^source = .*/source = \"fake\"/' /etc/da3-edge/da3-edge.toml")
    box.wait(lambda: starts() > clean_before, 90, "a start with the healed camera")
    before = max(int(x) for x in _frames(box))
    box.wait(
        lambda: max(int(x) for x in _frames(box)) > before + 20, 15, "frames at full rate again"
    )
    assert box.show("ActiveState")["ActiveState"] == "active"


def _a_reload_applies_the_config(box: Container) -> None:
    # The owner's way: `da3-edge config set ... --reload` checks the file, writes it and
    # reloads the running daemon, which re-reads its config and says READY again; a
    # value the daemon would refuse changes nothing.
    config = "/opt/da3-edge/venv/bin/da3-edge config"
    before = box.sh("sha256sum /etc/da3-edge/da3-edge.toml").stdout
    refused = box.sh(f"{config} set camera.fps fast")
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr.strip().endswith("camera.fps must be a number, not 'fast'")
    assert box.sh("sha256sum /etc/da3-edge/da3-edge.toml").stdout == before
    reload = box.sh(f"{config} set store.keep_frames 7 --reload")
    assert reload.returncode == 0, reload.stderr
    assert reload.stdout.splitlines() == [
        "store.keep_frames = 7 (was 20) in /etc/da3-edge/da3-edge.toml",
        "systemctl try-reload-or-restart da3-edge",
        "systemctl try-restart da3-edge-serve",
        "systemctl try-restart da3-edge-publish",
    ]
    box.wait(
        lambda: (
            "reload: config /etc/da3-edge/da3-edge.toml applied"
            in box.sh("journalctl -u da3-edge --no-pager -o cat").stdout
        ),
        20,
        "reload applied",
    )
    box.wait(lambda: len(_frames(box)) <= 7, 20, "keep_frames = 7 in force")
    assert box.show("ActiveState")["ActiveState"] == "active"


def _a_stop_is_clean(box: Container) -> None:
    # A clean stop: exit 0, Result=success, the store (a RuntimeDirectory) removed.
    stop = box.sh("systemctl stop da3-edge")
    assert stop.returncode == 0
    props = box.show("ActiveState", "Result", "ExecMainStatus")
    print("after stop:", props)
    assert (
        props["ActiveState"] == "inactive"
        and props["Result"] == "success"
        and props["ExecMainStatus"] == "0"
    )
    assert box.sh("test -e /run/da3-edge").returncode != 0


HEALTHZ = (
    '/usr/bin/python3 -c "import urllib.request as u, urllib.error as e\n'
    "try: r = u.urlopen('http://127.0.0.1:8000/healthz', timeout=5)\n"
    "except e.HTTPError as x: r = x\n"
    'print(r.status, r.read().decode().strip())"'
)


def test_serve_unit_beside_the_daemon(container: Container) -> None:
    """The shipped serve unit in its sandbox: READY, healthy while the daemon runs;
    stopping either leaves the other running, and serve never removes the store."""
    box = container

    def healthz() -> str:
        return box.sh(HEALTHZ).stdout.strip()

    assert box.sh("systemctl start da3-edge").returncode == 0
    start = box.sh("systemctl start da3-edge-serve")
    journal = box.sh("journalctl -u da3-edge-serve --no-pager -n 30").stdout
    assert start.returncode == 0, start.stderr + journal
    props = box.show("ActiveState", "Type", "User", unit="da3-edge-serve")
    assert props == {"ActiveState": "active", "Type": "notify", "User": "da3-edge-serve"}
    # serve, as its own user in the daemon's group, reads the daemon's store (0750).
    box.wait(lambda: healthz().startswith("200 ok: frame"), 30, "serve healthy")
    print("healthz:", healthz())
    mode = box.sh("stat -c '%a %U:%G' /run/da3-edge /run/da3-edge/status.json").stdout.split("\n")
    assert mode[:2] == ["750 da3-edge:da3-edge", "640 da3-edge:da3-edge"], mode
    # The store is the group's alone: another user, not in it, cannot list it.
    assert box.sh("runuser -u nobody -- ls /run/da3-edge").returncode != 0
    # Each unit's user reads only its own secrets, and serve cannot signal the daemon.
    box.sh("install -o da3-edge-publish -g da3-edge -m 0600 /dev/null /etc/da3-edge/p-secret")
    box.sh("install -o da3-edge-serve -g da3-edge -m 0600 /dev/null /etc/da3-edge/s-secret")
    for user, other in (
        ("da3-edge-serve", "p-secret"),
        ("da3-edge", "s-secret"),
        ("da3-edge-publish", "s-secret"),
    ):
        read = box.sh(f"runuser -u {user} -- cat /etc/da3-edge/{other}")
        assert read.returncode != 0 and "Permission denied" in read.stderr, (user, other)
    pid = box.show("MainPID")["MainPID"]
    kill = box.sh(f"runuser -u da3-edge-serve -- kill -0 {pid}")
    assert kill.returncode != 0 and "not permitted" in kill.stderr, kill.stderr

    assert box.sh("systemctl stop da3-edge-serve").returncode == 0
    assert box.show("ActiveState")["ActiveState"] == "active"  # the daemon goes on
    assert box.sh("test -f /run/da3-edge/latest/frame.json").returncode == 0  # store kept

    assert box.sh("systemctl start da3-edge-serve").returncode == 0
    box.wait(lambda: healthz().startswith("200 "), 30, "serve healthy again")
    assert box.sh("systemctl stop da3-edge").returncode == 0
    assert box.show("ActiveState", unit="da3-edge-serve")["ActiveState"] == "active"
    answer = box.wait(lambda: (h := healthz()).startswith("503 ") and h, 20, "serve: 503")
    print("healthz with the daemon stopped:", answer)
    assert "daemon" in str(answer)
    assert box.sh("systemctl stop da3-edge-serve").returncode == 0
    result = box.show("Result", "ExecMainStatus", unit="da3-edge-serve")
    assert result == {"Result": "success", "ExecMainStatus": "0"}, result


def test_serve_credentials_files_as_the_service_user(container: Container) -> None:
    """As da3-edge-serve (not root, whose reads prove nothing): a token file of another
    user, or one others can read, is refused in one line; its own 0600 file is accepted."""
    box = container
    serve = (
        "runuser -u da3-edge-serve -- timeout 5 /opt/da3-edge/venv/bin/da3-edge serve "
        "--config /tmp/serve.toml --store /tmp/no-store-yet --host 0.0.0.0 --port 0"
    )
    box.sh(
        "printf '[serve]\\ntoken_file = \"/tmp/token\"\\n' > /tmp/serve.toml; chmod 644 /tmp/serve.toml"
    )
    box.sh(
        "echo kQ3v_Zf8-Lw2Rt9yXa7Mn4Pb6Hc1Jd0Es5Ug > /tmp/token; chown root:root /tmp/token; chmod 600 /tmp/token"
    )
    root_owned = box.sh(serve)
    assert root_owned.returncode == 1, root_owned.stdout + root_owned.stderr
    assert "cannot read /tmp/token (Permission denied)" in root_owned.stderr
    box.sh("chmod 644 /tmp/token")  # readable, but root's
    foreign = box.sh(serve)
    assert (
        foreign.returncode == 1
        and "belongs to uid 0, not to the user this runs as" in foreign.stderr
    )
    box.sh("chown da3-edge-serve:da3-edge /tmp/token; chmod 640 /tmp/token")
    readable = box.sh(serve)
    assert readable.returncode == 1
    assert readable.stderr.strip().endswith(
        "can be read by others (mode 640); chmod 600 /tmp/token"
    )
    box.sh("chmod 600 /tmp/token")
    accepted = box.sh(serve)  # runs until timeout stops it (exit 124): it started
    print(accepted.stderr.strip().splitlines()[-1:])
    assert accepted.returncode == 124 and "(credentials required)" in accepted.stderr


def _status_as(box: Container, login: str) -> str:
    """/healthz's status code (or the error) asked with HTTP basic ``login``."""
    return box.sh(
        '/usr/bin/python3 -c "import base64, sys, urllib.request as u, urllib.error as e\n'
        f"h = {{'Authorization': 'Basic ' + base64.b64encode(b'{login}').decode()}}\n"
        "try: r = u.urlopen(u.Request('http://127.0.0.1:8000/healthz', headers=h), timeout=5)\n"
        "except e.HTTPError as x: r = x\n"
        "except OSError as x: print(x); sys.exit()\n"
        'print(r.status)"'
    ).stdout.strip()


def test_a_lost_password_is_replaced_and_serve_takes_it(container: Container) -> None:
    """`sudo da3-edge config password --reload` on the Pi: a new password printed once,
    the login file (serve's user's, 0600) holding only its hash, serve restarted by
    systemd: the new password lets in, the old one no longer does."""
    from edge import passwords

    box = container
    config = "/opt/da3-edge/venv/bin/da3-edge config"
    old = "old-Vq7-Tz2_hRw9Lp4-Xe6Nm3Jd"
    users = "/etc/da3-edge/serve-users"
    box.sh(f"printf 'viewer:%s\\n' '{passwords.hashed(old)}' > {users}")
    box.sh(f"chown da3-edge-serve:da3-edge {users}; chmod 600 {users}")
    assert box.sh(f"{config} set serve.basic_auth_file {users}").returncode == 0
    try:
        assert box.sh("systemctl restart da3-edge-serve").returncode == 0
        box.wait(lambda: _status_as(box, f"viewer:{old}") in ("200", "503"), 30, "old login in")
        reset = box.sh(f"{config} password --reload")
        assert reset.returncode == 0, reset.stderr
        lines = reset.stdout.splitlines()
        assert lines[1:] == [
            f"Keep it now: it is shown once, and {users} holds only its hash.",
            "systemctl try-restart da3-edge-serve",
        ], reset.stdout
        new = lines[0].rpartition(": ")[2]
        assert new not in box.sh(f"cat {users}").stdout
        mode = box.sh(f"stat -c '%a %U:%G' {users}").stdout.strip()
        assert mode == "600 da3-edge-serve:da3-edge", mode
        box.wait(lambda: _status_as(box, f"viewer:{new}") in ("200", "503"), 30, "new login in")
        assert _status_as(box, f"viewer:{old}") == "401"
    finally:
        box.sh(f"{config} set serve.basic_auth_file ''; systemctl stop da3-edge-serve")


def test_publish_unit_under_systemd(container: Container, tmp_path: Path) -> None:
    """The shipped publish unit in its sandbox (SocketBindDeny=any, the store read-only)
    reaching a real mosquitto on the host: states arrive, and a stop says offline."""
    import json

    from scripts.support.broker import Broker, Listener

    box = container
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker", {"da3edge": "pw-in-box", "ha": "ha-pass"})
    listener = Listener(broker.port, "ha", "ha-pass")
    try:
        box.sh(
            "printf 'pw-in-box\\n' > /etc/da3-edge/mqtt-password && "
            "chown da3-edge-publish:da3-edge /etc/da3-edge/mqtt-password && "
            "chmod 600 /etc/da3-edge/mqtt-password && "
            f'printf \'\\n[mqtt]\\nenabled = true\\nport = {broker.port}\\nusername = "da3edge"\\n'
            'password_file = "/etc/da3-edge/mqtt-password"\\ndevice_id = "box"\\n'
            "state_max_rate = 0.0\\n' >> /etc/da3-edge/da3-edge.toml"
        )
        assert box.sh("systemctl start da3-edge").returncode == 0
        start = box.sh("systemctl start da3-edge-publish")
        journal = box.sh("journalctl -u da3-edge-publish --no-pager -n 30").stdout
        assert start.returncode == 0, start.stderr + journal
        box.wait(lambda: len(listener.on("da3edge/box/state")) >= 3, 30, "states from the box")
        seqs = [json.loads(m.payload)["store_seq"] for m in listener.on("da3edge/box/state")]
        print("states from the container:", seqs[:10])
        assert box.sh("systemctl stop da3-edge-publish").returncode == 0
        result = box.show("Result", "ExecMainStatus", unit="da3-edge-publish")
        assert result == {"Result": "success", "ExecMainStatus": "0"}, result
        box.wait(
            lambda: [m for m in listener.on("da3edge/box/availability") if m.payload == b"offline"],
            10,
            "offline at stop",
        )
        assert box.sh("systemctl stop da3-edge").returncode == 0
    finally:
        listener.close()
        broker.stop()
