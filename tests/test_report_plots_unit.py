"""The report's plots (trainwatch.report.plots): tick labels that fit, time ticks on round UTC
steps (each step chosen where it must be and not one sooner), a panel's lines, stack, band and
dashed ceilings each drawn from its own points in its own colour, the step histogram trimmed to
the buckets the steps fell in, and SVG that follows the page's colours and scales with it.

A panel's figures are read from matplotlib's objects (plots._svg replaced by a recorder that
keeps the figure), its text from the SVG itself.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import matplotlib.dates as mdates
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.colors import to_hex

from trainwatch.report import plots
from trainwatch.report.panels import PanelSpec
from trainwatch.report.plots import PALETTE, _when, short, time_ticks
from trainwatch.report.series import Band, Panel, Series

T0 = 1_793_692_332.0  # 2026-11-03 07:52:12 UTC


def texts(svg: str) -> list[tuple[int, str]]:
    """Each <text>'s font size and text."""
    return [(int(size), text) for size, text in
            re.findall(r'<text style="font-size: (\d+)px;[^>]*>([^<]*)</text>', svg)]


class Kept:
    def __init__(self) -> None:
        self.figures: list[tuple[Any, str]] = []

    def svg(self, fig: Any, title: str) -> str:
        self.figures.append((fig, title))
        return "<svg></svg>"

    @property
    def ax(self) -> Any:
        [(fig, _)] = self.figures
        return fig.axes[0]


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Kept:
    k = Kept()
    monkeypatch.setattr(plots, "_svg", k.svg)
    return k


# --- tick labels and times -----------------------------------------------------------------

@pytest.mark.parametrize(("value", "label"), [
    (0.0, "0"), (0.25, "0.25"), (999.9, "999.9"), (1000.0, "1k"), (-1000.0, "-1k"),
    (12_500.0, "12.5k"), (999_999.0, "1000k"), (1_000_000.0, "1M"), (2_345_678.0, "2.346M"),
    (-3.5e6, "-3.5M"), (999_999_999.0, "1000M"), (1e9, "1G"), (7.25e10, "72.5G"),
    (123.456789, "123.5")])
def test_a_tick_label_is_short_in_thousands_millions_billions(value: float, label: str) -> None:
    assert short(value) == label and short(value, None) == label


def test_a_unix_time_is_matplotlibs_day_number_in_utc() -> None:
    assert _when(0.0) == mdates.date2num(datetime(1970, 1, 1, tzinfo=UTC))
    assert _when(T0 + 86_400.0) - _when(T0) == pytest.approx(1.0)
    assert _when(T0 + 3_600.0) - _when(T0) == pytest.approx(1 / 24)
    assert mdates.num2date(_when(T0)) == datetime.fromtimestamp(T0, UTC)
    assert plots._times([0.0, 86_400.0]) == [_when(0.0), _when(86_400.0)]


# (span in seconds, the tick step a reader expects): the first round step that gives at most
# six labels.
STEPS = [(6, 1), (7, 2), (12, 2), (13, 5), (30, 5), (31, 10), (60, 10), (61, 15), (90, 15),
         (91, 30), (180, 30), (181, 60), (360, 60), (361, 120), (720, 120), (721, 300),
         (1_800, 300), (1_801, 600), (3_600, 600), (3_601, 900), (5_400, 900), (5_401, 1_800),
         (10_800, 1_800), (10_801, 3_600), (21_600, 3_600), (21_601, 7_200), (43_200, 7_200),
         (43_201, 10_800), (64_800, 10_800), (64_801, 21_600), (129_600, 21_600),
         (129_601, 43_200), (259_200, 43_200), (259_201, 86_400), (518_400, 86_400),
         (518_401, 172_800), (1_036_800, 172_800), (1_036_801, 604_800), (3_628_800, 604_800),
         (3_628_801, 1_209_600), (7_257_600, 1_209_600), (7_257_601, 2_419_200),
         (14_515_200, 2_419_200), (40_000_000, 2_419_200)]


