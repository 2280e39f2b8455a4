"""``da3-edge serve``: the store live over HTTP (see ``edge.serve``).

Exit codes: 0 after a clean stop, 1 for a config error or an address it cannot
listen on (one line), 2 for usage errors.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from edge import config as config_mod
from edge.commands import options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge serve",
        description=(
            "Serve the frame store read-only over HTTP: a live page (/), the newest frame "
            "(/latest.json, /latest.jpg, /latest.png, /latest.npz, /latest.preview.png), "
            "an MJPEG stream (/stream.mjpg), events (/events), the daemon's status "
            "(/api/status), health (/healthz) and Prometheus metrics (/metrics). Binds "
            "127.0.0.1; any other address needs serve.token_file or serve.basic_auth_file."
        ),
    )
    options.add_store_and_config(p, sections="[serve]")
    config_mod.add_flags(p, ("serve",))
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    config = config_mod.load(ns.config, parts=("store", "serve"))
    flags = config_mod.flagged(ns, ("serve",))
    config = config_mod.with_overrides(config, flags, parts=("serve",))
    from edge.log import setup_logging
    from edge.serve import run
    from edge.store.trust import store_to_read

    setup_logging()
    return run(config, store_to_read(ns.store, config.store.dir))
