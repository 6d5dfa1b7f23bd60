"""A small client for Prometheus's HTTP API (stdlib only): instant queries, rules, alerts.

Every request is bounded as a whole by ``timeout`` and its answer by
``trainwatch.httpget.MAX_RESPONSE_BYTES`` (128 MiB): a server that drips or never ends its
answer costs at most that, never the machine's memory.

Every answer is checked where it comes in, so a broken or hostile server is one
:class:`PrometheusError` naming it and what was wrong, never a traceback further in: JSON
nested past what Python's parser takes, a result that is not a list of series, a series
without its ``metric`` labels (strings) or its ``[time, value]`` pair (``values`` list), a
sample time that is not a plausible Unix time, a value that is not a number. A value may be
NaN or ±Inf (Prometheus's own answers to 0/0 and x/0) unless the caller says it is a count or
a time (:data:`COUNT`, :data:`TIME`): those must be finite and in range, since they become
integers, ages and query instants.
"""

from __future__ import annotations

import http.client
import json
import math
import reprlib
import urllib.parse
from typing import Any, Literal, TypeGuard

from trainwatch.cliutil import LATEST_TIME, MAX_TIMEOUT
from trainwatch.httpget import ResponseTooLarge, fetch

Labels = dict[str, str]
# What a sample's value must be: ANY float (NaN and ±Inf included), a COUNT (a counter's
# reading, made an integer: finite, 0 to 2**53) or a TIME (Unix seconds: finite, 0 to
# LATEST_TIME).
Kind = Literal["any", "count", "time"]
ANY: Kind = "any"
COUNT: Kind = "count"
TIME: Kind = "time"
LARGEST_COUNT = float(2**53)  # above it a float no longer holds every whole number
_MUST = {COUNT: "a count (finite, 0 to 2**53)",
         TIME: f"a Unix time (finite, 0 to {LATEST_TIME:.0f}: 1970 to 2100)"}
