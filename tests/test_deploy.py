"""Deployment files, checked on the host: the Pi installer, the first-boot cloud-init
template, the macOS launchd agent and the pinned requirements they install.

The installer itself runs for real (twice, in a Debian arm64 chroot under qemu) in
scripts/arm/installer-check.sh, from the aarch64 lane; these are the cheap checks that
catch drift: a flag the docs or templates use that the scripts no longer have, a
requirements file that no longer matches uv.lock, a template cloud-init rejects.
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import subprocess
from pathlib import Path

import pytest

from scripts.support import ROOT
from scripts.support.tools import require_tool, run_cli, skip_or_fail
from scripts.support.units import parse_unit

INSTALLER = ROOT / "scripts" / "install-pi.sh"
INSTALLER_CHECK = ROOT / "scripts" / "arm" / "installer-check.sh"
USER_DATA = ROOT / "scripts" / "pi" / "user-data.yaml"
PLIST = ROOT / "scripts" / "macos" / "dev.da3-edge.daemon.plist"
REQUIREMENTS = ROOT / "requirements"
PI_DOC = ROOT / "docs" / "how-to" / "raspberry-pi.md"
INSTALLER_DOC = ROOT / "docs" / "explanation" / "installer.md"
MAC_DOC = ROOT / "docs" / "how-to" / "macos.md"


def installer(*args: str) -> subprocess.CompletedProcess[str]:
    """install-pi.sh with arguments that stop it before it checks for root or touches
    anything (help and usage errors only: CI runs the tests as root)."""
    return subprocess.run(["bash", str(INSTALLER), *args], capture_output=True, text=True)


def installer_help() -> str:
    proc = installer("--help")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


# ---------------------------------------------------------------------- install-pi.sh


@pytest.mark.parametrize(
    "script", [INSTALLER, INSTALLER_CHECK, ROOT / "scripts/pi/first-boot.sh"], ids=lambda p: p.name
)
def test_scripts_parse_as_bash(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_installer_help_lists_every_flag_it_parses() -> None:
    text = installer_help()
    assert text.startswith("usage: install-pi.sh ")
    parsed = set(re.findall(r"^\s+(?:-h \| )?(--[a-z0-9-]+)\)", INSTALLER.read_text(), re.M))
    assert parsed == {
        "--help",
        "--from",
        "--models",
        "--models-url",
        "--models-sha256",
        "--build-models",
        "--weights-sha256",
        "--config",
        "--serve-users",
        "--require-executorch",
        "--no-start",
        "--ready-timeout",
        "--recover",
        "--uninstall",
        "--purge",
    }
    assert parsed <= flags(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus"], "unknown argument: --bogus"),
        (
            ["--models-url", "https://example.org/m.tar.gz"],
            "--models-url needs --models-sha256 (the .tar.gz's SHA-256)",
        ),
        (["--models-url", "u", "--models-sha256", "abc"], "--models-sha256 must be 64 hex digits"),
        (["--models-sha256", "0" * 64], "--models-sha256 goes with --models-url"),
        (["--models", "a", "--models-url", "b"], "--models and --models-url exclude each other"),
        (["--from"], "--from needs a PATH"),
        (["--purge"], "--purge goes with --uninstall"),
        (["--uninstall", "--models", "m"], "--uninstall takes only --purge"),
        (["--uninstall", "--no-start"], "--uninstall takes only --purge"),
        (["--ready-timeout", "0"], "--ready-timeout must be a number of seconds above 0"),
        (["--ready-timeout=soon"], "--ready-timeout must be a number of seconds above 0"),
        (["--ready-timeout"], "--ready-timeout needs seconds"),
    ],
)
def test_installer_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    proc = installer(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"install-pi.sh: error: {message}",
        "Run 'install-pi.sh --help' for usage.",
    ]


def test_installer_installs_where_the_unit_looks() -> None:
    """The unit's ExecStart= program and --config, its models directory and its
    Documentation= file are what the installer says it installs."""
    service = parse_unit((ROOT / "systemd" / "da3-edge.service").read_text())["Service"]
    unit_text = (ROOT / "systemd" / "da3-edge.service").read_text()
    program, run, config_flag, config = service["ExecStart"][0].split()[:4]
    assert (run, config_flag) == ("run", "--config")
    models = re.search(r"DA3_EDGE_MODELS=(\S+)", " ".join(service["Environment"]))
    assert models
    text = installer_help()
    assert program.removesuffix("/bin/da3-edge") in text  # /opt/da3-edge/venv
    assert config in text
    assert models.group(1) in text
    doc = re.search(r"^Documentation=file://(/opt/da3-edge/(.+))$", unit_text, re.M)
    assert doc and (ROOT / doc.group(2)).is_file()  # copied from the checkout's systemd/


# ---------------------------------------------------------------------- requirements


def requirement_names(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", text, re.M))


def test_runtime_requirements_match_uv_lock() -> None:
    """requirements/runtime.txt is `uv export` of uv.lock: regenerate it with
    uv export --frozen --no-dev --no-emit-project -o requirements/runtime.txt"""
    uv = require_tool("uv", "pip install uv")
    cmd = [uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-header"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    committed = (REQUIREMENTS / "runtime.txt").read_text()
    body = "".join(line + "\n" for line in committed.splitlines() if not line.startswith("# "))
    header = committed.split("\n", 2)[1]
    assert (
        header == "#    uv export --frozen --no-dev --no-emit-project -o requirements/runtime.txt"
    )
    assert body.lstrip("\n") == proc.stdout.lstrip("\n"), (
        "requirements/runtime.txt is out of date with uv.lock: "
        "uv export --frozen --no-dev --no-emit-project -o requirements/runtime.txt"
    )
    assert "--hash=sha256:" in committed


def test_numpy1_overrides_replace_pins_of_the_runtime_set() -> None:
    """`uv pip install -r runtime.txt --override runtime-numpy1.txt` (bookworm): each
    override replaces a package of the runtime set, hash-pinned, numpy 1.x."""
    runtime = requirement_names((REQUIREMENTS / "runtime.txt").read_text())
    text = (REQUIREMENTS / "runtime-numpy1.txt").read_text()
    overrides = requirement_names(text)
    assert set(overrides) == {"numpy", "ml-dtypes"}
    assert set(overrides) <= set(runtime)
    assert overrides["numpy"].startswith("1.")
    assert not runtime["numpy"].startswith("1.")
    for block in re.split(r"\n(?=\S)", text.split("\n\n")[-1].strip()):
        if not block.startswith("#"):
            assert "--hash=sha256:" in block, block


def test_installer_uv_is_the_uv_ci_uses() -> None:
    pinned = requirement_names((REQUIREMENTS / "uv.txt").read_text())
    ci = re.search(r"pip install -q uv==(\S+)", (ROOT / ".ci" / "run").read_text())
    assert ci and pinned == {"uv": ci.group(1)}
    assert "--hash=sha256:" in (REQUIREMENTS / "uv.txt").read_text()


# ---------------------------------------------------------------------- cloud-init


def cloud_init() -> str:
    return require_tool("cloud-init", "scripts/install-host-packages.sh cloud-init")


def load_yaml(path: Path) -> object:
    """Parsed by cloud-init's own interpreter and YAML loader (yaml.safe_load)."""
    shebang = Path(cloud_init()).read_text().splitlines()[0]
    python = shebang.removeprefix("#!").split()[0]
    code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"
    proc = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_user_data_is_valid_cloud_config() -> None:
    proc = subprocess.run(
        [cloud_init(), "schema", "--config-file", str(USER_DATA)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Valid cloud-config" in proc.stdout


def user_data_alternative(tmp_path: Path) -> list[str]:
    """The commented-out alternative (models from a URL), as a list of arguments."""
    config = load_yaml(USER_DATA)
    # The active entry is the one `da3-edge card` adds (tests/test_card.py runs it).
    assert config == {"runcmd": [["bash", "/boot/firmware/da3-edge/first-boot.sh"]]}
    commented = [
        line.removeprefix("  # ")
        for line in USER_DATA.read_text().split("# Models from a URL instead")[1].splitlines()[2:]
    ]
    alt = tmp_path / "alternative.yaml"
    alt.write_text("#cloud-config\nruncmd:\n" + "".join(f"  {line}\n" for line in commented))
    alternative = load_yaml(alt)
    assert isinstance(alternative, dict) and len(alternative["runcmd"]) == 1
    command = alternative["runcmd"][0]
    assert isinstance(command, list)
    return command


def test_first_boot_script_passes_flags_the_installer_has() -> None:
    script = (ROOT / "scripts" / "pi" / "first-boot.sh").read_text()
    assert flags(script) <= flags(installer_help()), flags(script) - flags(installer_help())


def test_user_data_alternative_runs_the_installer_with_flags_it_has(tmp_path: Path) -> None:
    """The URL alternative, run by bash with /boot/firmware moved to a temporary directory
    and a stub installer: the wheel glob expands, the flags exist in install-pi.sh --help,
    and a failing installer fails the command (pipefail through tee)."""
    help_flags = flags(installer_help())
    boot = tmp_path / "boot"
    (boot / "da3-edge" / "scripts").mkdir(parents=True)
    (boot / "da3-edge" / "dist").mkdir()
    wheel = boot / "da3-edge" / "dist" / "da3_edge-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    args_file = tmp_path / "args"
    (boot / "da3-edge" / "scripts" / "install-pi.sh").write_text(
        f'printf "%s\\n" "$@" > {args_file}\necho stub installer ran\nexit 3\n'
    )
    log = tmp_path / "install.log"
    command = user_data_alternative(tmp_path)
    assert command[:2] == ["bash", "-c"]
    script = command[2]
    assert "/boot/firmware/da3-edge/scripts/install-pi.sh" in script
    assert flags(script) <= help_flags, flags(script) - help_flags
    script = script.replace("/boot/firmware", str(boot)).replace(
        "/var/log/da3-edge-install.log", str(log)
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    args = args_file.read_text().splitlines()
    assert args[:2] == ["--from", str(wheel)]
    assert args[2] == "--models-url"
    assert "stub installer ran" in log.read_text()


# ---------------------------------------------------------------------- launchd


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_launchd_agent_runs_a_command_line_that_checks(tmp_path: Path) -> None:
    """The plist parses, its paths are absolute (launchd expands no ~), and its
    ProgramArguments, with /Users/YOU moved to a temporary home, are a `da3-edge run`
    command line the real parser and config check accept."""
    with PLIST.open("rb") as f:
        agent = plistlib.load(f)
    assert agent["Label"] == PLIST.stem
    argv = agent["ProgramArguments"]
    assert argv[0] == "/Users/YOU/.local/bin/da3-edge" and argv[1] == "run"
    assert not [s for s in strings(agent) if "~" in s]
    for key in ("StandardOutPath", "StandardErrorPath", "WorkingDirectory"):
        assert (agent[key] + "/").startswith("/Users/YOU/")
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["ThrottleInterval"] >= 10
    assert agent["RunAtLoad"] is True
    help_text = run_cli(["run", "--help"]).stdout
    assert flags(" ".join(argv)) <= flags(help_text)

    home = tmp_path / "home"
    args = [a.replace("/Users/YOU", str(home)) for a in argv[2:]]
    config = Path(args[args.index("--config") + 1])
    config.parent.mkdir(parents=True)
    config.write_text(run_cli(["run", "--print-default-config"]).stdout)
    proc = run_cli(["run", *args, "--check-config"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{config}: ok\n"
    assert args[args.index("--source") + 1].startswith("opencv")


# ---------------------------------------------------------------------- docs


def test_the_installer_page_shows_the_real_installer_help() -> None:
    assert installer_help().rstrip() in INSTALLER_DOC.read_text()
    assert "explanation/installer.md" in PI_DOC.read_text()


def test_deploy_docs_are_linked() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    assert "how-to/raspberry-pi.md" in index and "how-to/macos.md" in index
    assert "docs/how-to/raspberry-pi.md" in (ROOT / "README.md").read_text()
    assert "scripts/install-pi.sh" in (ROOT / "systemd" / "README.md").read_text()
    mac = MAC_DOC.read_text()
    assert "launchctl bootstrap gui/" in mac and PLIST.name in mac
    for path in re.findall(r"\]\(([^)#:]+)\)", PI_DOC.read_text() + mac):
        assert (PI_DOC.parent / path).exists(), path


def test_the_export_setup_refuses_an_old_python_before_any_download(tmp_path: Path) -> None:
    """Ubuntu 22.04's Python 3.10 (or Homebrew's newest): one line naming the versions
    that work and how to get one, before a venv or a download."""
    old = next(
        (str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3"))), None
    )
    if old is None:
        skip_or_fail(
            "no Python 3.10 here to stand for an old one (this machine's pyenv has one)",
            host_tool=True,
        )
    assert old is not None
    venv = tmp_path / "venv"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts/setup-export-env.sh")],
        env={**os.environ, "PYTHON": old, "DA3_EDGE_EXPORT_VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"setup-export-env.sh: error: {old} is Python 3.10; the export environment needs 3.11, "
        "3.12 or 3.13 (the pinned torch and litert-torch have wheels for those only): install "
        "one (apt install python3.11, brew install python@3.13, uv python install 3.12) and "
        "run again with PYTHON=python3.12"
    ]
    assert not venv.exists()


def test_the_installer_builds_a_checkout_offline_with_uvs_own_backend(tmp_path: Path) -> None:
    """From a checkout the installer builds the wheel as root: offline, so with uv's
    own build backend (the uv of requirements/uv.txt, hash-checked) and nothing fetched.
    Its pin must lie in pyproject's uv_build range, or that build cannot happen."""
    import tomllib

    from packaging.requirements import Requirement

    pinned = re.search(r"^uv==([0-9.]+)", (ROOT / "requirements" / "uv.txt").read_text(), re.M)
    assert pinned
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    (wanted,) = [Requirement(r) for r in project["requires"] if r.startswith("uv_build")]
    assert pinned[1] in wanted.specifier, (pinned[1], str(wanted.specifier))
    build = [line for line in INSTALLER.read_text().splitlines() if 'uv" build' in line]
    assert len(build) == 1 and "--offline" in build[0], build
    # What offline means for a build that needs a fetched backend: refused, not fetched.
    uv = require_tool("uv", "pip install uv")
    options = ["--wheel", "--offline", "--force-pep517", "--no-cache"]
    proc = subprocess.run(
        [uv, "build", *options, "--out-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "network was disabled" in proc.stderr, proc.stderr[-500:]
