"""``da3-edge run``: the camera daemon (see ``edge.daemon``).

Flags override the config file; ``--check-config`` validates and exits. Exit codes:
0 after a clean stop (SIGTERM/SIGINT), 1 for a config, model or store error at start
(one line naming the problem), 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from edge import config as config_mod


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge run",
        description=(
            "Run the camera daemon: capture frames continuously and write relative depth "
            "frames into a bounded store (newest frame wins when inference is slower than "
            "the camera). Speaks sd_notify under systemd (READY, STATUS, WATCHDOG). "
            "SIGHUP reloads the config; SIGTERM stops."
        ),
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config (default: built-in defaults; see --print-default-config)",
    )
    config_mod.add_flags(p, config_mod.DAEMON_PARTS)
    p.add_argument(
        "--check-config", action="store_true", help="validate the config (and flags) and exit"
    )
    p.add_argument(
        "--print-default-config",
        action="store_true",
        help="print the commented default config and exit",
    )
    p.add_argument(
        "--max-frames",
        type=int,
        default=0,
        metavar="N",
        help="stop after N frames are written (testing)",
    )
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    if ns.print_default_config:
        sys.stdout.write(config_mod.default_text())
        return 0
    flags = config_mod.flagged(ns, config_mod.DAEMON_PARTS)
    config = config_mod.with_overrides(config_mod.load(ns.config), flags)
    if ns.check_config:
        print(f"{ns.config or 'defaults'}: ok")
        return 0
    from edge.daemon import Daemon, setup_logging

    setup_logging()
    daemon = Daemon(config, max_frames=ns.max_frames, overrides=flags)
    return daemon.run()
