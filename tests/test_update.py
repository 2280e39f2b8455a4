"""``da3-edge update``'s refusals and what it hands the new wheel's installer.

The update itself (a venv beside the running one, the switch, the rollback under a real
systemd) is tests/test_vm.py's and scripts/arm/installer-check.sh's. Here, on the test
machine (as root in CI), every run finds ``bash`` in a folder of this test's own: a
stand-in that records what it was given and exits, so no refusal that fails to happen
can run the real installer on this machine.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edge import deploy
from edge.errors import DeployError
from edge.version import version
from scripts.support import ROOT
from scripts.support.tools import as_user, run_cli

# The installer's stand-in: its arguments, the installer it was given (copied), and
# the mode of the folder the wheel was copied into.
STAND_IN = """#!/bin/sh
out={out}
printf '%s\\n' "$@" >"$out/args"
cp "$1" "$out/installer"
for a in "$@"; do case $a in *.whl) stat -c %a "$(dirname "$a")" >"$out/wheel-dir-mode"; cp "$a" "$out/wheel" ;; esac; done
exit 0
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return deploy.build_wheel(ROOT, tmp_path_factory.mktemp("wheel"))


def rewrite(
    wheel: Path,
    out: Path,
    *,
    version_to: str | None = None,
    tag: str | None = None,
    requires_python: str | None = None,
) -> Path:
    """A copy of ``wheel`` with another version (file name and .dist-info), another tag
    in its name, or another Requires-Python."""
    old = deploy.Wheel.read(wheel).version
    new = version_to or old
    name = wheel.name.replace(f"-{old}-", f"-{new}-")
    if tag:
        name = f"da3_edge-{new}-{tag}.whl"
    dest = out / name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith(".dist-info/METADATA"):
                text = data.decode().replace(f"Version: {old}\n", f"Version: {new}\n")
                if requires_python:
                    lines = [ln for ln in text.split("\n") if not ln.startswith("Requires-Python")]
                    text = "\n".join([lines[0], f"Requires-Python: {requires_python}", *lines[1:]])
                data = text.encode()
            item.filename = item.filename.replace(
                f"da3_edge-{old}.dist-info", f"da3_edge-{new}.dist-info"
            )
            dst.writestr(item, data)
    return dest