@pytest.mark.parametrize(("seconds", "step"), STEPS)
def test_ticks_are_the_first_round_step_with_six_labels_at_most(seconds: int, step: int) -> None:
    start = 1_000_000_000.0 - 1_000_000_000.0 % 2_419_200  # a multiple of every step
    ticks, _ = time_ticks((start, start + seconds))
    assert ticks[0] == start and ticks[1] - ticks[0] == step
    assert ticks == list(range(int(start), int(start + seconds) + 1, step))
    # Both ends on a tick: six steps, seven labels at most (but past six of the longest step).
    assert 1 < len(ticks) and (len(ticks) <= 7 or seconds > 6 * STEPS[-1][1])


def test_ticks_start_at_the_first_round_time_in_the_span_and_end_at_its_end() -> None:
    # 07:52:12 to 08:52:12: every 10 minutes from 08:00 (not 07:50, before the span).
    ticks, fmt = time_ticks((T0, T0 + 3_600.0))
    assert ticks == [1_793_692_800 + 600 * i for i in range(6)] and fmt == "%H:%M"
    assert all(T0 <= t <= T0 + 3_600.0 for t in ticks)
    # A span that ends on a round time has that tick; one that ends a second before has not.
    assert time_ticks((1_793_692_800.5, 1_793_696_400.0))[0][-1] == 1_793_696_400
    assert time_ticks((1_793_692_800.5, 1_793_696_399.0))[0][-1] == 1_793_695_800
    assert time_ticks((1_793_692_800.0, 1_793_696_400.0))[0][0] == 1_793_692_800
    assert time_ticks((1e9, 1e9))[0] == [1_000_000_000]  # no span: one tick, never none


@pytest.mark.parametrize(("start", "seconds", "fmt"), [
    (T0, 30.0, "%H:%M:%S"),  # 5 s steps
    (T0, 59.0 * 6, "%H:%M"),  # a minute: no seconds
    (T0, 3_600.0 * 6, "%H:%M"),  # hours within one day (07:52 to 13:52)
    (T0, 3_600.0 * 17, "%m-%d %H:%M"),  # hours across midnight: the day too
    (T0, 1_800.0 * 6, "%H:%M"),  # half hours within a day
    (T0 + 15 * 3600, 1_800.0 * 6, "%H:%M"),  # half hours across midnight: still no day
    (T0, 86_400.0 * 6, "%m-%d"),  # days: the day alone
    (T0, 43_200.0 * 6, "%m-%d %H:%M"),  # half days (across days)
])
def test_the_tick_format_names_the_day_only_across_days_or_for_days(
        start: float, seconds: float, fmt: str) -> None:
    assert time_ticks((start, start + seconds))[1] == fmt


def test_the_day_changes_at_utc_midnight() -> None:
    midnight = 1_793_664_000.0  # 2026-11-03 00:00:00 UTC
    assert time_ticks((midnight - 7_200.0, midnight - 1.0 + 14_400.0))[1] == "%m-%d %H:%M"
    assert time_ticks((midnight, midnight + 21_599.0))[1] == "%H:%M"  # 00:00 to 05:59:59
    assert time_ticks((midnight - 21_600.0, midnight - 1.0))[1] == "%H:%M"  # 18:00 to 23:59:59


# --- panels ----------------------------------------------------------------------------------

def panel(series: list[Series], stacked: bool = False, band: Band | None = None,
          ylabel: str = "steps/s") -> Panel:
    spec = PanelSpec("steps-t", "Steps per second", ylabel, (), stacked=stacked)
    return Panel(spec, series, band=band, ylabel=ylabel)


