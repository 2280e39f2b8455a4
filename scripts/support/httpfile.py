"""One file over HTTP on loopback, as a web server serves a model pack: Range honoured,
and faults on request (a response cut short, a server that stalls)."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from typing import Any


class Server:
    """A loopback HTTP server for one file, honouring Range; ``cut_after`` ends the
    first response after that many bytes, ``stall`` holds every answer that long,
    ``announced`` is the Content-Length it claims (a server that lies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cut_after: int | None = None
        self.stall = 0.0
        self.announced: int | None = None
        self.ranges: list[str | None] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                data = server.path.read_bytes()
                asked = self.headers.get("Range")
                server.ranges.append(asked)
                start = int(asked.removeprefix("bytes=").rstrip("-")) if asked else 0
                if server.stall:
                    time.sleep(server.stall)
                self.send_response(206 if asked else 200)
                length = server.announced or len(data) - start
                self.send_header("Content-Length", str(length))
                self.end_headers()
                body = data[start:]
                if server.cut_after is not None:
                    body, server.cut_after = body[: server.cut_after], None
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/models.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
