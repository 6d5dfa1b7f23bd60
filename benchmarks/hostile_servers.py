"""HTTP servers that answer badly on purpose, on loopback, for the CLI's and the trial library's
hostile-server tests and benchmarks/hostile.py: an endless body, a drip of one byte at a time.

Each is bounded: the endless one stops after ``cap`` bytes, the drip after ``seconds``, and
both stop when the ``with`` block ends.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hostile_server(kind: str, *, cap: int = 512 * 2**20, every: float = 0.2,
                   seconds: float = 60.0) -> Iterator[str]:
    """Yields the base URL of a server that answers every request (any method, any path) with
    ``kind``: "endless" (200, no length, ``cap`` bytes of JSON-ish filler as fast as it goes)
    or "drip" (200 with a Content-Length, then one byte every ``every`` seconds)."""
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if kind == "endless":
                self.send_header("Connection", "close")
                self.end_headers()
                piece, sent = b'{"status":"success","data":[' + b"1," * 32768, 0
                while sent < cap and not stop.is_set():
                    self.wfile.write(piece)
                    sent += len(piece)
            else:
                body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
                self.send_header("Content-Length", str(len(body) * 1000))
                self.end_headers()
                self.wfile.flush()
                for n in range(int(seconds / every)):
                    if stop.wait(every):
                        break
                    self.wfile.write(body[n % len(body):n % len(body) + 1])
                    self.wfile.flush()

        def do_GET(self) -> None:
            try:
                self._answer()
            except OSError:
                pass  # the client gave up: what these servers are for

        do_PUT = do_POST = do_DELETE = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
