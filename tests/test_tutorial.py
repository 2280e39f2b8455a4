"""docs/tutorial/first-depth-map.md, run as written: each command of its ``sh`` blocks
in order, in a shell at the checkout with HOME in a temporary folder, except the first
block's set-up, which CI's own steps (.ci/run: uv, uv sync, the export environment) did."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import plyfile

from scripts.support import ROOT
from scripts.support.tools import UV_CACHE

TUTORIAL = ROOT / "docs" / "tutorial" / "first-depth-map.md"
SET_UP = (
    "curl -LsSf https://astral.sh/uv/",
    "git clone ",
    "uv sync",
    "scripts/setup-export-env.sh",
)


def commands(text: str) -> list[str]:
    """The commands of the ``sh`` blocks, in order, the set-up left out."""
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(SET_UP)]


def test_the_tutorial_sets_up_as_ci_does_then_runs_the_rest() -> None:
    text = TUTORIAL.read_text()
    set_up = [
        c for b in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)[:1] for c in b.splitlines()
    ]
    assert [c.split(" ")[0] for c in set_up] == [
        "curl",
        "git",
        "uv",
        "scripts/setup-export-env.sh",
    ]
    assert (
        "/uv/0.13.9/install.sh" in set_up[0] and "uv==0.13.9" in (ROOT / ".ci" / "run").read_text()
    )
    assert len(commands(text)) == 6


def test_the_tutorial_runs_as_written(export_env: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "DA3_EDGE_MODELS")}
    env.update(HOME=str(tmp_path), UV_CACHE_DIR=UV_CACHE, UV_OFFLINE="1")
    (tmp_path / "da3-tutorial").mkdir()
    said: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    for command in commands(TUTORIAL.read_text()):
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        said.append((command, proc))

    def output(start: str) -> subprocess.CompletedProcess[str]:
        return next(proc for command, proc in said if command.startswith(start))

    home = tmp_path / "da3-tutorial"
    manifest = json.loads((home / "models" / "manifest.json").read_text())
    assert all(a["provenance"]["random_init"] for a in manifest["artifacts"] if a["kind"] == "core")
    listed = output("ls ~/da3-tutorial/out").stdout.split()
    assert sorted(listed) == [
        "picture.depth.png",
        "picture.json",
        "picture.npz",
        "picture.ply",
        "picture.preview.png",
    ]
    record = json.loads((home / "out" / "picture.json").read_text())
    assert record["random_init"] is True and record["source_size"] == [768, 1024]
    assert record["field_of_view"] == {"horizontal_degrees": 60.0, "source": "--hfov"}
    cloud = plyfile.PlyData.read(str(home / "out" / "picture.ply"))
    assert cloud["vertex"].count == record["point_cloud"]["points"] > 0
    assert "random-init weights" in output("uv run --no-dev da3-edge snap").stderr
    latest = output("ls ~/da3-tutorial/store/latest/").stdout.split()
    assert "frame.json" in latest and "frame.npz" in latest, latest
    status = json.loads((home / "store" / "status.json").read_text())
    assert status["counters"]["written"] == 5, status["counters"]
