"""`da3-edge doctor`: reports, and exits 1 only for what blocks running."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scripts.support.tools import as_user, run_cli, tmpfs, world_readable


def test_ready_with_models_and_a_writable_store(small_models: Path, tmp_path: Path) -> None:
    proc = run_cli(
        ["doctor", "--models", str(small_models), "--store", str(tmp_path / "store"), "--json"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    checks = {c["name"]: c for c in data["checks"]}
    assert data["ok"] is True
    assert checks["litert"]["status"] == "ok"
    assert (
        checks["models"]["status"] == "ok" and "3/3 intact, sizes 182" in checks["models"]["detail"]
    )
    assert "RANDOM-INIT" in checks["models"]["detail"]
    assert checks["store"]["status"] == "ok"
    # No camera on this machine: a warning, not a failure.
    assert checks["camera devices"]["status"] in ("ok", "warn")


def test_missing_models_block(tmp_path: Path) -> None:
    proc = run_cli(["doctor", "--models", str(tmp_path / "none"), "--store", str(tmp_path / "s")])
    assert proc.returncode == 1
    line = next(ln for ln in proc.stdout.splitlines() if ln.split()[1:2] == ["models"])
    assert line.startswith("FAIL") and "da3-edge models build" in line
    assert proc.stdout.rstrip().endswith("not ready: 1 blocking problem(s)")


def test_tampered_model_and_read_only_store(small_models: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(small_models, copy)
    victim = next(copy.glob("*_int8.tflite"))
    victim.write_bytes(victim.read_bytes()[:1000])
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        proc = run_cli(["doctor", "--models", str(copy), "--store", str(ro / "store"), "--json"])
    assert proc.returncode == 1
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["models"]["status"] == "warn" and "2/3 intact" in checks["models"]["detail"]
    assert (
        checks["model 140x182 int8"]["status"] == "FAIL"
        and "truncated" in checks["model 140x182 int8"]["detail"]
    )
    assert checks["store"]["status"] == "FAIL" and "NOT writable" in checks["store"]["detail"]


def test_picamera2_that_fails_to_import(
    small_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bookworm's trap: picamera2 is there, but its numpy-1 extensions fail under numpy 2.
    A stand-in package that fails the same way: doctor warns, the source says why."""
    fake = tmp_path / "site" / "picamera2"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ValueError("numpy.dtype size changed, may indicate binary incompatibility")\n'
    )
    paths = [str(fake.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # the lane finds edge this way
    proc = run_cli(
        ["doctor", "--models", str(small_models), "--store", str(tmp_path / "store"), "--json"]
    )
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["picamera2"]["status"] == "warn"
    assert "fails to import (ValueError: numpy.dtype size changed" in checks["picamera2"]["detail"]
    monkeypatch.syspath_prepend(str(fake.parent))
    from edge.camera.picamera2 import Picamera2Source
    from edge.errors import CameraError

    with pytest.raises(CameraError, match=r"fails to import .* numpy<2"):
        Picamera2Source(width=1280, height=720, timeout=2.0).open()


@pytest.mark.root
@pytest.mark.parametrize("readable", [True, False])
def test_a_store_another_users_daemon_writes(readable: bool, tmp_path: Path) -> None:
    """The Pi's owner runs doctor on the service's store (/run/da3-edge: da3-edge's,
    0750, group da3-edge): ready when it can read it (not writing it is right: the
    daemon does); when not, the line says which group to join. As nobody (setpriv):
    root can write anything."""
    nobody = 65534
    with world_readable() as base:
        store = base / "store"
        store.mkdir(mode=0o750)
        os.chown(store, 0, nobody if readable else 0)
        where = ("--models", str(base / "none"), "--store", str(store))
        proc = as_user(nobody, nobody, "", "doctor", "--json", *where)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    print(checks["store"])
    if readable:
        assert checks["store"]["status"] == "ok", checks["store"]
        assert checks["store"]["detail"] == f"{store}: root's daemon writes it; readable here"
    else:
        assert checks["store"]["status"] == "FAIL", checks["store"]
        assert (
            "you cannot read it: join its group (sudo usermod -aG root $USER)"
            in (checks["store"]["detail"])
        )


@pytest.mark.parametrize(
    "controls", [["ExposureTime", 1000], {"Exposure\x1b]0;owned\x07": "1\x1b[2J"}]
)
def test_a_hostile_status_json_is_shown_safely(controls: object, tmp_path: Path) -> None:
    """status.json is the store's, written by whoever can write there: a list where the
    daemon writes a table is skipped (it crashed doctor), and escape sequences in it
    never reach the terminal."""
    store = tmp_path / "store"
    store.mkdir(mode=0o755)
    (store / "status.json").write_text(
        json.dumps({"camera": {"source": "x", "controls": controls}})
    )
    proc = run_cli(["doctor", "--models", str(tmp_path / "none"), "--store", str(store)])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    shown = [line for line in proc.stdout.splitlines() if "camera controls" in line]
    if isinstance(controls, dict):
        assert shown == ["  ok  camera controls  x: Exposure?]0;owned? 1?[2J (read back)"]
    else:
        assert shown == []