# How much of a query or a value an error message quotes.
_QUOTE = 120
_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 40
_shown.maxlevel = 2
# Parameters longer than this (URL-encoded) are POSTed as a form (nginx's default limit on a
# request line is 8 KiB).
POST_PAST = 4096
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


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
        if not 0 < timeout <= MAX_TIMEOUT:
            raise ValueError(f"--timeout must be a number of seconds > 0 and at most "
                             f"{MAX_TIMEOUT:g}, not {timeout}")
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
        form = urllib.parse.urlencode(params)
        # A long query (a batch of many runs' reads) goes as a form body, past any URL limit
        # of a proxy in front of Prometheus; the rest as Prometheus's own UI asks, in the URL.
        post = len(form) > POST_PAST
        if form and not post:
            url += "?" + form
        try:
            # An error status is read too: Prometheus explains a bad query in the JSON body.
            body = fetch(url, timeout=self.timeout, method="POST" if post else "GET",
                         headers=_FORM if post else None,
                         body=form.encode() if post else None).body
        except ResponseTooLarge as err:
            raise PrometheusError(str(err)) from None
        except (OSError, http.client.HTTPException) as err:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {err}") from None
        try:
            doc = json.loads(body)
        except RecursionError:  # Python's parser recurses, ~1,000 levels deep at most
            raise PrometheusError(f"{url.split('?')[0]} answered JSON nested deeper than "
                                  "Python's parser goes (a Prometheus answer is a few levels "
                                  f"deep): is {self.url} a Prometheus server?") from None
        except ValueError:
            raise PrometheusError(f"{url.split('?')[0]} did not answer with Prometheus API "
                                  f"JSON (is {self.url} a Prometheus server?)") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error") if isinstance(doc, dict) else None
            said = (_one_line(error) if isinstance(error, str)
                    else f"its answer has no status \"success\" ({_shown.repr(doc)})")
            raise PrometheusError(f"Prometheus at {self.url}: {path} failed: {said}")
        return doc.get("data")

    def query(self, expr: str, kind: Kind = ANY) -> list[tuple[Labels, float]]:
        """An instant query's vector as (labels, value) pairs; each value a ``kind``."""
        return [(self._labels(series, expr), self._sample(series.get("value"), kind, expr)[1])
                for series in self._result(self._instant(expr), expr)]

    def value(self, expr: str, kind: Kind = ANY) -> float | None:
        """The largest value of ``expr``'s vector; None when it is empty (or NaN)."""
        return largest(self.query(f"max({expr})", kind))

    def samples(self, expr: str, kind: Kind = ANY
                ) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """A range selector's raw samples (``m{...}[5m]`` at an instant) as (labels, [(time,
        value), ...]) pairs, oldest first; each value a ``kind``."""
        return self._matrix(self._instant(expr), kind, expr)

    def query_range(self, expr: str, start: float, end: float, step: float, kind: Kind = ANY
                    ) -> list[tuple[Labels, list[tuple[float, float]]]]:
        """A range query's series as (labels, [(time, value), ...]) pairs, oldest first."""
        return self._matrix(self.get("query_range", query=expr, start=f"{start:.3f}",
                                     end=f"{end:.3f}", step=f"{step:g}"), kind, expr)

    def label_values(self, label: str, **params: str) -> list[str]:
        """``/api/v1/label/<label>/values``: the values (strings) ``label`` takes."""
        found = self.get(f"label/{label}/values", **params)
        if found is None:
            return []
        if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
            raise self._bad(f"/api/v1/label/{label}/values", "not a list of strings")
        return list(found)

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (recording and alerting), flattened out of their groups; each a
        dict with a ``name``, a ``type`` and (where it has them) a ``query`` (strings), and
        ``labels`` and ``annotations`` of strings."""
        data = self.get("rules")
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, list):
            raise self._bad("/api/v1/rules", "no list of rule groups")
        rules = []
        for group in groups:
            loaded = group.get("rules") if isinstance(group, dict) else None
            if not isinstance(loaded, list):
                raise self._bad("/api/v1/rules", "a rule group without its list of rules")
            for rule in loaded:
                if not (isinstance(rule, dict) and isinstance(rule.get("name"), str)
                        and isinstance(rule.get("type"), str)
                        and isinstance(rule.get("query", ""), str)
                        and all(_strings(rule.get(key) or {})
                                for key in ("labels", "annotations"))):
                    raise self._bad("/api/v1/rules", "a rule without its name, type, query, "
                                    f"labels or annotations ({_shown.repr(rule)})")
                rules.append(rule)
        return rules

    def alerts(self) -> list[dict[str, Any]]:
        """The pending and firing alerts; each a dict whose ``state`` and ``value`` are
        strings, and its ``labels`` and ``annotations`` (where it has them) too."""
        data = self.get("alerts")
        alerts = data.get("alerts") if isinstance(data, dict) else None
        if not isinstance(alerts, list):
            raise self._bad("/api/v1/alerts", "no list of alerts")
        for alert in alerts:
            if not (isinstance(alert, dict) and isinstance(alert.get("state", ""), str)
                    and isinstance(alert.get("value", ""), str)
                    and all(_strings(alert.get(key) or {})
                            for key in ("labels", "annotations"))):
                raise self._bad("/api/v1/alerts", f"an alert without its labels or state "
                                f"({_shown.repr(alert)})")
        return list(alerts)

    def _bad(self, what: str, why: str) -> PrometheusError:
        """The one-line error for an answer to ``what`` (a query, or an API path) that is not
        what Prometheus answers: ``why``."""
        return PrometheusError(f"Prometheus at {self.url} answered {_one_line(what)} with {why}")

    def _result(self, data: Any, expr: str) -> list[Any]:
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise self._bad(expr, "no list of series (\"result\")")
        return result

    def _labels(self, series: Any, expr: str) -> Labels:
        metric = series.get("metric") if isinstance(series, dict) else None
        if not _strings(metric):
            raise self._bad(expr, "a series without its labels (\"metric\", strings)")
        return dict(metric)

    def _sample(self, point: Any, kind: Kind, expr: str) -> tuple[float, float]:
        """A ``[time, value]`` pair as two floats: the time a plausible Unix time, the value
        a number of the ``kind`` asked."""
        if not isinstance(point, list) or len(point) != 2:
            raise self._bad(expr, f"a sample that is not a [time, value] pair "
                            f"({_shown.repr(point)})")
        at, value = _number(point[0]), _number(point[1])
        if at is None or not 0 <= at <= LATEST_TIME:
            raise self._bad(expr, f"sample time {_shown.repr(point[0])}, not "
                            f"{_MUST[TIME]}")
        if value is None:
            raise self._bad(expr, f"sample value {_shown.repr(point[1])}, not a number")
        if kind == COUNT and not 0 <= value <= LARGEST_COUNT or (
                kind == TIME and not 0 <= value <= LATEST_TIME):
            raise self._bad(expr, f"{_shown.repr(point[1])} where {_MUST[kind]} is due")
        return at, value

    def _matrix(self, data: Any, kind: Kind, expr: str
                ) -> list[tuple[Labels, list[tuple[float, float]]]]:
        found = []
        for series in self._result(data, expr):
            labels = self._labels(series, expr)
            values = series.get("values")
            if not isinstance(values, list):
                raise self._bad(expr, "a series without its samples (\"values\")")
            found.append((labels, [self._sample(point, kind, expr) for point in values]))
        return found


def largest(answer: list[tuple[Labels, float]]) -> float | None:
    """The value of a ``max(...)`` query's answer; None when it is empty (or NaN)."""
    values = [v for _, v in answer if not math.isnan(v)]
    return values[0] if values else None


def _strings(found: Any) -> TypeGuard[dict[str, str]]:
    """Whether ``found`` is a dict of strings to strings (a series' labels)."""
    return isinstance(found, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items())


def _number(found: Any) -> float | None:
    """A sample's time or value as a float (Prometheus writes values as strings: "1.5",
    "NaN", "+Inf"); None when it is none."""
    if isinstance(found, bool) or not isinstance(found, (str, int, float)):
        return None
    try:
        return float(found)
    except (ValueError, OverflowError):  # OverflowError: an int past a float's range
        return None


def _one_line(text: str) -> str:
    """``text`` on one line of printable characters, at most _QUOTE of them: a query or a
    server's own words (escape sequences written out, never sent to the terminal).

    >>> print(_one_line("rate(x[5m])\\n  by (job)\\x1b[2J"))
    rate(x[5m]) by (job)\\x1b[2J
    """
    text = " ".join(text[:4 * _QUOTE].split())
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return text if len(text) <= _QUOTE else text[:_QUOTE - 1] + "…"
