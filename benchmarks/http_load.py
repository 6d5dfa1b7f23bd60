"""Loopback load for the HTTP tests and benchmarks: bursts, slowloris, scrapers, and a server
that accepts and never answers.

Everything is bounded (client counts, durations) and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def proc_status(pid: int, key: str) -> int:
    """A number from /proc/PID/status: ``Threads``, ``VmRSS`` (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def burst(port: int, clients: int, path: str = "/healthz", timeout: float = 10.0,
          sources: int = 1) -> list[tuple[float, float, bytes]]:
    """Open ``clients`` connections at the same instant, each sending one request, from
    ``sources`` addresses (127.0.2.1, ...) in turn; for each, (seconds to connect, seconds to
    the full response, the response's status line)."""
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    selector = selectors.DefaultSelector()
    start = time.perf_counter()
    state: dict[socket.socket, list] = {}
    for n in range(clients):
        sock = socket.socket()
        if sources > 1:
            sock.bind((f"127.0.2.{n % sources + 1}", 0))
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        state[sock] = [None, None, b""]  # connected at, done at, bytes
        selector.register(sock, selectors.EVENT_WRITE)
    deadline = start + timeout
    while state and any(s[1] is None for s in state.values()) and time.perf_counter() < deadline:
        for key, events in selector.select(timeout=0.1):
            sock, entry = key.fileobj, state[key.fileobj]  # type: ignore[index]
            now = time.perf_counter() - start
            if events & selectors.EVENT_WRITE:
                entry[0] = now
                sock.send(request)  # type: ignore[union-attr]
                selector.modify(sock, selectors.EVENT_READ)
            else:
                chunk = sock.recv(65536)  # type: ignore[union-attr]
                entry[2] += chunk
                if not chunk:
                    entry[1] = now
                    selector.unregister(sock)
    results = [(c if c is not None else float("inf"), d if d is not None else float("inf"),
                data.split(b"\r\n", 1)[0]) for c, d, data in state.values()]
    for sock in state:
        sock.close()
    selector.close()
    return results


def connect(port: int, source: str = "127.0.0.1", timeout: float = 5.0) -> socket.socket:
    """A loopback connection from ``source`` (any 127.x.y.z: the whole 127/8 is loopback, so
    one machine can play many client addresses)."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0))


@contextmanager
def silent(port: int, clients: int, source: str = "127.0.0.1") -> Iterator[list[socket.socket]]:
    """``clients`` connections from ``source`` that never send a byte."""
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            sock = connect(port, source)
            sock.setblocking(False)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


@contextmanager
def slowloris(port: int, clients: int, every: float = 1.0,
              source: str = "127.0.0.1") -> Iterator[list[socket.socket]]:
    """``clients`` connections that each send a request line, then one header line every
    ``every`` seconds and never the blank line that ends the headers."""
    socks: list[socket.socket] = []
    stop = threading.Event()
    try:
        for _ in range(clients):
            sock = connect(port, source)
            sock.setblocking(False)
            try:
                sock.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass  # refused at once: allowed
            socks.append(sock)

        def dribble() -> None:
            while not stop.wait(every):
                for sock in socks:
                    try:
                        sock.send(b"X-Slow: 1\r\n")
                    except OSError:
                        pass  # closed by the server: that is allowed

        thread = threading.Thread(target=dribble, daemon=True)
        thread.start()
        yield socks
    finally:
        stop.set()
        for sock in socks:
            sock.close()


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@dataclass
class Scrapes:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.latencies) if self.latencies else float("nan")


def scrape_once(port: int, path: str = "/metrics", headers: dict[str, str] | None = None,
                conn: http.client.HTTPConnection | None = None,
                source: str = "127.0.0.1", timeout: float = 10.0) -> tuple[int, float]:
    """(status, seconds) of one GET, on ``conn`` or a new connection from ``source``."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                              source_address=(source, 0))
    start = time.perf_counter()
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - start
    finally:
        if own:
            conn.close()


def scrapers(port: int, clients: int, seconds: float, keep_alive: bool,
             path: str = "/metrics", headers: dict[str, str] | None = None,
             pause: float = 0.0, result: Scrapes | None = None) -> Scrapes:
    """``clients`` threads scraping ``path`` back to back (then ``pause``) for ``seconds``;
    pass ``result`` to watch it fill from another thread."""
    result = Scrapes() if result is None else result
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10) if keep_alive else None
        while time.monotonic() < deadline:
            try:
                status, took = scrape_once(port, path, headers, conn)
                with lock:
                    result.latencies.append(took)
                    if status != 200:
                        result.errors.append(str(status))
            except OSError as err:
                with lock:
                    result.errors.append(repr(err))
                if conn is not None:
                    conn.close()
            if pause:
                time.sleep(pause)  # pacing a client, not synchronising

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    return result


class BlackHole:
    """Accepts TCP connections and never answers (a hung gateway or a firewall's tarpit)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        self._listener.close()
        for conn in self.accepted:
            conn.close()
