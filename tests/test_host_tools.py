"""Every host command the tests and the test command's scripts call is installed by .ci/run.

A test that calls a tool nothing installs passes where someone once installed it by hand
and fails on a fresh machine (the real-systemd test needed mmdebstrap and systemd-nspawn,
which only an earlier session had installed). So the commands are read from the sources —
``require_tool``/``shutil.which`` names and literal subprocess argument lists in Python,
command words in the shell scripts — and each must come from a package on
requirements/apt.txt (which .ci/run installs before anything runs), from an Essential
Debian package, or from PyPI (uv, through .ci/run's pip). Then dpkg confirms that each
listed package really provides the commands the list says it does.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from scripts.support import ROOT
from scripts.support.tools import skip_or_fail, which

APT_LIST = ROOT / "requirements" / "apt.txt"
# The test command's shell scripts (README.md) and what they run.
SHELL_SCRIPTS = [
    ".ci/run",
    "scripts/test-all",
    "scripts/install-host-packages.sh",
    "scripts/check",
    "scripts/setup-export-env.sh",
    "scripts/arm-lane.sh",
    "scripts/arm/installer-check.sh",
]
PYTHON_SOURCES = ["tests", "scripts"]
# Not from Debian: the Python that runs the tests, and uv (pip, requirements/uv.txt).
FROM_PYPI_OR_PYTHON = {"python", "python3", "uv"}
BIN_DIRS = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/")
COMMAND_PREFIXES = {
    "exec",
    "command",
    "time",
    "env",
    "nice",
    "which",
    "if",
    "elif",
    "while",
    "until",
}
SHELL_WORDS = frozenset(
    """then else fi for do done case esac in function local export readonly declare set shift
    return exit echo printf cd trap wait read eval test [ [[ ]] true false : break continue source
    . unset mapfile kill pwd getopts type ulimit umask let shopt builtin""".split()  # noqa: SIM905
)


def apt_list() -> dict[str, list[str]]:
    """requirements/apt.txt: package -> the commands it provides that tests call."""
    packages: dict[str, list[str]] = {}
    for number, line in enumerate(APT_LIST.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(
            r"([a-z0-9][a-z0-9.+-]+)\s+tools:\s+([^-]\S*(?:\s+[^-]\S*)*)\s+--\s+\S.*", line
        )
        assert match, f"requirements/apt.txt:{number}: not 'package  tools: a b  -- who needs it'"
        packages[match.group(1)] = match.group(2).split()
    return packages


def _python_tools(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()

    def name_of(func: ast.expr) -> str:
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    def constant(node: ast.expr) -> str | None:
        return (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        )

    def is_subprocess(func: ast.expr) -> bool:
        return (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "subprocess"
        )

    # Local wrappers that hand their first argument to subprocess (container.py's _run).
    wrappers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.args.args:
            param = node.args.args[0].arg
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and is_subprocess(call.func)
                    and call.args
                    and isinstance(call.args[0], ast.Name)
                    and call.args[0].id == param
                ):
                    wrappers.add(node.name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func, first = name_of(node.func), node.args[0]
            if func in ("require_tool", "which") and constant(first):
                found.add(constant(first) or "")
            runs = is_subprocess(node.func) or (
                isinstance(node.func, ast.Name) and node.func.id in wrappers
            )
            if runs and isinstance(first, ast.List | ast.Tuple) and first.elts:
                command = constant(first.elts[0])
                if command:
                    found.add(command)
        # for tool in ("mmdebstrap", ...): ... shutil.which(tool)
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple | ast.List):
            names = [constant(e) for e in node.iter.elts]
            body = ast.Module(body=node.body, type_ignores=[])
            if all(names) and any(
                isinstance(c, ast.Call) and name_of(c.func) in ("which", "require_tool")
                for c in ast.walk(body)
            ):
                found.update(n for n in names if n)
    return found


def _shell_tools(path: Path) -> set[str]:
    """Command words of a bash script: the first word of each simple command, past
    assignments; heredoc bodies and comments skipped; the script's own functions and
    bash's builtins left out. Approximate, and errs towards missing a command rather
    than inventing one: only plain lower-case words count."""
    text = path.read_text()
    functions = set(re.findall(r"^\s*([A-Za-z_][\w-]*)\(\)\s*\{", text, re.M))
    found: set[str] = set()
    heredoc: str | None = None
    quoted: bool | None = None  # inside a multi-line '...': is it shell code (bash -c)?
    for line in text.replace("\\\n", " ").splitlines():
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        start = re.search(r"<<-?\s*'?(\w+)'?", line)
        if start:
            heredoc = start.group(1)
        if re.match(r"\s*#", line):
            continue
        line = re.sub(r"^\s*[\w|*.-]+\)", "", line)  # a case pattern
        line = re.sub(r'"[^"]*"', "S", line)  # strings are not commands
        line = re.sub(r"'[^']*'", "S", line)
        line = re.sub(r"\s#.*$", "", line)
        if "'" in line:  # a single-quoted string opens or closes on this line
            if quoted is None:
                quoted = bool(re.search(r"\b(bash|sh)\s+-\w*c\s+'\s*$", line))
                line = line[: line.index("'")]
            else:
                line, quoted = line[line.index("'") + 1 :], None
        elif quoted is False:
            continue
        # for tool in a b c; do command -v "$tool" ...
        listed = re.search(r"\bfor \w+ in ([\w .+-]+); do command -v", line)
        if listed:
            found.update(listed.group(1).split())
        for segment in re.split(r"&&|\|\||[;|(){}`]|\$\(|\bthen\b|\bdo\b|\belse\b|!", line):
            words = segment.split()
            # Past assignments and the words that run the next one (exec chroot ...).
            while words and (
                re.match(r"^[A-Za-z_]\w*(\[.*\])?\+?=", words[0])
                or words[0] in COMMAND_PREFIXES
                or (words[0].startswith("-") and len(words) > 1)
            ):
                words.pop(0)
            if not words:
                continue
            word = words[0]
            if word in SHELL_WORDS or word in functions:
                continue
            if re.fullmatch(r"[a-z][a-z0-9._+-]*", word):
                found.add(word)
    return found


@cache
def called_tools() -> dict[str, set[str]]:
    """tool -> the files that call it."""
    calls: dict[str, set[str]] = {}
    for name in SHELL_SCRIPTS:
        for tool in _shell_tools(ROOT / name):
            calls.setdefault(tool, set()).add(name)
    for folder in PYTHON_SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for tool in _python_tools(path):
                calls.setdefault(tool, set()).add(str(path.relative_to(ROOT)))
    return calls


def _dpkg(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("dpkg-query") is None:
        skip_or_fail(
            "dpkg-query not found: the host-tool check needs a Debian host", host_tool=True
        )
    return subprocess.run(["dpkg-query", *args], capture_output=True, text=True)


@cache
def base_packages() -> frozenset[str]:
    """Debian's Essential and Priority: required packages: on every Debian system
    (debootstrap's minbase is exactly these), so nothing needs to install them."""
    fields = "${Package} ${Essential} ${Priority}\\n"
    rows = [
        [*line.split(), "", "", ""][:3] for line in _dpkg("-W", "-f", fields).stdout.splitlines()
    ]
    return frozenset(
        name
        for name, essential, priority in rows
        if "yes" in (essential,) or priority == "required"
    )


def from_base_package(tool: str) -> bool:
    """Whether the command on this host belongs to a base package (alternatives such as
    awk -> mawk followed to the file dpkg knows)."""
    path = which(tool)
    if path is None:
        return False
    real = Path(path).resolve()
    # usrmerge: dpkg may know /bin/x for /usr/bin/x and the other way round.
    candidates = {str(real), str(real).removeprefix("/usr"), "/usr" + str(real)}
    for candidate in candidates:
        proc = _dpkg("-S", candidate)
        if proc.returncode == 0:
            owners = {o.strip() for o in proc.stdout.split(":", 1)[0].split(",")}
            return bool(owners & base_packages())
    return False


def provided_commands(package: str) -> set[str] | None:
    """The commands a package installs, or None when it is not installed."""
    proc = _dpkg("-L", package)
    if proc.returncode != 0:
        return None
    return {f.rsplit("/", 1)[1] for f in proc.stdout.splitlines() if f.startswith(BIN_DIRS)}


def test_the_scanner_finds_the_tools_named_in_this_project() -> None:
    """The static reading sees the calls that caused the fresh-machine failure."""
    calls = called_tools()
    for tool, where in {
        "mmdebstrap": "scripts/support/container.py",
        "systemd-nspawn": "scripts/support/container.py",
        "nsenter": "scripts/support/container.py",
        "systemd-analyze": "tests/test_systemd_unit.py",
        "cloud-init": "tests/test_deploy.py",
        "mount": "tests/test_daemon.py",
        "unshare": "scripts/arm-lane.sh",
        "chroot": "scripts/arm-lane.sh",
        "tar": "scripts/arm-lane.sh",
        "findmnt": "scripts/arm/installer-check.sh",
    }.items():
        assert where in calls.get(tool, set()), (tool, calls.get(tool))
    # Builtins, the scripts' own functions and heredoc bodies are not commands.
    assert not {"timed", "enter", "a76", "echo", "local", "import", "print"} & set(calls)


def test_every_called_tool_is_installed_by_ci() -> None:
    listed = {tool for tools in apt_list().values() for tool in tools}
    missing = {
        tool: sorted(where)
        for tool, where in called_tools().items()
        if tool not in listed and tool not in FROM_PYPI_OR_PYTHON and not from_base_package(tool)
    }
    print("commands called:", ", ".join(sorted(called_tools())))
    assert not missing, (
        f"called but installed by nothing in requirements/apt.txt: {missing} "
        "(add the Debian package that provides each, with who needs it)"
    )


@pytest.mark.parametrize("package", sorted(apt_list()))
def test_each_listed_package_provides_its_tools(package: str) -> None:
    provided = provided_commands(package)
    if provided is None:
        skip_or_fail(
            f"{package} is not installed (.ci/run installs requirements/apt.txt)", host_tool=True
        )
    assert provided is not None
    wrong = [tool for tool in apt_list()[package] if tool not in provided]
    assert not wrong, f"requirements/apt.txt: {package} does not provide {wrong}"


def test_ci_installs_the_list_before_anything_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test-all" in ci
    lines = (ROOT / "scripts" / "test-all").read_text().splitlines()
    run = "\n".join(x for x in lines if not x.lstrip().startswith("#"))  # commands only
    install = run.index("scripts/install-host-packages.sh")
    assert install < run.index("scripts/check") and install < run.index("uv sync")
    assert "requirements/apt.txt" in (ROOT / "scripts" / "install-host-packages.sh").read_text()
    # The lane installs its own tools by hand through the same script, from the same list.
    lane = (ROOT / "scripts" / "arm-lane.sh").read_text()
    assert "scripts/install-host-packages.sh qemu-user-static mmdebstrap" in lane
