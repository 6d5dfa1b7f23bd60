"""What every collector shares: the protocol, its error, and the one wrapper that times them.

A collector yields fresh metric families at scrape time. When part of its source fails (one
GPU lost, /proc/diskstats unreadable) it still yields what it could read and then raises
``CollectorError``; the wrapper keeps those families and reports the collector as failed.

>>> from prometheus_client import CollectorRegistry
>>> from exporter.metrics import CPU_COUNT
>>> class Answer:
...     def collect(self):
...         yield from build_families([(CPU_COUNT, (), 42.0)])
>>> registry = CollectorRegistry()
>>> registry.register(ScrapeCollector({"answer": Answer()}, version="0.1.0"))
>>> registry.get_sample_value("trainwatch_cpu_count")
42.0
>>> registry.get_sample_value("trainwatch_scrape_collector_success", {"collector": "answer"})
1.0
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from exporter.family import Family
from exporter.metrics import (
    BUILD_INFO,
    SCRAPE_DURATION,
    SCRAPE_SUCCESS,
    SCRAPE_TIMEOUTS,
    SCRAPE_WARNINGS_SUPPRESSED,
    MetricSpec,
)

log = logging.getLogger(__name__)

# One sample of a contract metric: (spec, values of its labels in spec order, value).
Sample = tuple[MetricSpec, Sequence[str], float]
# A failure that changes from scrape to scrape (GPUs timing out, then not) writes at most one
# warning per collector this often; the rest go to debug and are counted.
WARN_EVERY_SECONDS = 60.0

class CollectorError(Exception):
    """The collector's source failed (wholly or in part); the message says what, for the log.

    ``logged`` is True when the source already logged it (NVML's "no GPU" is logged once, at
    startup), so the wrapper keeps it at debug level.
    """

    def __init__(self, message: str, logged: bool = False) -> None:
        super().__init__(message)
        self.logged = logged


class CollectorTimeout(CollectorError):
    """Part of the source did not answer by the scrape's deadline (a hung driver); counted in
    ``trainwatch_scrape_collector_timeouts_total``."""


class Collector(Protocol):
    def collect(self) -> Iterator[Family]: ...


def build_families(samples: Iterable[Sample]) -> list[Family]:
    """Group samples into one fresh family per spec, in the order the specs first appear."""
    rows: dict[MetricSpec, list[tuple[Sequence[str], float]]] = {}
    for spec, labels, value in samples:
        found = rows.get(spec)
        if found is None:
            found = rows[spec] = []
        found.append((labels, value))
    return [Family(spec, found) for spec, found in rows.items()]


def emit(samples: Iterable[Sample], failures: Sequence[str],
         timeouts: Sequence[str] = ()) -> Iterator[Family]:
    """A collector's ending: the families it could read, then ``CollectorTimeout`` if a read
    missed the deadline or ``CollectorError`` if anything failed (the wrapper keeps the
    families and reports success 0)."""
    yield from build_families(samples)
    if timeouts:
        raise CollectorTimeout("; ".join([*timeouts, *failures]))
    if failures:
        raise CollectorError("; ".join(failures))


class Registry:
    """The collectors a scrape runs, in order: prometheus_client's ``CollectorRegistry`` as
    far as the exporter and its tests use it (``register``, ``collect``, ``get_sample_value``),
    without its lock, its copy of the collectors per scrape and its name bookkeeping.

    >>> registry = Registry()
    >>> registry.register(ScrapeCollector({}, version="0.1.0"))
    >>> registry.get_sample_value("trainwatch_exporter_build_info", {"version": "0.1.0"})
    1.0
    """

    def __init__(self) -> None:
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def collect(self) -> Iterator[Family]:
        for collector in self._collectors:
            yield from collector.collect()

    def get_sample_value(self, name: str, labels: Mapping[str, str] | None = None
                         ) -> float | None:
        """The value of one sample, or None (for tests: it runs a whole scrape)."""
        wanted = dict(labels or {})
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and sample.labels == wanted:
                    return sample.value
        return None


class ScrapeCollector:
    """Runs every enabled collector once per scrape, like node_exporter's ``execute()``.

    Each collector is timed; a ``CollectorError`` is logged (once per distinct message, and
    at most one warning per ``WARN_EVERY_SECONDS``, so neither a dead GPU nor a flapping one
    floods the log; the rest go to debug and are counted in
    ``trainwatch_scrape_collector_warnings_suppressed_total``) and reported as success 0, never
    as a failed scrape; a ``CollectorTimeout`` is also counted. Any other exception is a bug and
    propagates to the HTTP layer.
    """

    def __init__(self, collectors: Mapping[str, Collector], version: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._collectors = dict(collectors)
        self._version = version
        self._clock = clock
        self._last_error: dict[str, str] = {}
        self._warned_at: dict[str, float] = {}
        self._warning_shown: set[str] = set()  # its failure was a warning: say it recovered
        # Updated by concurrent scrapes: a lost increment under a race is harmless here.
        self._timeouts = dict.fromkeys(self._collectors, 0)
        self._suppressed = dict.fromkeys(self._collectors, 0)

    def collect(self) -> Iterator[Family]:
        success, duration = Family(SCRAPE_SUCCESS), Family(SCRAPE_DURATION)
        for name, collector in self._collectors.items():
            families: list[Family] = []
            start = time.perf_counter()
            ok = self._run(name, collector, families)
            duration.add_metric((name,), time.perf_counter() - start)
            success.add_metric((name,), 1.0 if ok else 0.0)
            yield from families
        yield success
        yield duration
        for spec, counts in ((SCRAPE_TIMEOUTS, self._timeouts),
                             (SCRAPE_WARNINGS_SUPPRESSED, self._suppressed)):
            family = Family(spec)
            for name, count in counts.items():
                family.add_metric((name,), count)
            yield family
        yield from build_families([(BUILD_INFO, (self._version,), 1.0)])

    def _run(self, name: str, collector: Collector, into: list[Family]) -> bool:
        try:
            # One by one: the families yielded before a CollectorError must be kept.
            for family in collector.collect():
                into.append(family)  # noqa: PERF402
        except CollectorError as err:
            if isinstance(err, CollectorTimeout):
                self._timeouts[name] += 1
            message = str(err)
            level = logging.DEBUG
            if not (err.logged or self._last_error.get(name) == message):
                now = self._clock()
                if now - self._warned_at.get(name, -math.inf) >= WARN_EVERY_SECONDS:
                    self._warned_at[name] = now
                    self._warning_shown.add(name)
                    level = logging.WARNING
                else:
                    self._suppressed[name] += 1
            log.log(level, "collector %s failed: %s", name, message)
            self._last_error[name] = message
            return False
        if self._last_error.pop(name, None) is not None:
            shown = name in self._warning_shown
            self._warning_shown.discard(name)
            log.log(logging.INFO if shown else logging.DEBUG, "collector %s recovered", name)
        return True
