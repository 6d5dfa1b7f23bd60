"""Run the panels' range queries; many lines become their spread (min, median, max)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from trainwatch.promapi import Labels, PrometheusAPI
from trainwatch.report.panels import PanelSpec, byte_unit
from trainwatch.report.window import Window

# More lines than this (64 ranks, 8 nodes of 8 GPUs) are drawn as one band per panel instead:
# overlapping lines hide one another, a band shows the spread and the median.
MAX_LINES = 8
Points = list[tuple[float, float]]


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

    @property
    def empty(self) -> bool:
        return not self.series and self.band is None


class Legend(dict[str, str]):
    """Labels for str.format_map: a label a series lacks reads '?' instead of raising."""

    def __missing__(self, key: str) -> str:
        return "?"


def fetch(api: PrometheusAPI, spec: PanelSpec, window: Window,
          hosts: dict[str, str]) -> Panel:
    """``hosts``: exporter instance -> node name, for the ``{host}`` in legends."""
    panel = Panel(spec, ylabel=spec.ylabel)
    for line in spec.lines:
        for labels, points in api.query_range(line.expr, window.start, window.end, window.step):
            scaled = [(t, v * line.scale) for t, v in points]
            if spec.drop_zero and not any(v for _, v in scaled):
                continue
            name = line.legend.format_map(_legend(labels, hosts))
            panel.series.append(Series(name, scaled, line.reference))
    panel.series.sort(key=lambda s: (s.reference, s.name))
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
    return found


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
