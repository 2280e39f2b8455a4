"""``da3-edge install-executorch``: the ExecuTorch stages' runtime, without torch.

See ``edge.etrunner.install`` for the steps and docs/explanation/executorch-runner.md
for why it is a separate install step and not a package dependency.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from edge import etrunner
from edge.etrunner import install


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge install-executorch",
        description="Install the runtime for --stages executorch: the pinned executorch "
        f"{etrunner.EXECUTORCH_VERSION} wheel (SHA-256 checked; only its C++ runtime "
        "libraries are kept, no torch), and da3-edge's runner built against it with the "
        "system C++ compiler. Outside the packages uv manages: `uv sync` keeps it. "
        "Running it again changes nothing.",
    )
    p.add_argument(
        "--dest",
        metavar="DIR",
        help=f"where to install (default: ${etrunner.ENV_RUNTIME}, else "
        "<python prefix>/share/da3-edge/executorch-<version>)",
    )
    p.add_argument(
        "--wheel",
        metavar="FILE",
        help="use this copy of the pinned wheel (offline installs); its SHA-256 is checked",
    )
    p.add_argument(
        "--platform",
        choices=sorted(install.WHEELS),
        help="build for this platform (default: this machine's; another needs --cxx)",
    )
    p.add_argument(
        "--cxx",
        metavar="CMD",
        help="C++ compiler (default: $CXX, else c++ or g++; aarch64-linux-gnu-g++ cross-builds)",
    )
    p.add_argument("--force", action="store_true", help="rebuild even if already installed")
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    dest = ns.dest or (etrunner.runtime_dir() if not ns.platform else None)
    path, changed = install.install(
        dest,
        target=ns.platform,
        wheel=ns.wheel,
        cxx=ns.cxx,
        force=ns.force,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"{'installed' if changed else 'unchanged'}: {path}")
    return 0
