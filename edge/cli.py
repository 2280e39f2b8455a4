"""``da3-edge``: a thin dispatcher to one module per subcommand.

Errors: usage errors exit 2 (argparse); runtime errors exit 1 with one line on stderr
that says what to do; ``DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from edge.errors import EdgeError, UsageError, report

COMMANDS = {
    "snap": ("edge.commands.snap", "depth maps for still images (PNG, npz, preview, JSON)"),
    "export": (
        "edge.commands.export",
        "convert DA3-small weights to LiteRT models (needs the export environment)",
    ),
    "run": ("edge.commands.run", "the camera daemon: continuous capture -> relative-depth frames"),
    "serve": ("edge.commands.serve", "the store live over HTTP: newest frame, events, health"),
    "publish": (
        "edge.commands.publish",
        "frames and health to MQTT, with Home Assistant discovery",
    ),
    "record": (
        "edge.commands.record",
        "the store's frames into MCAP for Foxglove and ROS 2 tools (depth, points)",
    ),
    "foxglove": (
        "edge.commands.foxglove",
        "the store's frames live in the Foxglove app (WebSocket, loopback)",
    ),
    "doctor": ("edge.commands.doctor", "check this machine: CPU, LiteRT, models, cameras, store"),
    "bench": ("edge.commands.bench", "benchmark: latency per stage, load, cold start, peak RSS"),
    "install-executorch": (
        "edge.commands.install_executorch",
        "install the runtime for --stages executorch (no torch)",
    ),
    "models": (
        "edge.commands.models",
        "list the models in a model directory and check their hashes",
    ),
    "config": (
        "edge.commands.config",
        "read or change the config file in place, checked before it is written",
    ),
    "card": (
        "edge.commands.card",
        "prepare a Raspberry Pi OS card (Imager's) to install da3-edge at first boot",
    ),
    "update": (
        "edge.commands.update",
        "install another da3-edge wheel on this Pi, rolled back if its daemon does not start",
    ),
}

USAGE = "usage: da3-edge [-h] [--version] COMMAND [ARGS...]"


# The depth runtime's packages (pyproject.toml marks LiteRT for the machines it has
# wheels for): where one is absent, a command that needs it says so in a line.
RUNTIME_MODULES = {"numpy": "numpy", "PIL": "Pillow", "ai_edge_litert": "LiteRT (ai-edge-litert)"}


def _help() -> str:
    lines = [
        USAGE,
        "",
        "Depth Anything 3 (small) on Arm edge devices: relative depth + confidence.",
        "",
        "commands:",
    ]
    lines += [f"  {name:<20}{text}" for name, (_, text) in COMMANDS.items()]
    lines += [
        "",
        "Run `da3-edge COMMAND --help` for a command's options.",
        "DEBUG=1 shows tracebacks.",
    ]
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_help())
        return 0 if args else 2
    if args[0] == "--version":
        from edge.version import version

        print(f"da3-edge {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(USAGE, file=sys.stderr)
        report(f"unknown command {name!r} (choose from {', '.join(COMMANDS)})")
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except UsageError as exc:
        if os.environ.get("DEBUG") == "1":
            traceback.print_exc()
        report(exc)
        return 2
    except EdgeError as exc:
        if os.environ.get("DEBUG") == "1":
            traceback.print_exc()
        report(exc)
        return 1
    except ModuleNotFoundError as exc:
        if exc.name not in RUNTIME_MODULES:
            raise
        report(
            f"{RUNTIME_MODULES[exc.name]} is not installed: depth needs LiteRT, numpy and "
            "Pillow, and LiteRT has wheels only for Linux (x86_64, aarch64) and macOS on Apple "
            "Silicon; elsewhere da3-edge readies cards (`da3-edge card`) and builds models"
        )
        return 1
    except SystemExit as exc:  # argparse: --help exits 0, usage errors exit 2
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        print("da3-edge: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get("DA3_EDGE_LITERT_LOG") != "1":
        # LiteRT's static destructors log "DestroyAccelerator" lines at exit; the
        # command's own output is complete by now.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    sys.exit(code)
