"""The rules on a live stack: real trainwatch-exporter, Pushgateway and Prometheus, and two real
PyTorch CPU trials (examples/pytorch_loop.py): one with a slow data loader, one healthy.

The rules are the committed ones rendered again by the same generator with shorter `for` and
rate windows (overrides, not an edited copy), so the whole test takes well under a minute.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import Prometheus, wait_until
from prometheus import generate_rules
from tests.live_stack import HEALTHY_STEP, SLOW_LOADER_SHARE_FLOOR, live_stack
from trainwatch.contract.records import QUANTILES, RecordNames

pytest.importorskip("torch")

FOR_SECONDS, RATE_WINDOW = 5, "10s"
ALERT = "TrainwatchDataloaderBound"
EXPERIMENT = "live-rules"
# slow sleeps 50 ms per batch in its Dataset: ~98% of each step waits for the loader idle
# (SLOW_LOADER_SHARE_FLOOR says what load does to that).
# healthy: the same loop without the delay, its step 2 ms of CPU (HEALTHY_STEP: ~3% in
# dataloader_next); it runs epoch after epoch over a small data set until the test stops it (600,000 steps' worth
# of data was a 600 MB tensor made before its first step).
TRIALS = {"slow": ["--loader-delay", "0.05", "--steps", "2000"],
          "healthy": [*HEALTHY_STEP, "--steps", "2000", "--max-seconds", "1800"]}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Prometheus, dict[str, subprocess.Popen[bytes]]]]:
    # Two fake GPUs (NVML faked at the pynvml boundary): busy, capped by their power limit.
    with live_stack(tmp_path, rate_window=RATE_WINDOW, for_=f"{FOR_SECONDS}s") as live:
        for name, args in TRIALS.items():
            live.start_trial(EXPERIMENT, name, "--workers", "0", "--batch-size", "8", *args)
        yield live.prometheus, live.trials  # healthy has steps to spare: the stack stops it


def loader_alerts(prom: Prometheus, trial: str) -> list[dict[str, Any]]:
    return [a for a in prom.alerts()
            if a["labels"]["alertname"] == ALERT and a["labels"].get("trial") == trial]


def select(metric: str, **labels: str) -> str:
    matchers = ",".join(f'{k}="{v}"' for k, v in {"experiment": EXPERIMENT, **labels}.items())
    return f"{metric}{{{matchers}}}"


def by_trial(prom: Prometheus, metric: str, **labels: str) -> dict[str, float]:
    """This test's trials' values of ``metric``, keyed by the trial label."""
    return {s["metric"]["trial"]: float(s["value"][1])
            for s in prom.query(select(metric, **labels))}


def wait_present_past_for(prom: Prometheus, series: str) -> None:
    """Wait until ``series`` has had samples for longer than `for` (+3 evaluations): an alert
    on it that was going to fire has fired by then, so its absence means something."""
    window = FOR_SECONDS + 3
    wait_until(lambda: prom.query(f"count_over_time({series}[{window}s]) >= {window - 1}"),
               timeout=30, what=f"{window}s of {series}", interval=0.5)


def test_dataloader_bound_fires_for_the_slow_trial_only_and_recording_rules_cover_both(
        stack: tuple[Prometheus, dict[str, subprocess.Popen[bytes]]]) -> None:
    prom, trials = stack
    names = RecordNames(RATE_WINDOW)

    def slow_firing() -> list[dict[str, Any]]:
        for name, proc in trials.items():
            assert proc.poll() is None, f"trial {name} exited early ({proc.returncode})"
        return [a for a in loader_alerts(prom, "slow") if a["state"] == "firing"]

    [alert] = wait_until(slow_firing, timeout=60, what=f"{ALERT} firing for trial slow",
                         interval=0.5)
    assert alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) > SLOW_LOADER_SHARE_FLOOR
    # The description carries this alert's own value as a percentage (Prometheus's
    # humanizePercentage: four significant digits), and the threshold its expression compares
    # against: both expanded at the evaluation the value comes from.
    threshold = generate_rules.load_settings().threshold(ALERT)
    assert alert["annotations"]["description"].startswith(
        f"Trial {EXPERIMENT}/slow rank 0 spends {float(alert['value']) * 100:.4g}% of its step "
        f"time in dataloader_next (threshold {threshold:.0%}). "), alert

    wait_present_past_for(prom, select(names.phase_share, phase="dataloader_next",
                                       trial="healthy"))
    assert loader_alerts(prom, "healthy") == [], "a healthy trial must not be dataloader-bound"
    shares = by_trial(prom, names.phase_share, phase="dataloader_next")
    assert shares["slow"] > SLOW_LOADER_SHARE_FLOOR and shares["healthy"] < threshold, shares

    for expr in (names.steps_rate, names.samples_rate):
        rates = by_trial(prom, expr)
        assert rates.keys() == {"slow", "healthy"} and all(v > 0 for v in rates.values()), expr
    samples, steps_rate = by_trial(prom, names.samples_rate), by_trial(prom, names.steps_rate)
    for trial in ("slow", "healthy"):  # --batch-size 8
        assert samples[trial] == pytest.approx(8 * steps_rate[trial], rel=0.25), trial
    for q in QUANTILES:
        steps = by_trial(prom, names.step_quantile, quantile=q)
        assert steps.keys() == {"slow", "healthy"} and steps["slow"] > 0.04, (q, steps)
        assert steps["slow"] > steps["healthy"], (q, steps)
        train = by_trial(prom, names.phase_quantile, quantile=q, phase="train_batch")
        assert train.keys() == {"slow", "healthy"} and all(v > 0 for v in train.values()), q
    # Pushed series keep job="trainwatch_trial" and carry no instance label (honor_labels).
    for series in prom.query(select("trainwatch_trial_steps_total")):
        assert series["metric"]["job"] == "trainwatch_trial" and "instance" not in series["metric"]
    [cpu] = prom.query(names.cpu_utilization)
    assert 0 < float(cpu["value"][1]) <= 1
    # The fake GPU i has (10 + i) GiB of its 80 GiB used by processes (FakeGpu.deterministic),
    # beside the driver's reservation, which is not counted as used (nvmlMemory_v2).
    gpus = {g["metric"]["gpu"]: float(g["value"][1]) for g in prom.query(names.gpu_memory_used)}
    assert gpus == {"0": pytest.approx(10 / 80), "1": pytest.approx(11 / 80)}, gpus
    # sw_power_cap is active on both GPUs: benign, so no throttling alert; the collectors work.
    power_cap = 'trainwatch_gpu_clock_event_active{reason="sw_power_cap"}'
    wait_present_past_for(prom, power_cap)
    assert len(prom.query(f"{power_cap} == 1")) == 2
    quiet = {"TrainwatchGPUThrottled", "TrainwatchCollectorFailing", "TrainwatchExporterDown"}
    assert [a["labels"] for a in prom.alerts() if a["labels"]["alertname"] in quiet] == []
    # Everything above was read from live trials (a finished one deletes its group).
    assert trials["healthy"].poll() is None, "healthy finished before the checks: raise --steps"
