"""Numbers in words a person reads (issue 38, item 7): one duration formatter (cliutil.ago),
one signed formatter (cliutil.signed), a percentile marked where it was interpolated inside a
histogram bucket, and "last timings:" (a stale trial's phase timings) never read as the
profiler trace."""

from __future__ import annotations

import pytest

from trainwatch.cliutil import ago, signed
from trainwatch.diagnose.baseline_stats import Judgement
from trainwatch.diagnose.figures import RankReport
from trainwatch.diagnose.render import quantile_ms, report_text


@pytest.mark.parametrize(("seconds", "said"), [
    (75, "75 seconds"), (420, "7 minutes"), (9000, "2.5 hours"), (47 * 3600, "47 hours"),
    (48 * 3600, "2 days"), (360 * 3600, "15 days"), (60502.5 * 3600, "2,520.9 days")])
def test_durations_over_48_hours_read_in_days(seconds, said):
    assert ago(seconds) == said
    assert seconds < 48 * 3600 or "hours" not in ago(seconds)


@pytest.mark.parametrize(("value", "spec", "unit", "said"), [
    (-0.00004, ".1f", " ms", "0.0 ms"), (0.00004, ".1f", " ms", "0.0 ms"), (-0.004, ".0%", "", "0%"),
    (-0.4, ".0f", "%", "0%"), (12.34, ".1f", " ms", "+12.3 ms"), (-12.34, ".1f", " ms", "-12.3 ms"),
    (-0.06, ".0%", "", "-6%"), (0.0, ".1f", "", "0.0")])
def test_a_value_that_rounds_to_zero_has_no_sign(value, spec, unit, said):
    assert signed(value, spec, unit) == said


def test_baseline_percent_of_a_tiny_change_is_not_minus_zero():
    assert Judgement("no change", 5, change=-0.001).percent == "0%"
    assert Judgement("slower", 5, change=-0.23).percent == "\u221223%"
    assert Judgement("faster", 5, change=0.04).percent == "+4%"


def test_a_percentile_inside_a_bucket_says_so_and_one_on_a_bound_does_not():
    bounds = (0.001, 0.025, 0.05, 0.1)
    assert quantile_ms(0.0423, bounds) == "≈42.3 ms (within the 25–50 ms bucket)"
    assert quantile_ms(0.0005, bounds) == "≈0.5 ms (within the 0–1 ms bucket)"
    assert quantile_ms(0.05, bounds) == "50.0 ms"
    assert quantile_ms(0.0423, ()) == "42.3 ms"  # no bounds read: nothing claimed
    assert quantile_ms(None, bounds) == "-"


def test_diagnose_text_marks_its_p50_and_p95():
    r = RankReport("e", "t", "0", "n", "1", "1", "5m", step_seconds={"0.5": 0.0423, "0.95": 0.05},
                   step_bounds=(0.025, 0.05, 0.1))
    text = report_text(r)
    assert "p50 ≈42.3 ms (within the 25–50 ms bucket), p95 50.0 ms;" in text
    assert "p50 42.3 ms" not in text
