"""The HTTP side: ``/metrics``, a landing page at ``/``, ``/healthz``; optional TLS and basic auth.

This is the one place with a broad ``except``: a bug in a collector answers 500 and is logged
with its traceback, and the exporter keeps serving.

>>> from exporter.collectors import build_registry
>>> from exporter.config import merge
>>> settings = merge(file={}, flags={"web.listen_address": "127.0.0.1:0"})
>>> server = make_server(settings, build_registry(settings))
>>> server.server_address[0]
'127.0.0.1'
>>> server.server_close()
"""

from __future__ import annotations

import html
import logging
import socket
import ssl
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.config import ConfigError, Settings, parse_listen_address
from exporter.deadline import SCRAPE_TIMEOUT_HEADER, scrape_deadline
from exporter.exposition import CONTENT_TYPE, render
from exporter.webauth import BasicAuth

log = logging.getLogger(__name__)
# A client that stalls mid-request (or mid-TLS-handshake) holds one thread at most this long.
CONNECTION_TIMEOUT_SECONDS = 30.0


class ExporterServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 registry: CollectorRegistry, auth: BasicAuth | None, landing: bytes) -> None:
        self.address_family = family
        self.registry = registry
        self.auth = auth
        self.landing = landing
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Dropped connections and failed TLS handshakes are the client's problem, not ours.
        log.debug("connection from %s failed: %r", client_address, sys.exc_info()[1])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses the connection
    server_version = f"trainwatch-exporter/{__version__}"
    timeout = CONNECTION_TIMEOUT_SECONDS
    # Headers and body leave in two writes; with Nagle on, a kept-alive client's delayed ACK
    # holds the body back ~40 ms per scrape.
    disable_nagle_algorithm = True
    server: ExporterServer

    def setup(self) -> None:
        super().setup()
        if isinstance(self.request, ssl.SSLSocket):
            # Handshake here, in the connection's thread, not in the accept loop.
            self.request.do_handshake()

    def do_GET(self) -> None:  # the name http.server dispatches to
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
            return
        auth = self.server.auth
        if auth is not None and not auth.check(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8",
                       {"WWW-Authenticate": 'Basic realm="trainwatch-exporter"'})
        elif path == "/metrics":
            self._metrics()
        elif path == "/":
            self._send(200, self.server.landing, "text/html; charset=utf-8")
        else:
            self._send(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")

    def _metrics(self) -> None:
        try:
            with scrape_deadline(self.headers.get(SCRAPE_TIMEOUT_HEADER)):
                body = render(self.server.registry.collect())
        except Exception:  # the one broad except: a bug must not kill serving
            log.exception("scrape failed")
            self._send(500, b"scrape failed; see the exporter's log\n", "text/plain")
            return
        headers = {}
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            body = _gzip(body)
            headers["Content-Encoding"] = "gzip"
        self._send(200, body, CONTENT_TYPE, headers)

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def _gzip(body: bytes) -> bytes:
    # Level 1: a scrape body shrinks ~10x either way, and the CPU goes to the scrape instead.
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    return compressor.compress(body) + compressor.flush()


def landing_page(settings: Settings) -> bytes:
    enabled = ", ".join(settings.enabled_collectors) or "none"
    return (f"<!doctype html><html><head><title>trainwatch-exporter</title></head><body>"
            f"<h1>trainwatch-exporter {html.escape(__version__)}</h1>"
            f"<p>GPU and host metrics for training jobs. Collectors: {html.escape(enabled)}.</p>"
            f'<p><a href="metrics">/metrics</a> &middot; <a href="healthz">/healthz</a></p>'
            f"</body></html>\n").encode()


def make_server(settings: Settings, registry: CollectorRegistry) -> ExporterServer:
    """Bind the listening socket (TLS-wrapped when configured); ``ConfigError`` if it cannot."""
    host, port = parse_listen_address(settings.web_listen_address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    auth = BasicAuth(settings.web_basic_auth_users) if settings.web_basic_auth_users else None
    context = _tls_context(settings) if settings.web_tls_cert_file else None
    try:
        server = ExporterServer((host or "0.0.0.0", port), family, registry, auth,
                                landing_page(settings))
    except (OSError, OverflowError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise ConfigError(f"cannot listen on {settings.web_listen_address!r}: {reason}") from None
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    return server


def _tls_context(settings: Settings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(settings.web_tls_cert_file), str(settings.web_tls_key_file))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot load TLS certificate {settings.web_tls_cert_file!r} / key "
                          f"{settings.web_tls_key_file!r}: {err}") from None
    return context
