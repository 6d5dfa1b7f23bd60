"""The HTTP layer in-process: a collector bug answers 500 and serving goes on."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from exporter.collector import ScrapeCollector
from exporter.config import merge
from exporter.web import make_server
from tests.stack import http_get


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
    server = make_server(merge(file={}, flags={"web.listen_address": "127.0.0.1:0"}), registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        status, body = http_get(url + "/metrics")
        assert (status, body) == (500, b"scrape failed; see the exporter's log\n")
        assert http_get(url + "/healthz") == (200, b"ok\n")
        buggy.broken = False
        status, body = http_get(url + "/metrics")
        assert status == 200
        assert b'trainwatch_scrape_collector_success{collector="buggy"} 1.0' in body
    finally:
        server.shutdown()
        server.server_close()
