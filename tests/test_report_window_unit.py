"""trainwatch.report.window: the window a report covers, at the edge of every bound (an empty
window, --at now or at the retention's edge, a margin under a second), the step that keeps
about POINTS points a line, and the trial's life chosen run by run."""

from __future__ import annotations

import time

import pytest

from tests.frozen import assert_frozen
from trainwatch.diagnose.runs import Run
from trainwatch.report.window import DEFAULT_SINCE, MARGIN, POINTS, Asked, Window, utc

NOW = 1_700_000_000.0
DAY = 86400.0


def run(first: float, last: float, *, rank: str = "0", pid: str = "1", current: bool = False,
        exit_reason: str | None = None) -> Run:
    return Run("e", "t", rank, pid, "n", "1", first=first, last=last, current=current,
               exit_reason=exit_reason)


def test_utc_is_the_date_and_time_to_the_second() -> None:
    assert utc(1_700_000_000) == "2023-11-14 22:13:20 UTC"
    assert utc(0.999) == "1970-01-01 00:00:00 UTC"
    assert utc(1_700_000_059.5) == "2023-11-14 22:14:19 UTC"


def test_the_constants_are_an_hour_360_points_and_a_2_percent_margin() -> None:
    assert (DEFAULT_SINCE, POINTS, MARGIN) == (3600.0, 360, 0.02)


def test_of_goes_since_back_from_the_end_or_an_hour_back_from_now() -> None:
    w = Window.of(since=600, start=None, end=NOW)
    assert (w.start, w.end, w.step, w.ends_now, w.seconds) == (NOW - 600, NOW, 2.0, False, 600)
    w = Window.of(since=None, start=None, end=None, now=NOW)
    assert (w.start, w.end, w.step, w.ends_now) == (NOW - 3600, NOW, 10.0, True)
    w = Window.of(since=None, start=NOW - 1000, end=None, now=NOW)
    assert (w.start, w.end, w.ends_now) == (NOW - 1000, NOW, True)
    before = time.time()
    w = Window.of(since=60, start=None, end=None)
    assert before <= w.end <= time.time() and w.seconds == pytest.approx(60)
    assert_frozen(w)


def test_of_refuses_since_with_start_and_a_window_that_ends_where_it_starts() -> None:
    with pytest.raises(ValueError) as caught:
        Window.of(since=60, start=NOW - 100, end=NOW)
    assert str(caught.value) == "--since and --start exclude each other: give one"
    with pytest.raises(ValueError) as caught:
        Window.of(since=None, start=NOW, end=NOW)
    assert str(caught.value) == ("the window is empty: --start 2023-11-14 22:13:20 UTC is not "
                                 "before --end 2023-11-14 22:13:20 UTC")
    with pytest.raises(ValueError, match="the window is empty"):
        Window.of(since=0, start=None, end=NOW)
    with pytest.raises(ValueError, match="the window is empty"):
        Window.of(since=-5, start=None, end=NOW)
    assert Window.of(since=None, start=NOW - 0.5, end=NOW).step == 1.0


@pytest.mark.parametrize("seconds, step", [
    (100, 1.0), (539, 1.0), (541, 2.0), (900, 2.0), (1000, 3.0), (2700, 8.0), (2880, 8.0),
    (3060, 8.0), (86400, 240.0)])
def test_the_step_is_the_window_over_360_rounded_at_least_1(seconds: float, step: float) -> None:
    w = Window.of(since=seconds, start=None, end=NOW)
    assert w.step == step and isinstance(w.step, float)


def test_describe_names_both_ends_and_the_length() -> None:
    assert Window.of(since=9000, start=None, end=NOW).describe() == (
        "2023-11-14 19:43:20 UTC to 2023-11-14 22:13:20 UTC (2.5 hours)")


def test_a_life_has_a_2_percent_margin_each_side_at_least_a_second() -> None:
    w = Window.life(10_000.0, 11_000.0, running=False, now=NOW)
    assert (w.start, w.end, w.step, w.ends_now) == (9_980.0, 11_020.0, 3.0, False)
    w = Window.life(10_000.0, 10_010.0, running=False, now=NOW)  # 0.2 s of margin: 1
    assert (w.start, w.end, w.step) == (9_999.0, 10_011.0, 1.0)
    w = Window.life(10_000.0, 10_000.0, running=False, now=NOW)
    assert (w.start, w.end) == (9_999.0, 10_001.0)


