"""The HTTP handler given to prometheus_client's push/delete: separate connect and read
timeouts (urllib has one timeout for both) and optional basic auth."""

from __future__ import annotations

import base64
import http.client
import urllib.parse
from collections.abc import Callable, Sequence


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
    auth: list[tuple[str, str]] = []
    if username is not None and password is not None:
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        auth.append(("Authorization", f"Basic {token}"))

    def handler(url: str, method: str, timeout: float | None,
                headers: Sequence[tuple[str, str]], data: bytes) -> Callable[[], None]:
        def send() -> None:
            parts = urllib.parse.urlsplit(url)
            conn_cls = (http.client.HTTPSConnection if parts.scheme == "https"
                        else http.client.HTTPConnection)
            conn = conn_cls(parts.hostname or "", parts.port, timeout=connect_timeout)
            try:
                conn.connect()
                # A gateway that accepts the connection and never answers costs read_timeout.
                conn.sock.settimeout(read_timeout)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                conn.request(method, path or "/", body=data, headers=dict([*headers, *auth]))
                response = conn.getresponse()
                body = response.read(1024)
                if response.status >= 400:
                    raise PushError(response.status, response.reason, body)
            finally:
                conn.close()
        return send
    return handler
