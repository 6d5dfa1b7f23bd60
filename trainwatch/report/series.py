"""Run the panels' range queries; many lines become their spread (min, median, max).

A line with a raw form (:class:`trainwatch.report.panels.Line`) is read both ways, and the
recorded series is drawn only where it covers the window as well as the raw series do: a trial
recorded under other rules (another window, rules deployed after it ran) is drawn from what it
pushed instead of "no data".
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from trainwatch.contract.records import BUSY_SOURCES
from trainwatch.promapi import Labels, PrometheusAPI
from trainwatch.report.panels import Line, PanelSpec, byte_unit
from trainwatch.report.window import Window

# More lines than this (64 ranks, 8 nodes of 8 GPUs) are drawn as one band per panel instead:
# overlapping lines hide one another, a band shows the spread and the median.
MAX_LINES = 8
Points = list[tuple[float, float]]
Rows = list[tuple[Labels, Points]]
RECORDED, RAW = "recorded", "raw"
# The recorded series are drawn when they hold at least this share of the raw series' points,
# less a few points a series (the rules start and end a series an evaluation later than the
# raw rate does).
COVERED, SLACK = 0.95, 3


@dataclass
class Series:
    name: str
    points: Points
    reference: bool = False


@dataclass
class Band:
    """min/median/max across ``count`` lines at each instant."""

    name: str
    count: int
    times: list[float]
    low: list[float]
    median: list[float]
    high: list[float]


@dataclass
class Panel:
    """A panel's data, ready to draw; ``note`` says why it is empty."""

    spec: PanelSpec
    series: list[Series] = field(default_factory=list)
    band: Band | None = None
    note: str | None = None
    ylabel: str = ""
    source: str | None = None  # RECORDED or RAW for a panel of recorded figures
    title: str | None = None  # the spec's title with what its series say (the busy source)

    @property
    def heading(self) -> str:
        return self.title or self.spec.title

    @property
    def empty(self) -> bool:
        return not self.series and self.band is None


class Legend(dict[str, str]):
    """Labels for str.format_map: a label a series lacks reads '?' instead of raising."""

    def __missing__(self, key: str) -> str:
        return "?"


def read(api: PrometheusAPI, spec: PanelSpec, window: Window, force: str | None = None
         ) -> tuple[list[tuple[Line, Rows]], str | None]:
    """Each line's series, and where the panel's recorded figures came from: RECORDED when
    every recorded line covers the window as well as its raw form (or ``force``)."""

    def rows(expr: str) -> Rows:
        return api.query_range(expr, window.start, window.end, window.step)

    recorded = [(line, rows(line.expr) if force != RAW or line.raw is None else [])
                for line in spec.lines]
    if not any(line.raw for line in spec.lines) or force == RECORDED:
        return recorded, RECORDED if force == RECORDED else None
    raw = [(line, rows(line.raw) if line.raw else found) for line, found in recorded]
    covered = force != RAW and all(
        _count(found) >= COVERED * _count(alternative) - SLACK * len(alternative)
        for (line, found), (_, alternative) in zip(recorded, raw) if line.raw)
    return (recorded, RECORDED) if covered else (raw, RAW)


def _count(rows: Rows) -> int:
    return sum(len(points) for _, points in rows)


def fetch(api: PrometheusAPI, spec: PanelSpec, window: Window, hosts: dict[str, str],
          force: str | None = None) -> Panel:
    """``hosts``: exporter instance -> node name, for the ``{host}`` in legends; ``force``:
    RECORDED or RAW to read recorded lines one way only. A run's first rate window needs no
    patch: the rules read a run younger than the window over its own age
    (trainwatch.contract.figures), recorded and raw alike."""
    panel = Panel(spec, ylabel=spec.ylabel)
    lines, panel.source = read(api, spec, window, force)
    sources: set[str] = set()
    for line, found in lines:
        for labels, points in found:
            sources.add(busy_source(labels))
            scaled = [(t, v * line.scale) for t, v in points]
            if spec.drop_zero and not any(v for _, v in scaled):
                continue
            name = line.legend.format_map(_legend(labels, hosts))
            panel.series.append(Series(name, scaled, line.reference))
    panel.series.sort(key=lambda s: (s.reference, s.name))
    if spec.title_names_source and panel.series:
        panel.title = f"{spec.title}: {' and '.join(sorted(sources))}"
    if spec.byte_rate:
        unit, size = byte_unit(max((v for s in panel.series for _, v in s.points), default=0.0))
        panel.ylabel = spec.ylabel.format(unit=unit)
        for s in panel.series:
            s.points = [(t, v / size) for t, v in s.points]
    measured = [s for s in panel.series if not s.reference]
    if len(measured) > MAX_LINES and not spec.stacked:
        panel.band = spread(measured)
        # One ceiling is enough to read against a band: the lowest.
        refs = [s for s in panel.series if s.reference]
        panel.series = sorted(refs, key=lambda s: min(v for _, v in s.points))[:1]
    if panel.empty:
        panel.note = spec.when_empty
    return panel


def _legend(labels: Labels, hosts: dict[str, str]) -> Legend:
    found = Legend(labels)
    found["host"] = hosts.get(labels.get("instance", ""), labels.get("instance", "?"))
    found["busy_source"] = busy_source(labels)
    return found


def busy_source(labels: Labels) -> str:
    """What the GPU-busy rule measured for this series, in words (its ``source`` label).

    >>> busy_source({"source": "sm_active"}), busy_source({"source": "utilization"})
    ('SM activity (NVML GPM)', 'NVML utilization (any kernel running)')
    """
    source = labels.get("source", "?")
    return BUSY_SOURCES.get(source, source)


def spread(lines: list[Series]) -> Band:
    """The band of ``lines``: at each instant where any has a value, their min, median, max.

    >>> b = spread([Series("a", [(0, 1.0), (1, 2.0)]), Series("b", [(0, 3.0)])])
    >>> b.times, b.low, b.median, b.high
    ([0, 1], [1.0, 2.0], [2.0, 2.0], [3.0, 2.0])
    """
    at: dict[float, list[float]] = defaultdict(list)
    for line in lines:
        for t, v in line.points:
            at[t].append(v)
    times = sorted(at)
    return Band(f"{len(lines)} series", len(lines), times, [min(at[t]) for t in times],
                [statistics.median(at[t]) for t in times], [max(at[t]) for t in times])
