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
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)
ENV_LITERT_LOG = "DA3_EDGE_LITERT_LOG"
# fd 2 is the process's: one capture at a time, or a second thread's would restore the
# first's temporary file as fd 2. Reentrant: a capture may nest in its own thread.
_FD2 = threading.RLock()


@contextlib.contextmanager
def captured_stderr(box: list[str]) -> Iterator[None]:
    """Redirect fd 2 to a temporary file for the block; append what was written.
    Another thread's capture waits for this one."""
    if os.environ.get(ENV_LITERT_LOG) == "1":
        yield
        return
    with _FD2, _redirected(box):
        yield


@contextlib.contextmanager
def _redirected(box: list[str]) -> Iterator[None]:
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


MADV_DONTNEED = 4  # Linux <asm-generic/mman-common.h>


def release_mapped_file(path: str | os.PathLike[str]) -> int:
    """Drop this process's resident pages of every read-only mapping of ``path``.

    LiteRT maps the whole .tflite file; XNNPACK packs the weights into its own buffers
    when the model is opened and does not read the file's pages again, yet they stay
    resident: 49 MiB of an fp16 model, 96 MiB of an fp32 one. ``madvise(MADV_DONTNEED)``
    on a read-only file mapping only forgets them: anything that reads there later
    faults them back in from the file (the pages stay in the page cache), so it is
    safe, not just fast. Linux only (elsewhere: 0). Returns the bytes advised.
    """
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    target = os.path.realpath(path)
    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    released = 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read().splitlines()
    except OSError:
        return 0
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] != target or "w" in fields[1]:
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        if madvise(start, end - start, MADV_DONTNEED) == 0:
            released += end - start
        else:
            log.debug("madvise(%s): errno %d", target, ctypes.get_errno())
    return released
