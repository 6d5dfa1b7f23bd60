"""The time window a report covers: ``--since DURATION`` back from now, or ``--start``/``--end``."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from trainwatch.cliutil import ago

# About this many points per line: enough to see a trend, few enough to keep the file small.
POINTS = 360
DEFAULT_SINCE = 3600.0


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


def utc(seconds: float) -> str:
    """``utc(1700000000)`` -> '2023-11-14 22:13:20 UTC'."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Window:
    """[start, end] in Unix seconds and the range queries' step.

    Example:
        >>> w = Window.of(since=600, start=None, end=1000.0)
        >>> w.start, w.end, w.step, w.ends_now
        (400.0, 1000.0, 2.0, False)
    """

    start: float
    end: float
    step: float
    ends_now: bool  # no --end given: the report reads "now", as diagnose does

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @classmethod
    def of(cls, since: float | None, start: float | None, end: float | None,
           now: float | None = None) -> Window:
        """ValueError (one line) for a window that ends before it starts."""
        ends_now = end is None
        end = (time.time() if now is None else now) if end is None else end
        if start is None:
            start = end - (DEFAULT_SINCE if since is None else since)
        elif since is not None:
            raise ValueError("--since and --start exclude each other: give one")
        if start >= end:
            raise ValueError(f"the window is empty: --start {utc(start)} is not before "
                             f"--end {utc(end)}")
        step = float(max(1, round((end - start) / POINTS)))
        return cls(start, end, step, ends_now)

    def describe(self) -> str:
        return f"{utc(self.start)} to {utc(self.end)} ({ago(self.seconds)})"

