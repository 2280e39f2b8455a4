"""``da3-edge config get|set|check``: in place, comments kept, checked before written.

(``--reload`` runs under a real systemd in tests/test_systemd_container.py.)
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import re
from pathlib import Path

import pytest

from edge import config as config_mod
from edge.commands import config as command
from edge.fakecore import fake_models
from scripts.support.tools import run_main

NOBODY = 65534


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    """The shipped config, as the installer leaves it, naming a model folder."""
    models = fake_models(tmp_path / "models", [(378, 504), (504, 378)])
    path = tmp_path / "da3-edge.toml"
    path.write_text(config_mod.default_text().replace('dir = ""', f'dir = "{models}"', 1))
    return path


def config(cfg: Path, *argv: str) -> tuple[int, str, str]:
    proc = run_main(["config", "--config", str(cfg), *argv])
    return proc.returncode, proc.stdout, proc.stderr


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_set_changes_one_line_and_keeps_the_rest(cfg: Path) -> None:
    before = cfg.read_text()
    code, out, err = config(cfg, "set", "camera.fps", "5")
    assert (code, err) == (0, "")
    assert out == f"camera.fps = 5.0 (was 0.0) in {cfg}\n"
    diff = [
        line
        for line in difflib.unified_diff(before.splitlines(), cfg.read_text().splitlines(), n=0)
        if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert diff == ["-fps = 0.0", "+fps = 5"]  # comments, order, every other line kept
    assert config(cfg, "get", "camera.fps")[1] == "5.0\n"
    assert config_mod.load(cfg).camera.fps == 5.0


def line_of(cfg: Path, key: str) -> int:
    """The line of ``key = `` in ``cfg`` (the first: each key is in one section here)."""
    lines = cfg.read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.startswith(f"{key} = "))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("camera.fps", "fast", "camera.fps must be a number, not 'fast'"),
        ("camera.fps", "nan", "camera.fps must be a finite number, not nan"),
        ("model.size", "280", "model.size: "),
        ("serve.host", "0.0.0.0", "serve.host is 0.0.0.0, beyond this machine: it needs"),
        ("store.keep_frames", "0", "store.keep_frames must be 1 to 100000 (frames)"),
    ],
)
def test_a_refused_value_is_one_line_and_changes_nothing(
    cfg: Path, key: str, value: str, message: str
) -> None:
    before = sha(cfg)
    at = line_of(cfg, key.partition(".")[2])
    code, out, err = config(cfg, "set", key, value)
    print(err)
    assert code == 1 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"da3-edge: error: {cfg}:{at}: {message}"), line
    assert sha(cfg) == before
    assert not [p for p in cfg.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_size_the_models_lack_names_the_export(cfg: Path) -> None:
    code, _, err = config(cfg, "set", "model.size", "280")
    assert code == 1 and "no fp16 models of size 280 (have 504)" in err
    assert "`da3-edge models build --weights hub --size 280 --precision fp16`" in err


def test_an_unknown_key_is_a_usage_error(cfg: Path) -> None:
    before = sha(cfg)
    code, _, err = config(cfg, "set", "camera.framerate", "5")
    assert code == 2
    assert err.splitlines() == [
        "da3-edge: error: camera.framerate: unknown key (known in [camera]: source, width, "
        "height, timeout, stall_after, backoff_min, backoff_max, hflip, vflip, af, "
        "lens_position, fps, hfov)"
    ]
    assert sha(cfg) == before


@pytest.mark.root
def test_the_files_owner_and_mode_are_kept(cfg: Path) -> None:
    """As the installer leaves it: root's, another group's, 0640 (CI is root: chown
    works, so the owner kept is a real one)."""
    os.chown(cfg, NOBODY, NOBODY)
    cfg.chmod(0o640)
    assert config(cfg, "set", "store.keep_frames", "7")[0] == 0
    st = cfg.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (NOBODY, NOBODY, 0o640)


def test_values_take_the_keys_type(cfg: Path) -> None:
    for key, value, shown in (
        ("camera.source", "fake:fps:5", "fake:fps:5"),
        ("camera.hflip", "true", "true"),
        ("store.formats", "png,npz", '["png", "npz"]'),
        ("store.formats", '["png", "preview"]', '["png", "preview"]'),
        ("serve.hosts", "pi.local", '["pi.local"]'),
        ("mqtt.username", '"true"', "true"),  # a text key takes text, quoted or not
    ):
        code, _, err = config(cfg, "set", key, value)
        assert (code, err) == (0, ""), (key, err)
        assert config(cfg, "get", key)[1] == shown + "\n", key
    assert config_mod.load(cfg).mqtt.username == "true"


def test_a_section_the_file_lacks_is_added(tmp_path: Path) -> None:
    models = fake_models(tmp_path / "models", [(378, 504)])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'# mine\n[model]\ndir = "{models}"\n')
    assert config(cfg, "set", "store.keep_frames", "9")[0] == 0
    assert cfg.read_text() == f'# mine\n[model]\ndir = "{models}"\n\n[store]\nkeep_frames = 9\n'


def test_check_and_get(cfg: Path) -> None:
    assert config(cfg, "check") == (0, f"{cfg}: ok\n", "")
    assert config(cfg, "get", "model.size") == (0, "0\n", "")
    assert config(cfg, "get", "serve.host") == (0, "127.0.0.1\n", "")
    cfg.write_text(cfg.read_text().replace("keep_frames = 100", "keep_frames = -1"))
    code, _, err = config(cfg, "check")
    at = line_of(cfg, "keep_frames")
    assert (
        code == 1
        and err == f"da3-edge: error: {cfg}:{at}: store.keep_frames must be 1 to 100000 (frames)\n"
    )


def test_the_service_config_finds_the_units_models() -> None:
    """``config`` on the service's file looks for models where the unit's daemon does."""
    unit = (Path(__file__).parents[1] / "systemd/da3-edge.service").read_text()
    assert f"DA3_EDGE_MODELS={command.SERVICE_MODELS}" in unit
    assert f"--config {command.DEFAULT}" in unit


def test_two_sets_at_once_keep_both_changes(cfg: Path) -> None:
    """Two `config set` of different keys started together, twelve times: each round both
    changes are in the file (they read, change and replace it one after the other)."""
    import subprocess
    import sys

    from scripts.support import ROOT

    for round_ in range(12):
        fps, keep = f"{round_ + 1}", f"{round_ + 2}"
        argv = [sys.executable, "-m", "edge", "config", "--config", str(cfg), "set"]
        procs = [
            subprocess.Popen(
                [*argv, key, value],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for key, value in (("camera.fps", fps), ("store.keep_frames", keep))
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
        loaded = config_mod.load(cfg)
        assert (loaded.camera.fps, loaded.store.keep_frames) == (float(fps), int(keep)), round_


@pytest.mark.root
def test_the_service_config_waits_for_the_installers_lock(
    cfg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installer holds /run/da3-edge-install.lock (flock) while it writes the service's
    config: `config set` of that file waits for it, and names it past its wait."""
    import fcntl

    lock = tmp_path / "install.lock"
    monkeypatch.setattr(command, "DEFAULT", str(cfg))
    monkeypatch.setattr(command, "INSTALL_LOCK", str(lock))
    monkeypatch.setattr(command, "LOCK_WAIT_S", 0.5)
    before = sha(cfg)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, out, err = config(cfg, "set", "camera.fps", "3")
    assert code == 1 and out == "" and sha(cfg) == before
    assert (
        err.strip() == f"da3-edge: error: {lock}: an install has held it for 0.5 s: try again later"
    )
    assert config(cfg, "set", "camera.fps", "3")[0] == 0


