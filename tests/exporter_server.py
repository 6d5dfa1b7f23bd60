"""The exporter's HTTP server in this process, for tests that need its handling, not a
subprocess."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry

from exporter.config import merge
from exporter.httpserver import Limits
from exporter.web import make_server


@contextmanager
def serving(registry: CollectorRegistry | None = None, limits: Limits | None = None,
            **file: Any) -> Iterator[int]:
    """``make_server`` on a free loopback port, served on a thread; yields the port. ``file``
    holds config-file keys (e.g. ``**{"web.basic_auth_users": users}``)."""
    settings = merge(file=file, flags={"web.listen_address": "127.0.0.1:0"})
    server = make_server(settings, registry or CollectorRegistry(), limits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
