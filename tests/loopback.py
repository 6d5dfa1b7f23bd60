"""A scripted HTTP server on loopback for the unit tests of the HTTP clients (promapi, httpget):
it answers every request with what the test set (status, body, headers) and keeps each request
it got (method, path, query, headers, body), so a test checks both what was sent and what the
client made of the answer. In process, on 127.0.0.1 only, started once per test module."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Script:
    """What the server answers next (to every request until changed) and what it was sent."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def answer(self, body: bytes | str, status: int = 200, **headers: str) -> None:
        self.body = body.encode() if isinstance(body, str) else body
        self.status = status
        self.headers = headers
        self.requests.clear()


@contextmanager
def scripted_server() -> Iterator[tuple[str, Script]]:
    """The base URL (``http://127.0.0.1:PORT``) and the script it follows."""
    script = Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            script.requests.append(Request(
                self.command, parts.path, urllib.parse.parse_qs(parts.query),
                {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)))
            self.send_response(script.status)
            for name, value in script.headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(script.body)))
            self.end_headers()
            self.wfile.write(script.body)

        do_POST = do_PUT = do_DELETE = do_GET

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", script
    finally:
        httpd.shutdown()
        httpd.server_close()
