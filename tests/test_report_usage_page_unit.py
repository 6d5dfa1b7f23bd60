"""`trainwatch report --usage`'s page (trainwatch.report.usage_page) without a Prometheus: the
range queries' step and PromQL, what collect keeps of their answers, each table cell's figure
(hours and the exact seconds behind them), the causes listed (and those left out), the owners
cut at usage's limit, the plots' lines (stacked where they must be, each its points), and the
page's parts in order. tests/test_report_usage.py runs the whole page against promtool's
evaluated records.

A fake API answers collect's questions at the Prometheus boundary (as
tests/test_report_collect_unit.py's does); the plots' figures are read from matplotlib's own
objects before they become SVG.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwatch import usage
from trainwatch.contract import remedies
from trainwatch.contract.records import IDLE_CAUSES, RecordNames
from trainwatch.report import usage_page
from trainwatch.report.usage_page import MAX_POINTS, UsageDoc, step_for
from trainwatch.usage import Group, Outside, Owner, Uninstrumented

END = 1_793_692_332.0  # 2026-11-03 07:52:12 UTC
N = RecordNames("5m")


# --- the range queries ---------------------------------------------------------------------

@given(st.floats(min_value=1.0, max_value=40 * 86400.0))
def test_the_step_is_whole_minutes_and_the_fewest_that_keep_a_line_short(since: float) -> None:
    step = step_for(since)
    assert step % 60 == 0 and step >= 60
    assert since / step <= MAX_POINTS  # at most MAX_POINTS points a line
    assert step == 60 or since / (step - 60) > MAX_POINTS  # a minute less would be too many


@pytest.mark.parametrize(("since", "step"), [
    (1.0, 60), (60.0, 60), (30_000.0, 60), (30_001.0, 120), (60_000.0, 120), (60_001.0, 180),
    (7 * 86400.0, 1260)])
def test_the_step_at_each_boundary(since: float, step: int) -> None:
    assert step_for(since) == step


def test_the_plots_read_the_fleets_records_summed_over_each_step() -> None:
    wasted, held, busy = usage_page.plotted(N)
    assert (wasted, held, busy) == (N.fleet(N.gpu_seconds_idle), N.fleet(N.gpu_seconds_held),
                                    N.fleet(N.gpu_seconds_busy))
    asked = usage_page.over_time(N, 1260.0)
    assert asked == {
        "wasted": f"sum by (cause) (sum_over_time({wasted}[1260s])) / 1260",
        "held": f"sum(sum_over_time({held}[1260s])) / 1260",
        "busy": f"sum(sum_over_time({busy}[1260s])) / 1260"}


class FakeAPI:
    """What collect asks: the retention, the rules (all of usage's loaded), usage's instant
    queries (no group) and the plots' range queries, answered from ``ranges`` by expression;
    every range query is logged."""

    url = "http://prom:9090"

    def __init__(self, ranges: dict[str, Any], retention: str = "10d") -> None:
        self.ranges, self.retention = ranges, retention
        self.log: list[tuple[str, float, float, float]] = []

    def get(self, path: str) -> Any:
        assert path == "status/runtimeinfo"
        return {"storageRetention": self.retention}

    def rules(self) -> list[dict[str, str]]:
        return [{"type": "recording", "name": name} for name in usage.required(N)]

    def label_values(self, label: str, **params: str) -> list[str]:
        return []

    def query(self, expr: str, kind: Any = None) -> list[Any]:
        return []

    def query_range(self, expr: str, start: float, end: float, step: float,
                    kind: Any = None) -> Any:
        self.log.append((expr, start, end, step))
        return self.ranges.get(expr, [])


def test_collect_keeps_the_idle_causes_it_knows_and_the_one_held_and_busy_line() -> None:
    asked = usage_page.over_time(N, 120.0)
    data = [(1_000.0, 1.5), (1_120.0, 2.25)]
    straggler = [(1_000.0, 0.75)]
    held, busy = [(1_000.0, 3.0), (1_120.0, 4.0)], [(1_000.0, 1.25)]
    api = FakeAPI({asked["wasted"]: [({"cause": "data"}, data),
                                     ({"cause": "cosmic_rays"}, [(1_000.0, 9.0)]),
                                     ({}, [(1_000.0, 8.0)]),
                                     ({"cause": "straggler"}, straggler)],
                   asked["held"]: [({}, held)], asked["busy"]: [({}, busy)]})
    before = time.time()
    doc = usage_page.collect(api, "namespace", 43_200.0)  # 12 h: a 2-minute step
    after = time.time()
    assert (doc.by, doc.since, doc.step, doc.prometheus) == ("namespace", 43_200.0, 120, api.url)
    assert before <= doc.end <= after and doc.start == doc.end - 43_200.0
    assert doc.wasted == {"data": data, "straggler": straggler}
    assert (doc.held, doc.busy) == (held, busy)
    assert doc.groups == [] and doc.outside == Outside()
    assert [(expr, step) for expr, _, _, step in api.log] == [
        (asked["wasted"], 120), (asked["held"], 120), (asked["busy"], 120)]
    assert all((s, e) == (doc.start, doc.end) for _, s, e, _ in api.log)


def test_collect_without_answers_has_empty_lines_and_reads_the_retention_as_its_range() -> None:
    api = FakeAPI({}, retention="3d")
    doc = usage_page.collect(api, "user", None)  # 7 days asked, 3 kept
    assert doc.since == 3 * 86400.0 and doc.step == step_for(3 * 86400.0) == 540
    assert (doc.wasted, doc.held, doc.busy) == ({}, [], [])
    assert {t for *_, t in api.log} == {540}


# --- the table -----------------------------------------------------------------------------

def group(name: str, held: float, busy: float, **wasted: float) -> Group:
    g = Group(name, held=held, busy=busy)
    g.wasted.update(wasted)
    return g


def cells(row: str) -> list[tuple[str, str, str]]:
    """(tag, attributes, text) of each cell of one row."""
    return re.findall(r"<(td|th)([^>]*)>(.*?)</\1>", row)


def test_a_row_shows_each_figure_in_hours_with_its_seconds_and_shares() -> None:
    g = group("team-a", held=97_200.0, busy=61_236.0, data=22_716.0, exchange=13_248.0)
    g.low_mfu, g.model, g.held_mfu = 1_800.0, 23_328.0, 64_800.0  # MFU 36%
    g.top = ("exp-a", "t-19", 18_000.0)
    row = usage_page._row(g)
    assert row.startswith('<tr data-group="team-a">')
    got = cells(row)
    assert got[0] == ("td", "", "team-a")
    assert got[1] == ("td", ' class="num" data-held="97200.0"', "27.0")
    assert got[2] == ("td", ' class="num" data-busy="61236.0"', "17.0 (63%)")
    assert got[3] == ("td", ' class="num" data-wasted="35964.0"', "9.99 (37%)")
    assert [c[1:] for c in got[4:9]] == [
        (' class="num" data-wasted-data="22716.0"', "6.31"),
        (' class="num" data-wasted-host-to-device="0.0"', "0.000"),
        (' class="num" data-wasted-exchange="13248.0"', "3.68"),
        (' class="num" data-wasted-straggler="0.0"', "0.000"),
        (' class="num" data-wasted-other="0.0"', "0.000")]
    assert got[9] == ("td", ' class="num" data-low-mfu="1800.0"', "0.50")
    assert got[10] == ("td", ' class="num" data-mfu="0.36"', "36%")
    top = ' class="top" data-top-experiment="exp-a" data-top-trial="t-19" data-top-wasted="18000.0"'
    assert got[11] == ("td", top, "exp-a/t-19 (5.00)")
    assert len(got) == 12


def test_a_row_without_gpu_hours_mfu_or_top_shows_dashes_and_the_total_row_is_a_heading(
) -> None:
    row = usage_page._row(Group("total"), total=True)
    assert row.startswith('<tr data-group="total" class="total"><th>total</th>')
    got = cells(row)
    assert got[2][2] == "0.000 (-)" and got[3][2] == "0.000 (-)"  # no held: no share
    assert got[10] == ("td", ' class="num" data-mfu=""', "-")
    assert got[11] == ("td", ' class="top"', "-")
    assert 'class="total"' not in usage_page._row(Group("total"))


def test_the_table_lists_the_groups_in_order_then_their_total() -> None:
    a = group("ns-b", held=7_200.0, busy=1_800.0, data=5_400.0)
    b = group("ns-a", held=3_600.0, busy=3_240.0, other=360.0)
    text = usage_page.table(UsageDoc("namespace", 86_400.0, END, [a, b], Outside(), "p"))
    head = re.findall(r"<th>(.*?)</th>", text.split("</tr>")[0])
    assert head == ["namespace", "held", "busy", "wasted", *(usage_page.e(w) for w in
                                                              IDLE_CAUSES.values()),
                    usage.LOW_MFU_WORDS, "MFU", "top offender (wasted)"]
    assert re.findall(r'data-group="([^"]*)"', text) == ["ns-b", "ns-a", "total"]
    total = text[text.index('data-group="total"'):]
    assert 'data-held="10800.0"' in total and 'data-wasted="5760.0"' in total


# --- the causes ----------------------------------------------------------------------------

def test_the_causes_are_those_with_a_verdict_and_wasted_hours_with_their_share_and_fix() -> None:
    a = group("a", held=36_000.0, busy=18_000.0, data=9_000.0, host_to_device=0.0, other=7_200.0)
    b = group("b", held=14_400.0, busy=10_800.0, straggler=1_800.0, exchange=1_800.0)
    a.low_mfu = 5_400.0
    outside = Outside((Uninstrumented(Owner(pod_uid="p-1", nodename="n-2"), 9_000.0, 2_250.0),
                       Uninstrumented(Owner(slurm_job_id="77"), 3_600.0, 0.0)), unused=5_040.0)
    text = usage_page.causes(UsageDoc("experiment", 86_400.0, END, [a, b], outside, "p"))
    listed = re.findall(r'<li data-cause="(\w+)">', text)
    assert listed == ["data", "exchange", "straggler", "low_mfu"]  # IDLE_CAUSES' order
    # 2.5 of the 14 hours held (50400 s): 18%.
    assert (f"<b>waiting on data</b>: 2.50 GPU-h (18% of held), as diagnose says it: "
            f"<b>{usage.VERDICTS['data'][0]}</b>. "  # type: ignore[index]
            f"{usage_page.e(usage.VERDICTS['data'][1])}</li>") in text  # type: ignore[index]
    assert text.count("0.50 GPU-h (4% of held)") == 2  # the straggler's and the exchange's
    assert (f"<b>{usage_page.e(usage.LOW_MFU_WORDS)}</b>: 1.50 GPU-h busy. "
            f"{usage_page.e(remedies.LOW_MFU)}</li>") in text
    outside_text = text[text.index('data-outside="trials"'):]
    assert ("Outside any trial: 3.50 GPU-h on GPUs with processes but no trial "
            "(uninstrumented), 1.40 GPU-h on GPUs with neither (unused).") in outside_text
    owners = re.findall(r'<li data-owner="([^"]*)" data-gpu-seconds="([^"]*)" '
                        r'data-busy-gpu-seconds="([^"]*)">([^<]*)</li>', text)
    assert owners == [
        ("pod p-1", "9000.0", "2250.0",
         "uninstrumented: pod p-1 on n-2: 2.50 GPU-h, 0.62 busy (25%)"),
        ("job 77", "3600.0", "0.0", "uninstrumented: job 77: 1.00 GPU-h, 0.000 busy (0%)")]


def test_no_low_mfu_and_no_owner_lists_neither() -> None:
    g = group("a", held=3_600.0, busy=3_600.0)
    text = usage_page.causes(UsageDoc("experiment", 86_400.0, END, [g], Outside(), "p"))
    assert re.findall(r"data-cause=", text) == [] and "<ul></ul>" not in text
    assert text.count("<li") == 1 and "(unused).</li></ul>" in text


def owners(count: int) -> Outside:
    return Outside(tuple(Uninstrumented(Owner(pod_uid=f"p-{i}"), 3_600.0 * (count - i))
                         for i in range(count)))


@pytest.mark.parametrize("count", [usage.MAX_OWNERS - 1, usage.MAX_OWNERS,
                                   usage.MAX_OWNERS + 1, usage.MAX_OWNERS + 3])
def test_the_owners_are_cut_at_usages_limit_and_say_how_many_more(count: int) -> None:
    text = usage_page.owners(owners(count))
    shown = re.findall(r'data-owner="([^"]*)"', text)
    assert shown == [f"pod p-{i}" for i in range(min(count, usage.MAX_OWNERS))]
    more = count - usage.MAX_OWNERS
    if more > 0:
        assert text.endswith(f"<li>... and {more} more (the page's JSON lists them all)</li></ul>")
    else:
        assert "more" not in text and text.endswith("</li></ul>")
    assert usage_page.owners(Outside()) == ""


# --- the plots -----------------------------------------------------------------------------

class Drawn:
    """usage_page._svg: the figures plot_svg made, kept instead of written out."""

    def __init__(self) -> None:
        self.figures: list[tuple[Any, str]] = []

    def svg(self, fig: Any, title: str) -> str:
        self.figures.append((fig, title))
        return f'<svg data-drawn="{title}"></svg>'


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Drawn:
    d = Drawn()
    monkeypatch.setattr(usage_page, "_svg", d.svg)
    return d


def test_the_idle_gpus_are_stacked_by_cause_a_missing_point_as_zero(drawn: Drawn) -> None:
    from trainwatch.report.plots import PALETTE, _when

    span = (END - 600.0, END)
    t0, t1, t2 = END - 540.0, END - 360.0, END - 180.0
    lines = [("waiting on data", [(t0, 1.5), (t1, 2.25), (t2, 0.5)]),
             ("a straggler", [(t1, 0.75)])]
    usage_page.plot_svg("usage-wasted", "Idle GPUs by cause", lines, span, True)
    [(fig, title)] = drawn.figures
    ax = fig.axes[0]
    assert title == "Idle GPUs by cause" and ax.get_ylabel() == "GPUs"
    layers = ax.collections
    assert [c.get_label() for c in layers] == ["waiting on data", "a straggler"]
    assert [tuple(round(x, 4) for x in c.get_facecolor()[0][:3]) for c in layers] == [
        tuple(round(int(p[i:i + 2], 16) / 255, 4) for i in (1, 3, 5)) for p in PALETTE[:2]]
    # The second layer sits on the first: its top is the sum, 0 where it has no point.
    top = layers[1].get_paths()[0].vertices
    tops = {round(x, 6): y for x, y in top if y > 0}
    assert tops[round(_when(t0), 6)] == pytest.approx(1.5)  # 1.5 + 0
    assert tops[round(_when(t1), 6)] == pytest.approx(3.0)  # 2.25 + 0.75
    assert tops[round(_when(t2), 6)] == pytest.approx(0.5)
    assert ax.get_xlim() == pytest.approx((_when(span[0]), _when(span[1])))
    assert ax.get_ylim()[0] == 0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["waiting on data",
                                                                  "a straggler"]
    assert len(ax.lines) == 0


def test_held_and_busy_are_lines_of_their_own_points(drawn: Drawn) -> None:
    from trainwatch.report.plots import _when

    span = (END - 600.0, END)
    held = [(END - 540.0, 3.0), (END - 60.0, 4.0)]
    busy = [(END - 540.0, 1.25)]
    usage_page.plot_svg("usage-held", "GPUs held and busy", [("held", held), ("busy", busy)],
                        span, False)
    [(fig, _)] = drawn.figures
    ax = fig.axes[0]
    assert len(ax.collections) == 0
    assert [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines] == [
        ("held", [_when(END - 540.0), _when(END - 60.0)], [3.0, 4.0]),
        ("busy", [_when(END - 540.0)], [1.25])]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 4.0


def test_a_plot_is_svg_with_the_pages_colours() -> None:
    svg = usage_page.plot_svg("usage-held", "GPUs held and busy", [("held", [(END - 60, 2.0)])],
                              (END - 600.0, END), False)
    assert svg.startswith("<svg") and 'class="plot"' in svg and "var(--fg)" in svg
    assert "#010203" not in svg and ">held<" in svg


def test_the_plots_draw_what_there_is_and_say_what_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, list[str], tuple[float, float], bool]] = []

    def plot(key: str, title: str, lines: list[tuple[str, Any]], span: tuple[float, float],
             stacked: bool) -> str:
        asked.append((key, [name for name, _ in lines], span, stacked))
        return f'<svg data-key="{key}"></svg>'

    monkeypatch.setattr(usage_page, "plot_svg", plot)
    points = [(END - 60.0, 1.0)]
    doc = UsageDoc("experiment", 10_800.0, END, [], Outside(), "p", 1_260.0,
                   {"straggler": points, "data": points, "other": []}, [], points)
    text = usage_page.plots(doc)
    assert asked == [
        ("usage-wasted", ["waiting on data", "a straggler"], (END - 10_800.0, END), True),
        ("usage-held", ["busy"], (END - 10_800.0, END), False)]
    assert 'data-panel="usage-wasted" data-state="plot"' in text
    assert text.endswith("each point the GPUs on average over 21m.</p>")
    asked.clear()
    held = [(END - 60.0, 3.0)]  # held and busy both: each line under its own name
    usage_page.plots(UsageDoc("experiment", 10_800.0, END, [], Outside(), "p", 1_260.0, {},
                              held, points))
    assert asked == [("usage-held", ["held", "busy"], (END - 10_800.0, END), False)]
    asked.clear()
    empty = usage_page.plots(UsageDoc("experiment", 3_600.0, END, [], Outside(), "p", 60.0))
    assert asked == []
    assert ('data-panel="usage-wasted" data-state="empty"><figcaption>Idle GPUs by cause'
            '</figcaption><p class="empty">No idle GPU-seconds recorded in the range.</p>') in empty
    assert ('<p class="empty">No GPU-seconds held by a live trial in the range.</p>') in empty
    assert empty.endswith("over 1m.</p>")


# --- the page ------------------------------------------------------------------------------

def test_the_page_puts_its_parts_in_order_with_usages_json(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usage_page, "plot_svg", lambda key, *_: f'<svg data-key="{key}"></svg>')
    g = group("ns</td>", held=7_200.0, busy=3_600.0, data=3_600.0)
    doc = UsageDoc("namespace", 5_400.0, END, [g], Outside(), "http://prom:9090", 60.0,
                   {"data": [(END - 60.0, 1.0)]}, [(END - 60.0, 2.0)])
    text = usage_page.page(doc)
    title = "trainwatch usage: where the GPU-hours went, by namespace"
    assert f"<title>{title}</title>" in text and f"<h1>{title}</h1>" in text
    assert ("<dt>Window</dt><dd>the last 90m: 2026-11-03 06:22:12 UTC to "
            "2026-11-03 07:52:12 UTC</dd><dt>By</dt><dd>namespace</dd>"
            "<dt>Prometheus</dt><dd>http://prom:9090</dd><dt>Generated</dt>") in text
    marks = ["<h1>", '<dl class="meta">', "<h2>GPU-hours per group</h2>",
             'data-usage="groups"', '<ul class="causes">', "<h2>Over time</h2>",
             'data-key="usage-wasted"', 'data-key="usage-held"', 'id="usage-json"']
    where = [text.index(m) for m in marks]
    assert where == sorted(where)
    assert "ns</td>" not in text.split('id="usage-json"')[0]
    script = text[text.index('id="usage-json">') + len('id="usage-json">'):]
    found = json.loads(script[:script.index("</script>")])
    assert found == json.loads(usage.as_json("namespace", 5_400.0, [g], Outside()))
    assert "td.num { white-space: nowrap; }" in text.split("</style>")[0]
    assert "No GPU-seconds recorded" not in text


def test_a_page_without_groups_says_so_instead_of_the_causes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usage_page, "plot_svg", lambda key, *_: "<svg></svg>")
    doc = UsageDoc("user", 7 * 86_400.0, END, [], Outside(), "http://prom:9090")
    text = usage_page.page(doc)
    assert ('<p class="empty">No GPU-seconds recorded in the last 7d: 2026-10-27 07:52:12 UTC '
            "to 2026-11-03 07:52:12 UTC.</p>") in text
    assert 'class="causes"' not in text
    assert "each point the GPUs on average over 1m.</p>" in text  # a minute unless told
    assert re.findall(r'data-group="([^"]*)"', text) == ["total"]
    assert math.isclose(json.loads(text.split('id="usage-json">')[1].split("</script>")[0])[
        "since_seconds"], 7 * 86_400.0)


# --- the edges: less than a GPU-second, shares of nothing, the total row in the table --------

def test_a_range_of_nothing_still_steps_a_whole_minute() -> None:
    # Prometheus refuses a step of 0: the shortest range steps a minute like any other.
    assert step_for(0.0) == 60 and step_for(0.5) == 60


@pytest.mark.parametrize(("held", "busy", "share"), [
    (0.5, 0.25, "50%"),  # half a GPU-second held: still a share of it
    (1.0, 0.75, "75%"),
    (2.0, 0.5, "25%"),
    (0.0, 0.0, "-"),  # nothing held: no share
    (-3_600.0, 1_800.0, "-"),  # less than nothing (it cannot be): no share either
])
def test_the_busy_share_is_of_any_positive_hours_held(held: float, busy: float, share: str
                                                      ) -> None:
    got = cells(usage_page._row(group("g", held=held, busy=busy)))
    assert got[2][2].endswith(f" ({share})")


@pytest.mark.parametrize(("mfu", "shown"), [(0.8, "80%"), (0.25, "25%"), (0.995, "100%"),
                                            (0.0, "0%")])
def test_the_mfu_is_shown_in_whole_percent(mfu: float, shown: str) -> None:
    # 0.8 and 0.25 are where one percent more or less of the MFU (80.8, 79.2; 25.25, 24.75)
    # shows another whole number.
    g = group("g", held=3_600.0, busy=3_600.0)
    g.model, g.held_mfu = mfu * 3_600.0, 3_600.0
    assert g.mfu == pytest.approx(mfu)
    assert cells(usage_page._row(g))[10][2] == shown


def test_the_tables_last_row_is_the_total_and_its_heading() -> None:
    a = group("ns-b", held=7_200.0, busy=1_800.0)
    text = usage_page.table(UsageDoc("namespace", 86_400.0, END, [a], Outside(), "p"))
    rows = re.findall(r"<tr[^>]*>.*?</tr>", text)
    assert rows[-1].startswith('<tr data-group="total" class="total"><th>total</th>')
    assert [r for r in rows if 'class="total"' in r] == rows[-1:]
    assert cells(rows[1])[0] == ("td", "", "ns-b")


@pytest.mark.parametrize(("seconds", "listed"), [
    (0.5, True),  # half a GPU-second wasted is listed
    (1.0, True),
    (0.0, False),
    (-7.5, False),  # less than none (it cannot be) is not
])
def test_a_cause_is_listed_for_any_wasted_seconds_above_none(seconds: float, listed: bool
                                                             ) -> None:
    g = group("a", held=7_200.0, busy=3_600.0, data=seconds)
    g.low_mfu = seconds
    text = usage_page.causes(UsageDoc("experiment", 86_400.0, END, [g], Outside(), "p"))
    assert re.findall(r'<li data-cause="(\w+)">', text) == (["data", "low_mfu"] if listed
                                                             else [])


def test_the_usage_plots_lines_are_as_wide_as_the_reports(drawn: Drawn,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from trainwatch.report import plots
    from trainwatch.report.panels import PanelSpec
    from trainwatch.report.series import Panel, Series

    kept: list[Any] = []
    monkeypatch.setattr(plots, "_svg", lambda fig, title: kept.append(fig) or "")
    points = [(END - 540.0, 3.0), (END - 60.0, 4.0)]
    plots.panel_svg(Panel(PanelSpec("k", "K", "u", ()), [Series("held", points)], ylabel="u"),
                    (END - 600.0, END))
    usage_page.plot_svg("usage-held", "GPUs held and busy", [("held", points)],
                        (END - 600.0, END), False)
    [report_line] = kept[0].axes[0].lines
    [(fig, _)] = drawn.figures
    assert [line.get_linewidth() for line in fig.axes[0].lines] == [report_line.get_linewidth()]
