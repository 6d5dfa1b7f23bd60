"""`trainwatch report` without a stack: bad input, windows, the spread of many lines, themes."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from benchmarks.stack import free_port
from trainwatch.report.panels import PanelSpec
from trainwatch.report.series import COVERED, SLACK, Series, spread
from trainwatch.report.window import Window

TRAINWATCH = Path(sys.executable).parent / "trainwatch"


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), "report", "--experiment", "e", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_unreachable_prometheus_leaves_the_old_file_alone(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("the old report")
    done = report("--prometheus", f"http://127.0.0.1:{free_port()}", "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("trainwatch report: error: cannot reach Prometheus at")
    assert done.stderr.count("\n") == 1
    assert out.read_text() == "the old report" and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("where", ["missing/r.html", "file/r.html", "."])
def test_unwritable_output_fails_before_any_query(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("")
    # No Prometheus at all: the output is checked first, so its error is the one shown.
    done = report("--prometheus", f"http://127.0.0.1:{free_port()}", "-o",
                  str(tmp_path / where))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert str(tmp_path / where).rstrip("/.") in done.stderr and "Prometheus" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_empty_window_is_refused() -> None:
    done = report("--start", "2026-01-02T00:00:00Z", "--end", "2026-01-01T00:00:00Z",
                  "-o", "/tmp/never.html")
    assert done.returncode == 2 and "the window is empty" in done.stderr


def test_window_step_keeps_lines_short() -> None:
    w = Window.of(since=86400, start=None, end=1e9)
    assert (w.start, w.step, w.ends_now) == (1e9 - 86400, 240.0, False)
    with pytest.raises(ValueError, match="exclude each other"):
        Window.of(since=60, start=0.0, end=None)


def test_many_ranks_draw_a_band_not_64_lines() -> None:
    from trainwatch.report.plots import panel_svg
    from trainwatch.report.series import Panel

    lines = [Series(f"rank {r}", [(1000.0 + t, float(r + t)) for t in range(5)])
             for r in range(64)]
    band = spread(lines)
    # At each instant t the ranks read t..63+t: the band's edges and middle follow them.
    assert band.count == 64 and band.times == [1000.0 + t for t in range(5)]
    assert (band.low, band.high) == ([float(t) for t in range(5)], [63.0 + t for t in range(5)])
    assert band.median == [31.5 + t for t in range(5)]  # the mean of the middle two, 31 and 32
    spec = PanelSpec("steps", "Steps per second", "steps/s", ())
    svg = panel_svg(Panel(spec, band=band, ylabel="steps/s"), (1000.0, 1004.0))
    assert "median of 64" in svg and "min–max of 64" in svg and "rank 3" not in svg
    assert svg.startswith("<svg") and "var(--fg)" in svg and "#010203" not in svg


def test_every_recorded_line_of_the_report_has_its_raw_form() -> None:
    from trainwatch.contract.records import RecordNames
    from trainwatch.report import panels

    n = RecordNames("10s")
    sel: dict[str, str | None] = {"experiment": "e", "trial": "t", "rank": None}
    for spec in (panels.trial_panels(n, sel, "t", False) + panels.gpu_panels(sel)
                 + panels.node_panels(n, sel)):
        for line in spec.lines:
            recorded = ":" in line.expr.split("{")[0] or "_rate10s" in line.expr
            assert (line.raw is not None) == recorded, (spec.key, line.expr)
            assert line.raw is None or "_rate10s" not in line.raw


def test_the_window_is_the_trials_life_unless_a_time_is_given() -> None:
    from trainwatch.diagnose.runs import Run
    from trainwatch.report.window import Asked

    now, day = 1_000_000.0, 86400.0
    ended = Run("e", "t", "0", "1", "n", "1", first=now - 3 * 3600, last=now - 3600,
                exit_reason="clean")
    running = Run("e", "t", "0", "2", "n", "1", first=now - 600, last=now - 1, current=True)
    life = Asked().window([ended], now, 15 * day)
    assert (life.start, life.end, life.ends_now) == (ended.first - 144, ended.last + 144, False)
    assert Asked().window([ended, running], now, 15 * day).ends_now  # the latest run runs
    at = Asked(at=now - 2 * 3600).window([ended, running], now, 15 * day)
    assert (at.start, at.end) == (ended.first - 144, now - 2 * 3600)
    assert Asked(since=600).window([ended], now, 15 * day).start == now - 600
    with pytest.raises(ValueError, match="outside the 15 days Prometheus keeps"):
        Asked(start=now - 20 * day, end=now - 16 * day).window([ended], now, 15 * day)
    with pytest.raises(ValueError, match="in the future"):
        Asked(at=now + 60).window([ended], now, 15 * day)


@settings(deadline=None)  # the first example imports matplotlib
@example(start=1_800_000_000.0, seconds=3600.0)  # 08:00 to 09:00 UTC: both ends on a tick
@given(start=st.floats(1e9, 2e9), seconds=st.sampled_from(
    (3, 59, 290, 299, 4.9 * 60, 4.9 * 3600, 4.9 * 86400, 40 * 86400)) | st.floats(2, 40 * 86400))
def test_time_ticks_never_crowd(start: float, seconds: float) -> None:
    """Inside the span, on round multiples of one of the steps, evenly spaced, never more than
    MAX_TICKS steps (MAX_TICKS + 1 labels only with both ends on one:
    tests/test_report_plots_unit.py); and never sparser than the next smaller step allows: at
    least two up to a step of two days (each step is at most 2.5 times the one before)."""
    from trainwatch.report.plots import MAX_TICKS, TICK_STEPS, time_ticks

    ticks, _ = time_ticks((start, start + seconds))
    assert 1 <= len(ticks) <= MAX_TICKS or (len(ticks) == MAX_TICKS + 1 and ticks[0] == start
                                            and ticks[-1] == start + seconds), ticks
    assert all(start <= t <= start + seconds for t in ticks), (start, ticks)
    if len(ticks) > 1:
        [step] = {b - a for a, b in itertools.pairwise(ticks)}
        assert step in TICK_STEPS and ticks[0] % step == 0, ticks
    if seconds <= MAX_TICKS * 2 * 86400:
        assert len(ticks) >= 2, (start, seconds, ticks)


class CannedAPI:
    """query_range answers: ``series`` series (ranks 0, 1, ...), each of ``recorded`` points
    reading 0.37 for a recorded expression (a name with a colon), of ``raw`` points reading
    0.41 for any other."""

    def __init__(self, recorded: int, raw: int, series: int = 1) -> None:
        self.recorded, self.raw, self.series = recorded, raw, series

    def query_range(self, expr: str, start: float, end: float, step: float
                    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        count, value = (self.recorded, 0.37) if ":trainwatch_" in expr else (self.raw, 0.41)
        return [({"trial": "t", "rank": str(r)}, [(float(t), value) for t in range(count)])
                for r in range(self.series)]


# The fewest recorded points a series of 100 raw ones still counts as covered: COVERED of them,
# less SLACK a series.
EDGE = math.ceil(COVERED * 100 - SLACK)


@pytest.mark.parametrize(("recorded", "raw", "source", "series"), [
    (100, 100, "recorded", 1), (97, 100, "recorded", 1),  # a run's first evaluations: covered
    (EDGE, 100, "recorded", 1), (EDGE - 1, 100, "raw", 1),  # either side of the bound
    (EDGE, 100, "recorded", 3), (EDGE - 1, 100, "raw", 3),  # SLACK for each series
    (60, 100, "raw", 1),  # rules deployed halfway through the trial
    (0, 100, "raw", 1),  # rules re-rendered with another window, or never recorded
    (0, 0, "recorded", 1),  # nothing either way: the panel says "no data"
])
def test_recorded_figures_are_drawn_where_they_cover_the_window(
        recorded: int, raw: int, source: str, series: int) -> None:
    from trainwatch.contract.records import RecordNames
    from trainwatch.report import panels
    from trainwatch.report.series import read

    sel: dict[str, str | None] = {"experiment": "e", "trial": "t", "rank": None}
    [_, steps, _] = panels.trial_panels(RecordNames("10s"), sel, "t", False)
    window = Window.of(since=100, start=None, end=1e9)
    lines, used = read(CannedAPI(recorded, raw, series), steps, window)  # type: ignore[arg-type]
    assert used == source
    # Every series of the source named, and only its points (0.37 recorded, 0.41 raw).
    count, value = (recorded, 0.37) if source == "recorded" else (raw, 0.41)
    [(_, rows)] = lines
    assert [labels["rank"] for labels, _ in rows] == [str(r) for r in range(series)]
    assert all(points == [(float(t), value) for t in range(count)] for _, points in rows)


class BusyAPI:
    """query_range answers for the GPU-busy panel: each GPU's series with its ``source``, GPU i
    busy 0.37 + 0.2 i of the time."""

    def __init__(self, sources: list[str]) -> None:
        self.sources = sources

    def query_range(self, expr: str, start: float, end: float, step: float
                    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        return [({"instance": "n1:10910", "gpu": str(i), "uuid": f"GPU-{i}", "source": source},
                 [(float(t), 0.37 + 0.2 * i) for t in range(100)])
                for i, source in enumerate(self.sources)]


@pytest.mark.parametrize(("sources", "title", "legends"), [
    (["sm_active"], "GPU busy: SM activity (NVML GPM)",
     ["node1 GPU 0: SM activity (NVML GPM)"]),
    (["utilization"], "GPU busy: NVML utilization (any kernel running)",
     ["node1 GPU 0: NVML utilization (any kernel running)"]),
    (["sm_active", "utilization"],  # a rank on a Hopper and an Ampere board
     "GPU busy: NVML utilization (any kernel running) and SM activity (NVML GPM)",
     ["node1 GPU 0: SM activity (NVML GPM)", "node1 GPU 1: NVML utilization (any kernel running)"]),
])
def test_the_gpu_busy_plot_names_the_source_the_rule_used(
        sources: list[str], title: str, legends: list[str]) -> None:
    from trainwatch.report import page, panels
    from trainwatch.report.series import fetch

    sel: dict[str, str | None] = {"experiment": "e", "trial": "t", "rank": None}
    [busy] = [s for s in panels.gpu_panels(sel) if s.key == panels.BUSY_PANEL]
    assert busy.lines[0].expr.startswith("gpu:trainwatch_gpu_busy:ratio ")  # the rule
    window = Window.of(since=100, start=None, end=1e9)
    drawn = fetch(BusyAPI(sources), busy, window, {"n1:10910": "node1"})  # type: ignore[arg-type]
    assert drawn.heading == title and [s.name for s in drawn.series] == legends
    # In percent, each GPU's own figure under its own legend.
    assert [[v for _, v in s.points] for s in drawn.series] == \
        [pytest.approx([37.0 + 20 * i] * 100) for i in range(len(sources))]
    html = page._panel(drawn, (1e9 - 100, 1e9))
    assert f"<figcaption>{title}" in html and all(legend in html for legend in legends)
    empty = fetch(BusyAPI([]), busy, window, {})  # type: ignore[arg-type]
    assert empty.heading == "GPU busy" and empty.note is not None  # no source claimed
