"""Native libraries that talk on file descriptor 2.

LiteRT prints ~20 INFO lines per model it loads (accelerator registry, vendor plugins
it cannot find) and ExecuTorch's XNNPACK backend a few cpuinfo lines, with no switch
for either. ``captured_stderr`` catches what they write while loading and on first
use; the text goes to the DEBUG level of the ``edge.native`` logger (and into error
messages), and ``DA3_EDGE_LITERT_LOG=1`` lets it through untouched. It is used around
loads and first runs only, never in the steady-state loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator

log = logging.getLogger(__name__)
ENV_LITERT_LOG = "DA3_EDGE_LITERT_LOG"


@contextlib.contextmanager
def captured_stderr(box: list[str]) -> Iterator[None]:
    """Redirect fd 2 to a temporary file for the block; append what was written."""
    if os.environ.get(ENV_LITERT_LOG) == "1":
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            box.append(text)
            for line in text.splitlines():
                log.debug("native: %s", line)
