"""Every test file is classified for the aarch64 lane, by the rule in docs/arm.md.

The lane (scripts/arm-lane.sh) runs, on the emulated Cortex-A76, the tests marked
``arm``: those whose result can differ on Arm (native code, CPU-dependent behaviour).
docs/arm.md has a table naming each test file's lane and why; this keeps the table, the
markers and the files in step, so a new test file cannot land unclassified.
"""

from __future__ import annotations

import re

from scripts.support import ROOT

ARM_DOC = ROOT / "docs" / "arm.md"
MARK = re.compile(r"pytest\.mark\.arm\b")


def classification() -> dict[str, tuple[str, str]]:
    """docs/arm.md's table: test file -> (lane, why)."""
    text = ARM_DOC.read_text()
    section = text.split("## Which tests run emulated", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(tests/test_\w+\.py)` \| (\S+) \| (.+?) \|$", section, re.M)
    table: dict[str, tuple[str, str]] = {}
    for name, lane, why in rows:
        assert name not in table, f"docs/arm.md lists {name} twice"
        table[name] = (lane, why)
    return table


def test_every_test_file_is_classified_once() -> None:
    files = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")}
    table = classification()
    assert set(table) == files, (
        f"unclassified: {sorted(files - set(table))}; gone: {sorted(set(table) - files)} "
        "(docs/arm.md, 'Which tests run emulated')"
    )
    for name, (lane, why) in table.items():
        assert lane in ("both", "x86_64"), (name, lane)
        assert len(why) > 10, f"{name}: say why"


def test_the_table_matches_the_markers() -> None:
    for name, (lane, _) in classification().items():
        marked = bool(MARK.search((ROOT / name).read_text()))
        assert marked == (lane == "both"), (
            f"{name}: docs/arm.md says {lane!r} but the file "
            + ("has" if marked else "has no")
            + " test marked arm"
        )


def test_the_lane_runs_exactly_the_marked_tests() -> None:
    lane = (ROOT / "scripts" / "arm-lane.sh").read_text()
    assert "-m arm" in lane
    assert "grep -lE 'pytest\\.mark\\.arm\\b' tests/test_*.py" in lane
