"""One duration grammar for every trainwatch setting: the trial's push interval and timeouts,
`trainwatch gc`'s ages, `--since`, the stack's intervals and the rules' windows.

A duration is a number of seconds (``10``, ``2.5``) or parts largest unit first, as Prometheus
writes them (``90s``, ``1m30s``, ``500ms``, ``2d``); trainwatch's own settings also take a
fractional part (``0.5s``). What goes into a rule or a Prometheus flag must be a Prometheus
duration: whole numbers, at least one part, not zero (:func:`is_prometheus_duration`).

>>> [parse_duration(v) for v in (10, "2.5", "10s", "1m30s", "500ms", "2d", "0.5s")]
[10.0, 2.5, 10.0, 90.0, 0.5, 172800.0, 0.5]
>>> is_prometheus_duration("5m"), is_prometheus_duration("1.5m"), is_prometheus_duration("0s")
(True, False, False)
"""

from __future__ import annotations

import re

# Largest first: the order the parts must come in.
UNITS = {"y": 365 * 86400.0, "w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0,
         "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[ywdhms])")
_ORDER = list(UNITS)


def _parts(text: str) -> list[tuple[str, str]] | None:
    """The (number, unit) parts of ``text``, or None unless it is nothing but parts whose units
    come largest first, each once."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    ranks = [_ORDER.index(u) for _, u in parts]
    return parts if ranks == sorted(set(ranks)) else None


def parse_duration(value: str | float) -> float:
    """Seconds from a number or a duration string; ValueError (TypeError for a boolean)
    otherwise."""
    if isinstance(value, bool):
        raise TypeError("expected seconds, not a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _parts(text)
    if parts is None:
        raise ValueError("expected seconds (10, 2.5) or a duration like 10s, 1m30s, 500ms, 2d")
    return sum(float(n) * UNITS[u] for n, u in parts)


def is_prometheus_duration(value: object) -> bool:
    """Whether Prometheus reads ``value`` as a duration longer than zero (``5m``, ``1h30m``)."""
    if not isinstance(value, str):
        return False
    parts = _parts(value)
    return (parts is not None and all(n.isdigit() for n, _ in parts)
            and any(int(n) for n, _ in parts))