def test_the_installers_lock_is_one_file_in_roots_run() -> None:
    """The installer and `config set` lock the same file, in /run itself (root's, 0755):
    not /run/lock, which every user may write and so could plant the lock in first."""
    from scripts.support import ROOT

    installer = (ROOT / "scripts/install-pi.sh").read_text()
    assert re.findall(r"^exec 9>(\S+)$", installer, re.M) == [command.INSTALL_LOCK]
    assert Path(command.INSTALL_LOCK).parent == Path("/run")


def test_config_after_the_action_and_a_config_readied_before_the_models(tmp_path: Path) -> None:
    """On a laptop, for a card whose Pi makes its own models: `config set K V --config F`
    (the flag after the action) writes a config no models exist for yet, saying what it
    could not check; a value that is wrong by the config's own rules is still refused."""
    path = tmp_path / "card.toml"
    path.write_text(config_mod.default_text())
    proc = run_main(["config", "set", "camera.fps", "4", "--config", str(path)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"camera.fps = 4.0 (was 0.0) in {path}\n"
    assert proc.stderr.startswith("models: not checked: there are none at ")
    assert config_mod.load(path).camera.fps == 4.0
    bad = run_main(["config", "set", "camera.fps", "-1", "--config", str(path)])
    assert bad.returncode == 1 and "camera.fps" in bad.stderr.splitlines()[-1]
    assert config_mod.load(path).camera.fps == 4.0
    strict = run_main(["config", "check", "--config", str(path)])
    assert strict.returncode == 1  # check still wants the models the config names


def test_set_on_a_file_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[camera\nfps = 1\n")
    before = sha(path)
    code, out, err = config(path, "set", "camera.fps", "2")
    assert code == 1 and out == "" and sha(path) == before
    assert (
        err
        == f"da3-edge: error: {path}: not valid TOML (Expected ']' at the end of a table declaration (at line 1, column 8))\n"
    )


def test_a_size_the_built_models_lack_is_built_from_their_release(tmp_path: Path) -> None:
    """Models built from a release that is still at hand (the Pi's: the installer keeps
    it): a new model.size has its cores built first (progress on stderr), then is set.
    Once the release is gone, the refusal stands and names the build command."""
    from edge.models import Manifest
    from scripts.support.release import tensors_for, write_release
    from scripts.support.tools import run_cli

    release = write_release(tmp_path / "release", tensors_for([(42, 56)]), seed=3)
    models = tmp_path / "models"
    build = ["models", "build", "--weights", str(release), "--shape", "42x56", "--no-stages"]
    built = run_cli([*build, "--out", str(models)])
    assert built.returncode == 0, built.stderr
    path = tmp_path / "da3-edge.toml"
    path.write_text(
        f'[camera]\nsource = "fake"\nwidth = 640\nheight = 480\n[model]\nsize = 56\ndir = "{models}"\n'
    )
    code, out, err = config(path, "set", "model.size", "70")
    assert code == 0, err
    assert f"models: none for this fp16 model.size; building them from {release}" in err
    assert "42x70 fp16" in err and out.startswith("model.size = 70 (was 56)")  # the nearest aspect
    assert {a.shape for a in Manifest.load(models).cores()} == {(42, 56), (42, 70)}
    (release / "model.safetensors").rename(tmp_path / "moved.safetensors")
    path.write_text(path.read_text().replace("size = 70", "size = 56"))
    (models / "da3-small_42x56_fp16.tflite").unlink()
    manifest = Manifest.load(models)
    manifest.artifacts = [a for a in manifest.artifacts if a.shape != (42, 56)]
    manifest.save()
    before = path.read_bytes()
    code, _, err = config(path, "set", "model.size", "56")
    assert code == 1 and "no fp16 models of size 56 (have 70)" in err, err
    assert path.read_bytes() == before


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.root  # the file belongs to another user, as on the Pi
def test_a_lost_password_is_replaced_in_one_command(tmp_path: Path) -> None:
    """`config password`: the login file the config names gets a new random password,
    printed once; the file holds only its hash, keeps its owner and mode, and a real
    serve started on it takes the new password and refuses the old one."""
    from edge import passwords
    from scripts.support.serve import serving

    users = tmp_path / "serve-users"
    users.write_text(f"viewer:{passwords.hashed('old-Vq7-Tz2_hRw9Lp4-Xe6Nm3Jd')}\n")
    users.chmod(0o600)
    os.chown(users, NOBODY, NOBODY)
    path = tmp_path / "da3-edge.toml"
    path.write_text(f'[serve]\nhost = "0.0.0.0"\nbasic_auth_file = "{users}"\n')
    before = sha(path)
    code, out, err = config(path, "password")
    assert code == 0, err
    lines = out.splitlines()
    found = re.fullmatch(r"New password for the page's login viewer: (\S+)", lines[0])
    assert found, out
    new = found.group(1)
    assert lines[1:] == [
        f"Keep it now: it is shown once, and {users} holds only its hash.",
        "serve takes it when it next starts (--reload restarts it now).",
    ]
    assert len(new) == 24 and new not in users.read_text()
    user, _, secret = users.read_text().strip().partition(":")
    assert user == "viewer" and passwords.matches(new.encode(), secret.encode())
    st = users.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (NOBODY, NOBODY, 0o600)
    assert sha(path) == before  # the config itself is not touched
    os.chown(users, os.getuid(), os.getgid())  # serve here runs as this user
    args = ["--config", str(path), "--host", "127.0.0.1", "--store", str(tmp_path)]
    with serving(args, tmp_path / "serve.log") as s:
        assert s.get("/healthz", _basic("viewer", new))[0] == 503  # in, and no daemon
        assert s.get("/healthz", _basic("viewer", "old-Vq7-Tz2_hRw9Lp4-Xe6Nm3Jd"))[0] == 401
    code, out, err = config(path, "password", "--user", "guest")
    assert code == 0 and users.read_text().startswith("guest:scrypt$"), err


@pytest.mark.parametrize(
    ("text", "setup", "message"),
    [
        ("[serve]\n", None, "serve.basic_auth_file is not set: the page has no login to reset"),
        ('[serve]\nbasic_auth_file = "{users}"\n', None, "cannot read {users} (No such file"),
        ('[serve]\nbasic_auth_file = "{users}"\n', "link", "cannot read {users} (Too many levels"),
        ('[serve]\nbasic_auth_file = "{users}"\n', "empty", "holds no user:secret line"),
    ],
)
def test_a_password_reset_that_cannot_be_done_is_one_line(
    tmp_path: Path, text: str, setup: str | None, message: str
) -> None:
    users = tmp_path / "serve-users"
    if setup == "link":
        (tmp_path / "elsewhere").write_text("viewer:x\n")
        users.symlink_to(tmp_path / "elsewhere")
    elif setup == "empty":
        users.write_text("\n")
    path = tmp_path / "da3-edge.toml"
    path.write_text(text.format(users=users))
    code, out, err = config(path, "password")
    assert code != 0 and out == "", out
    assert len(err.strip().splitlines()) == 1 and message.format(users=users) in err, err
    assert setup != "link" or (tmp_path / "elsewhere").read_text() == "viewer:x\n"
