"""Docs that must not drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.support import ROOT, generated, measured


@pytest.mark.parametrize("part", generated.PARTS, ids=lambda p: p.name)
def test_generated_docs_are_current(part: generated.Part) -> None:
    """Each generated part of the docs (the command reference from --help, the tables
    from the committed measurements) is what its generator renders now."""
    text = part.doc.read_text()
    assert part.written(text) == text, f"{part.name} is out of date: run {generated.COMMAND}"


def test_a_stale_part_is_found_and_rewritten(tmp_path: Path) -> None:
    """The check fails on a doc that drifted, and writing puts the part back."""
    part = next(p for p in generated.PARTS if p.name == "kernels table")
    doc = tmp_path / "arm.md"
    drifted = part.doc.read_text().replace(part.begin + "\n", part.begin + "\n| stale |\n")
    doc.write_text(drifted)
    moved = generated.Part(part.name, doc, part.render)
    assert moved.written(drifted) != drifted
    assert moved.written(drifted) == part.doc.read_text()


def test_the_price_of_sizes_is_medians_and_ratios_to_the_first() -> None:
    """The price of sizes' summary (scripts.support.sizes): medians over rounds, ratios to the first size's in
    the same run, and the table row that shows them."""
    from scripts.support.performance_tables import render_sizes
    from scripts.support.sizes import summarise

    def point(core: float, still: float) -> dict[str, float]:
        return {"core_ms": core, "still_s": still, "still_peak_rss_mib": 300.0}

    def daemon(fps: float, core_ms: float) -> dict[str, object]:
        return {
            "fps": fps,
            "core_s": core_ms / 1000,
            "ratio_to_core_rate": fps * core_ms / 1000,
            "stages": "executorch",
        }

    rounds = [
        {
            "504/fp16": point(c, 2.0),
            "504/int8": point(c, 2.0),
            "280/fp16": point(c / 4, 1.0),
            "280/int8": point(c / 4, 1.0),
            "504/daemon": daemon(fps, c),
            "280/daemon": daemon(fps * 3, c / 4),
        }
        for c, fps in ((400.0, 2.4), (1000.0, 0.9), (420.0, 2.3))  # a noisy round
    ]
    rows = summarise([504, 280], rounds)
    assert [(r["size"], r["shape"], r["tokens"]) for r in rows] == [
        (504, [378, 504], 972),
        (280, [210, 280], 300),
    ]
    assert rows[0]["core_ms"]["fp16"] == 420.0 and rows[0]["core_ratio"]["fp16"] == 1.0
    assert rows[1]["core_ms"]["int8"] == 105.0 and rows[1]["core_ratio"]["int8"] == 0.25
    assert rows[1]["still_ratio"]["fp16"] == 0.5
    # The daemon's ratio is each round's own (its core timed just before it); the row is
    # the median round by that ratio (its frames/s with it), as compare_pytorch's.
    assert rows[0]["daemon"]["fps"] == 2.4 and rows[0]["daemon"]["ratio_to_core_rate"] == 2.4 * 0.4
    assert rows[0]["daemon"]["ratio_range"] == [0.9, 2.3 * 0.42]
    assert len(rows[1]["daemon"]["rounds"]) == 3
    for row, flops in zip(rows, (75.3, 20.1), strict=True):
        row["gflop"] = flops
    machine = {"cpu": {"model": "cpu", "machine": "x86_64", "cores": 2}, "git_revision": "abc"}
    data = {
        "machine": machine,
        "threads": 2,
        "rounds": 3,
        "image": "img",
        "random_init": True,
        "daemon_frames": 30,
        "sizes": rows,
    }
    table = render_sizes(data)
    assert (
        "| 280 | 210x280 | 300 | 20.1 | 105 ms (0.25) | 105 ms (0.25) | 1.00 s (0.50) | "
        "1.00 s (0.50) | 7.20 frames/s (0.72) |" in table
    ), table
    assert "(fp16, executorch stages), 30 frames" in table
    assert "random-init weights (the cost of a size, not its accuracy)" in table


def test_readme_names_the_test_command_ci_runs() -> None:
    """The README's test command is one script, the one .ci/run calls."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nscripts/test-all\n" in readme and "\nscripts/test-all\n" in ci
    assert "scripts/check" in (ROOT / "scripts" / "test-all").read_text()


def test_every_environment_variable_is_in_the_reference() -> None:
    """docs/reference/environment.md lists each ``DA3_EDGE_*`` variable the tree reads
    (the package, scripts, tests, CI, units), and nothing the tree no longer reads."""
    import re

    pattern = re.compile(r"\bDA3_EDGE_[A-Z0-9_]*[A-Z0-9]\b")
    used: dict[str, str] = {}
    for top in ("edge", "scripts", "tests", "systemd", ".ci"):
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for name in pattern.findall(text):
                used.setdefault(name, str(path.relative_to(ROOT)))
    documented = set(pattern.findall((ROOT / "docs/reference/environment.md").read_text()))
    print(f"{len(used)} variables in the tree: {', '.join(sorted(used))}")
    missing = {name: where for name, where in used.items() if name not in documented}
    assert not missing, f"not in docs/reference/environment.md: {missing}"
    assert documented <= set(used), f"documented, read nowhere: {documented - set(used)}"