def test_lines_are_drawn_from_their_points_and_ceilings_dashed_in_their_own_colours(
        kept: Kept) -> None:
    measured = [Series("rank 0", [(T0, 3.25), (T0 + 60, 4.5)]),
                Series("rank\x1b1", [(T0 + 30, 2.75)])]
    refs = [Series(f"limit {i}", [(T0, 10.0 + i), (T0 + 120, 10.0 + i)], reference=True)
            for i in range(4)]
    span = (T0 - 17.0, T0 + 301.0)
    plots.panel_svg(panel([refs[0], *measured, *refs[1:]]), span)
    ax = kept.ax
    lines = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()),
              line.get_linestyle()) for line in ax.lines]
    assert lines == [
        ("rank 0", [_when(T0), _when(T0 + 60)], [3.25, 4.5], "-"),
        ("rank\\x1b1", [_when(T0 + 30)], [2.75], "-"),  # a name's escape written out
        *[(f"limit {i}", [_when(T0), _when(T0 + 120)], [10.0 + i] * 2, "--") for i in range(4)]]
    # The ceilings in the palette's last colours, from the end, round again after three.
    assert [to_hex(line.get_color()) for line in ax.lines[2:]] == [
        PALETTE[-1], PALETTE[-2], PALETTE[-3], PALETTE[-1]]
    assert [to_hex(line.get_color()) for line in ax.lines[:2]] == list(PALETTE[:2])
    # Ceilings are thinner than the measured lines.
    assert [line.get_linewidth() for line in ax.lines] == [1.4, 1.4, 1.2, 1.2, 1.2, 1.2]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 13.0
    assert ax.get_ylabel() == "steps/s" and ax.get_xlabel() == "time (UTC)"
    assert ax.get_xlim() == pytest.approx((_when(span[0]), _when(span[1])))
    ticks, fmt = time_ticks(span)
    assert list(ax.get_xticks()) == pytest.approx(plots._times(ticks))
    label = ax.xaxis.get_major_formatter()
    assert [label(x) for x in ax.get_xticks()] == [
        datetime.fromtimestamp(t, UTC).strftime(fmt) for t in ticks]
    assert label(_when(1_793_692_800.0)) == "08:00"  # in UTC, whatever the local zone
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "rank 0", "rank\\x1b1", "limit 0", "limit 1", "limit 2", "limit 3"]
    assert len(ax.collections) == 0


def test_shares_are_stacked_on_a_0_to_100_axis_a_missing_point_as_zero(kept: Kept) -> None:
    series = [Series("forward", [(T0, 40.0), (T0 + 60, 35.5), (T0 + 120, 30.0)]),
              Series("data", [(T0 + 60, 22.25)]),
              Series("limit", [(T0, 90.0)], reference=True)]
    plots.panel_svg(panel(series, stacked=True, ylabel="share (%)"), (T0, T0 + 120))
    ax = kept.ax
    assert [c.get_label() for c in ax.collections] == ["forward", "data"]
    top = {round(x, 6): y for x, y in ax.collections[1].get_paths()[0].vertices}
    assert top[round(_when(T0), 6)] == pytest.approx(40.0)  # data 0 there
    assert max(top.values()) == pytest.approx(57.75)  # 35.5 + 22.25
    assert ax.get_ylim() == (0, 100)
    assert [line.get_label() for line in ax.lines] == ["limit"]  # the ceiling not stacked
    assert [c.get_alpha() for c in ax.collections] == [0.9, 0.9]


def test_many_lines_are_a_band_of_min_and_max_around_the_median(kept: Kept) -> None:
    band = Band("steps", 64, [T0, T0 + 60], [1.5, 2.0], [2.5, 3.25], [4.0, 4.75])
    plots.panel_svg(panel([], band=band), (T0, T0 + 60))
    ax = kept.ax
    [fill] = ax.collections
    assert fill.get_label() == "min–max of 64" and fill.get_alpha() == 0.3
    assert list(fill.get_linewidth()) == [0]  # no edge around the band
    assert to_hex(fill.get_facecolor()[0]) == PALETTE[0]
    ys = [y for _, y in fill.get_paths()[0].vertices]
    assert min(ys) == pytest.approx(1.5) and max(ys) == pytest.approx(4.75)
    [median] = ax.lines
    assert (median.get_label(), list(median.get_ydata())) == ("median of 64", [2.5, 3.25])
    assert to_hex(median.get_color()) == PALETTE[0] and median.get_linewidth() == 1.4
    assert ax.get_ylim()[0] == 0


