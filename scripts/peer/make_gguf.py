#!/usr/bin/env python3
"""Write DA3-small weights as a GGUF for depth-anything.cpp, the C++/ggml peer.

Run in the export environment (it has torch and the reference package), with the
peer's sources for its writer and ``gguf`` (its converter's one extra dependency)
importable::

    .venv-export/bin/python -m scripts.peer.make_gguf --peer-src PEER_SRC \\
        --weights .cache/tests/weights-seed0 --out peer/da3-small-f32.gguf

The network is built and filled by da3-edge's own loader (``edge.export.weights``,
official safetensors or a seeded random release), so both programs compare the same
numbers; the peer's writer (``scripts/convert_da3_to_gguf.py:write_da3_gguf``) lays
them out. Its own loader goes through ``depth_anything_3.api``, which imports pose
alignment code (``evo``) that neither needs. f16 and q8_0 files are made from this
one with the peer's ``da3-cli quantize``.

A GGUF made from random weights is named so by its checkpoint name
(``random-init-seed<N>``): the peer's ``info`` shows it.
"""

from __future__ import annotations

import argparse
import contextlib
import runpy
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def peer_scripts(peer_src: Path) -> Iterator[None]:
    """The peer's own ``scripts`` in place of da3-edge's while its converter loads: the
    peer's folder has no ``__init__.py`` (a namespace package), so da3-edge's regular
    package of the same name, imported already (``-m scripts.peer.make_gguf``), would
    win and ``scripts.gguf_keys`` would not be found. da3-edge's is put back after."""
    ours = {k: m for k, m in sys.modules.items() if k == "scripts" or k.startswith("scripts.")}
    for name in ours:
        del sys.modules[name]
    theirs = types.ModuleType("scripts")
    theirs.__path__ = [str(peer_src / "scripts")]
    sys.modules["scripts"] = theirs
    try:
        yield
    finally:
        for name in [k for k in sys.modules if k == "scripts" or k.startswith("scripts.")]:
            del sys.modules[name]
        sys.modules.update(ours)


def load_writer(peer_src: Path) -> Callable[..., None]:
    """The peer's ``write_da3_gguf``, its file run as a module of its own."""
    converter = peer_src / "scripts" / "convert_da3_to_gguf.py"
    with peer_scripts(peer_src):
        found = runpy.run_path(str(converter), run_name="peer_convert")
    writer: Callable[..., None] = found["write_da3_gguf"]
    return writer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-src", type=Path, required=True, help="depth-anything.cpp sources")
    ap.add_argument("--weights", type=Path, required=True, help="release folder or .safetensors")
    ap.add_argument("--out", type=Path, required=True, help="the f32 GGUF to write")
    args = ap.parse_args(argv)

    converter = args.peer_src / "scripts" / "convert_da3_to_gguf.py"
    if not converter.is_file():
        ap.error(f"{converter}: not found (is --peer-src a depth-anything.cpp checkout?)")
    try:
        write_da3_gguf = load_writer(args.peer_src)
    except ImportError as exc:
        ap.error(f"cannot load the peer's writer ({exc}); pip install gguf")

    from edge.export.weights import load_official, random_seed_of, resolve_weights_file

    weights = load_official(args.weights)
    seed = random_seed_of(resolve_weights_file(args.weights))
    name = f"random-init-seed{seed}" if seed is not None else "da3-small"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    write_da3_gguf(weights.net.float(), str(tmp), name)
    tmp.replace(args.out)
    print(f"{args.out}: {args.out.stat().st_size / 2**20:.1f} MiB ({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