def test_owner_commands_install_no_developer_tools() -> None:
    """Every ``uv run da3-edge ...`` a reader is told to type carries ``--no-dev``: a
    plain ``uv run`` syncs the dev group (playwright, scikit-image, scipy, mypy, ruff)
    onto an owner's laptop (``uv run`` adds, never removes: a developer's checkout keeps
    its tools)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "systemd/README.md"]
    bad = [
        f"{page.relative_to(ROOT)}: {line.strip()}"
        for page in pages
        for line in page.read_text().splitlines()
        if re.search(r"\buv run (?!--no-dev\b)(?:--\S+ )*da3-edge\b", line)
    ]
    assert not bad, bad


CHANGELOG_SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def changelog_problems(text: str) -> list[str]:
    """Where ``text`` is not a changelog for users in Keep a Changelog's form: releases
    (``## [Unreleased]``, ``## [1.2.3] - 2026-12-06``) holding only its six kinds of
    change as bullets; no tables or deeper headings (measurements live in the docs)."""
    problems = []
    release = re.compile(r"## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?")
    in_release = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            in_release = bool(release.fullmatch(line))
            if not in_release:
                problems.append(f"{n}: not a release heading: {line}")
        elif line.startswith("### ") and line[4:] not in CHANGELOG_SECTIONS:
            problems.append(f"{n}: not one of {', '.join(CHANGELOG_SECTIONS)}: {line}")
        elif line.startswith(("####", "|")):
            problems.append(f"{n}: a table or a deeper heading: {line[:40]}")
        elif in_release and line and not line.startswith(("### ", "- ", "  ")):
            problems.append(f"{n}: not a bullet: {line[:40]}")
    return problems


def test_the_changelog_is_for_users() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text or re.search(r"^## \[\d", text, re.M)
    assert changelog_problems(text) == []
    notebook = "## Unreleased (0.1.0)\n\n### Performance: what each change measured\n| a |\n"
    assert len(changelog_problems(notebook)) == 3


def test_a_table_refuses_a_measurement_from_a_dirty_tree(tmp_path: Path) -> None:
    """A committed figure comes from a commit: a measurement whose revision ends in
    +dirty is refused unless measured.MEASURED_DIRTY names it and why; each one named
    there is still so (the list only shrinks)."""
    for name in measured.MEASURED_DIRTY:
        data = measured.load_measurement(measured.BENCH / name)
        assert measured.revision(data).endswith("+dirty"), f"{name} is clean now: drop it"
    dirty = tmp_path / "new-x86_64.json"
    dirty.write_text('{"machine": {"git_revision": "abc1234+dirty"}}')
    with pytest.raises(measured.DirtyMeasurement, match=r"abc1234\+dirty"):
        measured.load_measurement(dirty)
    clean = tmp_path / "clean-x86_64.json"
    clean.write_text('{"_run": {"revision": "abc1234"}}')
    assert measured.load_measurement(clean) == {"_run": {"revision": "abc1234"}}


def test_a_tool_will_not_measure_into_docs_bench_from_a_dirty_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from edge import bench

    monkeypatch.setattr(bench, "git_revision", lambda: "abc1234+dirty")
    with pytest.raises(SystemExit, match="uncommitted changes"):
        measured.refuse_dirty(measured.BENCH / "sizes-x86_64.json")
    measured.refuse_dirty(tmp_path / "scratch.json")  # outside docs/bench: allowed
    monkeypatch.setattr(bench, "git_revision", lambda: "abc1234")
    measured.refuse_dirty(measured.BENCH / "sizes-x86_64.json")


def links(page: Path, docs: Path) -> set[Path]:
    """The pages under ``docs`` that ``page`` links to (relative Markdown links)."""
    found = set()
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
        path = (page.parent / target).resolve()
        if path.is_relative_to(docs) and path.exists():
            found.add(path)
    return found


def orphans(docs: Path) -> list[str]:
    """The pages under ``docs`` that no chain of links from its README.md reaches."""
    docs = docs.resolve()
    seen, todo = {docs / "README.md"}, [docs / "README.md"]
    while todo:
        for page in links(todo.pop(), docs) - seen:
            seen.add(page)
            todo.append(page)
    return sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md") if p not in seen)


def test_every_page_is_reachable_from_the_index(tmp_path: Path) -> None:
    """A page no link leads to is a page nobody reads: every page under docs/ can be
    reached from docs/README.md, link by link (a page planted with no link is found)."""
    assert orphans(ROOT / "docs") == []
    (tmp_path / "how-to").mkdir()
    (tmp_path / "README.md").write_text("- [a](how-to/a.md)\n")
    (tmp_path / "how-to" / "a.md").write_text("see [b](../b.md#part)\n")
    (tmp_path / "b.md").write_text("# b\n")
    (tmp_path / "c.md").write_text("[a](how-to/a.md)\n")
    assert orphans(tmp_path) == ["c.md"]


SECURITY = ROOT / "docs" / "reference" / "security.md"
ATTACKS = "## Every attack, and its test"


def attack_rows(text: str) -> list[list[str]]:
    """The cells of each row of the table under ``ATTACKS`` (its header and rule left out)."""
    _, found, section = ("\n" + text).partition("\n" + ATTACKS + "\n")
    assert found, f"no {ATTACKS!r} section"
    section = section.split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def defines(path: Path, name: str) -> bool:
    """Whether ``path`` (read, not imported) defines ``name``: a top-level function, or
    ``Class::method``."""
    import ast

    body = ast.parse(path.read_text()).body
    *owner, function = name.split("::")
    if owner:
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner[0]]
        body = classes[0].body if len(owner) == 1 and classes else []
    return any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function for n in body
    )


def attack_problems(text: str, root: Path) -> list[str]:
    """What is wrong with the table of attacks: a row that is not four cells or names no
    test (nor says "no test"), a ``tests/...py::name`` that file does not define, another
    file that is not there, or a check's "words" its file does not hold."""
    problems = []
    for n, row in enumerate(attack_rows(text), 1):
        if len(row) != 4 or row[0] not in ("1", "2", "3"):
            problems.append(f"row {n}: not round | attack | what holds | test: {row}")
            continue
        named = re.findall(r'`([^`]+)`(?: "([^"]+)")?', row[3])
        if not named and row[3] != "no test":
            problems.append(f"row {n}: names no test: {row[3]}")
        for ref, words in named:
            path, _, name = ref.partition("::")
            file = root / path
            if not file.is_file():
                problems.append(f"row {n}: no file {path}")
            elif path.startswith("tests/") and not defines(file, name):
                problems.append(f"row {n}: {path} defines no test {name!r}")
            elif words and words not in file.read_text():
                problems.append(f"row {n}: {path} has no check {words!r}")
    return problems


def test_every_attack_in_security_md_names_a_test_that_exists(tmp_path: Path) -> None:
    """docs/reference/security.md's table holds the attacks of all three rounds, each
    beside tests that exist (read with ast, not imported) or the installer check's words
    found in it; a wrong name, file or check is found."""
    from collections import Counter

    text = SECURITY.read_text()
    rows = attack_rows(text)
    rounds = Counter(row[0] for row in rows)
    untested = [row[1] for row in rows if row[3] == "no test"]
    print(f"attacks by round: {dict(sorted(rounds.items()))}; no test: {untested}")
    assert sorted(rounds) == ["1", "2", "3"]
    assert attack_problems(text, ROOT) == []
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(
        "def test_a():\n    pass\n\n\nclass TestB:\n    def test_b(self):\n        pass\n"
    )
    (tmp_path / "check.sh").write_text('check "the file was not written" true\n')
    planted = "\n".join(
        [
            ATTACKS,
            "",
            "| round | attack | what holds | test |",
            "| --- | --- | --- | --- |",
            "| 1 | a | b | `tests/test_a.py::test_a`<br>`tests/test_a.py::TestB::test_b` |",
            '| 2 | a | b | `check.sh` "the file was not written" |',
            "| 3 | a | b | no test |",
            "| 1 | a | b | `tests/test_a.py::test_b` |",
            "| 1 | a | b | `tests/test_a.py::TestB::test_a` |",
            "| 2 | a | b | `tests/test_c.py::test_a` |",
            '| 2 | a | b | `check.sh` "the file was written" |',
            "| 3 | a | b | none |",
            "| 4 | a | b | `tests/test_a.py::test_a` |",
        ]
    )
    problems = attack_problems(planted, tmp_path)
    assert [p.split(":")[0] for p in problems] == [f"row {n}" for n in range(4, 10)], problems


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "systemd/README.md"]


def test_no_page_tells_users_to_keep_the_store_in_tmp() -> None:
    """/tmp is shared: another user can make the store's folder there first (the
    default store refuses it; the docs must not ask for it either)."""
    told = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in doc_pages()
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"(--store|DA3_EDGE_STORE=|dir *=) *[\"']?/tmp/", line)
        and "telling users" not in line  # security.md's table names the attack
    ]
    assert not told, "\n".join(told)


def test_the_stores_mode_in_the_docs_is_the_units() -> None:
    """systemd/README.md states the store's mode the unit sets, and that is 0750."""
    unit = (ROOT / "systemd/da3-edge.service").read_text()
    mode = re.search(r"^RuntimeDirectoryMode=(\d+)$", unit, re.M)
    assert mode and mode[1] == "0750", "the store must be closed to others"
    readme = (ROOT / "systemd/README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `/run/da3-edge/`"))
    stated = set(re.findall(r"mode (\d{4})", row))
    stated |= set(re.findall(r"RuntimeDirectoryMode=(\d+)", readme))
    assert stated == {mode[1]}, stated