def test_a_panel_is_svg_in_the_pages_colours_with_its_text_as_text() -> None:
    series = [Series("rank 0", [(T0, 1250.0), (T0 + 60, 2500.0)])]
    svg = plots.panel_svg(panel(series), (T0, T0 + 300))
    assert svg.startswith("<svg") and "<?xml" not in svg and "<!DOCTYPE" not in svg
    head = svg[:svg.index(">")]
    assert 'class="plot"' in head and " width=" not in head and " height=" not in head
    assert 'viewBox="0 0 518.4 208.8"' in head  # 7.2 x 2.9 inches at 72 points
    assert "<title>Steps per second</title>" in svg
    assert "<dc:date>" not in svg  # no build time: a report rebuilt from the same data is the same
    assert not any(placeholder in svg for placeholder in plots.THEME)
    assert all(var in svg for var in ("var(--fg)", "var(--grid)", "var(--bg)"))
    assert "opacity: 0.85" in svg  # the legend's box lets the lines show through
    got = texts(svg)
    # Ticks and labels at 9 px, the legend at 8; y ticks in thousands, times in UTC.
    assert (8, "rank 0") in got and (9, "steps/s") in got and (9, "time (UTC)") in got
    assert (9, "2.5k") in got and (9, "07:55") in got
    assert {size for size, text in got if text != "rank 0"} == {9}
    # One panel's clip paths are named after it: two panels on one page never share an id.
    other = plots.panel_svg(Panel(PanelSpec("gpu-util", "U", "u", ()), series, ylabel="u"),
                            (T0, T0 + 300))
    ids = set(re.findall(r'<clipPath id="([^"]+)"', svg))
    assert ids and ids.isdisjoint(re.findall(r'<clipPath id="([^"]+)"', other))
    assert ids == set(re.findall(r'<clipPath id="([^"]+)"', plots.panel_svg(
        panel(series), (T0, T0 + 300))))


def test_the_plot_area_leaves_the_right_quarter_to_the_legend(kept: Kept) -> None:
    plots.panel_svg(panel([Series("rank 0", [(T0, 1.0)])]), (T0, T0 + 60))
    box = kept.ax.get_position()
    assert 0 < box.x0 < box.x1 <= 0.75 and 0 < box.y0 < box.y1 <= 1
    assert box.y0 >= 0.15  # room for the time labels under it
    # The legend hangs from the plot's top right corner, just outside it, in the figure.
    figure = kept.figures[0][0].bbox
    anchor = kept.ax.get_legend().get_bbox_to_anchor()
    assert figure.width * box.x1 <= anchor.x0 <= figure.width * 0.76
    assert anchor.y0 == pytest.approx(kept.ax.bbox.y1)


@pytest.mark.parametrize(("count", "columns"), [(1, 1), (12, 1), (13, 2), (20, 2)])
def test_a_long_legend_takes_two_columns(kept: Kept, count: int, columns: int) -> None:
    series = [Series(f"gpu {i}", [(T0, float(i))]) for i in range(count)]
    plots.panel_svg(panel(series), (T0, T0 + 60))
    legend = kept.ax.get_legend()
    assert legend._ncols == columns and len(legend.get_texts()) == count


def test_a_panel_with_nothing_to_draw_has_no_legend(kept: Kept) -> None:
    plots.panel_svg(panel([]), (T0, T0 + 60))
    assert kept.ax.get_legend() is None


# --- the step histogram ----------------------------------------------------------------------

def test_the_histogram_shows_the_buckets_the_steps_fell_in_and_one_empty_each_side(
        kept: Kept) -> None:
    buckets = [(0.005, 0.0), (0.01, 0.0), (0.025, 0.0), (0.05, 7.0), (0.1, 0.0), (0.25, 19.0),
               (0.5, 0.0), (1.0, 0.0), (float("inf"), 0.0)]
    plots.histogram_svg("Step-time distribution t-19", buckets)
    [(fig, title)] = kept.figures
    ax = fig.axes[0]
    assert title == "Step-time distribution t-19"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["≤0.025", "≤0.05", "≤0.1", "≤0.25",
                                                            "≤0.5"]
    assert [p.get_height() for p in ax.patches] == [0.0, 7.0, 0.0, 19.0, 0.0]
    assert all(t.get_rotation() == 45 for t in ax.get_xticklabels())
    assert ax.get_xlabel() == "step time (s), bucket upper bound"
    assert ax.get_ylabel() == "steps (count)"
    assert fig.subplotpars.bottom > 0.2  # more room than a panel: the labels slant
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["steps in the bucket"]
    assert not any(line.get_visible() for line in ax.get_xgridlines())
    assert any(line.get_visible() for line in ax.get_ygridlines())