def test_a_life_ends_at_now_while_it_runs_at_until_when_given_and_never_past_now() -> None:
    w = Window.life(NOW - 18_000, NOW - 60, running=True, now=NOW)
    assert (w.start, w.end, w.ends_now) == (pytest.approx(NOW - 18_000 - 358.8), NOW, True)
    assert w.step == round((18_000 + 358.8) / 360)
    w = Window.life(NOW - 18_000, NOW - 60, running=False, now=NOW)  # the margin past now
    assert (w.end, w.ends_now) == (NOW, False)
    w = Window.life(NOW - 18_000, NOW - 600, running=False, now=NOW)
    assert w.end == pytest.approx(NOW - 252.0)
    w = Window.life(NOW - 18_000, NOW - 60, running=True, now=NOW, until=NOW - 9_000)
    assert (w.end, w.ends_now, w.step) == (NOW - 9_000, True, round((9_000 + 358.8) / 360))
    w = Window.life(NOW - 18_000, NOW - 60, running=False, now=NOW, until=NOW - 9_000)
    assert (w.end, w.ends_now) == (NOW - 9_000, False)


def test_asked_is_given_by_since_start_or_end_never_by_at_alone() -> None:
    assert not Asked().given and not Asked(at=NOW).given
    assert Asked(since=60).given and Asked(start=1.0).given and Asked(end=2.0).given
    assert Asked(since=0.0).given and Asked(start=0.0).given and Asked(end=0.0).given
    assert_frozen(Asked())


ENDED = run(NOW - 3 * 3600, NOW - 3600, exit_reason="clean")
RUNNING = run(NOW - 600, NOW - 1, pid="2", current=True)


def test_without_times_the_window_is_the_latest_runs_life() -> None:
    w = Asked().window([ENDED], NOW, 15 * DAY)
    assert (w.start, w.end, w.ends_now) == (ENDED.first - 144, ENDED.last + 144, False)
    w = Asked().window([ENDED, RUNNING], NOW, 15 * DAY)
    assert (w.start, w.end, w.ends_now) == (pytest.approx(RUNNING.first - 11.98), NOW, True)


def test_a_run_still_scraped_after_its_exit_or_no_longer_scraped_is_not_running() -> None:
    for last in (run(NOW - 600, NOW - 100, current=True, exit_reason="clean"),
                 run(NOW - 600, NOW - 100)):
        w = Asked().window([last], NOW, DAY)
        assert (w.end, w.ends_now) == (NOW - 100 + 10, False)


def test_the_life_covers_every_ranks_latest_run() -> None:
    ranks = [run(NOW - 5000, NOW - 2000, rank="0", exit_reason="clean"),
             run(NOW - 4000, NOW - 1000, rank="1", exit_reason="clean"),
             run(NOW - 3000, NOW - 500, rank="2", current=True)]
    w = Asked().window(ranks, NOW, DAY)
    assert (w.start, w.end, w.ends_now) == (NOW - 5000 - 90, NOW, True)
    w = Asked().window(ranks[:2], NOW, DAY)
    assert (w.start, w.end, w.ends_now) == (NOW - 5000 - 80, NOW - 1000 + 80, False)


def test_at_picks_the_run_on_then_and_ends_the_window_there() -> None:
    at = Asked(at=NOW - 2 * 3600).window([ENDED, RUNNING], NOW, 15 * DAY)
    assert (at.start, at.end, at.ends_now) == (ENDED.first - 144, NOW - 2 * 3600, False)
    at = Asked(at=NOW - 300).window([ENDED, RUNNING], NOW, 15 * DAY)  # the running one, then
    assert (at.start, at.end, at.ends_now) == (pytest.approx(RUNNING.first - 11.98), NOW - 300, False)
    with pytest.raises(ValueError) as caught:
        Asked(at=ENDED.first - 1).window([RUNNING, ENDED], NOW, 15 * DAY)
    assert str(caught.value) == (f"--at {utc(ENDED.first - 1)} is before the trial's first "
                                 f"sample ({utc(ENDED.first)})")


