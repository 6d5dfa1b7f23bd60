"""trainwatch.httpget.fetch against loopback servers: what it sends, the answer it returns
whatever the status, the size limit at its edge, and the one deadline for the whole request
against a server that accepts and never answers, or answers its headers and then stalls."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from benchmarks.hostile_servers import hostile_server
from tests.frozen import assert_frozen
from tests.loopback import Script, scripted_server
from tests.trial_support import closed_port_url
from trainwatch import httpget
from trainwatch.httpget import Answer, ResponseTooLarge, fetch


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Script]]:
    with scripted_server() as found:
        yield found


@contextmanager
def stalling(preamble: bytes) -> Iterator[str]:
    """A server that reads the request, sends ``preamble`` and then nothing until the test ends;
    its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    done = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            conn.recv(65536)
            conn.sendall(preamble)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        for conn in held:
            conn.close()


def test_a_get_is_sent_to_the_urls_path_and_query_and_its_answer_returned(
        served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b"hello", status=200)
    assert fetch(url, timeout=5) == Answer(200, "OK", b"hello")
    assert fetch(url + "/a/b?x=1&y=%20", timeout=5).body == b"hello"
    first, second = script.requests
    assert (first.method, first.path, first.query, first.body) == ("GET", "/", {}, b"")
    assert (second.path, second.query) == ("/a/b", {"x": ["1"], "y": [" "]})


def test_the_method_headers_and_body_are_sent_as_given(served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b"")
    answer = fetch(url + "/p", timeout=5, method="PUT", headers={"X-One": "1", "X-Two": "b"},
                   body=b"payload")
    assert answer == Answer(200, "OK", b"")
    [sent] = script.requests
    assert (sent.method, sent.body) == ("PUT", b"payload")
    assert (sent.headers["x-one"], sent.headers["x-two"]) == ("1", "b")


def test_the_options_are_named_and_the_answer_is_a_frozen_value(
        served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b"v")
    with pytest.raises(TypeError):
        fetch(url, 5)  # type: ignore[misc]
    assert_frozen(fetch(url, timeout=5))


def test_an_error_status_is_an_answer_too(served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b'{"status":"error"}', status=503)
    assert fetch(url, timeout=5) == Answer(503, "Service Unavailable", b'{"status":"error"}')


