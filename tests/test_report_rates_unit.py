"""trainwatch.report.rates: each raw figure is the recording rule's own expression (from
trainwatch.contract.figures) on the series the report's selection picks, with the rate window
given and the run's age written inline for that window (in seconds), never another's."""

from __future__ import annotations

import pytest

from tests.frozen import assert_frozen
from trainwatch.contract import figures
from trainwatch.report.rates import RawRates

TRIAL = 'experiment="e", trial="t1"'


def counter(metric: str, window: str, seconds: float, trial: str, *extra: str) -> str:
    return figures.born_at_zero(metric, trial, window, figures.inline_age(trial, seconds),
                                *extra)


@pytest.mark.parametrize("window, seconds", [("5m", 300.0), ("90s", 90.0), ("1h", 3600.0)])
def test_a_counters_rate_is_born_at_zero_over_the_window_or_the_runs_age(
        window: str, seconds: float) -> None:
    raw = RawRates(window)
    found = raw.counter_rate("trainwatch_trial_steps_total", 'experiment="e"', trial="t1",
                             rank=None)
    assert found == counter("trainwatch_trial_steps_total", window, seconds, TRIAL)
    assert f"[{window}]" in found and f"time() - {seconds:g}" in found
    assert 'trainwatch_trial_steps_total{experiment="e", trial="t1"}' in found
    assert "rank=" not in found


@pytest.mark.parametrize("window, seconds", [("5m", 300.0), ("45s", 45.0)])
def test_phase_share_is_each_phases_time_over_the_step_time_per_rank(
        window: str, seconds: float) -> None:
    found = RawRates(window).phase_share('experiment="e"', trial="t1")
    phases = counter("trainwatch_trial_phase_seconds_sum", window, seconds, TRIAL, "phase")
    steps = counter("trainwatch_trial_step_seconds_sum", window, seconds, TRIAL)
    assert found == figures.phase_share(f"(\n{phases}\n)", f"(\n{steps}\n)")
    assert found.startswith("(\n(\n  sum by (experiment, trial, rank, phase) (rate("
                            'trainwatch_trial_phase_seconds_sum{experiment="e", trial="t1"}'
                            f"[{window}]))")
    assert "sum by (experiment, trial, rank) (rate(trainwatch_trial_step_seconds_sum" in found


def test_the_node_figures_select_the_exporters_series_with_the_window() -> None:
    raw = RawRates("2m")
    assert raw.cpu_utilization('instance="n:9"') == (
        '1 - sum by (instance) (rate(trainwatch_cpu_seconds_total{instance="n:9", '
        'mode=~"idle|iowait|steal"}[2m]))\n'
        '/ max by (instance) (trainwatch_cpu_count{instance="n:9"})')
    assert raw.device_rate("nic_receive_bytes", 'device="eth0"', 'instance="n:9"') == (
        'sum by (instance, device) (rate(trainwatch_nic_receive_bytes_total{device="eth0", '
        'instance="n:9"}[2m]))')
    assert raw.gpu_busy('uuid="GPU-1"') == figures.gpu_busy('uuid="GPU-1"')
    assert 'trainwatch_gpu_sm_active_ratio{uuid="GPU-1"}' in raw.gpu_busy('uuid="GPU-1"')
    assert_frozen(raw)