@pytest.mark.parametrize(("counts", "shown"), [
    ([3.0, 0.0, 0.0, 0.0], ["≤0.1", "≤0.2"]),  # the first bucket: nothing before it
    ([0.0, 0.0, 0.0, 5.0], ["≤0.3", "≤+Inf"]),  # the last: nothing after it
    ([0.0, 2.0, 0.0, 0.0], ["≤0.1", "≤0.2", "≤0.3"]),
    ([0.0, 0.0, 0.0, 0.0], ["≤0.1", "≤0.2", "≤0.3", "≤+Inf"]),  # no step: every bucket
])
def test_the_histogram_at_its_ends(kept: Kept, counts: list[float], shown: list[str]) -> None:
    bounds = [0.1, 0.2, 0.3, float("inf")]
    plots.histogram_svg("h", list(zip(bounds, counts)))
    assert [t.get_text() for t in kept.ax.get_xticklabels()] == shown


def test_a_histogram_is_svg_in_the_pages_colours() -> None:
    svg = plots.histogram_svg("Step-time distribution t-19", [(0.05, 7.0), (0.1, 11.0)])
    assert svg.startswith("<svg") and "var(--fg)" in svg and "#010203" not in svg
    got = texts(svg)
    assert (9, "≤0.05") in got and (9, "≤0.1") in got and (8, "steps in the bucket") in got
    assert to_hex(PALETTE[0]) in svg.lower()


# --- the edges of time_ticks: a tick on the span's last second, the day format's thresholds,
# and days before 1970 ------------------------------------------------------------------------

@pytest.mark.parametrize(("span", "ticks"), [
    ((1_001.0, 1_005.0), [1_001, 1_002, 1_003, 1_004, 1_005]),  # 1 s steps, an odd end
    ((1_000.0, 1_005.0), [1_000, 1_001, 1_002, 1_003, 1_004, 1_005]),
    ((995.0, 1_025.0), [995, 1_000, 1_005, 1_010, 1_015, 1_020, 1_025]),  # 5 s, ends on 1025
    ((990.5, 1_020.0), [995, 1_000, 1_005, 1_010, 1_015, 1_020]),
    ((1_004.5, 1_005.0), [1_005]),  # under a second: the one whole second in it
])
def test_a_span_that_ends_on_a_tick_ends_with_it_odd_or_even(
        span: tuple[float, float], ticks: list[int]) -> None:
    assert time_ticks(span)[0] == ticks


@pytest.mark.parametrize(("seconds", "fmt"), [
    (259_200, "%m-%d %H:%M"),  # 12 h steps: the last with a time of day
    (259_201, "%m-%d"),  # 1 day
    (518_401, "%m-%d"),  # 2 days
    (1_036_801, "%m-%d"),  # a week
    (3_628_801, "%m-%d"),  # 2 weeks
    (7_257_601, "%m-%d"),  # 4 weeks
    (40_000_000, "%m-%d"),  # past six of the longest step
])
def test_steps_of_a_day_or_more_show_the_day_alone(seconds: int, fmt: str) -> None:
    ticks, got = time_ticks((T0, T0 + seconds))
    assert got == fmt
    # The labels say which day each tick is on, and no two are alike.
    labels = [datetime.fromtimestamp(t, UTC).strftime(got) for t in ticks]
    assert len(set(labels)) == len(labels)


@pytest.mark.parametrize(("span", "fmt"), [
    ((-21_600.0, -1.0), "%H:%M"),  # 1969-12-31 18:00 to 23:59:59: one day
    ((-86_400.0 + 1.0, -86_400.0 + 21_601.0), "%H:%M"),  # 1969-12-31 00:00:01 to 06:00:01
    ((-7_200.0, 14_400.0), "%m-%d %H:%M"),  # 22:00 on 12-31 to 04:00 on 01-01
    ((-100_000.0, -80_000.0), "%m-%d %H:%M"),  # 12-29 to 12-30
])
def test_before_1970_a_day_still_ends_at_utc_midnight(span: tuple[float, float], fmt: str
                                                      ) -> None:
    assert time_ticks(span)[1] == fmt


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@given(start=st.integers(-3_000_000_000, 4_000_000_000), fraction=st.floats(0, 0.999),
       seconds=st.integers(10_802, 259_199))
