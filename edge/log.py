"""Logging for the long-running commands (the daemon, serve): one line a record,
to stderr, which systemd's journal keeps; ``DEBUG=1`` for debug records."""

from __future__ import annotations

import logging
import os


def setup_logging() -> None:
    level = logging.DEBUG if os.environ.get("DEBUG") == "1" else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