def test_an_answer_of_exactly_the_limit_is_taken_and_one_byte_more_refused(
        served: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = served
    script.answer(b"x" * 1000)
    assert fetch(url, timeout=5, limit=1000).body == b"x" * 1000
    with pytest.raises(ResponseTooLarge) as caught:
        fetch(url + "/q?secret=1", timeout=5, limit=999)
    assert str(caught.value) == (f"{url}/q answered more than 999 bytes (MAX_RESPONSE_BYTES, "
                                 "the limit on one answer)")
    assert isinstance(caught.value, OSError)
    # The default is MAX_RESPONSE_BYTES as it is at the call.
    monkeypatch.setattr(httpget, "MAX_RESPONSE_BYTES", 1000)
    assert fetch(url, timeout=5).body == b"x" * 1000
    monkeypatch.setattr(httpget, "MAX_RESPONSE_BYTES", 999)
    with pytest.raises(ResponseTooLarge, match="more than 999 bytes"):
        fetch(url, timeout=5)


def test_a_large_answer_arrives_whole_in_pieces(served: tuple[str, Script]) -> None:
    url, script = served
    body = bytes(range(256)) * 4099  # past several pieces, not a whole number of them
    script.answer(body)
    assert fetch(url, timeout=5, limit=len(body)).body == body


def test_the_timeout_is_taken_above_0_up_to_the_timers_limit_and_refused_past_either(
        served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b"ok")
    assert fetch(url, timeout=threading.TIMEOUT_MAX).body == b"ok"
    assert fetch(url, timeout=1e-3 + 5).body == b"ok"
    for bad in (0.0, -1.0, threading.TIMEOUT_MAX * 2, float("nan"), float("inf")):
        with pytest.raises(ValueError) as caught:
            fetch(url, timeout=bad)
        assert str(caught.value) == (f"timeout must be > 0 seconds and at most "
                                     f"{threading.TIMEOUT_MAX:g}, not {bad}")


def test_https_is_spoken_to_an_https_url() -> None:
    with scripted_server() as (url, _), pytest.raises(ssl.SSLError):
        fetch(url.replace("http:", "https:"), timeout=5)


def test_only_https_is_spoken_with_tls(served: tuple[str, Script]) -> None:
    url, script = served
    script.answer(b"plain")
    for scheme in ("ws", "zz", "httpz"):  # sorting after "https", as before it
        assert fetch(url.replace("http:", f"{scheme}:"), timeout=5).body == b"plain"


def test_a_server_that_never_answers_is_cut_off_at_the_deadline() -> None:
    with stalling(b"") as url:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as caught:
            fetch(url + "/x?y=1", timeout=0.3)
        took = time.monotonic() - start
    assert str(caught.value) == (f"no complete answer from {url.removeprefix('http://')} "
                                 "within 0.3 s (--timeout bounds the whole request)")
    assert 0.25 < took < 2.0, took


def test_a_body_cut_short_by_the_deadline_is_a_timeout_never_a_short_answer() -> None:
    # Headers, no length: the body ends when the connection does, and the server stalls.
    with stalling(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial") as url:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="within 0.4 s"):
            fetch(url, timeout=0.4)
        took = time.monotonic() - start
    assert 0.35 < took < 2.0, took


def test_a_dripping_answer_is_cut_off_at_the_deadline_for_the_whole_request() -> None:
    """Each byte arrives within the socket's own timeout: only the one deadline ends it."""
    with hostile_server("drip", every=0.05, seconds=4.0) as url:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="within 0.5 s"):
            fetch(url, timeout=0.5)
        took = time.monotonic() - start
    assert 0.45 < took < 2.0, took


def test_the_default_limit_is_128_mib() -> None:
    assert httpget.MAX_RESPONSE_BYTES == 134_217_728


def test_a_socket_timeout_just_before_the_timer_is_the_same_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket's own timeout is the time left: it may go off before the timer thread runs
    (a loaded machine), and says the same then."""
    class Late(threading.Timer):
        def __init__(self, interval: float, function: Callable[[], None]) -> None:
            super().__init__(interval + 0.5, function)

    monkeypatch.setattr(httpget.threading, "Timer", Late)
    with stalling(b"") as url, pytest.raises(TimeoutError) as caught:
        fetch(url, timeout=0.2)
    assert str(caught.value) == (f"no complete answer from {url.removeprefix('http://')} "
                                 "within 0.2 s (--timeout bounds the whole request)")


def test_a_socket_the_timer_cannot_shut_down_is_left_to_its_own_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """shutdown() fails on a socket the peer reset: the timer thread ignores it (no traceback
    from the thread) and the socket's own timeout, the time left, ends the request at the
    deadline (not a second later, as a floor of a second on that timeout would)."""
    class Early(threading.Timer):  # runs well before the socket's timeout, never cancelled
        def __init__(self, interval: float, function: Callable[[], None]) -> None:
            super().__init__(interval / 4, function)

    refused: list[int] = []

    def refuse(self: socket.socket, how: int) -> None:
        refused.append(how)
        raise OSError(107, "Transport endpoint is not connected")

    failed: list[object] = []
    monkeypatch.setattr(httpget.threading, "Timer", Early)
    monkeypatch.setattr(socket.socket, "shutdown", refuse)
    monkeypatch.setattr(threading, "excepthook", failed.append)
    start = time.monotonic()
    with stalling(b"") as url, pytest.raises(TimeoutError, match="within 0.4 s"):
        fetch(url, timeout=0.4)
    assert 0.39 < time.monotonic() - start < 0.95
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.join(2)  # the timer has run
    assert refused == [socket.SHUT_RDWR] and failed == []


def test_a_deadline_that_passes_just_after_the_connect_is_a_timeout_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the check after connecting and setting the socket's timeout to the time left,
    the deadline may pass: the socket still gets a timeout above zero (a negative one raises
    ValueError, zero makes it non-blocking) and the request ends as a timeout."""
    class Clock:  # its second reading, for the time left, is 0.3 s past the deadline
        readings = iter([1000.0, 1000.5])

        @staticmethod
        def monotonic() -> float:
            return next(Clock.readings)

    monkeypatch.setattr(httpget, "time", Clock)
    with stalling(b"") as url, pytest.raises(TimeoutError, match="within 0.2 s"):
        fetch(url, timeout=0.2)


def test_a_connect_that_takes_past_the_deadline_is_a_timeout(
        served: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    url, script = served
    script.answer(b"late")
    connect = http.client.HTTPConnection.connect

    def slow(self: http.client.HTTPConnection) -> None:
        time.sleep(0.3)
        connect(self)

    monkeypatch.setattr(http.client.HTTPConnection, "connect", slow)
    with pytest.raises(TimeoutError, match="within 0.1 s"):
        fetch(url, timeout=0.1)
    assert script.requests == []  # nothing sent once the deadline passed


def test_a_server_that_is_not_there_or_speaks_no_http_is_its_own_error() -> None:
    with pytest.raises(ConnectionRefusedError):
        fetch(closed_port_url(), timeout=2)
    with stalling(b"SSH-2.0-OpenSSH_9.6\r\n") as url, \
            pytest.raises(http.client.HTTPException):
        fetch(url, timeout=5)
