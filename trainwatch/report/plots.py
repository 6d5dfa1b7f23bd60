"""Draw panels with matplotlib as inline SVG whose colours follow the page's light or dark mode.

Why matplotlib's SVG: the file must open anywhere, years later, attached to a ticket or
archived with the run, where scripts may be blocked; static SVG needs no script, stays small
(tens of kB a plot, where Plotly's inlined bundle alone is several MB) and keeps text as text
(searchable, testable).
Axis text, ticks and grid are drawn in placeholder colours that become CSS variables, so one
SVG serves both colour schemes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
from cycler import cycler
from matplotlib.figure import Figure

from trainwatch.cliutil import printable
from trainwatch.report.series import Panel

# Placeholders (never used as real colours) -> the page's CSS variables.
THEME = {"#010203": "var(--fg)", "#020304": "var(--grid)", "#030405": "var(--bg)"}
FG, GRID, BG = THEME
# Tableau 10: each colour reads on white and on near-black.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
STYLE: dict[str, Any] = {
    "svg.fonttype": "none", "font.size": 9,
    "text.color": FG, "axes.labelcolor": FG, "axes.edgecolor": GRID, "xtick.color": FG,
    "ytick.color": FG, "grid.color": GRID, "axes.grid": True, "axes.facecolor": "none",
    "figure.facecolor": "none", "legend.facecolor": BG, "legend.edgecolor": GRID,
    "legend.framealpha": 0.85, "axes.prop_cycle": cycler(color=PALETTE),
    "font.family": ["DejaVu Sans", "sans-serif"],
}
SIZE = (7.2, 2.9)


def _style(key: str) -> Any:
    # The salt names the SVG's clip paths: one per panel keeps ids unique within the page and
    # the same from run to run.
    return {**STYLE, "svg.hashsalt": key}


def _figure() -> tuple[Figure, plt.Axes]:
    fig = Figure(figsize=SIZE)
    # Fixed margins, the legend in the right quarter: constrained layout measures every text
    # twice and doubled the time a report takes.
    fig.subplots_adjust(left=0.1, right=0.74, bottom=0.2, top=0.96)
    ax = fig.add_subplot()
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(short))
    return fig, ax


def short(value: float, _: object = None) -> str:
    """A tick label that fits the fixed margin: ``short(12500)`` -> '12.5k'; ``short(0.25)``
    -> '0.25'."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.4g}{suffix}"
    return f"{value:.4g}"


def _when(seconds: float) -> float:
    """matplotlib's date number of a Unix time."""
    return float(mdates.date2num(datetime.fromtimestamp(seconds, UTC)))


def _times(seconds: Sequence[float]) -> list[float]:
    return [_when(t) for t in seconds]


# Tick steps (seconds) to choose from, and at most this many labels: matplotlib's
# AutoDateLocator gave up on some spans (a warning each) and crowded the labels into one another.
TICK_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
              43200, 86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)
MAX_TICKS = 6


