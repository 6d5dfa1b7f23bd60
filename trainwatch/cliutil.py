"""What every `trainwatch` command shares: its exit codes, its duration and time arguments and
how it says how long ago something happened.

>>> duration("1h30m"), ago(420)
(5400.0, '7 minutes')
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from trial_instrumentation.durations import parse_duration

EXIT_OK = 0
# A finding: `diagnose` names a bottleneck, `stack status` a service that is down.
EXIT_FOUND = 1
# Bad input, or nothing to read: an unknown trial, an unreachable Prometheus or Pushgateway.
EXIT_USAGE = 2


def duration(text: str) -> float:
    """An argparse type: seconds in ``90``, ``90s``, ``30m``, ``1h30m``, ``2d``."""
    try:
        return parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (e.g. 90s, 30m, 1h, 2d)") from None


def parse_time(text: str) -> float:
    """Unix seconds from ``1700000000`` or an ISO 8601 time (``2026-11-23T08:00:00Z``; a time
    without a zone is UTC).

    >>> parse_time("1700000000"), parse_time("2023-11-14T22:13:20Z")
    (1700000000.0, 1700000000.0)
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (Unix seconds or ISO 8601, e.g. 2026-11-23T08:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def ago(seconds: float) -> str:
    """``ago(75)`` -> '75 seconds'; ``ago(420)`` -> '7 minutes'; ``ago(9000)`` -> '2.5 hours'."""
    if seconds < 120:
        return f"{seconds:.0f} seconds"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def add_prometheus(sub: argparse.ArgumentParser, timeout: float = 10.0,
                   several: bool = False) -> None:
    """``--prometheus`` and ``--timeout``, as every command that reads Prometheus takes them;
    ``several``: ``--prometheus`` may be repeated (a list, or None when not given)."""
    sub.add_argument("--prometheus", metavar="URL", action="append" if several else "store",
                     help="Prometheus base URL, e.g. http://prometheus:9090 (default: "
                     "$TRAINWATCH_PROMETHEUS, else the running `trainwatch stack`'s)" +
                     ("; repeat it for the shards of a Prometheus sharded by trial: the one "
                      "holding the trial is read" if several else ""))
    sub.add_argument("--timeout", type=float, default=timeout,
                     help=f"HTTP timeout for each request, seconds (default {timeout:g})")


def add_trial(sub: argparse.ArgumentParser) -> None:
    """``--experiment``, ``--trial`` and ``--rank``: which trial a command is about."""
    sub.add_argument("--experiment", required=True)
    sub.add_argument("--trial", help="default: every trial of the experiment")
    sub.add_argument("--rank", help="default: every rank")
