"""The import graph of ``edge``, read from the source (imports inside functions
included, since a lazy import still ties two modules together): no module reaches
itself again."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edge"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The edge modules ``path`` imports anywhere in it (``from edge import x`` names
    module x when there is one; a package's own ``__init__`` re-exports count too)."""
    out: set[str] = set()
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    out.add(f"{base}.{a.name}")
                elif base in modules:
                    out.add(base)
    out.discard(this)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {name: imports(path, modules) for name, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of more than one module."""
    found, done = [], set()
    for start in sorted(edges):
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    key = frozenset(path)
                    if key not in done:
                        done.add(key)
                        found.append([*path, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_the_reader_sees_a_planted_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_edge_imports_no_module_that_imports_it_back() -> None:
    edges = graph()
    assert edges["edge.core"] >= {"edge.litert", "edge.weightcache"}  # the reader works
    assert "edge.core" not in edges["edge.weightcache"]
    loops = cycles(edges)
    print("\n".join(" -> ".join(c) for c in loops) or "no cycles")
    assert loops == []


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_config_stands_below_the_runtime() -> None:
    """The settings are read by everything and read nothing that runs: edge.config
    reaches no model runtime, camera, pipeline, daemon or consumer, even lazily (the
    checks that need models or a camera live with their owners)."""
    edges = graph()
    below = reach(edges, "edge.config")
    assert "edge.models" in below  # the reader works
    runtime = "edge.pipeline edge.core edge.camera edge.daemon edge.serve edge.publish"
    runtime += " edge.frames edge.litert"
    found = sorted(m for m in below if m.startswith(tuple(runtime.split())))
    assert not found, found
