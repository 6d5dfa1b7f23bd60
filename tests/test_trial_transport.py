"""The push handler on the wire: what it sends, separate connect and read timeouts, basic auth,
and the error it raises for an error status (fast: loopback servers in this process)."""

from __future__ import annotations

import base64
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from benchmarks.hostile_servers import hostile_server
from benchmarks.http_load import BlackHole
from benchmarks.stack import wait_until
from tests.trial_support import StatusServer, closed_port_url, run_script
from trial_instrumentation import transport
from trial_instrumentation.collector import TrialState
from trial_instrumentation.config import resolve as resolve_config
from trial_instrumentation.pusher import Pusher
from trial_instrumentation.transport import PushError, make_handler, request, resolve


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
    assert message.endswith(": bad metric name " + "x" * 184)  # 200 characters quoted, no more


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


# A 4xx (bad metric, wrong auth, bad grouping key) fails the same way every time: not retried.
@pytest.mark.parametrize(("status", "retryable"), [
    (399, True), (400, False), (401, False), (404, False), (499, False), (500, True), (501, True),
    (503, True)])
def test_only_a_4xx_answer_is_not_worth_retrying(status: int, retryable: bool) -> None:
    assert PushError(status, "r", b"").retryable is retryable


def test_request_returns_at_most_limit_bytes_of_the_body_1_kib_by_default() -> None:
    server = StatusServer(200, body=b"y" * 5000)
    try:
        assert request(server.url + "/m", "PUT", 1.0, 1.0) == b"y" * 1024
        assert request(server.url + "/m", "PUT", 1.0, 1.0, limit=10) == b"y" * 10
    finally:
        server.close()


def test_a_connection_gets_the_connect_timeout_or_10_s_when_given_none() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        for given, expected in ((0.5, 0.5), (3, 3), (None, 10.0)):
            with transport._bounded_connect(("127.0.0.1", port), given) as sock:
                assert sock.gettimeout() == expected, given
    finally:
        listener.close()


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The system resolver replaced: numeric hosts as usual, names answered from ``names``
    (a list of addresses, an OSError to raise, or an Event to wait on first)."""
    names: dict[str, object] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> object:
        if kwargs.get("flags") == socket.AI_NUMERICHOST:
            return real(host, port, *args, **kwargs)  # type: ignore[arg-type]
        answer = names[host]
        if isinstance(answer, threading.Event):
            answer.wait(10)
            return []
        if isinstance(answer, OSError):
            raise answer
        return answer

    monkeypatch.setattr(transport.socket, "getaddrinfo", getaddrinfo)
    return names


def test_a_name_is_resolved_by_the_system_resolver(resolver: dict[str, object]) -> None:
    answer = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 9091))]
    resolver["gateway.example"] = answer
    assert resolve("gateway.example", 9091, 1.0) == answer
    assert resolve("127.0.0.1", 9091, 1.0)[0][4] == ("127.0.0.1", 9091)  # no lookup needed


def test_a_name_that_does_not_resolve_raises_the_resolvers_error(
        resolver: dict[str, object]) -> None:
    resolver["nowhere.example"] = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    with pytest.raises(socket.gaierror, match="Name or service not known"):
        resolve("nowhere.example", 9091, 1.0)


def test_a_resolver_that_hangs_costs_the_timeout_then_raises(
        resolver: dict[str, object]) -> None:
    hung = threading.Event()
    resolver["slow.example"] = hung
    start = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="resolving 'slow.example' took longer than 0.2s"):
            resolve("slow.example", 9091, 0.2)
        assert time.monotonic() - start < 5
    finally:
        hung.set()


def test_an_abandoned_lookup_never_keeps_the_training_process_from_exiting() -> None:
    script = (
        "import socket, time\n"
        "from trial_instrumentation import transport\n"
        "socket.getaddrinfo = lambda *a, **k: time.sleep(60) if k.get('flags') is None else "
        "(_ for _ in ()).throw(socket.gaierror('not numeric'))\n"
        "try:\n"
        "    transport.resolve('slow.example', 9091, 0.1)\n"
        "except TimeoutError:\n"
        "    pass\n")
    done, took = run_script(script)
    assert done.returncode == 0, done.stderr
    assert took < 15  # the 60 s lookup was not waited out


def test_a_dripping_gateway_costs_the_connect_and_read_timeouts_in_all() -> None:
    """Issue 25: a gateway answering a byte at a time never let a read time out, holding one
    push for a whole 60 s run."""
    with hostile_server("drip", every=0.05, seconds=30) as url:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"within 1s \(connect \+ read timeout\)"):
            request(url + "/metrics/job/x", "PUT", 0.3, 0.7, data=b"")
        took = time.monotonic() - start
    assert 0.9 < took < 2.5, took


def test_a_dripping_gateway_is_a_counted_and_warned_failure_within_one_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    with hostile_server("drip", every=0.05, seconds=30) as url:
        config = resolve_config(pushgateway=url, experiment="e", trial="t", push_interval=3,
                                connect_timeout=0.3, read_timeout=0.7, env={})
        state = TrialState(config.buckets, {})
        pusher = Pusher(config, CollectorRegistry(), state)
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
            pusher.start()
            try:
                wait_until(lambda: state.push_failures >= 1, timeout=config.push_interval,
                           interval=0.02, what="the dripped push to count as a failure")
            finally:
                pusher.stop(timeout=0.1)
        assert time.monotonic() - start < config.push_interval
    assert any("failed: TimeoutError" in r.getMessage() for r in caplog.records)


def test_a_deadline_that_passes_over_a_closed_socket_raises_nothing_in_its_thread() -> None:
    """The deadline shuts its sockets down from a timer thread; one already closed (the push
    ended as the deadline passed) is skipped, not an error on stderr from that thread."""
    from trial_instrumentation.transport import _Deadline

    raised: list[BaseException | None] = []
    before = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        sock = socket.socket()
        sock.close()
        deadline = _Deadline(0.01)
        deadline.watch(sock)
        deadline._timer.join(5)
    finally:
        threading.excepthook = before
    assert deadline.passed and raised == []


def test_an_error_body_not_in_utf8_is_quoted_with_replacements() -> None:
    err = PushError(502, "Bad Gateway", b"  upstream \xff\xfe down \n")
    assert str(err) == "Pushgateway answered 502 Bad Gateway: upstream \ufffd\ufffd down"
    assert err.retryable
