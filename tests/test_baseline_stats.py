"""The baseline's statistics (trainwatch/diagnose/baseline_stats.py): a run against the median of
earlier runs, a difference inside their own spread is no change, fewer than two runs is no
baseline; and --max-slowdown's grammar."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwatch.diagnose.baseline_stats import (
    FASTER,
    NO_BASELINE,
    NO_CHANGE,
    SLOWER,
    Judgement,
    judge,
    parse_slowdown,
)

throughputs = st.floats(min_value=0.1, max_value=1e6, allow_nan=False, allow_infinity=False)
runs = st.lists(throughputs, min_size=2, max_size=12)


def test_a_run_23_percent_slower_than_the_median_is_slower_by_23_percent() -> None:
    j = judge(77.0, [100.0, 98.0, 103.0, 101.0, 99.0])
    assert j.state == SLOWER and j.median == 100.0
    assert j.change == pytest.approx(-0.23) and j.percent == "\u221223%"
    assert j.beyond(0.05) and not j.beyond(0.25)


def test_a_faster_run_is_faster_and_never_fails_the_gate() -> None:
    j = judge(104.0, [100.0, 98.0, 101.0])
    assert j.state == FASTER and j.percent == "+4%" and not j.beyond(0.0)


def test_fewer_than_two_runs_is_no_baseline_and_says_how_many() -> None:
    for baseline in ([], [100.0]):
        j = judge(10.0, baseline)
        assert j.state == NO_BASELINE and j.runs == len(baseline) and j.change is None
        assert j.percent == "no baseline" and not j.beyond(0.0)
    # A run without a throughput is no run of the baseline.
    assert judge(10.0, [100.0, float("nan"), 0.0]).state == NO_BASELINE


def test_one_pinned_run_is_a_baseline_when_asked_for() -> None:
    assert judge(50.0, [100.0], minimum=1).state == SLOWER


@given(runs, st.floats(min_value=0.0, max_value=1.0))
def test_a_run_inside_the_baseline_runs_spread_is_no_change(baseline: list[float],
                                                            where: float) -> None:
    low, high = min(baseline), max(baseline)
    current = min(high, max(low, low + where * (high - low)))
    j = judge(current, baseline)
    assert j.state == NO_CHANGE and not j.beyond(0.0)
    assert j.low is not None and j.high is not None and j.low <= 0 <= j.high


@given(runs, st.floats(min_value=0.01, max_value=0.99))
def test_a_run_below_the_slowest_baseline_run_is_slower_by_its_ratio_to_the_median(
        baseline: list[float], fraction: float) -> None:
    current = min(baseline) * fraction
    j = judge(current, baseline)
    assert j.state == SLOWER
    assert j.change == pytest.approx(current / statistics.median(baseline) - 1)
    assert j.beyond(-j.change * 0.999) and not j.beyond(-j.change * 1.001)


@given(runs, throughputs, st.floats(min_value=0.01, max_value=100.0))
def test_the_judgement_does_not_depend_on_the_unit(baseline: list[float], current: float,
                                                   scale: float) -> None:
    a, b = judge(current, baseline), judge(current * scale, [v * scale for v in baseline])
    assert a.state == b.state or abs((a.change or 0) - (b.change or 0)) < 1e-9


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("15 %", 0.15), ("0.05", 0.05),
                                             ("0%", 0.0), ("99.5%", 0.995)])
def test_max_slowdown_reads_a_percentage_or_a_fraction(text: str, value: float) -> None:
    assert parse_slowdown(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["banana", "", "%", "-5%", "100%", "1.5", "nan", "inf%"])
def test_max_slowdown_refuses_what_is_no_fraction_of_0_to_1_in_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="--max-slowdown") as err:
        parse_slowdown(text)
    assert "\n" not in str(err.value)


# Mutation testing (make mutation TARGETS=baseline_stats) found these unasserted.
def test_the_spread_is_each_extreme_runs_change_from_the_median() -> None:
    j = judge(90, [80, 100, 125])
    assert (j.state, j.runs, j.median) == (NO_CHANGE, 3, 100)
    assert (j.change, j.low, j.high) == (pytest.approx(-0.1), pytest.approx(-0.2),
                                         pytest.approx(0.25))
    wide = judge(90, [80, 100, 250])  # the fastest run over twice the median
    assert (wide.low, wide.high) == (pytest.approx(-0.2), pytest.approx(1.5))


def test_beyond_is_strictly_more_than_the_bound_and_only_when_slower() -> None:
    j = judge(75, [100, 100, 100])
    assert (j.state, j.change) == (SLOWER, -0.25)
    assert not j.beyond(0.25) and j.beyond(0.2499)
    assert not judge(130, [100, 100, 100]).beyond(0.0)  # faster
    assert not judge(100, [90, 100, 110]).beyond(0.0)  # inside the spread


def test_runs_without_a_positive_throughput_are_left_out() -> None:
    assert judge(100, [-5.0, 100, 100]).runs == 2
    assert judge(100, [0.0, 100]).state == NO_BASELINE  # one run left: too few


@pytest.mark.parametrize("current", [None, math.nan, math.inf])
def test_no_current_throughput_is_no_baseline_however_many_runs(current: float | None) -> None:
    j = judge(current, [100, 100, 100, 100])
    assert (j.state, j.runs, j.change) == (NO_BASELINE, 4, None)


@pytest.mark.parametrize(("change", "shown"), [(-0.234, "\u221223%"), (-0.236, "\u221224%"),
                                               (0.04, "+4%"), (-0.004, "0%")])
def test_percent_rounds_the_change_in_percent(change: float, shown: str) -> None:
    assert Judgement(SLOWER, 5, 100.0, change).percent == shown


def test_a_judgement_cannot_be_changed_after_it_is_made() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        judge(75, [100, 100]).state = NO_CHANGE  # type: ignore[misc]
