"""``da3-edge serve``: the store live over HTTP (see ``edge.serve``).

Exit codes: 0 after a clean stop, 1 for a config error or an address it cannot
listen on (one line), 2 for usage errors.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

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
    p.add_argument("--host", metavar="ADDR", help=config_mod.flag_help("serve.host"))
    p.add_argument("--port", type=int, metavar="N", help=config_mod.flag_help("serve.port"))
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    config = config_mod.load(ns.config, parts=("store", "serve"))
    serve = config.serve
    if ns.host is not None:
        serve = replace(serve, host=ns.host)
    if ns.port is not None:
        serve = replace(serve, port=ns.port)
    config = replace(config, serve=serve)
    config_mod.validate(config, parts=("serve",))
    from edge.log import setup_logging
    from edge.serve import run
    from edge.store.trust import store_to_read

    setup_logging()
    return run(config, store_to_read(ns.store, config.store.dir))