def time_ticks(span: tuple[float, float]) -> tuple[list[int], str]:
    """Tick times (Unix seconds, on round UTC multiples of one step) and their strftime format.

    >>> time_ticks((1000.0, 1300.0))
    ([1020, 1080, 1140, 1200, 1260], '%H:%M')
    >>> time_ticks((0.0, 20.0))[1]
    '%H:%M:%S'
    """
    seconds = max(1e-9, span[1] - span[0])
    step = next((s for s in TICK_STEPS if seconds / s <= MAX_TICKS), TICK_STEPS[-1])
    first = int(-(-span[0] // step)) * step
    ticks = list(range(first, int(span[1]) + 1, step))
    crosses_days = int(span[0] // 86400) != int(span[1] // 86400)
    fmt = ("%m-%d" if step >= 86400 else "%m-%d %H:%M" if crosses_days and step >= 3600
           else "%H:%M" if step >= 60 else "%H:%M:%S")
    return ticks, fmt


def _time_axis(ax: plt.Axes, span: tuple[float, float]) -> None:
    """UTC times of day (with the day when the span crosses days), at most MAX_TICKS of them."""
    ax.xaxis_date(tz=UTC)
    ticks, fmt = time_ticks(span)
    ax.xaxis.set_major_locator(mticker.FixedLocator(_times(ticks)))
    ax.xaxis.set_major_formatter(mdates.DateFormatter(fmt, tz=UTC))
    ax.set_xlim(_when(span[0]), _when(span[1]))
    ax.set_xlabel("time (UTC)")


def panel_svg(panel: Panel, span: tuple[float, float]) -> str:
    """One panel as an ``<svg>`` element (lines, a stack, or a band with its ceilings) over the
    window ``span`` (start, end in Unix seconds), so every panel shares one time axis."""
    with matplotlib.rc_context(_style(panel.spec.key)):
        fig, ax = _figure()
        measured = [s for s in panel.series if not s.reference]
        if panel.spec.stacked:
            grid = sorted({t for s in measured for t, _ in s.points})
            values = [dict(s.points) for s in measured]
            ax.stackplot(_times(grid), *[[v.get(t, 0.0) for t in grid] for v in values],
                         labels=[printable(s.name) for s in measured], alpha=0.9)
            # Shares over a rate window the trial has not filled yet can sum past 100%.
            ax.set_ylim(0, 100)
        else:
            for s in measured:
                ax.plot(_times([t for t, _ in s.points]), [v for _, v in s.points],
                        label=printable(s.name), linewidth=1.4)
        if panel.band is not None:
            b = panel.band
            when = _times(b.times)
            ax.fill_between(when, b.low, b.high, alpha=0.3, color=PALETTE[0], linewidth=0,
                            label=f"min–max of {b.count}")
            ax.plot(when, b.median, color=PALETTE[0], linewidth=1.4, label=f"median of {b.count}")
        for i, s in enumerate(r for r in panel.series if r.reference):
            ax.plot(_times([t for t, _ in s.points]), [v for _, v in s.points],
                    label=printable(s.name), linestyle="--", linewidth=1.2, color=PALETTE[-1 - i % 3])
        ax.set_ylabel(panel.ylabel)
        _time_axis(ax, span)
        if not panel.spec.stacked:
            ax.set_ylim(bottom=0)
        _legend(ax)
        return _svg(fig, panel.heading)


def histogram_svg(title: str, buckets: list[tuple[float, float]]) -> str:
    """Steps per histogram bucket, labelled by each bucket's upper bound."""
    used = [i for i, (_, count) in enumerate(buckets) if count > 0]
    # The buckets the steps fell in, with one empty neighbour each side for context.
    buckets = buckets[max(0, used[0] - 1):used[-1] + 2] if used else buckets
    with matplotlib.rc_context(_style(title)):
        fig, ax = _figure()
        fig.subplots_adjust(bottom=0.3)  # room for the slanted bucket labels
        labels = [f"≤{_seconds(le)}" for le, _ in buckets]
        ax.bar(range(len(buckets)), [c for _, c in buckets], color=PALETTE[0],
               label="steps in the bucket")
        ax.set_xticks(range(len(buckets)), labels, rotation=45, ha="right")
        ax.set_xlabel("step time (s), bucket upper bound")
        ax.set_ylabel("steps (count)")
        ax.grid(axis="x", visible=False)
        _legend(ax)
        return _svg(fig, title)


def _seconds(le: float) -> str:
    return "+Inf" if le == float("inf") else f"{le:g}"


def _legend(ax: plt.Axes) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  ncol=1 if len(handles) <= 12 else 2)


def _svg(fig: Figure, title: str) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Title": printable(title)})
    text = out.getvalue()
    text = text[text.index("<svg"):]  # the XML prolog and DOCTYPE do not belong in HTML
    # Scales with the page instead of the figure's fixed points.
    text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="plot"', text,
                  count=1)
    for placeholder, var in THEME.items():
        text = text.replace(placeholder, var)
    return text
