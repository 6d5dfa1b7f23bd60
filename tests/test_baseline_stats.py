"""The baseline's statistics (trainwatch/diagnose/baseline_stats.py): a run against the median of
earlier runs, a difference inside their own spread is no change, fewer than two runs is no
baseline; and --max-slowdown's grammar."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwatch.diagnose.baseline_stats import (
    FASTER,
    NO_BASELINE,
    NO_CHANGE,
    SLOWER,
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
