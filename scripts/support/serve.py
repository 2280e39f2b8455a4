"""`da3-edge serve` as a real process, and a client for it."""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .daemon import Command


class Serve(Command):
    """A `da3-edge serve` process; ``port`` read from its log line."""

    def __init__(self, args: list[str], log: Path) -> None:
        super().__init__("serve", ["--port", "0", *args], log)
        self.port = 0
        end = time.monotonic() + 20
        while time.monotonic() < end and self.proc.poll() is None:
            found = re.search(r"on http://[^:]+:(\d+)/", self.log)
            if found:
                self.port = int(found.group(1))
                return
            time.sleep(0.05)
        raise AssertionError(f"serve did not start:\n{self.log}")

    def get(
        self, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


@contextmanager
def serving(args: list[str], log: Path) -> Iterator[Serve]:
    s = Serve(args, log)
    try:
        yield s
    finally:
        s.stop()