def test_at_is_taken_from_now_back_to_the_retention_and_refused_past_either() -> None:
    assert Asked(at=NOW).window([RUNNING], NOW, DAY).end == NOW
    with pytest.raises(ValueError) as caught:
        Asked(at=NOW + 600).window([RUNNING], NOW, DAY)
    assert str(caught.value) == "--at is 10 minutes in the future"
    with pytest.raises(ValueError, match="in the future"):
        Asked(at=NOW + 0.5).window([RUNNING], NOW, DAY)
    old = run(NOW - 2 * DAY, NOW - DAY + 100, exit_reason="clean")
    assert Asked(at=NOW - DAY).window([old], NOW, DAY).end == NOW - DAY
    with pytest.raises(ValueError) as caught:
        Asked(at=NOW - DAY - 1).window([old], NOW, DAY)
    assert str(caught.value) == ("--at is 24 hours ago, outside the 24 hours Prometheus keeps "
                                 "(its retention)")


def test_at_with_end_is_refused_and_with_since_or_start_ends_the_asked_window() -> None:
    with pytest.raises(ValueError) as caught:
        Asked(at=NOW - 60, end=NOW - 30).window([RUNNING], NOW, DAY)
    assert str(caught.value) == "--at and --end exclude each other: give one"
    w = Asked(since=600, at=NOW - 60).window([RUNNING], NOW, DAY)
    assert (w.start, w.end, w.ends_now) == (NOW - 660, NOW - 60, False)
    w = Asked(start=NOW - 100, at=NOW - 60).window([RUNNING], NOW, DAY)
    assert (w.start, w.end) == (NOW - 100, NOW - 60)


def test_an_asked_window_is_taken_as_given() -> None:
    w = Asked(since=600).window([ENDED], NOW, DAY)
    assert (w.start, w.end, w.ends_now) == (NOW - 600, NOW, True)
    w = Asked(start=NOW - 7200, end=NOW - 3600).window([], NOW, DAY)
    assert (w.start, w.end, w.ends_now) == (NOW - 7200, NOW - 3600, False)
    w = Asked(end=NOW - 100).window([], NOW, DAY)
    assert (w.start, w.end) == (NOW - 3700, NOW - 100)


def test_a_window_that_ends_before_the_retention_is_refused_one_at_its_edge_taken() -> None:
    assert Asked(start=NOW - 2 * DAY, end=NOW - DAY).window([], NOW, DAY).end == NOW - DAY
    with pytest.raises(ValueError) as caught:
        Asked(start=NOW - 2 * DAY, end=NOW - DAY - 1).window([], NOW, DAY)
    assert str(caught.value) == ("the window ends 24 hours ago, outside the 24 hours "
                                 "Prometheus keeps (its retention)")
    ended_long_ago = run(NOW - 5 * DAY, NOW - 3 * DAY, exit_reason="clean")
    with pytest.raises(ValueError, match="the window ends 3 days ago, outside the 2 days"):
        Asked().window([ended_long_ago], NOW, 2 * DAY)


def test_lengths_are_differences_of_the_times_however_far_apart() -> None:
    """A start near 1970 or an --at in the 2080s (a year typed wrong): every length is end less
    start, not what a remainder of the two would give once one is over twice the other."""
    w = Window.of(since=None, start=1_000.0, end=NOW)
    assert w.seconds == NOW - 1_000.0
    assert w.describe().endswith("(19,675.9 days)")
    w = Window.life(1_000.0, 3_500.0, running=False, now=NOW)  # 50 s of margin each side
    assert (w.start, w.end, w.step) == (950.0, 3_550.0, 7.0)
    with pytest.raises(ValueError) as caught:
        Asked(at=2 * NOW + 86_400.0).window([RUNNING], NOW, DAY)
    assert str(caught.value) == "--at is 19,676.9 days in the future"
    with pytest.raises(ValueError) as caught:
        Asked(at=1_000.0).window([RUNNING], NOW, 10 * DAY)
    assert str(caught.value) == ("--at is 19,675.9 days ago, outside the 10 days Prometheus "
                                 "keeps (its retention)")
    with pytest.raises(ValueError) as caught:
        Asked(start=500.0, end=1_000.0).window([RUNNING], NOW, 10 * DAY)
    assert str(caught.value) == ("the window ends 19,675.9 days ago, outside the 10 days "
                                 "Prometheus keeps (its retention)")
