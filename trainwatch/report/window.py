"""The time window a report covers: the trial's own life unless the user picks one (``--since
DURATION`` back from ``--end``, ``--at`` or now, or ``--start``/``--end``).

With no time given, the window is the life of the trial's latest run of each rank (the run on at
``--at``): its first sample to its last, or to now while it runs; an earlier run under the same
key is reached with ``--at`` or ``--start``/``--end``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from trainwatch.cliutil import ago
from trainwatch.diagnose.entry import Run, latest_per_rank

# About this many points per line: enough to see a trend, few enough to keep the file small.
POINTS = 360
DEFAULT_SINCE = 3600.0
# A run's life is drawn with this share of it (at least a second) as a margin each side.
MARGIN = 0.02


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


    @classmethod
    def life(cls, first: float, last: float, running: bool, now: float,
             until: float | None = None) -> Window:
        """From a run's first sample to its last (or to now while it runs, or ``until``), with
        a margin.

        >>> w = Window.life(1000.0, 1100.0, running=False, now=5000.0)
        >>> w.start, w.end, w.ends_now
        (998.0, 1102.0, False)
        """
        pad = max(1.0, MARGIN * (last - first))
        end = until if until is not None else now if running else min(now, last + pad)
        return cls(first - pad, end, float(max(1, round((end - first + pad) / POINTS))),
                   running)


@dataclass(frozen=True)
class Asked:
    """The times the user gave, each None when not given."""

    since: float | None = None
    start: float | None = None
    end: float | None = None
    at: float | None = None

    @property
    def given(self) -> bool:
        """A window was asked for (else the trial's life is the window)."""
        return self.since is not None or self.start is not None or self.end is not None

    def window(self, runs: Sequence[Run], now: float, kept: float) -> Window:
        """The report's window over ``runs`` (the trial's, within the ``kept`` seconds of
        Prometheus's retention); ValueError (one line) for times it cannot cover."""
        if self.at is not None:
            if self.end is not None:
                raise ValueError("--at and --end exclude each other: give one")
            if self.at > now:
                raise ValueError(f"--at is {ago(self.at - now)} in the future")
            if self.at < now - kept:
                raise ValueError(f"--at is {ago(now - self.at)} ago, outside the {ago(kept)} "
                                 "Prometheus keeps (its retention)")
        if self.given:
            window = Window.of(self.since, self.start, self.end if self.at is None else self.at,
                               now=now)
        else:
            on = latest_per_rank(runs, self.at)
            if not on:  # --at before the trial's first run
                raise ValueError(f"--at {utc(self.at or now)} is before the trial's first "
                                 f"sample ({utc(min(r.first for r in runs))})")
            running = self.at is None and any(r.current and r.exit_reason is None for r in on)
            window = Window.life(min(r.first for r in on), max(r.last for r in on), running, now,
                                 until=self.at)
        if window.end < now - kept:
            raise ValueError(f"the window ends {ago(now - window.end)} ago, outside the "
                             f"{ago(kept)} Prometheus keeps (its retention)")
        return window
