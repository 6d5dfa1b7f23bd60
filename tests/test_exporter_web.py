"""The HTTP layer in-process: a collector bug answers 500 and serving goes on; a malformed
``Authorization`` header answers 401."""

from __future__ import annotations

import base64
import http.client
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from benchmarks.stack import http_get
from exporter.collector import ScrapeCollector
from exporter.webauth import hash_password
from tests.exporter_server import serving


class Buggy:
    def __init__(self) -> None:
        self.broken = True

    def collect(self) -> Iterator[Metric]:
        if self.broken:
            raise KeyError("a bug, not a source error")
        return iter(())


def test_a_collector_bug_answers_500_and_the_exporter_keeps_serving() -> None:
    buggy = Buggy()
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"buggy": buggy}, version="test"))
    with serving(registry) as port:
        url = f"http://127.0.0.1:{port}"
        status, body = http_get(url + "/metrics")
        assert (status, body) == (500, b"scrape failed; see the exporter's log\n")
        assert http_get(url + "/healthz") == (200, b"ok\n")
        buggy.broken = False
        status, body = http_get(url + "/metrics")
        assert status == 200
        assert b'trainwatch_scrape_collector_success{collector="buggy"} 1.0' in body


def test_a_non_ascii_authorization_header_answers_401() -> None:
    # A password with a non-ASCII character: its UTF-8 bytes, base64'd, are the login.
    users = {"prometheus": hash_password("s3cr\xe9t", iterations=1000)}
    with serving(CollectorRegistry(), **{"web.basic_auth_users": users}) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            # Header values travel as Latin-1: base64 with a non-ASCII character in it.
            conn.request("GET", "/metrics", headers={"Authorization": "Basic cHJvbWV0aGV1czpz\xe9"})
            response = conn.getresponse()
            assert (response.status, response.read()) == (401, b"unauthorized\n")
            assert response.getheader("WWW-Authenticate") == 'Basic realm="trainwatch-exporter"'
            # The same connection, the password's UTF-8 bytes: let in (the header, ASCII
            # base64, is not what is non-ASCII).
            login = base64.b64encode("prometheus:s3cr\xe9t".encode()).decode()
            conn.request("GET", "/metrics", headers={"Authorization": "Basic " + login})
            response = conn.getresponse()
            assert response.status == 200, response.read()
            response.read()
        finally:
            conn.close()
