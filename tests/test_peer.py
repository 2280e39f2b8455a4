"""The peer comparison's tooling (scripts/peer/): depth-anything.cpp's converter loads
from its own ``scripts`` folder, not da3-edge's package of the same name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scripts.support import ROOT

CONVERTER = """\
from scripts.gguf_keys import KEY


def write_da3_gguf(net, path, name):
    with open(path, "w") as fh:
        fh.write(f"{KEY} {name} {net}")
"""


def test_the_peers_converter_finds_its_own_scripts_package(tmp_path: Path) -> None:
    """A stand-in peer tree as depth-anything.cpp lays it out (``scripts/`` without an
    ``__init__.py``, its converter importing ``scripts.gguf_keys``), loaded the way the
    README runs it (``python -m scripts.peer.make_gguf``: da3-edge's ``scripts`` imported
    first); da3-edge's package is whole again afterwards."""
    peer = tmp_path / "depth-anything.cpp"
    (peer / "scripts").mkdir(parents=True)
    (peer / "scripts" / "gguf_keys.py").write_text('KEY = "peer-keys"\n')
    (peer / "scripts" / "convert_da3_to_gguf.py").write_text(CONVERTER)
    out = tmp_path / "out.gguf"
    code = f"""
import scripts.peer.make_gguf as m
write = m.load_writer(__import__("pathlib").Path({str(peer)!r}))
write("NET", {str(out)!r}, "random-init-seed0")
import scripts.peer, scripts.generated  # da3-edge's own, back in place
assert scripts.peer.__file__.startswith({str(ROOT)!r}), scripts.peer.__file__
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    print(proc.stderr[-2000:])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok"
    assert out.read_text() == "peer-keys random-init-seed0 NET"
