"""The HTTP handler given to prometheus_client's push/delete: separate connect and read
timeouts (urllib has one timeout for both), name resolution bounded by the connect timeout
(a resolver that does not answer cost 10 s per lookup), and optional basic auth.

The timeouts also bound the request as a whole: a gateway that drips its answer a byte at a
time never lets a read time out, so at ``connect_timeout + read_timeout`` after the start a
timer shuts the socket down and the push fails with ``TimeoutError``, counted and warned like
any other failure (it held one push for a whole 60 s run, unseen)."""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any


class PushError(OSError):
    """The Pushgateway answered with an error status."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        text = body.decode("utf-8", "replace").strip()
        super().__init__(f"Pushgateway answered {status} {reason}: {text[:200]}")
        self.status = status

    @property
    def retryable(self) -> bool:
        # A 4xx (bad metric, wrong auth, bad grouping key) fails the same way on every retry.
        return not 400 <= self.status < 500


Handler = Callable[[str, str, float | None, Sequence[tuple[str, str]], bytes], Callable[[], None]]


def make_handler(connect_timeout: float, read_timeout: float, username: str | None = None,
                 password: str | None = None) -> Handler:
    """A prometheus_client push handler; ``timeout`` passed by the caller is ignored.

    >>> handler = make_handler(1.0, 2.0)
    >>> callable(handler("http://127.0.0.1:9/metrics/job/x", "PUT", None, [], b""))
    True
    """
    auth = auth_headers(username, password)

    def handler(url: str, method: str, timeout: float | None,
                headers: Sequence[tuple[str, str]], data: bytes) -> Callable[[], None]:
        def send() -> None:
            request(url, method, connect_timeout, read_timeout, [*headers, *auth], data, 1024)
        return send
    return handler


def auth_headers(username: str | None, password: str | None) -> list[tuple[str, str]]:
    if username is None or password is None:
        return []
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return [("Authorization", f"Basic {token}")]


def request(url: str, method: str, connect_timeout: float, read_timeout: float,
            headers: Sequence[tuple[str, str]] = (), data: bytes | None = None,
            limit: int = 1024) -> bytes:
    """Up to ``limit`` bytes of the response body; ``PushError`` on a status >= 400."""
    parts = urllib.parse.urlsplit(url)
    conn_cls = (http.client.HTTPSConnection if parts.scheme == "https"
                else http.client.HTTPConnection)
    conn = conn_cls(parts.hostname or "", parts.port, timeout=connect_timeout)
    conn._create_connection = _bounded_connect  # type: ignore[attr-defined]
    total = connect_timeout + read_timeout
    cut_off = _Deadline(total)
    try:
        conn.connect()
        cut_off.watch(conn.sock)
        # A gateway that accepts the connection and never answers costs read_timeout.
        conn.sock.settimeout(read_timeout)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path or "/", body=data, headers=dict(headers))
        response = conn.getresponse()
        body = response.read(limit)
        if cut_off.passed:
            raise TimeoutError
        if response.status >= 400:
            raise PushError(response.status, response.reason, body)
        return body
    except (OSError, http.client.HTTPException):
        if cut_off.passed:
            raise TimeoutError(f"{method} {parts.netloc}: no complete answer within "
                               f"{total:g}s (connect + read timeout)") from None
        raise
    finally:
        cut_off.cancel()
        conn.close()


class _Deadline:
    """Shuts the watched socket down ``seconds`` from now, ending any read blocked on it."""

    def __init__(self, seconds: float) -> None:
        self.passed = False
        self._socks: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        self._socks.append(sock)
        if self.passed:
            raise TimeoutError

    def cancel(self) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        self.passed = True
        for sock in self._socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def resolve(host: str, port: int, timeout: float) -> list[Any]:
    """``socket.getaddrinfo`` that gives up after ``timeout`` (``TimeoutError``).

    The system resolver has no timeout of its own to pass: the lookup runs on a daemon thread,
    left to finish on its own when it is abandoned.
    """
    try:  # an address, not a name: nothing to wait for, no thread
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    result: list[Any] = []
    failure: list[BaseException] = []

    def lookup() -> None:
        try:
            result.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            failure.append(err)

    thread = threading.Thread(target=lookup, name="trainwatch-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"resolving {host!r} took longer than {timeout:g}s")
    if failure:
        raise failure[0]
    return result


def _bounded_connect(address: tuple[str, int], timeout: float | None = None,
                     source_address: Any = None) -> socket.socket:
    # http.client's connect() calls this with the connection's timeout (the connect timeout).
    host, port = address
    budget = timeout if isinstance(timeout, (int, float)) else 10.0
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in resolve(host, port, budget):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(budget)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as err:
            sock.close()
            last = err
    raise last or OSError(f"no address for {host!r}")
