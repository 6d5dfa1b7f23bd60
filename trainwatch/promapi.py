"""A small client for Prometheus's HTTP API (stdlib only): instant queries, rules, alerts.

Every request is bounded as a whole by ``timeout`` and its answer by
``trainwatch.httpget.MAX_RESPONSE_BYTES`` (128 MiB): a server that drips or never ends its
answer costs at most that, never the machine's memory.
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.parse
from typing import Any

from trainwatch.httpget import ResponseTooLarge, fetch

Labels = dict[str, str]


class PrometheusError(RuntimeError):
    """Prometheus cannot be reached or answered with an error; the message says which."""


class PrometheusAPI:
    """Reads one Prometheus server.

    Example:
        >>> api = PrometheusAPI("http://127.0.0.1:9090/")
        >>> api.url
        'http://127.0.0.1:9090'
    """

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--prometheus: {url!r} is not an http(s) URL like "
                             "http://prometheus:9090")
        if not 0 < timeout < float("inf"):
            raise ValueError(f"--timeout must be a number of seconds > 0, not {timeout}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        # The instant the instant queries are evaluated at; None: Prometheus's now.
        self.at: float | None = None

    def pinned(self, at: float | None) -> PrometheusAPI:
        """The same server, its instant queries evaluated at ``at`` (Unix seconds): a finished
        trial is read as it was while it still pushed."""
        api = PrometheusAPI(self.url, self.timeout)
        api.at = at
        return api

    def _instant(self, expr: str) -> Any:
        if self.at is None:
            return self.get("query", query=expr)
        return self.get("query", query=expr, time=f"{self.at:.3f}")

    def get(self, path: str, **params: str) -> Any:
        """The ``data`` of ``/api/v1/<path>``; PrometheusError on any failure."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            # An error status is read too: Prometheus explains a bad query in the JSON body.
            body = fetch(url, timeout=self.timeout).body
        except ResponseTooLarge as err:
            raise PrometheusError(str(err)) from None
        except (OSError, http.client.HTTPException) as err:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {err}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{url} did not answer with Prometheus API JSON "
                                  f"(is {self.url} a Prometheus server?)") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error", doc) if isinstance(doc, dict) else doc
            raise PrometheusError(f"Prometheus {path} failed: {error}")
        return doc.get("data")

    def query(self, expr: str) -> list[tuple[Labels, float]]:
        """An instant query's vector as (labels, value) pairs."""
        data = self._instant(expr)
        return [(dict(s["metric"]), float(s["value"][1])) for s in data.get("result", [])]

    def value(self, expr: str) -> float | None:
        """The largest value of ``expr``'s vector; None when it is empty (or NaN)."""
        values = [v for _, v in self.query(f"max({expr})") if not math.isnan(v)]
        return values[0] if values else None

    def samples(self, expr: str) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """A range selector's raw samples (``m{...}[5m]`` at an instant) as (labels, [(time,
        value), ...]) pairs, oldest first."""
        data = self._instant(expr)
        return _matrix(data)

    def query_range(self, expr: str, start: float, end: float, step: float
                    ) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """A range query's series as (labels, [(time, value), ...]) pairs, oldest first."""
        return _matrix(self.get("query_range", query=expr, start=f"{start:.3f}",
                                end=f"{end:.3f}", step=f"{step:g}"))

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (recording and alerting), flattened out of their groups."""
        return [rule for group in self.get("rules")["groups"] for rule in group["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        """The pending and firing alerts."""
        return list(self.get("alerts")["alerts"])


def _matrix(data: Any) -> list[tuple[Labels, list[tuple[float, float]]]]:
    return [(dict(s["metric"]), [(float(t), float(v)) for t, v in s.get("values", [])])
            for s in data.get("result", [])]