def update(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``da3-edge update ARGS`` with the installer's stand-in first on PATH."""
    bin_dir, out = tmp_path / "bin", tmp_path / "ran"
    bin_dir.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    fake = bin_dir / "bash"
    fake.write_text(STAND_IN.format(out=out))
    fake.chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    return run_cli(["update", *args], extra_env={"PATH": path}, cwd=tmp_path)


def refused(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> str:
    """The one line a refusal prints; the installer never ran."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert not (tmp_path / "ran" / "args").exists(), "the installer ran"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    print(lines[0])
    return lines[0]


def test_version_order() -> None:
    order = ["0.1.0.dev1", "0.1.0a1", "0.1.0b2", "0.1.0rc1", "0.1", "0.1.0.post1", "0.1.1", "1.0"]
    keys = [deploy.version_key(v) for v in order]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert deploy.version_key("1.0") == deploy.version_key("1.0.0")
    with pytest.raises(DeployError, match="not a version"):
        deploy.version_key("latest")


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        (">=3.11,<3.15", True),
        (">=3.12", False),
        ("<3.11", False),
        ("==3.11.*", True),
        ("!=3.11.*", False),
        ("~=3.10", True),
        ("~=3.12.0", False),
        (">3.11", True),
    ],
)
def test_requires_python_on_311(spec: str, allowed: bool) -> None:
    assert deploy._python_allows(spec, (3, 11, 7)) is allowed


@pytest.mark.root
def test_update_hands_the_new_wheels_own_installer_a_checked_copy(
    tmp_path: Path, wheel: Path
) -> None:
    """A newer wheel: the installer run is the one inside it, given a copy of the wheel
    in a folder only root can enter (what was checked is what is installed), and the
    bound on READY."""
    newer = rewrite(wheel, tmp_path, version_to="99.0.0")
    sha = hashlib.sha256(newer.read_bytes()).hexdigest()
    proc = update(tmp_path, str(newer), "--sha256", sha.upper(), "--ready-timeout", "240")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"da3-edge update: {version()} -> 99.0.0 ({newer.name})"
    ran = tmp_path / "ran"
    args = (ran / "args").read_text().splitlines()
    assert args[0].endswith("/deploy/scripts/install-pi.sh") and args[1] == "--from"
    assert args[3:] == ["--ready-timeout", "240"]
    assert Path(args[2]).name == newer.name and not args[2].startswith(str(tmp_path))
    assert (ran / "wheel").read_bytes() == newer.read_bytes()
    assert (ran / "wheel-dir-mode").read_text().strip() == "700"
    with zipfile.ZipFile(newer) as archive:
        assert (ran / "installer").read_bytes() == archive.read(
            "edge/data/deploy/scripts/install-pi.sh"
        )


@pytest.mark.root
def test_update_passes_the_models_on(tmp_path: Path, wheel: Path) -> None:
    newer = rewrite(wheel, tmp_path, version_to="99.0.0")
    models = ("--models", "https://example.org/m.tar.gz", "--models-sha256", "ab" * 32)
    proc = update(tmp_path, str(newer), *models)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "ran" / "args").read_text().splitlines()
    assert args[-4:] == [
        "--models-url",
        "https://example.org/m.tar.gz",
        "--models-sha256",
        "ab" * 32,
    ]


@pytest.mark.root
def test_update_refuses_a_wheel_whose_hash_differs(tmp_path: Path, wheel: Path) -> None:
    got = hashlib.sha256(wheel.read_bytes()).hexdigest()
    line = refused(update(tmp_path, str(wheel), "--sha256", "0" * 64), tmp_path)
    assert line == (
        f"da3-edge: error: {wheel}: SHA-256 {got}, expected {'0' * 64}: not the wheel asked for"
    )


@pytest.mark.root
def test_update_refuses_a_downgrade_unless_asked(tmp_path: Path, wheel: Path) -> None:
    older = rewrite(wheel, tmp_path, version_to="0.0.1")
    line = refused(update(tmp_path, str(older)), tmp_path)
    assert line == (
        f"da3-edge: error: {older.name}: version 0.0.1 is older than the installed "
        f"{version()}: nothing changed (--allow-downgrade installs it)"
    )
    proc = update(tmp_path, str(older), "--allow-downgrade")
    assert proc.returncode == 0 and (tmp_path / "ran" / "args").exists(), proc.stderr


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"tag": "cp39-cp39-manylinux_2_17_x86_64"}, "a wheel for cp39 (cp39), not Python"),
        ({"tag": "py3-none-win_amd64"}, "a wheel for win_amd64, not Python"),
        ({"requires_python": ">=3.99"}, "it requires Python >=3.99, not Python"),
    ],
    ids=["another Python", "another platform", "Requires-Python"],
)
@pytest.mark.root
def test_update_refuses_a_wheel_for_another_python(
    tmp_path: Path, wheel: Path, change: dict[str, str], why: str
) -> None:
    other = rewrite(wheel, tmp_path, version_to="99.0.0", **change)
    line = refused(update(tmp_path, str(other)), tmp_path)
    here = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
    assert line.startswith(f"da3-edge: error: {other.name}: {why}"), line
    assert here in line and line.endswith(": nothing changed"), line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["https://example.org/da3_edge-9.0.0-py3-none-any.whl"],
            "a wheel's URL needs --sha256 HEX",
        ),
        (["WHEEL", "--sha256", "12"], "--sha256 must be 64 hex digits"),
        (
            ["WHEEL", "--models", "https://example.org/m.tar.gz"],
            "--models URL needs --models-sha256 HEX",
        ),
        (["WHEEL", "--ready-timeout", "0"], "--ready-timeout must be more than 0 seconds"),
        (["missing.whl"], "missing.whl: no such file"),
        (
            ["http://127.0.0.1:9/w/..", "--sha256", "0" * 64],
            "http://127.0.0.1:9/w/..: the URL must end in the wheel's file name (*.whl)",
        ),
        (
            ["http://127.0.0.1:9/w/?x=a.whl", "--sha256", "0" * 64],
            "http://127.0.0.1:9/w/?x=a.whl: the URL must end in the wheel's file name (*.whl)",
        ),
        (
            ["http://127.0.0.1:9/w/a%00.whl", "--sha256", "0" * 64],
            "http://127.0.0.1:9/w/a%00.whl: the URL must end in the wheel's file name (*.whl)",
        ),
    ],
    ids=[
        "url without hash",
        "short hash",
        "models url without hash",
        "zero timeout",
        "no file",
        "url ending in ..",
        "url naming no file",
        "url with a nul",
    ],
)
@pytest.mark.root
def test_update_refusals_are_one_line(
    tmp_path: Path, wheel: Path, args: list[str], message: str
) -> None:
    newer = rewrite(wheel, tmp_path, version_to="99.0.0")
    args = [str(newer) if a == "WHEEL" else a for a in args]
    assert refused(update(tmp_path, *args), tmp_path) == f"da3-edge: error: {message}"


@pytest.mark.root
def test_update_refuses_a_user_who_is_not_root(tmp_path: Path, wheel: Path) -> None:
    """As nobody (setpriv): root's own refusal cannot be seen as root."""
    tmp_path.chmod(0o755)
    proc = as_user(65534, 65534, "", "update", str(wheel), cwd="/")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "da3-edge: error: run as root: sudo da3-edge update ..."
