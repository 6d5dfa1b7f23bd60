"""A small HTTP/1.1 server that bursts and hostile clients cannot stall.

Connections live on one asyncio event loop and hold no thread while they wait: a slowloris
client sending a header line every few seconds costs a socket and a buffer until its
``header_timeout`` closes it. Only a complete request reaches a thread, from a fixed pool of
``workers``. A connection must bring its first request within ``first_request_timeout``. Each
client address holds at most ``max_connections_per_client`` connections and all together at
most ``max_connections`` (``exporter.admission``: an address holding none always gets one);
a connection over them is closed at once, never queued. With TLS the handshake runs after the
connection is counted, under its own ``handshake_timeout``, and asyncio's per-connection TLS
read buffer is cut from 256 KiB to ``TLS_READ_BUFFER`` (one full TLS record), so a flood of
unfinished handshakes costs little memory, which ``exporter.reclaim`` gives back once the
flood ends. The listen backlog absorbs a fleet of scrapers connecting at the same instant (the
standard library's ``http.server`` listens with 5: the excess SYNs were dropped and retried a
second later). Requests carry no body here: one that announces a body is answered 413 and its
connection closed, so the body can never be read as a second request.

``Handler`` gets a ``Request`` and returns a ``Response`` (``exporter.httpmessage``); for
HEAD the body is left out.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from exporter.admission import Admission, client_key
from exporter.httpmessage import BadRequest, Request, Response, parse_head
from exporter.reclaim import Reclaimer

log = logging.getLogger(__name__)

TLS_READ_BUFFER = 20 * 1024  # one TLS record: at most 16 KiB of data plus 2 KiB and a header


@dataclass(frozen=True)
class Limits:
    """What one client may cost; the defaults suit a node exporter scraped by a few servers."""

    backlog: int = 1024  # the kernel caps it at net.core.somaxconn (4096 here)
    max_connections: int = 1000  # open at once; fd limit here is 20,000
    max_connections_per_client: int = 64  # by client_key: scrapers behind one NAT, with room
    first_request_timeout: float = 5.0  # from accept (or the TLS handshake) to the first headers
    header_timeout: float = 10.0  # from a request's first byte to the end of its headers
    idle_timeout: float = 120.0  # a kept-alive connection between requests (> scrape interval)
    write_timeout: float = 30.0  # a client that does not read its response
    handshake_timeout: float = 5.0  # TLS, counted against the connection caps
    max_header_bytes: int = 16 * 1024
    workers: int = 4  # threads that run handlers (scrapes); nothing else takes a thread


Handler = Callable[[Request], Response]


class HTTPServer:
    """Serves ``handler`` on a bound socket; ``serve_forever``/``shutdown`` as in socketserver."""

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, handler: Handler,
                 context: ssl.SSLContext | Callable[[], ssl.SSLContext | None] | None = None,
                 limits: Limits | None = None) -> None:
        # A callable context is asked once per connection: a renewed certificate is served to
        # the next connection (exporter.webreload).
        limits = limits or Limits()
        self.handler, self.context, self.limits = handler, context, limits
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(limits.backlog)  # connections queue before serve_forever runs
        except BaseException:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        self.admission = Admission(limits.max_connections, limits.max_connections_per_client)
        self.refused_connections = 0
        self.reclaimer = Reclaimer()
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="scrape")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started, self._stopped = threading.Event(), threading.Event()

    def serve_forever(self) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_log_quietly)
        try:
            loop.run_until_complete(self._serve(loop))
        finally:
            try:
                loop.run_until_complete(_cancel_connections())
                loop.close()
            finally:
                self._stopped.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread) and wait until it has returned."""
        self._started.wait()
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._stop = loop, asyncio.Event()
        if self.context is not None:
            asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER  # type: ignore[attr-defined]
        # No ssl= here: asyncio would run the handshake before _connection could count it.
        server = await asyncio.start_server(
            self._connection, sock=self.socket, backlog=self.limits.backlog,
            limit=self.limits.max_header_bytes)
        self._started.set()
        async with server:
            await self._stop.wait()

    @property
    def open_connections(self) -> int:
        return self.admission.total

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = client_key(str(peer[0])) if peer else ""  # an IPv6 /64 is one client
        transport = writer.transport
        if not self.admission.admit(client, transport):
            self.refused_connections += 1
            transport.abort()
            return
        for victim in self.admission.evicted:  # a heavier address's oldest, for a newcomer
            victim.abort()  # type: ignore[attr-defined]
        self.admission.evicted.clear()
        try:
            context = self.context() if callable(self.context) else self.context
            if context is not None:
                await writer.start_tls(context,
                                       ssl_handshake_timeout=self.limits.handshake_timeout)
            first = True
            while await self._exchange(reader, writer, client, first):
                first = False
            writer.close()  # after the last response has been flushed
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away, stalled or sent garbage
        finally:
            self.admission.release(client, transport)
            if not writer.transport.is_closing():  # the TLS one after start_tls
                writer.transport.abort()
            self.reclaimer.ended_one(asyncio.get_running_loop())

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        client: str, first: bool) -> bool:
        """Serve one request; True to keep the connection for another."""
        limits, loop = self.limits, asyncio.get_running_loop()
        try:
            # The first request, however it trickles in, ends by first_request_timeout.
            wait = limits.first_request_timeout if first else limits.idle_timeout
            end = loop.time() + limits.first_request_timeout
            head = await asyncio.wait_for(reader.readexactly(1), wait)
            rest = min(limits.header_timeout, end - loop.time()) if first else \
                limits.header_timeout
            head += await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), rest)
            request = parse_head(head, client)
        except asyncio.LimitOverrunError:
            return await self._send(writer, "GET", Response(431, b"headers too large\n"), False)
        except BadRequest as err:
            return await self._send(writer, "GET", Response(err.status, f"{err}\n".encode()),
                                    False)
        if request.method not in ("GET", "HEAD"):
            response = Response(405, b"GET or HEAD only\n", headers={"Allow": "GET, HEAD"})
        else:
            response = await loop.run_in_executor(self._pool, self._handle, request)
        keep = request.version == "HTTP/1.1" and \
            "close" not in request.headers.get("connection", "").lower()
        return await self._send(writer, request.method, response, keep)

    def _handle(self, request: Request) -> Response:
        try:
            return self.handler(request)
        except Exception:  # the one broad except: a bug must not kill serving
            log.exception("handling %s %s failed", request.method, request.target[:200])
            return Response(500, b"internal error; see the exporter's log\n")

    async def _send(self, writer: asyncio.StreamWriter, method: str, response: Response,
                    keep: bool) -> bool:
        reason = HTTPStatus(response.status).phrase
        headers = {"Server": "trainwatch-exporter", "Date": formatdate(usegmt=True),
                   "Content-Type": response.content_type,
                   "Content-Length": str(len(response.body)), **response.headers}
        if not keep:
            headers["Connection"] = "close"
        head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else response.body))
        await asyncio.wait_for(writer.drain(), self.limits.write_timeout)
        return keep


async def _cancel_connections() -> None:
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _log_quietly(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Failed TLS handshakes and reset connections are the client's problem, not ours.
    error = context.get("exception")
    if isinstance(error, (OSError, ssl.SSLError, asyncio.TimeoutError)):
        log.debug("connection failed: %s", context.get("message"))
    else:
        loop.default_exception_handler(context)
