"""``da3-edge foxglove``: the store's frames live in the Foxglove app (see
``edge.foxglove_live``).

Exit codes: 0 once stopped (Ctrl-C / SIGTERM); 1 for a store or missing-SDK error (one
line); 2 for usage errors (a host beyond loopback, a port it cannot listen on).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from edge import config as config_mod
from edge.commands import options

PORT = 8765  # Foxglove's own default for its WebSocket servers


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge foxglove",
        description=(
            "Send the store's frames live to the Foxglove app over Foxglove's WebSocket "
            "protocol, on a recording's channels: relative depth and confidence (RawImage "
            "32FC1, not metres), the scene or the preview, the camera's calibration and the "
            "point cloud where the field of view is known. Loads no model; reads frames only "
            "while a client subscribes; a slow client loses older frames, never slows the "
            "daemon. Loopback only (the protocol has no login): from another machine, an SSH "
            "tunnel. Needs foxglove-sdk (pip install 'da3-edge[robots]')."
        ),
    )
    options.add_store_and_config(p, sections="[store]")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="a loopback address to listen on (default: 127.0.0.1)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=PORT,
        help=f"the port to listen on; 0: any free one (default: {PORT}, Foxglove's)",
    )
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    if not 0 <= ns.port <= 65535:
        raise SystemExit(f"da3-edge foxglove: error: --port {ns.port}: not a port")
    from edge.foxglove_live import check_host, serve
    from edge.record import needs_sdk
    from edge.store.trust import store_to_read

    check_host(ns.host, ns.port)
    config = config_mod.load(ns.config, parts=("store",))
    needs_sdk()
    root = store_to_read(ns.store, config.store.dir)
    stop = threading.Event()
    handlers = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}

    def ready(port: int) -> None:
        host = f"[{ns.host}]" if ":" in ns.host else ns.host
        print(f"foxglove: {root} on ws://{host}:{port}", file=sys.stderr, flush=True)

    try:
        done = serve(root, ns.host, ns.port, stop, ready=ready)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    flag = ", RANDOM-INIT (not a real model)" if done.random_init else ""
    print(f"foxglove: stopped after {done.frames} frames sent{flag}", file=sys.stderr)
    return 0
