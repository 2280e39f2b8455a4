"""Third-party output of an export kept out of the way, and kept.

Exporting imports torch, litert-torch, ExecuTorch and the reference package, which print
a page of their own lines between the kit's progress lines: absl/oneDNN and flatbuffer
exporter logs and cpuinfo probes written by C++ straight to file descriptor 2,
FutureWarnings from torch's pytree, an omegaconf deprecation, and the reference
package's INFO logger on stdout. None of it is for the user of `da3-edge export`.

:func:`third_party_output_to_log` points descriptors 1 and 2 at a log file for the length of
the export, so everything written there, by Python or by C++, lands in the log. The
kit's own lines reach the terminal through the :class:`Console` it yields (duplicates of
the original descriptors: ``say`` for progress on stderr, ``result`` for stdout); Python
warnings raised from the kit's own code still reach the terminal. On success (or when
nothing was written) the log is deleted; on failure it is kept and named. ``--verbose``
skips all of this.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import edge

_EDGE_DIR = str(Path(edge.__file__).resolve().parent)


class Console:
    """Where the kit's own lines go: the terminal, whatever descriptors 1 and 2 are."""

    def __init__(self, err: TextIO, out: TextIO) -> None:
        self.err = err
        self.out = out

    def say(self, message: str) -> None:
        print(message, file=self.err, flush=True)

    def result(self, message: str) -> None:
        print(message, file=self.out, flush=True)


@contextlib.contextmanager
def third_party_output_to_log() -> Iterator[Console]:
    """Send descriptors 1 and 2 to a temporary log; yield the console for the kit's lines."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    err = os.fdopen(os.dup(saved[2]), "w", buffering=1, encoding="utf-8", errors="replace")
    out = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
    fd, name = tempfile.mkstemp(prefix="da3-edge-export-", suffix=".log")
    log = Path(name)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        # The kit's own warnings are real warnings: they reach the terminal.
        own = str(Path(filename).resolve()).startswith(_EDGE_DIR)
        target = err if own else (file or sys.stderr)
        target.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show
    ok = False
    try:
        yield Console(err, out)
        ok = True
    finally:
        warnings.showwarning = shown
        sys.stdout.flush()
        sys.stderr.flush()
        for target, original in saved.items():
            os.dup2(original, target)
            os.close(original)
        if ok or log.stat().st_size == 0:
            log.unlink(missing_ok=True)
        else:
            print(
                f"(third-party output of this export: {log}; --verbose shows it as it comes)",
                file=err,
                flush=True,
            )
        err.close()
        out.close()


@contextlib.contextmanager
def everything_shown() -> Iterator[Console]:
    """--verbose: nothing redirected."""
    yield Console(sys.stderr, sys.stdout)
