"""exporter.httpserver in process: a real HTTPServer on 127.0.0.1 port 0, served on a thread,
talked to over raw loopback sockets (and http.client, ssl for TLS), with deadlines of tenths of
a second. What a request gets back (status line, headers, body, keep-alive), what a bad one
gets, each deadline on its own side of the others, the connection caps, shutdown and close.
The same under load and from a whole exporter process: tests/test_exporter_http_hostile.py."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import dataclasses
import email.utils
import logging
import os
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from exporter import httpserver
from exporter.httpmessage import Request, Response
from exporter.httpserver import TLS_READ_BUFFER, HTTPServer, Limits, _log_quietly
from exporter.tls import server_context

HERE = Path(__file__).parent
README = HERE.parent / "README.md"
CERT, KEY = str(HERE / "test_exporter_tls.crt"), str(HERE / "test_exporter_tls.key")
LONG = 30.0  # a deadline no test waits for


def poll(probe: Callable[[], Any], timeout: float = 3.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Recorder:
    """A handler that answers each request with what it was asked, and keeps the requests."""

    def __init__(self, status: int = 202) -> None:
        self.status = status
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Response:
        self.requests.append(request)
        return Response(self.status, f"{request.method} {request.target}\n".encode(),
                        "text/x-test", {"X-Seen": str(len(self.requests))})


@contextmanager
def running(handler: Callable[[Request], Response] | None = None, limits: Limits | None = None,
            context: Any = None, server: HTTPServer | None = None) -> Iterator[HTTPServer]:
    """``server`` (or a new one) served on a thread; shut down and closed after, and
    ``serve_forever`` must then have returned without raising."""
    server = server or HTTPServer(("127.0.0.1", 0), socket.AF_INET, handler or Recorder(),
                                  context, limits)
    raised: list[BaseException] = []

    def serve() -> None:
        try:
            server.serve_forever()
        except BaseException as err:  # noqa: BLE001 - reported below
            raised.append(err)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stopper = threading.Thread(target=server.shutdown, daemon=True)
        stopper.start()
        stopper.join(5)
        server.server_close()
        thread.join(5)
    assert not stopper.is_alive(), "shutdown did not return"
    assert not thread.is_alive() and raised == []


class Client:
    """One loopback connection, reading whole responses off it."""

    def __init__(self, port: int, source: str = "127.0.0.1", timeout: float = 3.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0))
        self.buffer = b""

    def send(self, data: bytes) -> Client:
        self.sock.sendall(data)
        return self

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self, head_only: bool = False) -> tuple[str, dict[str, str], bytes]:
        """(status line, headers, body) of the next response; the body by Content-Length."""
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"closed before a response: {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status, *lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        assert len(headers) == len(lines), lines  # no header twice
        length = 0 if head_only else int(headers["Content-Length"])
        while len(self.buffer) < length:
            assert self._fill(), "closed inside a body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        """True once the server has closed (nothing more comes); the wait is the socket's."""
        try:
            return not self._fill() and self.buffer == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def get(path: str = "/x", version: str = "HTTP/1.1", method: str = "GET", **headers: str) -> bytes:
    lines = [f"{method} {path} {version}", "Host: x"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def seconds_to_close(client: Client) -> float:
    start = time.monotonic()
    assert client.closed()
    return time.monotonic() - start


# ----------------------------------------------------------------- one request, one response


def test_a_get_gets_the_handlers_status_body_and_headers_and_the_servers_own() -> None:
    handler = Recorder(status=202)
    with running(handler) as server:
        client = Client(server.server_address[1], source="127.0.0.7")
        before = time.time()
        status, headers, body = client.send(get("/a/b?c=1", Accept="t/x")).response()
        client.close()
    assert status == "HTTP/1.1 202 Accepted"
    assert body == b"GET /a/b?c=1\n"
    assert headers["Content-Length"] == str(len(body)) == "13"
    assert headers["Content-Type"] == "text/x-test"
    assert headers["X-Seen"] == "1"
    assert headers["Server"] == "trainwatch-exporter"
    assert headers["Date"].endswith(" GMT")
    date = email.utils.parsedate_to_datetime(headers["Date"]).timestamp()
    assert before - 1 <= date <= time.time() + 1
    assert "Connection" not in headers  # HTTP/1.1 without "close": kept
    [request] = handler.requests
    assert (request.method, request.target, request.version) == ("GET", "/a/b?c=1", "HTTP/1.1")
    assert dict(request.headers) == {"host": "x", "accept": "t/x"}
    assert request.client == "127.0.0.7"


def test_an_ipv6_client_is_known_by_its_64_not_its_address() -> None:
    handler = Recorder()
    try:
        server = HTTPServer(("::1", 0), socket.AF_INET6, handler, None, None)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with running(server=server), \
            socket.create_connection(("::1", server.server_address[1]), timeout=3) as sock:
        sock.sendall(get("/who", Connection="close"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 202 ")
    [request] = handler.requests
    assert request.client == "::/64"  # not ::1: one host commonly holds its whole /64


def test_head_gets_the_length_of_the_body_but_not_the_body() -> None:
    handler = Recorder(status=200)
    with running(handler) as server:
        client = Client(server.server_address[1])
        status, headers, body = client.send(get("/page", method="HEAD")).response(head_only=True)
        assert (status, body) == ("HTTP/1.1 200 OK", b"")
        assert headers["Content-Length"] == str(len(b"HEAD /page\n"))
        # The same connection: a body after the head would be read as the next response.
        status, headers, body = client.send(get("/next")).response()
        client.close()
    assert (status, body, headers["X-Seen"]) == ("HTTP/1.1 200 OK", b"GET /next\n", "2")
    assert [r.method for r in handler.requests] == ["HEAD", "GET"]


def test_http_1_1_keeps_the_connection_and_1_0_or_close_ends_it() -> None:
    handler = Recorder(status=200)
    with running(handler) as server:
        port = server.server_address[1]
        client = Client(port)
        for n in (1, 2, 3):
            _, headers, body = client.send(get(f"/{n}")).response()
            assert (body, "Connection" in headers) == (f"GET /{n}\n".encode(), False)
        client.close()
        for request in (get("/old", version="HTTP/1.0"),
                        get("/bye", Connection="Keep-Alive, CLOSE"),
                        get("/bye", Connection="close")):
            client = Client(port)
            # A second request in the same packet is never read.
            status, headers, _ = client.send(request + get("/more")).response()
            assert (status, headers["Connection"]) == ("HTTP/1.1 200 OK", "close")
            assert client.closed()
            client.close()
    assert [r.target for r in handler.requests] == ["/1", "/2", "/3", "/old", "/bye", "/bye"]


def test_methods_other_than_get_and_head_get_405_without_the_handler() -> None:
    handler = Recorder()
    with running(handler) as server:
        client = Client(server.server_address[1])
        for method in ("POST", "DELETE", "OPTIONS"):
            status, headers, body = client.send(get("/x", method=method)).response()
            assert (status, body) == ("HTTP/1.1 405 Method Not Allowed", b"GET or HEAD only\n")
            assert headers["Allow"] == "GET, HEAD" and "Connection" not in headers
        assert handler.requests == []
        status, _, body = client.send(get("/after")).response()  # kept alive
        client.close()
    assert (status, body) == ("HTTP/1.1 202 Accepted", b"GET /after\n")


@pytest.mark.parametrize(("raw", "status", "body"), [
    (b"GET /x\r\nHost: x\r\n\r\n", "400 Bad Request", b"malformed request line\n"),
    (b"GET /x HTTP/2.0\r\nHost: x\r\n\r\n", "505 HTTP Version Not Supported",
     b"only versions 1.0 and 1.1 are served\n"),
    (b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n",
     "413 Request Entity Too Large", b"request bodies are not accepted\n"),
])
def test_a_bad_request_gets_its_status_and_reason_and_the_connection_closes(
        raw: bytes, status: str, body: bytes) -> None:
    handler = Recorder()
    with running(handler) as server:
        client = Client(server.server_address[1])
        got_status, headers, got_body = client.send(raw + get("/second")).response()
        assert (got_status, got_body) == (f"HTTP/1.1 {status}", body)
        assert headers["Connection"] == "close"
        assert headers["Content-Length"] == str(len(body))
        assert client.closed()
        client.close()
    assert handler.requests == []


def test_headers_over_the_limit_get_431_and_under_it_are_served() -> None:
    handler = Recorder(status=200)
    with running(handler, Limits(max_header_bytes=2000)) as server:
        port = server.server_address[1]
        client = Client(port)
        status, _, _ = client.send(get("/small", Pad="p" * 1800)).response()
        assert status == "HTTP/1.1 200 OK"
        client.close()
        client = Client(port)
        status, headers, body = client.send(get("/big", Pad="p" * 2200)).response()
        assert (status, body) == ("HTTP/1.1 431 Request Header Fields Too Large",
                                  b"headers too large\n")
        assert headers["Connection"] == "close"
        assert client.closed()
        client.close()
    assert [r.target for r in handler.requests] == ["/small"]


def test_a_handler_that_raises_gets_500_logged_with_its_target_cut_and_serving_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def broken(request: Request) -> Response:
        calls.append(request.target)
        if len(calls) == 1:
            raise KeyError("a bug")
        return Response(200, b"fine\n")

    target = "/" + "".join(chr(ord("a") + n % 26) for n in range(299))
    with caplog.at_level(logging.ERROR, logger=httpserver.__name__), running(broken) as server:
        client = Client(server.server_address[1])
        status, headers, body = client.send(get(target)).response()
        assert (status, body) == ("HTTP/1.1 500 Internal Server Error",
                                  b"internal error; see the exporter's log\n")
        assert "Connection" not in headers
        status, _, body = client.send(get("/again")).response()  # the same connection
        client.close()
    assert (status, body) == ("HTTP/1.1 200 OK", b"fine\n")
    [record] = [r for r in caplog.records if r.name == httpserver.__name__]
    assert record.getMessage() == f"handling GET {target[:200]} failed"
    assert record.exc_info is not None and record.exc_info[0] is KeyError


# ----------------------------------------------------------------------------- deadlines


def test_a_connection_that_sends_nothing_is_closed_at_the_first_request_deadline() -> None:
    limits = Limits(first_request_timeout=0.3, idle_timeout=LONG, header_timeout=LONG)
    with running(limits=limits) as server:
        client = Client(server.server_address[1])
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()
        poll(lambda: server.open_connections == 0, what="the connection to be released")


def test_a_kept_connection_is_closed_at_the_idle_deadline_after_its_first_request() -> None:
    limits = Limits(first_request_timeout=LONG, idle_timeout=0.3, header_timeout=LONG)
    with running(limits=limits) as server:
        client = Client(server.server_address[1])
        client.send(get("/1")).response()
        client.send(get("/2")).response()  # idle each time, not only after the first
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()


def test_a_first_request_trickling_in_ends_at_the_first_request_deadline() -> None:
    # Not 1 s: end / now (a clock since boot) is about 1, and min(header, 1) would pass.
    limits = Limits(first_request_timeout=0.3, idle_timeout=LONG, header_timeout=LONG)
    with running(limits=limits) as server:
        client = Client(server.server_address[1])
        start = time.monotonic()
        client.sock.settimeout(0.05)
        sent = 0
        for byte in get("/slow", Pad="p" * 200):
            try:
                client.send(bytes([byte]))
                sent += 1
            except OSError:
                break
            try:
                if client.sock.recv(1) == b"":
                    break
            except TimeoutError:
                pass
        took = time.monotonic() - start
        client.close()
    assert sent < 200 and 0.2 < took < 0.8, (sent, took)


def test_headers_stalling_are_cut_at_the_header_deadline_on_the_first_and_later_requests() -> None:
    limits = Limits(first_request_timeout=LONG, idle_timeout=LONG, header_timeout=0.3)
    with running(limits=limits) as server:
        port = server.server_address[1]
        client = Client(port).send(b"GET /x HTTP/1.1\r\n")
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()
        client = Client(port).send(b"G")  # the header deadline runs from the first byte
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()
        client = Client(port)
        client.send(get("/1")).response()
        client.send(b"GET /2 HTTP/1.1\r\n")
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()


def test_a_later_request_may_take_the_header_deadline_not_the_first_requests() -> None:
    limits = Limits(first_request_timeout=0.4, idle_timeout=LONG, header_timeout=LONG)
    with running(limits=limits) as server:
        client = Client(server.server_address[1])
        client.send(get("/1")).response()
        start = time.monotonic()
        for part in (b"GET /2 HTTP/1.1\r\n", b"Host: x\r\n", b"A: 1\r\n", b"B: 2\r\n"):
            client.send(part)
            time.sleep(0.2)  # the trickle under test, past the first request's deadline
        assert time.monotonic() - start > 0.6
        status, _, body = client.send(b"\r\n").response()
        client.close()
    assert (status, body) == ("HTTP/1.1 202 Accepted", b"GET /2\n")


def test_an_unfinished_tls_handshake_is_cut_at_the_handshake_deadline() -> None:
    limits = Limits(handshake_timeout=0.3, first_request_timeout=LONG, header_timeout=LONG)
    with running(limits=limits, context=server_context(CERT, KEY)) as server:
        client = Client(server.server_address[1]).send(b"\x16\x03\x01\x00\xa0\x01")
        assert 0.2 < seconds_to_close(client) < 1.5
        client.close()
        poll(lambda: server.open_connections == 0, what="the connection to be released")


def test_clients_that_time_out_vanish_or_send_garbage_log_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    limits = Limits(first_request_timeout=0.2, idle_timeout=LONG, header_timeout=LONG)
    with caplog.at_level(logging.DEBUG), running(limits=limits) as server:
        port = server.server_address[1]
        timed_out = Client(port)
        assert timed_out.closed()  # TimeoutError
        gone = Client(port).send(b"GET /x HTTP/1.1\r\nHo")
        gone.sock.shutdown(socket.SHUT_WR)  # IncompleteReadError
        assert gone.closed()
        reset = Client(port).send(b"GET /x HTTP/1.1\r\nHo")
        reset.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reset.close()  # ConnectionResetError, an OSError
        poll(lambda: server.reclaimer.ended == 3, what="three connections to end")
        for client in (timed_out, gone):
            client.close()
    with caplog.at_level(logging.DEBUG), \
            running(limits=limits, context=server_context(CERT, KEY)) as server:
        garbage = Client(server.server_address[1]).send(b"GET / HTTP/1.1\r\n\r\n")
        assert garbage.closed()  # ssl.SSLError
        garbage.close()
        poll(lambda: server.reclaimer.ended == 1, what="the connection to end")
    logged = [r.getMessage() for r in caplog.records
              if r.name in (httpserver.__name__, "asyncio")
              and not r.getMessage().startswith("Using selector")]
    assert logged == []


# ------------------------------------------------------------------------- connection caps


def test_a_client_over_its_share_is_refused_at_once_and_counted() -> None:
    with running(limits=Limits(max_connections=10, max_connections_per_client=2)) as server:
        port = server.server_address[1]
        held = [Client(port, "127.0.0.2"), Client(port, "127.0.0.2")]
        poll(lambda: server.open_connections == 2, what="two connections")
        for n in (1, 2):
            extra = Client(port, "127.0.0.2")
            assert seconds_to_close(extra) < 0.5
            extra.close()
            assert server.refused_connections == n
        other = Client(port, "127.0.0.3")
        status, _, _ = other.send(get("/")).response()
        assert status == "HTTP/1.1 202 Accepted"
        assert server.open_connections == 3
        for client in held + [other]:
            client.close()
        poll(lambda: server.open_connections == 0, what="all connections released")
        held = [Client(port, "127.0.0.2"), Client(port, "127.0.0.2")]  # room again
        for client in held:
            assert client.send(get("/")).response()[0] == "HTTP/1.1 202 Accepted"
            client.close()
    assert server.refused_connections == 2


def test_a_newcomer_at_the_global_cap_evicts_the_oldest_of_the_heaviest_address() -> None:
    with running(limits=Limits(max_connections=3, max_connections_per_client=3)) as server:
        port = server.server_address[1]
        oldest = Client(port, "127.0.0.2")
        poll(lambda: server.open_connections == 1, what="the first connection")
        younger = [Client(port, "127.0.0.2"), Client(port, "127.0.0.2")]
        poll(lambda: server.open_connections == 3, what="three connections")
        newcomer = Client(port, "127.0.0.3")
        assert newcomer.send(get("/")).response()[0] == "HTTP/1.1 202 Accepted"
        assert oldest.closed()
        for client in younger:
            assert client.send(get("/")).response()[0] == "HTTP/1.1 202 Accepted"
        assert server.admission.evicted == []
        assert (server.refused_connections, server.open_connections) == (0, 3)
        for client in [oldest, newcomer, *younger]:
            client.close()


def test_ended_connections_are_released_and_counted_for_the_reclaimer() -> None:
    with running(limits=Limits(max_connections=2, max_connections_per_client=2)) as server:
        port = server.server_address[1]
        for n in range(5):  # more connections than the cap, one after another
            client = Client(port)
            status, _, _ = client.send(get("/", Connection="close")).response()
            assert status == "HTTP/1.1 202 Accepted" and client.closed()
            client.close()
        poll(lambda: server.reclaimer.ended == 5, what="five ended connections")
        assert (server.open_connections, server.refused_connections) == (0, 0)


# -------------------------------------------------------------------------------- TLS


def test_tls_is_served_with_a_context_asked_for_each_connection() -> None:
    asked = []

    def context() -> ssl.SSLContext:
        asked.append(1)
        return server_context(CERT, KEY)

    client_context = ssl.create_default_context(cafile=CERT)
    with running(context=context) as server:
        for n in (1, 2):
            with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=3) \
                    as raw, client_context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(get("/tls", Connection="close"))
                reply = b""
                while chunk := tls.recv(65536):
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 202 Accepted\r\n") and reply.endswith(b"GET /tls\n")
            assert len(asked) == n
        assert asyncio.sslproto.SSLProtocol.max_size == TLS_READ_BUFFER


def test_a_context_callable_answering_none_serves_plain_http() -> None:
    with running(context=lambda: None) as server:
        client = Client(server.server_address[1])
        assert client.send(get("/")).response()[0] == "HTTP/1.1 202 Accepted"
        client.close()


def test_asyncios_tls_read_buffer_is_cut_only_when_tls_is_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size", 256 * 1024)
    with running() as server:
        client = Client(server.server_address[1])
        client.send(get("/")).response()
        client.close()
    assert asyncio.sslproto.SSLProtocol.max_size == 256 * 1024
    with running(context=server_context(CERT, KEY)):
        pass
    assert asyncio.sslproto.SSLProtocol.max_size == TLS_READ_BUFFER


def test_the_tls_read_buffer_holds_one_whole_record_and_is_less_than_asyncios() -> None:
    record = 16 * 1024 + 2048 + 5  # plaintext, expansion allowed by RFC 8446, header
    assert record <= TLS_READ_BUFFER < 256 * 1024


def test_a_client_that_does_not_read_its_response_is_cut_off_at_the_write_deadline() -> None:
    body = os.urandom(1 << 25)  # far more than the loopback socket buffers hold

    def large(request: Request) -> Response:
        return Response(200, body)

    limits = Limits(write_timeout=0.3, idle_timeout=LONG, first_request_timeout=LONG)
    with running(large, limits) as server:
        client = Client(server.server_address[1])
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.send(get("/large"))
        poll(lambda: server.open_connections == 1, what="the request to be taken")
        start = time.monotonic()
        poll(lambda: server.open_connections == 0, what="the stalled connection to be cut")
        took = time.monotonic() - start
        client.close()
    assert took < 1.5


def what_a_client_may_cost() -> str:
    """The README's section on the server's limits, as one line."""
    text = README.read_text().split("### What a client may cost\n", 1)[1].split("\n#", 1)[0]
    return " ".join(text.split())


def test_the_readme_states_the_default_limits_the_server_uses() -> None:
    text = what_a_client_may_cost()

    def number(pattern: str) -> float:
        found = re.findall(pattern, text)
        assert len(found) == 1, pattern
        return float(found[0].replace(",", ""))

    limits = Limits()
    assert number(r"one of (\d+) scrape threads") == limits.workers
    assert number(r"backlog is ([\d,]+)") == limits.backlog
    assert number(r"within (\d+) s of its first byte") == limits.header_timeout
    assert number(r"fit in (\d+) KiB") * 1024 == limits.max_header_bytes
    assert number(r"first request within (\d+) s of the connection") == \
        limits.first_request_timeout
    assert number(r"idles at most (\d+) s") == limits.idle_timeout
    assert number(r"cut off after (\d+) s") == limits.write_timeout
    assert number(r"holds at most (\d+) connections") == limits.max_connections_per_client
    assert number(r"all together at most ([\d,]+)") == limits.max_connections
    assert number(r"must finish within (\d+) s") == limits.handshake_timeout
    assert number(r"TLS read buffer is cut to (\d+) KiB") * 1024 == TLS_READ_BUFFER


def test_limits_are_frozen_and_hashable() -> None:
    limits = Limits(workers=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.workers = 3  # type: ignore[misc]
    assert hash(limits) == hash(Limits(workers=2))


# ------------------------------------------------------------------ start, stop and close


def test_the_socket_listens_before_serve_forever_and_reuses_the_address() -> None:
    server = HTTPServer(("127.0.0.1", 0), socket.AF_INET, Recorder(), None, None)
    assert server.socket.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0
    assert server.server_address == server.socket.getsockname()
    client = Client(server.server_address[1]).send(get("/early"))  # queued by the kernel
    with running(server=server):
        status, _, body = client.response()
        client.close()
    assert (status, body) == ("HTTP/1.1 202 Accepted", b"GET /early\n")
    assert server.limits == Limits()  # none given: the defaults


def test_a_failed_bind_raises_and_leaves_no_socket_open() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        fds = len(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError):
            HTTPServer(taken.getsockname(), socket.AF_INET, Recorder())
        assert len(os.listdir("/proc/self/fd")) == fds


def test_shutdown_closes_open_connections_and_the_loop() -> None:
    with running() as server:
        port = server.server_address[1]
        kept = Client(port)
        kept.send(get("/")).response()
        silent = Client(port)
        poll(lambda: server.open_connections == 2, what="two connections")
        assert server._loop is not None
        assert server._loop.get_exception_handler() is _log_quietly
    assert server._loop.is_closed()
    for client in (kept, silent):
        assert client.closed()
        client.close()
    assert server.socket.fileno() == -1


def test_server_close_neither_waits_for_a_running_handler_nor_starts_queued_ones() -> None:
    # As after serve_forever ended (SIGTERM) with a scrape still running and one queued.
    server = HTTPServer(("127.0.0.1", 0), socket.AF_INET, Recorder(), None, Limits(workers=1))
    entered, release = threading.Event(), threading.Event()
    running_one = server._pool.submit(lambda: entered.set() or release.wait(5))
    queued = server._pool.submit(lambda: "ran")
    assert entered.wait(3)
    closer = threading.Thread(target=server.server_close, daemon=True)
    closer.start()
    closer.join(2)
    closing_returned = not closer.is_alive()
    release.set()
    assert running_one.result(3) is True
    assert closing_returned
    assert queued.cancelled()
    assert server.socket.fileno() == -1
    with pytest.raises(RuntimeError):
        server._pool.submit(lambda: None)


def test_two_workers_run_two_handlers_at_once() -> None:
    barrier = threading.Barrier(2, timeout=3)

    def meet(request: Request) -> Response:
        barrier.wait()  # broken (an error: 500) unless both run at once
        return Response(200, b"met\n")

    with running(meet, Limits(workers=2)) as server:
        port = server.server_address[1]
        clients = [Client(port).send(get(f"/{n}")) for n in (1, 2)]
        statuses = [client.response()[0] for client in clients]
        for client in clients:
            client.close()
    assert statuses == ["HTTP/1.1 200 OK"] * 2


# -------------------------------------------------------------------- the loop's handler


@pytest.mark.parametrize("error", [ConnectionResetError(104, "reset"), ssl.SSLError(1, "bad"),
                                   TimeoutError()])
def test_client_failures_reaching_the_loop_are_logged_at_debug_only(
        error: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.DEBUG):
            _log_quietly(loop, {"message": "handshake failed", "exception": error})
    finally:
        loop.close()
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (httpserver.__name__, logging.DEBUG, "connection failed: handshake failed")]


def test_other_errors_reaching_the_loop_go_to_asyncios_handler(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.DEBUG):
            _log_quietly(loop, {"message": "a bug", "exception": ValueError("v")})
            _log_quietly(loop, {"message": "no exception at all"})
    finally:
        loop.close()
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("asyncio", logging.ERROR, "a bug"), ("asyncio", logging.ERROR, "no exception at all")]