def test_hourly_ticks_name_the_day_exactly_when_the_span_crosses_utc_midnight(
        start: int, fraction: float, seconds: int) -> None:
    # Spans of just over 3 h to just under 3 days (a whole second off each end, whatever the
    # fraction) tick every 1, 2, 3, 6 or 12 h: the day is named when the two
    # ends' UTC dates differ (the dates from datetime, before 1970 as after).
    first = start + fraction
    last = first + seconds
    days = {(EPOCH + timedelta(seconds=t)).date() for t in (first, last)}
    assert time_ticks((first, last))[1] == ("%m-%d %H:%M" if len(days) == 2 else "%H:%M")


# --- the histogram's buckets: a bucket is one the steps fell in when its count is above 0 ------

@pytest.mark.parametrize(("counts", "shown"), [
    ([0.0, 0.0, 1.0, 0.0, 0.0, 0.0], ["≤0.2", "≤0.3", "≤0.4"]),  # one step
    ([0.0, 0.0, 0.0, 0.5, 0.0, 0.0], ["≤0.3", "≤0.4", "≤0.5"]),  # increase()'s half a step
    # A count below 0 (rounding in a de-cumulated histogram) is no bucket steps fell in.
    ([-1e-9, 0.0, 0.0, 4.0, 0.0, 0.0], ["≤0.3", "≤0.4", "≤0.5"]),
    ([0.0, 0.0, 4.0, 0.0, 0.0, -0.25], ["≤0.2", "≤0.3", "≤0.4"]),
])
def test_a_bucket_is_shown_for_any_steps_in_it_and_never_for_less_than_none(
        kept: Kept, counts: list[float], shown: list[str]) -> None:
    bounds = [0.1, 0.2, 0.3, 0.4, 0.5, float("inf")]
    plots.histogram_svg("h", list(zip(bounds, counts)))
    assert [t.get_text() for t in kept.ax.get_xticklabels()] == shown


@pytest.mark.parametrize(("seconds", "fmt"), [
    (180.0, "%H:%M:%S"),  # 30 s steps: the seconds shown
    (181.0, "%H:%M"),  # 1 min steps: none
    (10_800.0, "%H:%M"),  # 30 min steps across midnight: no day
    (10_801.0, "%m-%d %H:%M"),  # 1 h steps across midnight: the day
])
def test_each_format_threshold_from_both_sides(seconds: float, fmt: str) -> None:
    midnight = 1_793_664_000.0  # 2026-11-03 00:00:00 UTC
    start = midnight - 90.0 if seconds < 3_600 else midnight - 5_400.0
    assert time_ticks((start, start + seconds))[1] == fmt


def test_a_panel_draws_only_in_the_pages_colours_and_its_palette() -> None:
    """Text, ticks, spines, grid and backgrounds all take the page's theme (light or dark):
    no colour of matplotlib's own (black text, white figure) is left in the SVG."""
    series = [Series("rank 0", [(T0, 1250.0), (T0 + 60, 2500.0)])]
    svg = plots.panel_svg(panel(series), (T0, T0 + 300))
    used = {value.strip() for _, value in re.findall(r'(fill|stroke): ?([^;"]+)', svg)}
    used |= set(re.findall(r'(?:fill|stroke)="([^"]+)"', svg))
    assert {"var(--fg)", "var(--grid)", "var(--bg)"} <= used
    assert used - {"none", *plots.THEME.values()} <= set(plots.PALETTE), used
    assert not re.search(r"#(000000|ffffff)\b", svg, re.IGNORECASE)
    # A text without a fill is drawn black: every one, and an empty panel's note, has the page's.
    empty = plots.panel_svg(panel([]), (T0, T0 + 300))
    styles = re.findall(r'<text style="([^"]*)"', svg + empty)
    assert len(styles) > 5 and all("fill: var(--fg)" in st for st in styles), styles
