"""``da3-edge publish``: frames and health to MQTT (see ``edge.publish``).

Exit codes: 0 after a clean stop, or at once when ``mqtt.enabled`` is false (nothing
to do: said in one line); 1 for a config error (one line); 2 for usage errors. A
broker that is down or refuses the login is not an error: publish keeps retrying.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from edge import config as config_mod
from edge.commands import options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="da3-edge publish",
        description=(
            "Publish the store's frames and the daemon's health to an MQTT broker "
            "(topics da3edge/<device id>/availability, state, stats, preview) with Home "
            "Assistant discovery. Configured in the [mqtt] section; off until "
            "mqtt.enabled = true."
        ),
    )
    options.add_store_and_config(p, sections="[mqtt]")
    return p


def main(args: Sequence[str] | None = None) -> int:
    ns = parser().parse_args(args)
    config = config_mod.load(ns.config, parts=("store", "mqtt"))
    if not config.mqtt.enabled:
        why = f"mqtt.enabled is false in {ns.config or 'the defaults'}: nothing to publish"
        print(f"da3-edge publish: {why}", file=sys.stderr)
        # Under systemd (Type=notify) a clean start and stop, not a failed unit.
        from edge.systemd import Notifier

        Notifier.from_env().ready(why)
        return 0
    from edge.log import setup_logging
    from edge.publish import run
    from edge.store.trust import store_to_read

    store = store_to_read(ns.store, config.store.dir)
    setup_logging()
    return run(config.mqtt, store)
