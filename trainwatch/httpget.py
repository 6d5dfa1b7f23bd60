"""One HTTP request with a size limit on the answer and one deadline for all of it.

urllib's ``timeout`` bounds each socket operation, not the request: a server that drips a byte
a second, or sends an endless body, kept ``diagnose`` and ``gc`` running (and growing to tens
of GB) as long as it liked. Here ``timeout`` bounds connecting, sending, the headers and the
whole body together: at the deadline a timer shuts the socket down, which ends whatever read
is waiting. The body is read in pieces and refused past ``limit`` bytes
(``MAX_RESPONSE_BYTES``: 128 MiB, some 50 times the largest answer measured at fleet scale).

>>> fetch("http://127.0.0.1:9/", timeout=1.0)
Traceback (most recent call last):
...
ConnectionRefusedError: [Errno 111] Connection refused
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

MAX_RESPONSE_BYTES = 128 * 2**20
_PIECE = 64 * 1024


class ResponseTooLarge(OSError):
    """The answer went past the size limit; the message names the limit."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    body: bytes


def fetch(url: str, *, timeout: float, method: str = "GET",
          headers: Mapping[str, str] | None = None,
          limit: int | None = None, body: bytes | None = None) -> Answer:
    """The answer to one request, whatever its status; ``TimeoutError`` if it is not complete
    within ``timeout`` seconds, ``ResponseTooLarge`` past ``limit`` bytes, ``OSError`` or
    ``http.client.HTTPException`` if the server cannot be reached or speaks no HTTP. ``limit``
    defaults to ``MAX_RESPONSE_BYTES``, read at each call; ``body``: what the request sends."""
    if not 0 < timeout <= threading.TIMEOUT_MAX:  # past it the timer cannot wait: OverflowError
        raise ValueError(f"timeout must be > 0 seconds and at most {threading.TIMEOUT_MAX:g}, "
                         f"not {timeout}")
    limit = MAX_RESPONSE_BYTES if limit is None else limit
    parts = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout)
    expired = threading.Event()
    opened: list[socket.socket] = []  # the response keeps the socket after conn lets go of it

    def expire() -> None:
        expired.set()
        for sock in opened:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    start = time.monotonic()
    timer.start()
    try:
        conn.connect()
        opened.append(conn.sock)
        if expired.is_set():  # the deadline passed while connecting: nothing was shut
            raise TimeoutError
        conn.sock.settimeout(max(0.001, timeout - (time.monotonic() - start)))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        received = bytearray()
        while piece := response.read1(_PIECE):
            received += piece
            if len(received) > limit:
                raise ResponseTooLarge(f"{url.split('?')[0]} answered more than {limit:,} bytes "
                                       "(MAX_RESPONSE_BYTES, the limit on one answer)")
        if expired.is_set():
            raise TimeoutError
        return Answer(response.status, response.reason, bytes(received))
    except (OSError, http.client.HTTPException) as err:
        # The socket's own timeout is the time left, so it may go off just before the timer.
        if (expired.is_set() or isinstance(err, TimeoutError)) and \
                not isinstance(err, ResponseTooLarge):
            raise TimeoutError(f"no complete answer from {parts.netloc} within {timeout:g} s "
                               "(--timeout bounds the whole request)") from None
        raise
    finally:
        timer.cancel()
        conn.close()
