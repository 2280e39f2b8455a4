"""The house rules: every Python file is a module of its package, none loaded by path;
imports go one way (edge <- scripts.support <- the tools and the tests; nothing imports
a test); no function longer than a screen, no class in edge/ longer than four."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from scripts.support import ROOT

# What loads a file by its path, or puts a folder on the import path by hand (spelt in
# two pieces, so this file does not find itself).
BY_PATH = (
    "load_" + "script",
    "sys.path." + "insert",
    "sys.path." + "append",
    "spec_from_" + "file_location",
)
LONGEST = 60  # lines of a function, its decorators and docstring included
LONGEST_CLASS = 250  # lines of a class, the same way


def files(*folders: str, pattern: str = "*") -> list[Path]:
    return [
        p
        for folder in folders
        for p in (ROOT / folder).rglob(pattern)
        if p.is_file() and "__pycache__" not in p.parts
    ]


def test_nothing_is_imported_by_path() -> None:
    """Every Python file of the checkout is imported as a module of its package (edge,
    scripts, tests): none is loaded by its path, none edits sys.path."""
    found = [
        f"{p.relative_to(ROOT)}: {word}"
        for p in [ROOT / "pyproject.toml", *files(".ci", "edge", "scripts", "tests", "systemd")]
        for word in BY_PATH
        if word in p.read_text(errors="replace")
    ]
    assert not found, found


def test_no_test_module_imports_another() -> None:
    """What several test modules share lives in scripts/support, not in a test module
    another one imports (which would also run its tests' module fixtures' imports)."""
    found = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in files("tests", pattern="*.py")
        for line in p.read_text().splitlines()
        if line.lstrip().startswith(("from .test_", "from tests.test_", "from . import test_"))
    ]
    assert not found, found


# Who may import whom, by the importer's layer (the first that names it): edge stands
# alone (it ships); the maintainer's support package stands on edge; the tools on both
# (and on each other); the tests on edge and the support package, never on a tool or
# another test. Lazy imports (inside functions) count the same.
LAYERS = ("edge", "scripts.support", "scripts", "tests")
MAY_IMPORT = {
    "edge": {"edge"},
    "scripts.support": {"edge", "scripts.support"},
    "scripts": {"edge", "scripts.support", "scripts"},
    "tests": {"edge", "scripts.support"},
}


def lay_out(root: Path, tree: dict[str, str]) -> None:
    """Files of a made-up checkout: path -> text."""
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def layer(module: str) -> str | None:
    return next((n for n in LAYERS if module == n or module.startswith(n + ".")), None)


def modules(root: Path) -> dict[str, Path]:
    """Every Python module of the checkout's packages at ``root``, by its dotted name."""
    found = {}
    for top in ("edge", "scripts", "tests"):
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, module) for each import in module ``name`` at any depth, made absolute: a
    ``from P import N`` counts as P.N where that is a module, else as P."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in known else base


def arrows(root: Path, refused: Callable[[str, str], bool]) -> list[str]:
    """``file:line importer -> imported`` for each import in ``root`` that ``refused``."""
    known = modules(root)
    return [
        f"{path.relative_to(root)}:{line} {name} -> {target}"
        for name, path in sorted(known.items())
        for line, target in imported(name, path, known)
        if refused(name, target)
    ]


def _across_layers(source: str, target: str) -> bool:
    frm, to = layer(source), layer(target)
    return bool(frm and to and to not in MAY_IMPORT[frm])


def wrong_arrows(root: Path) -> list[str]:
    return arrows(root, _across_layers)


def test_imports_go_one_way() -> None:
    """edge imports nothing of the checkout's; scripts.support only edge; the tools edge
    and scripts.support; the tests edge and scripts.support; nothing imports a test."""
    assert len(modules(ROOT)) > 150
    found = wrong_arrows(ROOT)
    assert not found, "\n".join(found)


def test_the_import_rule_finds_each_wrong_arrow(tmp_path: Path) -> None:
    tree = {
        "edge/__init__.py": "",
        "edge/bench.py": "def f():\n    from scripts.support import replay\n",
        "scripts/__init__.py": "",
        "scripts/soak.py": "from edge import bench\nfrom scripts.support import replay\n",
        "scripts/tool.py": "from tests.support import models\nfrom . import soak\n",
        "scripts/support/__init__.py": "from edge import bench\n",
        "scripts/support/replay.py": "from .. import soak\nfrom . import ROOT\n",
        "tests/__init__.py": "",
        "tests/support.py": "",
        "tests/test_a.py": "import scripts.soak\nfrom scripts.support import replay\n",
        "tests/test_b.py": "from .test_a import x\nfrom edge.bench import f\n",
    }
    lay_out(tmp_path, tree)
    assert [arrow.split(" ", 1)[1] for arrow in wrong_arrows(tmp_path)] == [
        "edge.bench -> scripts.support.replay",
        "scripts.support.replay -> scripts.soak",
        "scripts.tool -> tests.support",
        "tests.test_a -> scripts.soak",
        "tests.test_b -> tests.test_a",
    ]


# Inside edge: the daemon writes through the store and reaches no consumer (serve,
# publish, record and foxglove, a store's reader or follower); the store's writer (the ring) reads nothing
# of the reader side; the reader side loads no array code.
MAY_NOT = {
    "edge.daemon": (
        "edge.serve",
        "edge.publish",
        "edge.record",
        "edge.foxglove_live",
        "edge.store.read",
        "edge.store.follow",
    ),
    "edge.store.ring": ("edge.store.read", "edge.store.follow"),
    "edge.store.read": ("numpy", "edge.store.ring", "edge.frames"),
    "edge.store.follow": ("numpy", "edge.store.ring", "edge.frames"),
    "edge.store.trust": ("numpy", "edge.store.ring", "edge.frames"),
    "edge.store.layout": ("numpy", "edge.store.ring", "edge.frames"),
}


