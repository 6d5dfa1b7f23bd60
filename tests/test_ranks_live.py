"""Stragglers and scaling efficiency on a live stack: two real 2-rank gloo DDP CPU trials (examples/ddp_gloo.py under
torchrun), one whose rank 1 sleeps 0.15 s more per batch and its twin without the delay.
TrainwatchRankStraggler fires for rank 1 of the first, naming its node, and never for the twin;
`trainwatch diagnose` names the straggler rank and its node."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_stack import LiveStack, live_stack
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names

pytest.importorskip("torch")

RATE_WINDOW, FOR = "10s", "5s"
EXPERIMENT = "live-ranks"
NAMES = RecordNames(RATE_WINDOW)
TRAINWATCH = Path(sys.executable).parent / "trainwatch"
ALERT = "TrainwatchRankStraggler"
NODE = os.uname().nodename


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with live_stack(tmp_path_factory.mktemp("ranks_live"), rate_window=RATE_WINDOW,
                    for_=FOR) as live:
        # A 0.05 s loader sleep per batch on every rank keeps scheduling noise on a shared
        # machine small against the step; no DataLoader workers, so the sleep is in the step.
        # Each rank first measures its single-rank step limit (1 s), for scaling efficiency.
        common = ("--workers", "0", "--batch-size", "8", "--loader-delay", "0.05",
                  "--steps", "3000", "--step-limit-seconds", "1")
        live.start_trial(EXPERIMENT, "straggler", *common, "--straggler-rank", "1",
                         "--straggler-delay", "0.15", ranks=2, env={"OMP_NUM_THREADS": "1"})
        live.start_trial(EXPERIMENT, "even", *common, ranks=2, env={"OMP_NUM_THREADS": "1"})
        prom = live.prometheus
        prom.wait_for_series(f'ALERTS{{alertname="{ALERT}", alertstate="firing", '
                             f'experiment="{EXPERIMENT}"}}', 120)
        prom.wait_for_series('ALERTS{alertname="TrainwatchScalingInefficient", '
                             'alertstate="firing", trial="even"}', 60)
        # The twin has been measured as long as the straggler has been firing.
        prom.wait_for_series(f'count_over_time({NAMES.rank_spread}{{trial="even"}}[15s]) >= 10',
                             30)
        for name, proc in live.trials.items():
            assert proc.poll() is None, live.trial_log(name)
        yield live


def test_straggler_alert_fires_for_rank_1_naming_its_node(stack: LiveStack) -> None:
    firing = [a for a in stack.prometheus.alerts()
              if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]
    assert [(a["labels"]["trial"], a["labels"]["rank"], a["labels"]["nodename"])
            for a in firing] == [("straggler", "1", NODE)], firing
    [alert] = firing
    assert f"rank 1 on node {NODE}" in alert["annotations"]["description"]
    own = own_steps(stack)
    # Rank 1's own step holds its extra 0.15 s; rank 0's wait for it is not counted.
    assert own["1"] - own["0"] > 0.1, own
    # The value is rank 1's own step over the median rank's (of two: their mean), not over the
    # fastest rank's (~3x here) nor its own (1).
    assert float(alert["value"]) > 1.25
    assert float(alert["value"]) == pytest.approx(over_median(own), rel=0.2), (alert, own)


def own_steps(stack: LiveStack) -> dict[str, float]:
    """Each rank of the straggler trial: its own step mean (its wait for the others left out)."""
    return {s["metric"]["rank"]: float(s["value"][1]) for s in stack.prometheus.query(
        f'{NAMES.rank_step_mean}{{trial="straggler"}}')}


def over_median(own: dict[str, float]) -> float:
    """Rank 1's own step over the median of the ranks' (``quantile(0.5)`` of two: their mean)."""
    return own["1"] / statistics.median(own.values())


def test_the_twin_without_delay_never_fires(stack: LiveStack) -> None:
    prom = stack.prometheus
    assert prom.query(f'count_over_time(ALERTS{{alertname="{ALERT}", trial="even"}}[10m])') == []
    [spread] = prom.query(f'max_over_time({NAMES.rank_spread}{{trial="even"}}[15s])')
    assert float(spread["value"][1]) < 1.25, spread
    [slow] = prom.query(f'min_over_time({NAMES.rank_spread}{{trial="straggler"}}[5s])')
    assert float(slow["value"][1]) > 1.25, slow


def diagnose(stack: LiveStack, trial: str, fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), "diagnose", "--experiment", EXPERIMENT, "--trial",
                           trial, "--format", fmt, "--prometheus", stack.prometheus.url],
                          capture_output=True, text=True, timeout=30, check=False)


def test_diagnose_names_the_straggler_rank_and_its_node(stack: LiveStack) -> None:
    reports = json.loads(diagnose(stack, "straggler", "json").stdout)["reports"]
    assert sorted(r["rank"] for r in reports) == ["0", "1"]
    for report in reports:  # every rank's report names the trial's straggler
        [(rank, node, ratio)] = report["ranks"]["stragglers"]
        assert (rank, node) == ("1", NODE) and ratio > 1.25
        assert ratio == pytest.approx(over_median(own_steps(stack)), rel=0.2), report
    text = diagnose(stack, "straggler", "text").stdout
    assert f"STRAGGLER: rank 1 on node {NODE}" in text, text
    assert "what to change on the straggler: Find what differs on the slow rank" in text
    even = json.loads(diagnose(stack, "even", "json").stdout)["reports"]
    assert [r["ranks"]["stragglers"] for r in even] == [[], []], even


def test_scaling_efficiency_is_recorded_alerted_and_explained(stack: LiveStack) -> None:
    prom = stack.prometheus
    efficiency = {s["metric"]["trial"]: float(s["value"][1])
                  for s in prom.query(NAMES.scaling_efficiency)}
    # Both sleep >= 0.05 s per batch of 8 against a step limit of thousands of samples/s.
    assert set(efficiency) == {"straggler", "even"} and max(efficiency.values()) < 0.2
    # Each is both ranks' samples/s over two ranks' single-rank limit (their mean), read here
    # from the ranks' own series: not one rank's samples, nor one rank's limit.
    for trial, found in efficiency.items():
        samples = [float(s["value"][1]) for s in prom.query(
            f'{NAMES.samples_rate}{{experiment="{EXPERIMENT}", trial="{trial}"}}')]
        limits = [float(s["value"][1]) for s in prom.query(
            f'{names.STEP_LIMIT}{{experiment="{EXPERIMENT}", trial="{trial}"}}')]
        assert len(samples) == len(limits) == 2, (samples, limits)
        assert found == pytest.approx(sum(samples) / (2 * statistics.mean(limits)),
                                      rel=0.15), (trial, found, samples, limits)
    firing = {a["labels"]["trial"]: a for a in prom.alerts()
              if a["labels"]["alertname"] == "TrainwatchScalingInefficient"}
    assert "even" in firing, firing
    # The alert names what holds the trial back, recorded with diagnose's thresholds.
    assert firing["even"]["annotations"]["cause"] == "loader", firing["even"]
    causes = {}
    for trial in ("straggler", "even"):
        reports = json.loads(diagnose(stack, trial, "json").stdout)["reports"]
        causes[trial] = {r["scaling"]["cause"] for r in reports}
    # The straggler trial is held back by rank 1; its even twin by the loader both ranks wait on.
    assert causes == {"straggler": {"straggler"}, "even": {"loader"}}, causes
    text = diagnose(stack, "straggler", "text").stdout
    assert f"SCALING held back by a straggler: rank 1 on node {NODE}" in text, text
    # Its extra 0.15 s a batch sleeps in its Dataset, read in dataloader_next (no workers).
    assert "evidence: rank 1: its extra time is in dataloader_next: " in text, text
