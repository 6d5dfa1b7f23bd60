"""exporter.web in process: ``Routes`` called with requests directly (paths, basic auth and its
verdicts, the scrape's deadline, gzip, a collector bug), the landing page, and ``make_server``
binding real loopback sockets (the family, the default host, TLS, bind errors, when the
registry is built). Over HTTP from a whole exporter: tests/test_exporter_web.py."""

from __future__ import annotations

import base64
import gc
import gzip
import html
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily

from exporter import __version__, web
from exporter.config import ConfigError, Settings
from exporter.deadline import SCRAPE_TIMEOUT_HEADER, current_deadline, read_budget
from exporter.exposition import CONTENT_TYPE, render
from exporter.httpmessage import Request, Response
from exporter.httpserver import HTTPServer, Limits
from exporter.web import Routes, landing_page, make_server
from exporter.webauth import hash_password
from exporter.webreload import LiveWebConfig

HERE = Path(__file__).parent
CERT, KEY = str(HERE / "test_exporter_tls.crt"), str(HERE / "test_exporter_tls.key")
ALICE = hash_password("wonder7", iterations=100, salt="s1")


def login(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Gauges:
    """A collector of ``count`` gauges; keeps each scrape's deadline; raises when told to."""

    def __init__(self, count: int = 3) -> None:
        self.count, self.broken = count, False
        self.deadlines: list[float] = []

    def collect(self) -> Iterator[Any]:
        self.deadlines.append(current_deadline())
        if self.broken:
            raise KeyError("a bug, not a source error")
        for n in range(self.count):
            yield GaugeMetricFamily(f"trainwatch_test_value_{n}", f"test gauge {n}",
                                    value=n + 0.5)


def routes(collector: Gauges | None = None, **settings: Any) -> Routes:
    chosen = Settings(**settings)
    return Routes(collector or Gauges(), LiveWebConfig(chosen), landing_page(chosen))


def ask(pages: Routes, target: str, client: str = "10.0.0.1", **headers: str) -> Response:
    lowered = {name.lower().replace("_", "-"): value for name, value in headers.items()}
    return pages(Request("GET", target, "HTTP/1.1", lowered, client))


# -------------------------------------------------------------------------------- Routes


def test_metrics_is_the_rendered_scrape_as_plain_exposition_text() -> None:
    collector = Gauges()
    response = ask(routes(collector), "/metrics?x=1")
    assert response.status == 200 and response.content_type == CONTENT_TYPE
    assert response.body == render(Gauges().collect())
    assert b"trainwatch_test_value_2 2.5\n" in response.body
    assert dict(response.headers) == {}  # no Content-Encoding without gzip asked for
    assert len(collector.deadlines) == 1


@pytest.mark.parametrize("accepted", ["gzip", "deflate, gzip;q=0.5", "br,gzip"])
def test_metrics_is_gzipped_when_the_client_accepts_gzip(accepted: str) -> None:
    plain = ask(routes(Gauges(200)), "/metrics").body
    response = ask(routes(Gauges(200)), "/metrics", accept_encoding=accepted)
    assert response.status == 200 and response.content_type == CONTENT_TYPE
    assert dict(response.headers) == {"Content-Encoding": "gzip"}
    assert gzip.decompress(response.body) == plain
    assert len(response.body) < len(plain) / 4  # compressed, not only wrapped


def test_gzip_is_the_fastest_level_with_gzips_whole_window() -> None:
    chunk = os.urandom(20 * 1024)  # incompressible alone
    body = web._gzip(chunk + chunk)
    assert gzip.decompress(body) == chunk + chunk
    # RFC 1952: a gzip header's XFL byte is 4 where "the compressor used the fastest algorithm".
    assert body[:3] == b"\x1f\x8b\x08" and body[8] == 4
    # The repeat lies 20 KiB back: found within deflate's 32 KiB window (RFC 1951), not 16 KiB.
    assert len(body) < len(chunk) * 1.1


@pytest.mark.parametrize("accepted", ["identity", "deflate, br", ""])
def test_metrics_is_plain_when_gzip_is_not_accepted(accepted: str) -> None:
    response = ask(routes(), "/metrics", accept_encoding=accepted)
    assert response.body == render(Gauges().collect())
    assert dict(response.headers) == {}


@pytest.mark.parametrize("timeout", ["4", "0.75", None])
def test_the_scrape_runs_under_the_deadline_its_timeout_header_sets(timeout: str | None) -> None:
    collector = Gauges()
    headers = {} if timeout is None else {SCRAPE_TIMEOUT_HEADER: timeout}
    before = time.monotonic()
    ask(routes(collector), "/metrics", **headers)
    after = time.monotonic()
    [deadline] = collector.deadlines
    assert before + read_budget(timeout) <= deadline <= after + read_budget(timeout)


def test_a_collector_bug_answers_500_and_is_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    collector = Gauges()
    collector.broken = True
    pages = routes(collector)
    with caplog.at_level(logging.ERROR, logger=web.__name__):
        response = ask(pages, "/metrics", accept_encoding="gzip")
    assert (response.status, response.body, response.content_type) == (
        500, b"scrape failed; see the exporter's log\n", "text/plain")
    assert dict(response.headers) == {}
    [record] = [r for r in caplog.records if r.name == web.__name__]
    assert record.getMessage() == "scrape failed"
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    collector.broken = False
    assert ask(pages, "/metrics").status == 200  # the next scrape is served


def test_the_other_pages_and_an_unknown_path() -> None:
    collector = Gauges()
    pages = routes(collector)
    landing = landing_page(Settings())
    for target, status, body, kind in [
            ("/healthz", 200, b"ok\n", "text/plain; charset=utf-8"),
            ("/healthz?verbose=1", 200, b"ok\n", "text/plain; charset=utf-8"),
            ("/", 200, landing, "text/html; charset=utf-8"),
            ("/?q", 200, landing, "text/html; charset=utf-8"),
            ("/metrics/", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"),
            ("/healthz/x", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"),
            ("/favicon.ico", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"),
            # Paths sorting before "/" (an empty one among them) are not the landing page.
            ("?q", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"),
            ("*", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8"),
            (".well-known", 404, b"not found: try /metrics\n", "text/plain; charset=utf-8")]:
        response = ask(pages, target)
        assert (response.status, response.body, response.content_type) == (status, body, kind), \
            target
    assert collector.deadlines == []  # none of them scraped


def test_with_users_every_page_but_healthz_needs_a_valid_login() -> None:
    collector = Gauges()
    pages = routes(collector, web_basic_auth_users={"alice": ALICE})
    challenge = {"WWW-Authenticate": 'Basic realm="trainwatch-exporter"'}
    for target in ("/metrics", "/", "/nowhere"):
        for header in ({}, {"authorization": login("alice", "wrong")},
                       {"authorization": login("bob", "wonder7")},
                       {"authorization": "Bearer abc"}):
            response = ask(pages, target, **header)
            assert (response.status, response.body, dict(response.headers)) == (
                401, b"unauthorized\n", challenge), (target, header)
    assert collector.deadlines == []
    good = login("alice", "wonder7")
    assert ask(pages, "/healthz").body == b"ok\n"
    assert ask(pages, "/metrics", authorization=good).body == render(Gauges().collect())
    assert ask(pages, "/", authorization=good).status == 200
    assert ask(pages, "/nowhere", authorization=good).status == 404


def test_a_client_out_of_login_attempts_is_told_to_retry_and_another_is_not() -> None:
    pages = routes(web_basic_auth_users={"alice": ALICE})
    wrong = login("alice", "guess")
    statuses = [ask(pages, "/metrics", "10.0.0.9", authorization=wrong).status
                for _ in range(12)]
    assert statuses[0] == 401 and statuses[-1] == 429
    busy = ask(pages, "/metrics", "10.0.0.9", authorization=login("alice", "wonder7"))
    assert (busy.status, busy.body, dict(busy.headers)) == (
        429, b"too many failed logins; try again later\n", {"Retry-After": "1"})
    assert ask(pages, "/metrics", "10.0.0.10", authorization=wrong).status == 401
    assert ask(pages, "/healthz", "10.0.0.9").status == 200


# ---------------------------------------------------------------------------- landing page


def test_the_landing_page_names_the_version_and_the_enabled_collectors() -> None:
    settings = Settings(collectors={"gpu": True, "host": False, "gpu_process": True})
    page = landing_page(settings).decode()
    assert page.startswith("<!doctype html>") and page.endswith("</html>\n")
    assert f"<h1>trainwatch-exporter {html.escape(__version__)}</h1>" in page
    assert "Collectors: gpu, gpu_process.</p>" in page
    assert '<a href="metrics">/metrics</a>' in page and '<a href="healthz">/healthz</a>' in page


def test_the_landing_page_says_none_without_collectors() -> None:
    settings = Settings(collectors={"gpu": False, "host": False, "gpu_process": False})
    assert "Collectors: none.</p>" in landing_page(settings).decode()


# ----------------------------------------------------------------------------- make_server


def serve_one(server: HTTPServer, request: bytes, tls: bool = False) -> bytes:
    """Serve ``request`` (which asks to close) once on ``server`` and return the reply."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        with socket.create_connection(("127.0.0.1" if host == "0.0.0.0" else host, port),
                                      timeout=3) as sock:
            if tls:
                context = ssl.create_default_context(cafile=CERT)
                sock = context.wrap_socket(sock, server_hostname="localhost")
            sock.sendall(request)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        return reply
    finally:
        server.shutdown()
        server.server_close()


def settings_at(address: str, **more: Any) -> Settings:
    return Settings(web_listen_address=address, **more)


def test_make_server_serves_the_registry_it_is_given() -> None:
    server = make_server(settings_at("127.0.0.1:0"), Gauges())
    assert server.server_address[0] == "127.0.0.1" and server.socket.family == socket.AF_INET
    assert server.context is None and server.limits == Limits()
    reply = serve_one(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    assert reply.endswith(b"\r\n\r\n" + render(Gauges().collect()))


def test_make_server_builds_a_callable_registry_once_the_socket_is_bound() -> None:
    seen = []

    def build() -> Gauges:
        # Bound and listening already: a connection is queued by the kernel.
        seen.append(socket.create_connection(("127.0.0.1", port), timeout=3))
        return Gauges(1)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = make_server(settings_at(f"127.0.0.1:{port}"), build)
    seen[0].close()
    reply = serve_one(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.endswith(b"\r\n\r\n" + render(Gauges(1).collect()))
    assert len(seen) == 1


def test_make_server_listens_on_ipv6_and_on_every_interface_without_a_host() -> None:
    server = make_server(settings_at("[::1]:0"), Gauges())
    try:
        assert server.socket.family == socket.AF_INET6 and server.server_address[0] == "::1"
    finally:
        server.server_close()
    server = make_server(settings_at(":0"), Gauges())
    try:
        assert server.socket.family == socket.AF_INET and server.server_address[0] == "0.0.0.0"
    finally:
        server.server_close()


def test_make_server_uses_the_limits_and_web_config_it_is_given() -> None:
    limits = Limits(max_connections=7, workers=1)
    live = LiveWebConfig(Settings(web_basic_auth_users={"alice": ALICE}))
    server = make_server(settings_at("127.0.0.1:0"), Gauges(), limits, web=live)
    assert server.limits is limits
    # The given web config's users, though the settings have none.
    reply = serve_one(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 401 Unauthorized\r\n")


def test_make_server_with_tls_asks_the_live_config_for_the_context() -> None:
    settings = settings_at("127.0.0.1:0", web_tls_cert_file=CERT, web_tls_key_file=KEY)
    live = LiveWebConfig(settings)
    server = make_server(settings, Gauges(), web=live)
    assert callable(server.context) and server.context() is live.current().context
    reply = serve_one(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                      tls=True)
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"\r\n\r\nok\n")


def test_an_address_in_use_is_a_config_error_before_the_registry_is_built() -> None:
    built = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ConfigError) as caught:
            make_server(settings_at(address), lambda: built.append(1) or Gauges())
    assert str(caught.value) == f"cannot listen on {address!r}: Address already in use"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert built == []


def test_a_backlog_too_large_for_listen_is_a_config_error_with_its_reason() -> None:
    with pytest.raises(ConfigError) as caught:
        make_server(settings_at("127.0.0.1:0"), Gauges(), Limits(backlog=2 ** 40))
    assert str(caught.value).startswith("cannot listen on '127.0.0.1:0': ")
    reason = str(caught.value).split(": ", 1)[1]
    with socket.socket() as sock, pytest.raises(OverflowError) as direct:
        sock.listen(2 ** 40)
    assert reason == str(direct.value)


def test_a_registry_that_fails_to_build_closes_the_socket() -> None:
    def build() -> Gauges:
        raise RuntimeError("collectors failed")

    gc.collect()  # an earlier test's unreachable socket closed now, not during the count
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError, match="collectors failed") as failed:
        make_server(settings_at("127.0.0.1:0"), build)
    # Counted while the traceback (and so make_server's frame) is held: closed, not collected.
    assert len(os.listdir("/proc/self/fd")) == fds
    assert failed.traceback