def _within(name: str, part: str) -> bool:
    return name == part or name.startswith(part + ".")


def _forbidden(source: str, target: str) -> bool:
    return any(
        _within(source, part) and any(_within(target, t) for t in targets)
        for part, targets in MAY_NOT.items()
    )


def forbidden_arrows(root: Path) -> list[str]:
    return arrows(root, _forbidden)


def test_the_daemon_reaches_no_consumer_and_the_writer_no_reader() -> None:
    assert not forbidden_arrows(ROOT), "\n".join(forbidden_arrows(ROOT))


def test_the_rule_finds_a_daemon_that_imports_a_reader(tmp_path: Path) -> None:
    tree = {
        "edge/__init__.py": "",
        "edge/daemon/service.py": "from edge.store.read import latest\nfrom edge.store import ring\n",
        "edge/store/__init__.py": "",
        "edge/store/follow.py": "",
        "edge/store/ring.py": "from edge.store import follow\n",
        "edge/store/read.py": "import numpy as np\n",
    }
    lay_out(tmp_path, tree)
    assert [arrow.split(" ", 1)[1] for arrow in forbidden_arrows(tmp_path)] == [
        "edge.daemon.service -> edge.store.read",
        "edge.store.read -> numpy",
        "edge.store.ring -> edge.store.follow",
    ]


def circles(root: Path) -> list[list[str]]:
    """The import circles among the checkout's modules (lazy imports included): each a
    strongly connected set of two or more, sorted."""
    known = modules(root)
    graph = {
        name: sorted({t for _, t in imported(name, path, known) if t in known and t != name})
        for name, path in known.items()
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            part = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return sorted(found)


def test_no_import_circle_in_edge_scripts_or_tests() -> None:
    assert circles(ROOT) == []


def test_the_circle_rule_finds_a_lazy_circle(tmp_path: Path) -> None:
    tree = {
        "scripts/__init__.py": "",
        "scripts/support/__init__.py": "",
        "scripts/support/a.py": "from scripts.support import b\n",
        "scripts/support/b.py": "def f():\n    from scripts.support.c import g\n",
        "scripts/support/c.py": "import scripts.support.a\n",
        "scripts/support/d.py": "from scripts.support import a\n",
    }
    lay_out(tmp_path, tree)
    assert circles(tmp_path) == [["scripts.support.a", "scripts.support.b", "scripts.support.c"]]


def shipped_for_maintainers(root: Path) -> list[str]:
    """Public top-level functions and classes of edge/ whose name appears nowhere else in
    the package, nor among pyproject.toml's entry points: shipped, though only the
    maintainer's tools and tests (or nothing) use them. By name, so one that shares its
    name with something the package uses is missed, never one that is used flagged."""
    words: Counter[str] = Counter()
    defined: dict[str, list[Path]] = {}
    for path in [*sorted((root / "edge").rglob("*.py")), root / "pyproject.toml"]:
        text = path.read_text()
        words.update(re.findall(r"\w+", text))
        for node in ast.parse(text).body if path.suffix == ".py" else []:
            kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            if isinstance(node, kinds) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(path)
    return [
        f"{path.relative_to(root)}: {name}"
        for name, paths in sorted(defined.items())
        if words[name] <= len(paths)
        for path in paths
    ]


def test_the_package_ships_no_maintainer_code() -> None:
    """What only scripts/ and tests/ use lives in scripts/support, not in edge/ (which
    every Pi installs)."""
    found = shipped_for_maintainers(ROOT)
    assert not found, found


def test_the_shipping_rule_finds_a_maintainers_function(tmp_path: Path) -> None:
    (tmp_path / "edge").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project.scripts]\nx = "edge.b:main"\n')
    (tmp_path / "edge" / "a.py").write_text("def used():\n    pass\n\n\nclass Helper:\n    pass\n")
    (tmp_path / "edge" / "b.py").write_text("from edge import a\n\n\ndef main():\n    a.used()\n")
    assert shipped_for_maintainers(tmp_path) == ["edge/a.py: Helper"]


def long_functions(path: Path) -> list[str]:
    """Functions over LONGEST lines, and classes over LONGEST_CLASS (in edge/)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            longest = LONGEST_CLASS if isinstance(node, ast.ClassDef) else LONGEST
            if lines > longest:
                found.append(f"{path.relative_to(ROOT)}:{first} {node.name}: {lines} lines")
    return found


def test_no_function_is_over_a_screen() -> None:
    python = files("edge", "scripts", "tests", pattern="*.py")
    assert len(python) > 150
    found = [line for path in python for line in long_functions(path)]
    assert not found, found


def test_the_rule_finds_a_long_function(tmp_path: Path) -> None:
    path = ROOT / "tests" / f".house-{tmp_path.name}.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST))
    methods = "".join(
        f"    def m{i}(self):\n        return {i}\n\n" for i in range(LONGEST_CLASS // 3 + 1)
    )
    try:
        path.write_text(
            f"def short():\n    return 1\n\n\ndef long():\n{body}\n\nclass Big:\n{methods}"
        )
        assert [f.split()[1] for f in long_functions(path)] == ["long:", "Big:"]
    finally:
        path.unlink()
