"""The HTTP side: ``/metrics``, a landing page at ``/``, ``/healthz``; optional TLS and basic auth.

The pages are served by ``exporter.httpserver`` (which bounds what a client may cost). This is
the one place with a broad ``except``: a bug in a collector answers 500 and is logged with its
traceback, and the exporter keeps serving.

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
import zlib
from collections.abc import Callable
from urllib.parse import urlsplit

from exporter import __version__
from exporter.collector import Collector, Registry
from exporter.config import ConfigError, Settings, parse_listen_address
from exporter.deadline import SCRAPE_TIMEOUT_HEADER, scrape_deadline
from exporter.exposition import CONTENT_TYPE, render
from exporter.httpmessage import Request, Response
from exporter.httpserver import HTTPServer, Limits
from exporter.webauth import Verdict
from exporter.webreload import LiveWebConfig

log = logging.getLogger(__name__)


class Routes:
    """The exporter's pages: what ``HTTPServer`` calls, in a worker thread, per request."""

    def __init__(self, registry: Collector, web: LiveWebConfig, landing: bytes) -> None:
        self.registry, self.web, self.landing = registry, web, landing

    def __call__(self, request: Request) -> Response:
        path = urlsplit(request.target).path
        if path == "/healthz":
            return Response(200, b"ok\n")
        auth = self.web.current().auth  # the users as they are now (exporter.webreload)
        if auth is not None:
            verdict = auth.verify(request.headers.get("authorization"), request.client)
            if verdict is Verdict.BUSY:
                return Response(429, b"too many failed logins; try again later\n",
                                headers={"Retry-After": "1"})
            if verdict is not Verdict.OK:
                return Response(401, b"unauthorized\n",
                                headers={"WWW-Authenticate": 'Basic realm="trainwatch-exporter"'})
        if path == "/metrics":
            return self._metrics(request)
        if path == "/":
            return Response(200, self.landing, "text/html; charset=utf-8")
        return Response(404, b"not found: try /metrics\n")

    def _metrics(self, request: Request) -> Response:
        try:
            with scrape_deadline(request.headers.get(SCRAPE_TIMEOUT_HEADER.lower())):
                body = render(self.registry.collect())
        except Exception:  # the one broad except: a bug must not kill serving
            log.exception("scrape failed")
            return Response(500, b"scrape failed; see the exporter's log\n", "text/plain")
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(200, _gzip(body), CONTENT_TYPE, {"Content-Encoding": "gzip"})
        return Response(200, body, CONTENT_TYPE)


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


def make_server(settings: Settings,
                registry: Collector | Callable[[], Collector],
                limits: Limits | None = None, web: LiveWebConfig | None = None) -> HTTPServer:
    """Bind the listening socket (TLS when configured); ``ConfigError`` if it cannot.

    A callable ``registry`` is called only once the socket is bound and TLS loaded, so a bad
    address or certificate is reported before any collector starts (and logs about NVML).
    ``web`` follows changes to the users and TLS files (default: the TLS files of ``settings``).
    """
    host, port = parse_listen_address(settings.web_listen_address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    web = web or LiveWebConfig(settings)
    routes = Routes(Registry(), web, landing_page(settings))
    context = (lambda: web.current().context) if settings.web_tls_cert_file else None
    try:
        server = HTTPServer((host or "0.0.0.0", port), family, routes, context,
                            limits or Limits())
    except (OSError, OverflowError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise ConfigError(f"cannot listen on {settings.web_listen_address!r}: {reason}") from None
    try:
        routes.registry = registry() if callable(registry) else registry
    except BaseException:
        server.server_close()
        raise
    return server
