"""The push handler on the wire: what it sends, separate connect and read timeouts, basic auth,
and the error it raises for an error status (fast: loopback servers in this process)."""

from __future__ import annotations

import base64
import ssl
import time
from collections.abc import Iterator

import pytest

from tests.trial_support import BlackHole, StatusServer, closed_port_url
from trial_instrumentation.transport import PushError, make_handler


@pytest.fixture
def ok() -> Iterator[StatusServer]:
    server = StatusServer(200)
    yield server
    server.close()


def test_sends_the_method_path_query_headers_and_body(ok: StatusServer) -> None:
    send = make_handler(1.0, 1.0)(f"{ok.url}/metrics/job/j/a/b?x=1", "PUT", 99.0,
                                  [("Content-Type", "text/plain")], b"m 1\n")
    assert send() is None
    assert (ok.requests, ok.paths, ok.bodies, ok.authorization) == (
        ["PUT"], ["/metrics/job/j/a/b?x=1"], [b"m 1\n"], [None])


def test_a_url_without_a_path_asks_for_the_root(ok: StatusServer) -> None:
    make_handler(1.0, 1.0)(ok.url, "DELETE", None, [], b"")()
    assert (ok.requests, ok.paths) == (["DELETE"], ["/"])


def test_basic_auth_only_with_both_username_and_password(ok: StatusServer) -> None:
    make_handler(1.0, 1.0, "user", "p:w")(ok.url + "/m", "PUT", None, [], b"")()
    make_handler(1.0, 1.0, "user", None)(ok.url + "/m", "PUT", None, [], b"")()
    make_handler(1.0, 1.0, None, "pw")(ok.url + "/m", "PUT", None, [], b"")()
    token = base64.b64encode(b"user:p:w").decode()
    assert ok.authorization == [f"Basic {token}", None, None]


@pytest.mark.parametrize("status", [400, 404, 500, 503])
def test_an_error_status_raises_push_error_quoting_the_answer(status: int) -> None:
    server = StatusServer(status, body=b"  bad metric name " + b"x" * 500 + b"\n")
    try:
        with pytest.raises(PushError) as raised:
            make_handler(1.0, 1.0)(server.url + "/m", "PUT", None, [], b"")()
    finally:
        server.close()
    err = raised.value
    assert err.status == status and isinstance(err, OSError)
    message = str(err)
    assert message.startswith(f"Pushgateway answered {status} ")
    assert ": bad metric name " in message and message.endswith("x" * 182)  # 200 chars quoted


@pytest.mark.parametrize("status", [200, 202, 204, 301, 399])
def test_a_status_below_400_is_success(status: int) -> None:
    server = StatusServer(status, body=b"" if status == 204 else b"ok")
    try:
        make_handler(1.0, 1.0)(server.url + "/m", "PUT", None, [], b"")()
    finally:
        server.close()


def test_the_read_timeout_bounds_a_gateway_that_never_answers() -> None:
    hole = BlackHole()
    send = make_handler(connect_timeout=30.0, read_timeout=0.2)(hole.url + "/m", "PUT", 30.0, [],
                                                                 b"")
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            send()
    finally:
        hole.close()
    assert 0.15 < time.monotonic() - start < 10, "the read timeout, not the connect timeout"


def test_a_closed_port_fails_with_connection_refused() -> None:
    with pytest.raises(ConnectionRefusedError):
        make_handler(1.0, 1.0)(closed_port_url() + "/m", "PUT", None, [], b"")()


def test_https_urls_speak_tls(ok: StatusServer) -> None:
    # The plain-HTTP server cannot answer a TLS handshake: the handler did try TLS.
    https = ok.url.replace("http://", "https://")
    with pytest.raises(ssl.SSLError):
        make_handler(1.0, 1.0)(https + "/m", "PUT", None, [], b"")()
    assert ok.requests == []
