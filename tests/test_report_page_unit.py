"""The trial report's HTML (trainwatch.report.page) from a Document built by hand: each part
shows the values behind it (times ago and since, the GPUs, the window, the verdict's fix, the
limits, the alerts, the baseline's two sides and its changes), in the order it must, and what
must be absent is (a verdict's runbook link it has not, a pending alert's "fired", the
untimed row of the side-by-side table, a section note where none).

The plots have their own tests (tests/test_report_plots_unit.py); here panel_svg and
histogram_svg are replaced by recorders that keep what they were asked to draw.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import pytest

from trainwatch.diagnose import compare
from trainwatch.diagnose.compare import Side
from trainwatch.diagnose.figures import Gpu, RankReport
from trainwatch.diagnose.runs import Run
from trainwatch.diagnose.verdict import Verdict
from trainwatch.report import page
from trainwatch.report.collect import Document, FiredAlert
from trainwatch.report.panels import PanelSpec
from trainwatch.report.series import RAW, RECORDED, Band, Panel, Series
from trainwatch.report.window import Window, utc

NOW = 1_793_700_000.0  # 2026-11-03 10:00:00 UTC
START, END = NOW - 9_973.0, NOW - 41.0


class Drawn:
    """panel_svg and histogram_svg: what each was asked to draw, as a marked <svg>."""

    def __init__(self) -> None:
        self.panels: list[tuple[str, tuple[float, float]]] = []
        self.histograms: list[tuple[str, list[tuple[float, float]]]] = []

    def panel(self, p: Panel, span: tuple[float, float]) -> str:
        self.panels.append((p.spec.key, span))
        return f'<svg data-drawn="{p.spec.key}"></svg>'

    def histogram(self, title: str, buckets: list[tuple[float, float]]) -> str:
        self.histograms.append((title, buckets))
        return f'<svg data-histogram="{title}"></svg>'


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Drawn:
    d = Drawn()
    monkeypatch.setattr(page, "panel_svg", d.panel)
    monkeypatch.setattr(page, "histogram_svg", d.histogram)
    return d


VERDICT = Verdict(
    kind="dataloader", title="Data loader bound", bottleneck=True, measured=0.437,
    comparison=">", threshold=0.3, alert="TrainwatchDataLoaderBound",
    remedy="Raise num_workers to 8", runbook_url="https://rb.example/loader?a=1&b=2",
    steps=12_345, notes=("GPU idle 61% of the time", "loader <workers> at 4"))
RUN = Run(experiment="exp-a", trial="t-19", rank="0", pid="4242", nodename="node-b",
          world_size="2", first=NOW - 5_437.0, last=NOW - 79.0, current=True)


def verdict(**kw: Any) -> Verdict:
    return dataclasses.replace(VERDICT, **kw)


def run(**kw: Any) -> Run:
    return dataclasses.replace(RUN, **kw)


def report(rank: str = "0", **kw: Any) -> RankReport:
    made = RankReport(experiment="exp-a", trial="t-19", rank=rank, nodename="node-b",
                      pid="4242", world_size="2", window="5m", verdict=VERDICT,
                      run=run(rank=rank))
    return dataclasses.replace(made, **kw)


def doc(**kw: Any) -> Document:
    made = Document(prometheus="http://prom:9090", experiment="exp-a", trial="t-19", rank=None,
                    window=Window(START, END, 15.0, False), evaluated_at=None,
                    reports=[report()], now=NOW, stale_after=300.0, rate_window="5m")
    return dataclasses.replace(made, **kw)


def between(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i:text.index(end, i)]


# --- the run's state ---------------------------------------------------------------------

def test_a_running_rank_says_since_when_and_its_last_push() -> None:
    d = doc()
    said = page.state(d, d.reports[0])
    # Started 5437 s (91 minutes) ago, last pushed 79 s ago: each figure in its place.
    assert said == ('<p class="state" data-state="running" data-rank="t-19/0">Running: started '
                    "91 minutes ago, last push 79 seconds ago</p>")


def test_a_rank_past_the_stale_threshold_stopped_without_a_word() -> None:
    r = report(run=run(last=NOW - 113.0))  # 113 s over a 100 s threshold
    said = page.state(doc(reports=[r], stale_after=100.0), r)
    assert 'data-state="stale"' in said
    assert ("Stopped pushing 113 seconds ago without a word (crashed or killed; 12,345 steps "
            "in 89 minutes)</p>") in said  # 5437 - 113 s of life
    at_threshold = report(run=run(last=NOW - 100.0))
    assert 'data-state="running"' in page.state(doc(reports=[at_threshold], stale_after=100.0),
                                                at_threshold)


@pytest.mark.parametrize(("reason", "how"), [
    ("clean", "clean"), ("failed", "failed: an exception or a non-zero exit"),
    ("terminated", "terminated: SIGTERM"), ("oom", "oom")])
def test_an_ended_rank_says_how_when_and_how_long_it_ran(reason: str, how: str) -> None:
    r = report(run=run(exit_reason=reason, current=False, started=NOW - 200_000.0,
                       pushed=NOW - 9_000.0), verdict=verdict(steps=1))
    said = page.state(doc(reports=[r]), r)
    # Ended 9000 s ago, after 191000 s (2.2 days) of life; one step.
    assert f"Ended 2.5 hours ago ({how}, 1 step in 2.2 days)</p>" in said
    assert "Running" not in said and "without a word" not in said


@pytest.mark.parametrize(("exit_reason", "last", "said"), [
    (None, 20_500.0, "Running: started 8.3 hours ago, last push 8.2 hours ago"),
    ("clean", 20_500.0, "Ended 8.2 hours ago (clean, 12,345 steps in 8 minutes)"),
    (None, 20_500.0, "Stopped pushing 8.2 hours ago without a word"),
])
def test_times_ago_are_differences_on_any_clock(exit_reason: str | None, last: float,
                                                said: str) -> None:
    # A clock near its epoch (now 50000 s, the run from 20000 s to 20500 s): "ago" is now
    # minus then, not a remainder that equals it only while then is past half of now.
    stale = math.inf if said.startswith("Running") else 60.0
    r = report(run=run(first=20_000.0, last=last, exit_reason=exit_reason))
    assert said in page.state(doc(reports=[r], now=50_000.0, stale_after=stale), r)


def test_a_rank_without_a_verdict_has_unknown_steps_and_without_a_run_no_state() -> None:
    r = report(run=run(exit_reason="clean", current=False), verdict=None)
    assert "(clean, ? steps in 89 minutes)" in page.state(doc(reports=[r]), r)
    two = report(run=run(exit_reason="clean", current=False), verdict=verdict(steps=2))
    assert "(clean, 2 steps in" in page.state(doc(reports=[two]), two)
    zero = report(run=run(exit_reason="clean", current=False), verdict=verdict(steps=0))
    assert "(clean, 0 steps in" in page.state(doc(reports=[zero]), zero)
    bare = report(run=None)
    assert page.state(doc(reports=[bare]), bare) == ""


def test_with_several_ranks_each_state_names_its_rank() -> None:
    a, b = report("0"), report("1", trial="t-20", run=run(rank="1", trial="t-20"))
    d = doc(reports=[a, b])
    assert 'data-rank="t-20/1">t-20 rank 1: Running: started' in page.state(d, b)
    assert ">t-19 rank 0: Running" in page.state(d, a)
    assert ">Running" in page.state(doc(reports=[a]), a)


# --- the header ----------------------------------------------------------------------------

def dl(text: str) -> dict[str, str]:
    return dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", text))


def test_the_header_names_trials_ranks_nodes_and_gpus_sorted_once_each() -> None:
    r0 = report("0", nodename="node-b", gpus=[
        Gpu("GPU-bbb", "10.0.0.2:10910", "1"), Gpu("GPU-aaa", "10.0.0.2:10910", "0")])
    r1 = report("1", trial="t-03", nodename=None, gpus=[Gpu("GPU-aaa", "10.0.0.2:10910", "0"),
                                                        Gpu("GPU-ccc", None, None)])
    r2 = report("2", nodename="node-a")
    d = doc(reports=[r0, r1, r2], gpu_names={"GPU-aaa": "NVIDIA H100 80GB HBM3"},
            span=(START + 61.0, END - 17.0), thresholds_from="rules from ./rules.yml")
    got = dl(page.header(d))
    assert got["Experiment"] == "exp-a"
    assert got["Trials"] == "t-03, t-19"
    assert got["Ranks"] == "t-19/0, t-03/1, t-19/2"  # the reports' order
    assert got["Nodes"] == "?, node-a, node-b"
    # A GPU without exporter series: neither its index nor its node known.
    assert got["GPUs"] == ("GPU ? on ?: GPU-ccc<br>"
                           "GPU 0 on 10.0.0.2:10910: GPU-aaa NVIDIA H100 80GB HBM3<br>"
                           "GPU 1 on 10.0.0.2:10910: GPU-bbb")
    assert got["Window"] == (f"{page.e(d.window.describe())}; the trial&#x27;s samples "
                             f"{utc(START + 61.0)} to {utc(END - 17.0)}")
    assert got["Verdict read at"] == "now (as `trainwatch diagnose` reads it)"
    assert got["Rates"].startswith("over 5m windows (the recording rules&#x27;)")
    assert got["Prometheus"] == "http://prom:9090"
    assert got["Thresholds"] == "rules from ./rules.yml"
    assert list(got)[-1] == "Generated" and got["Generated"].endswith(" UTC")


def test_a_header_without_gpus_span_or_thresholds_says_so() -> None:
    d = doc(reports=[report(gpus=[])], evaluated_at=END - 600.0)
    got = dl(page.header(d))
    assert got["GPUs"] == "none reported by the trial"
    assert got["Window"] == page.e(d.window.describe())
    assert got["Verdict read at"].startswith(f"{utc(END - 600.0)} (the last sample")
    assert "Thresholds" not in got


# --- the verdict ---------------------------------------------------------------------------

def test_a_verdict_shows_its_finding_fix_notes_runbook_and_evidence() -> None:
    r = report()
    text = page.verdict(r)
    assert text.startswith('<section class="verdict bottleneck" data-rank="t-19/0" '
                           'data-kind="dataloader" data-finding="dataloader">')
    assert "<h3>t-19 rank 0 on node-b</h3>" in text
    assert '<div class="title">Data loader bound</div>' in text
    assert ('<div class="head">VERDICT: Data loader bound: 43.7% &gt; threshold 30.0% '
            "(TrainwatchDataLoaderBound)</div>") in text
    assert ('<div class="also">Also: GPU idle 61% of the time</div>'
            '<div class="also">Also: loader &lt;workers&gt; at 4</div>') in text
    assert '<span class="fix">Raise num_workers to 8</span>' in text
    url = "https://rb.example/loader?a=1&amp;b=2"
    assert f'runbook: <a href="{url}">{url}</a>' in text
    assert '<pre class="diagnose-text">Trial exp-a/t-19 rank 0 on node-b (pid 4242' in text


def test_a_healthy_verdict_has_no_bottleneck_mark_runbook_or_notes() -> None:
    r = report("2", nodename=None, verdict=verdict(
        kind="healthy", title="Healthy", bottleneck=False, runbook_url=None, notes=(),
        life_kind="gpu"))
    text = page.verdict(r)
    assert text.startswith('<section class="verdict" data-rank="t-19/2" data-kind="healthy" '
                           'data-finding="gpu">')
    assert "<h3>t-19 rank 2 on ?</h3>" in text
    assert "runbook" not in text and "Also:" not in text
    assert page.verdict(report(verdict=None)) == ""


# --- figures and sections ------------------------------------------------------------------

def test_a_figure_is_its_plot_or_its_note_and_says_where_raw_figures_came_from() -> None:
    drawn = page.figure("steps-t", "Steps <per> second", "<svg/>", source=RECORDED)
    assert drawn == ('<figure class="panel" data-panel="steps-t" data-state="plot" '
                     'data-source="recorded"><figcaption>Steps &lt;per&gt; second</figcaption>'
                     "<svg/></figure>")
    raw = page.figure("steps-t", "Steps", "<svg/>", source=json.loads('"raw"'))  # equal, not RAW itself
    assert 'data-source="raw"><figcaption>Steps <span class="source">(from the raw series' in raw
    empty = page.figure("gpu-sm", "SM", None, "not <exported>")
    assert empty == ('<figure class="panel" data-panel="gpu-sm" data-state="empty">'
                     '<figcaption>SM</figcaption><p class="empty">not &lt;exported&gt;</p>'
                     "</figure>")


def spec(key: str, title: str = "T") -> PanelSpec:
    return PanelSpec(key, title, "y", ())


def test_sections_draw_each_panel_over_the_span_and_the_loop_its_histograms_and_limits(
        drawn: Drawn) -> None:
    steps = Panel(spec("steps-t-19", "Steps per second"), [Series("rank 0", [(START, 1.5)])],
                  source=RAW)
    band = Panel(spec("gpu-util"), band=Band("b", 9, [START], [1.0], [2.0], [3.0]))
    empty = Panel(spec("gpu-sm", "SM activity"), note="not exported here")
    d = doc(span=(START + 61.0, END - 17.0),
            sections=[("Training loop", [steps], "Rates over <5m>"),
                      ("GPUs", [band, empty], None), ("Nodes", [], None)],
            histogram={"t-9": [(0.1, 3.0)], "t-10": [(0.25, 7.0), (0.5, 1.0)]})
    out = page.sections(d)
    text = "".join(out)
    assert drawn.panels == [("steps-t-19", (START + 61.0, END - 17.0)),
                            ("gpu-util", (START + 61.0, END - 17.0))]  # not the empty one
    # Histograms by trial name, each its own figure.
    assert drawn.histograms == [("Step-time distribution t-10", [(0.25, 7.0), (0.5, 1.0)]),
                                ("Step-time distribution t-9", [(0.1, 3.0)])]
    assert text.index('data-panel="step-histogram-t-10"') < text.index(
        'data-panel="step-histogram-t-9"')
    assert "<figcaption>Step-time distribution — trial t-10</figcaption>" in text
    assert out[0] == "<h2>Training loop</h2>"
    assert out[1] == '<p class="note" data-section-note="Training loop">Rates over &lt;5m&gt;</p>'
    assert out[2].startswith('<p class="note" data-limits="none">')  # limits after the note
    assert out[3].startswith('<div class="plots"><figure class="panel" data-panel="steps-t-19" '
                             'data-state="plot" data-source="raw">')
    assert out[4:] == ["<h2>GPUs</h2>", out[5], "<h2>Nodes</h2>"]  # no note, no empty grid
    assert '<p class="empty">not exported here</p>' in out[5]
    assert text.count("data-limits") == 1 and text.count("data-section-note") == 1


def test_sections_span_the_window_without_a_span_and_only_the_loop_has_histograms(
        drawn: Drawn) -> None:
    lines = Panel(spec("cpu"), [Series("n", [(START, 0.5)])])
    # Only the section named "Training loop" has them: not one sorting before or after it.
    d = doc(sections=[("Nodes", [lines], None), ("Tuning", [], None),
                      ("Training loop (old)", [], None)], histogram={"t-9": [(0.1, 3.0)]})
    text = "".join(page.sections(d))
    assert drawn.panels == [("cpu", (START, END))] and drawn.histograms == []
    assert "data-limits" not in text and "step-histogram" not in text
    assert 'data-source' not in text


# --- limits and alerts ---------------------------------------------------------------------

def test_the_limits_table_lists_the_ranks_that_measured_one() -> None:
    d = doc(reports=[report("0", loader_limit=1234.56, limits_advice="loader <bound>"),
                     report("1"),
                     report("2", step_limit=987.4)])
    text = page.limits(d)
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", text)
    assert rows == [("t-19/0", "1235", "-", "loader &lt;bound&gt;"), ("t-19/2", "-", "987", "-")]
    assert text.startswith('<table data-limits="measured">')


def alert(name: str, first: float, last: float, **kw: Any) -> FiredAlert:
    return dataclasses.replace(FiredAlert(name, "gpu 0 on node-b", first, last, None), **kw)


def test_alerts_are_listed_firing_or_pending_with_their_runbook_and_times() -> None:
    d = doc(alerts=[alert("Slow<Step>", 1_793_682_659.0, 1_793_692_332.0,
                          runbook_url="http://rb/slow"),
                    alert("GpuIdle", 1_793_690_000.5, 1_793_691_000.0, fired=False,
                          about="node-a")])
    text = page.alerts(d)
    assert text.startswith("<h2>Alerts in the window</h2>")
    rows = re.findall(r'<tr data-state="(\w+)"><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>'
                      r'<td class="when">(.*?)</td><td class="when">(.*?)</td></tr>', text)
    assert rows == [
        ("firing", '<a href="http://rb/slow" title="runbook">Slow&lt;Step&gt;</a>', "fired",
         "gpu 0 on node-b", "2026-11-03<br>05:10:59 UTC", "2026-11-03<br>07:52:12 UTC"),
        ("pending", "GpuIdle", "pending only", "node-a", "2026-11-03<br>07:13:20 UTC",
         "2026-11-03<br>07:30:00 UTC")]


def test_no_alert_in_the_window_says_so() -> None:
    text = page.alerts(doc())
    assert 'data-alerts="none"' in text and "<table" not in text
    assert text.startswith("<h2>Alerts</h2>")


# --- against the baseline ------------------------------------------------------------------

def side(ref: str, step: float | None, phases: dict[str, float], **kw: Any) -> Side:
    return Side(ref, run(first=NOW - 4_000.0, last=NOW - 100.0), "ended clean",
                step_seconds=step, phase_seconds=phases, **kw)


def rows_of(text: str) -> list[tuple[str, str, str]]:
    return re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td><td>([^<]*)</td></tr>", text)


def test_a_comparison_shows_both_sides_and_what_changed_largest_first() -> None:
    a = side("exp-a/t-19 rank 0", 0.250, {"forward": 0.090, "data": 0.120}, steps=4321,
             steps_per_second=3.987, samples_per_second=510.36, gpu_busy=0.4123,
             gpu_busy_source="sm_active")
    b = side("exp-a/t-2 rank 0", 0.160, {"forward": 0.085, "data": 0.040}, steps=9876,
             steps_per_second=6.25, samples_per_second=800.04)
    c = compare.compare(a, b)
    text = page.baseline(doc(comparison=c, baseline_line="12% slower than <its> median"))
    table = rows_of(between(text, 'data-compare="side-by-side"', "</table>"))
    assert table == [
        ("trial", "exp-a/t-19 rank 0", "exp-a/t-2 rank 0"), ("state", "ended clean", "ended clean"),
        ("ran", "65 minutes", "65 minutes"), ("steps", "4321", "9876"),
        ("steps/s", "3.99", "6.25"), ("samples/s", "510.4", "800.0"),
        ("step time", "250.0 ms", "160.0 ms"), ("GPU busy", "41.2% (sm_active)", "-"),
        ("data", "120.0 ms (48.0%)", "40.0 ms (25.0%)"),
        ("forward", "90.0 ms (36.0%)", "85.0 ms (53.1%)")]  # no untimed row
    changes = re.findall(r'<tr data-phase="(.*?)"><td>(.*?)</td><td class="num">(.*?)</td>'
                         r'<td class="num">(.*?)</td></tr>', text)
    # 90 ms slower: data +80 ms (89%), forward +5 ms (6%), untimed 40-35 = +5 ms (6%).
    assert [row[0] for row in changes][:1] == ["data"]
    assert changes[0] == ("data", "data", "+80.0 ms per step", "89%")
    assert sorted(changes[1:]) == sorted([
        ("forward", "forward", "+5.0 ms per step", "6%"),
        (compare.UNTIMED, compare.UNTIMED, "+5.0 ms per step", "6%")])
    assert text.index('data-compare="side-by-side"') < text.index('data-baseline="line"') < \
        text.index('data-compare="summary"') < text.index('data-compare="changes"')
    assert '<span data-baseline="line">12% slower than &lt;its&gt; median</span>' in text
    assert f'<span data-compare="summary">{page.e(c.summary)}</span>' in text


def test_a_comparison_without_a_step_time_has_no_change_table() -> None:
    a = side("exp-a/t-19 rank 0", None, {})
    b = side("exp-a/t-2 rank 0", 0.160, {"data": 0.040})
    text = page.baseline(doc(comparison=compare.compare(a, b)))
    assert 'data-compare="side-by-side"' in text and 'data-compare="changes"' not in text
    assert "No comparison: exp-a/t-19 rank 0 has no finished step" in text
    assert "data-baseline" not in text
    assert ("step time", "-", "160.0 ms") in rows_of(text)
    assert [row[0] for row in rows_of(text)][-1] == "GPU busy"  # no change: no phase rows


def test_without_a_comparison_the_own_baseline_line_or_nothing() -> None:
    assert page.baseline(doc()) == ""
    text = page.baseline(doc(baseline_line="as fast as its median"))
    assert text == ('<h2>Against the baseline</h2><p class="verdict-change"><b>Against its '
                    'baseline:</b> <span data-baseline="line">as fast as its median</span></p>')


def test_a_share_rounding_to_zero_has_no_sign_and_none_is_a_dash() -> None:
    assert [page._share(x) for x in (-0.001, 0.004, -0.25, 0.555, None)] == [
        "0%", "0%", "-25%", "56%", "-"]


# --- the whole page ------------------------------------------------------------------------

def test_the_page_puts_each_part_in_order_and_embeds_diagnoses_json(drawn: Drawn) -> None:
    a = report("0")
    b = report("1", verdict=verdict(title="GPU bound </script>", bottleneck=False))
    d = doc(reports=[a, b], baseline_line="as fast as its median",
            sections=[("GPUs", [Panel(spec("gpu-util"), [Series("g", [(START, 1.0)])])], None)],
            alerts=[alert("Slow", START, END)])
    text = page.page(d)
    assert text.startswith('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    assert "<title>trainwatch report: exp-a/t-19</title>" in text
    assert "<h1>trainwatch report: exp-a/t-19</h1>" in text
    marks = ["<h1>", 'data-state="running" data-rank="t-19/0"',
             'data-state="running" data-rank="t-19/1"', '<dl class="meta">',
             "<h2>Verdict</h2>", '<section class="verdict bottleneck" data-rank="t-19/0"',
             '<section class="verdict" data-rank="t-19/1"', "<h2>Against the baseline</h2>",
             "<h2>Profiler trace</h2>", "<h2>GPUs</h2>", "<h2>Alerts in the window</h2>",
             '<script type="application/json" id="diagnose-json">']
    where = [text.index(m) for m in marks]
    assert where == sorted(where)
    script = between(text, 'id="diagnose-json">', "</script>")[len('id="diagnose-json">'):]
    assert "</script" not in script
    found = json.loads(script)["reports"]
    assert [(r["rank"], r["verdict"]["title"]) for r in found] == [
        ("0", "Data loader bound"), ("1", "GPU bound </script>")]
    assert text.endswith("\n</body></html>\n")


def test_an_experiments_page_is_titled_by_the_experiment_alone() -> None:
    d = doc(trial=None, reports=[dataclasses.replace(report(), run=None, verdict=None)])
    text = page.page(d)
    assert "<title>trainwatch report: exp-a</title>" in text
    assert "exp-a/" not in between(text, "<title>", "</title>")
    assert 'class="state"' not in text and "<section" not in text
    assert "--experiment exp-a</code>" in text  # the trace note's command, no --trial
