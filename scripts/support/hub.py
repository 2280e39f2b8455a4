"""A loopback server that answers like the Hugging Face hub for one release: the resolve
URL of ``config.json`` serves it; that of ``model.safetensors`` (an LFS file) redirects
to a file host with the file's SHA-256 (``X-Linked-Etag``) and size (``X-Linked-Size``),
and the file host honours Range. Faults on request: a first response cut short, a wrong
SHA-256, a size that lies, more bytes than announced, a reason phrase with terminal
escapes."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path
from typing import Any

from edge.models import CONFIG_FILE, HUB_REPO, WEIGHTS_FILE


class _Handler(http.server.BaseHTTPRequestHandler):
    hub: Hub  # set on the subclass each Hub makes

    def log_message(self, *_: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.answer(body=False)

    def do_GET(self) -> None:
        self.answer(body=True)

    def answer(self, body: bool) -> None:
        hub = self.hub
        if hub.status:
            self.send_response(*hub.status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == hub.resolve + CONFIG_FILE:
            self.send(hub.config, body)
        elif self.path == hub.resolve + WEIGHTS_FILE:
            self.send_response(302)
            self.send_header("Location", f"/files/{hub.sha256}")
            self.send_header("X-Linked-Etag", f'"{hub.etag or hub.sha256}"')
            size = hub.announced if hub.announced is not None else len(hub.weights)
            self.send_header("X-Linked-Size", str(size))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == f"/files/{hub.sha256}":
            self.ranged(body)
        else:
            self.send_error(404)

    def send(self, data: bytes, body: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def ranged(self, body: bool) -> None:
        hub = self.hub
        asked = self.headers.get("Range")
        hub.ranges.append(asked)
        start = int(asked.removeprefix("bytes=").rstrip("-")) if asked else 0
        data = hub.weights[start:] + hub.extra
        self.send_response(206 if asked else 200)
        if not hub.extra:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if hub.cut_after is not None:
            data, hub.cut_after = data[: hub.cut_after], None
        if body:
            self.wfile.write(data)
        self.close_connection = True


class Hub:
    def __init__(self, release: Path, repo: str = HUB_REPO) -> None:
        self.config = (release / CONFIG_FILE).read_bytes()
        self.weights = (release / WEIGHTS_FILE).read_bytes()
        self.sha256 = hashlib.sha256(self.weights).hexdigest()
        self.resolve = f"/{repo}/resolve/main/"
        self.announced: int | None = None  # X-Linked-Size, when it should lie
        self.etag: str | None = None  # X-Linked-Etag, when it should lie
        self.extra = b""  # bytes sent past the file (a host that sends too much)
        self.cut_after: int | None = None
        self.status: tuple[int, str] | None = None  # every answer, when set
        self.ranges: list[str | None] = []
        handler = type("Handler", (_Handler,), {"hub": self})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A client that hangs up on an oversize answer is the point of a test, not news.
        self.httpd.handle_error = lambda request, address: None  # type: ignore[method-assign,assignment]
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
