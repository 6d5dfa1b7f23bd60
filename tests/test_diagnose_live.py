"""`trainwatch diagnose` and `trainwatch trials` against a live stack (tests/live_stack.py):
a data-loader-bound PyTorch trial and a healthy one, run at the same time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fake_nvml import fake_uuid
from benchmarks.fake_nvml_exporter import IDLE_PERCENT
from tests.live_stack import (
    BUSY_GPU,
    IDLE_GPU,
    RATE_OVERSHOOT,
    SLOW_LOADER_SHARE_FLOOR,
    TWO_TRIALS_EXPERIMENT,
    TWO_TRIALS_RATE_WINDOW,
    LiveStack,
)
from trainwatch.contract import remedies
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import loader_cause

pytest.importorskip("torch")

EXPERIMENT = TWO_TRIALS_EXPERIMENT
NAMES = RecordNames(TWO_TRIALS_RATE_WINDOW)
TRAINWATCH = Path(sys.executable).parent / "trainwatch"
# The slow trial sleeps 50 ms a step: 20 steps/s at most (160 samples/s, batch 8), as rate() reads.
SLOW_STEPS_PER_SECOND_CEILING = RATE_OVERSHOOT / 0.05


@pytest.fixture(scope="module")
def stack(two_trials: LiveStack) -> LiveStack:
    return two_trials


def trainwatch(stack: LiveStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), *args, "--prometheus", stack.prometheus.url],
                          capture_output=True, text=True, timeout=30, check=False)


def diagnose(stack: LiveStack, trial: str) -> tuple[int, dict[str, Any]]:
    done = trainwatch(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", trial,
                      "--format", "json")
    assert done.stderr == "", done.stderr
    [report] = json.loads(done.stdout)["reports"]
    return done.returncode, report


def loader_share(stack: LiveStack, trial: str) -> float:
    [series] = stack.prometheus.query(
        f'{NAMES.phase_share}{{experiment="{EXPERIMENT}", trial="{trial}", '
        f'phase="dataloader_next"}}')
    return float(series["value"][1])


def test_diagnose_names_the_data_loader_of_the_slow_trial_only(stack: LiveStack) -> None:
    code, slow = diagnose(stack, "slow")
    verdict = slow["verdict"]
    assert (code, verdict["kind"], verdict["alert"]) == (1, "dataloader",
                                                         "TrainwatchDataloaderBound")
    # The deployed threshold (from the rule's annotation), and the number Prometheus records.
    assert verdict["threshold"] == 0.3
    # Its Dataset sleeps in the trial process (--workers 0), which mostly waits: latency-bound,
    # with that cause's remedy only (tests/test_loader_cause_live.py: the other live cases).
    assert slow["loader_cause"]["kind"] == "latency_bound", slow["loader_cause"]
    assert verdict["remedy"] == remedies.LOADER_LATENCY_BOUND
    assert verdict["measured"] == pytest.approx(loader_share(stack, "slow"), abs=0.02)
    assert verdict["measured"] > SLOW_LOADER_SHARE_FLOOR
    # Among the rank's alerts, not necessarily first: on a busy 2-core machine the node's
    # TrainwatchCPUSaturated fires too, and it sorts before it.
    assert ("TrainwatchDataloaderBound", "firing") in \
        [(a["name"], a["state"]) for a in slow["alerts"]], slow["alerts"]
    assert slow["phases"][0]["phase"] == "dataloader_next"
    # Steps, not samples: 8 samples a step (batch 8), read at the same instant.
    assert 0 < slow["steps_per_second"] <= SLOW_STEPS_PER_SECOND_CEILING
    assert slow["step_seconds"]["0.5"] > 0.04
    assert slow["samples_per_second"] == pytest.approx(8 * slow["steps_per_second"], rel=1e-6)
    assert slow["world_size"] == "1" and slow["nodename"]

    code, healthy = diagnose(stack, "healthy")
    assert healthy["verdict"]["kind"] not in ("dataloader", "no_timings"), healthy["verdict"]
    assert loader_share(stack, "healthy") < 0.3
    assert not [a for a in healthy["alerts"] if a["name"] == "TrainwatchDataloaderBound"]
    assert code == healthy["verdict"]["exit_code"]
    assert healthy["steps_per_second"] > slow["steps_per_second"]  # it never sleeps


def test_reports_show_exactly_each_trials_gpu(stack: LiveStack) -> None:
    _, slow = diagnose(stack, "slow")
    _, healthy = diagnose(stack, "healthy")
    assert [(g["uuid"], g["gpu"], g["utilization"]) for g in slow["gpus"]] == \
        [(fake_uuid(IDLE_GPU), str(IDLE_GPU), pytest.approx(IDLE_PERCENT / 100))]
    assert [(g["uuid"], g["utilization"], g["memory_used"]) for g in healthy["gpus"]] == \
        [(fake_uuid(BUSY_GPU), pytest.approx(0.5), pytest.approx(10 / 80))]
    assert all(g["instance"] == stack.exporter_instance for g in slow["gpus"] + healthy["gpus"])


def test_text_report_says_what_to_change(stack: LiveStack) -> None:
    done = trainwatch(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", "slow")
    assert done.returncode == 1, done.stderr
    # Early (the trial may still be younger than the 10s window here) or not, the same verdict.
    assert re.search(r"^VERDICT( \(early, \d+ steps\))?: Data loader:", done.stdout, re.MULTILINE), \
        done.stdout
    assert f"what to change: {remedies.LOADER_LATENCY_BOUND}" in done.stdout
    # Its loader has no workers (--workers 0): no word of workers in the cause.
    assert f"  cause: {loader_cause.latency_title(0)}: " in done.stdout
    assert "the trial process (no DataLoader workers) wanting " in done.stdout
    assert "TrainwatchDataloaderBound firing" in done.stdout
    assert "#trainwatchdataloaderbound" in done.stdout


def test_unknown_trial_lists_the_live_ones(stack: LiveStack) -> None:
    done = trainwatch(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", "nope")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"no trial {EXPERIMENT}/nope" in done.stderr
    assert "healthy (rank 0)" in done.stderr and "slow (rank 0)" in done.stderr


def test_trials_lists_both_with_their_loader_share(stack: LiveStack) -> None:
    # The shared stack may hold other modules' trials too (under other experiments, pushed
    # before or after this test as the suite is scheduled): all are listed, the filter keeps
    # this experiment's two only.
    everything = trainwatch(stack, "trials", "--format", "json")
    assert everything.returncode == 0, everything.stderr
    listed = {(r["experiment"], r["trial"]) for r in json.loads(everything.stdout)["trials"]}
    assert {(EXPERIMENT, "slow"), (EXPERIMENT, "healthy")} <= listed
    done = trainwatch(stack, "trials", "--format", "json", "--experiment", EXPERIMENT)
    assert done.returncode == 0, done.stderr
    rows = {r["trial"]: r for r in json.loads(done.stdout)["trials"]}
    assert rows.keys() == {"slow", "healthy"}
    assert all(r["experiment"] == EXPERIMENT for r in rows.values())
    assert all(r["live"] and r["steps_per_second"] > 0 for r in rows.values())
    # Steps, not samples (8 a step): the slow one sleeps 50 ms a step, the healthy one never.
    assert rows["slow"]["steps_per_second"] <= SLOW_STEPS_PER_SECOND_CEILING, rows
    assert rows["slow"]["steps_per_second"] < rows["healthy"]["steps_per_second"], rows
    assert rows["slow"]["dataloader_share"] > SLOW_LOADER_SHARE_FLOOR \
        > rows["healthy"]["dataloader_share"]
    assert rows["slow"]["gpu_busy"] == pytest.approx(IDLE_PERCENT / 100)  # no GPM: utilization
    assert rows["healthy"]["gpu_busy"] == pytest.approx(0.6)  # GPM: SM activity, not NVML 50%
    text = trainwatch(stack, "trials", "--experiment", EXPERIMENT).stdout.splitlines()
    assert text[0].split() == ["EXPERIMENT", "TRIAL", "RANK", "NODE", "PID", "STARTED", "LAST",
                               "PUSH", "STATE", "STEPS", "STEPS/S", "VS", "BASELINE",
                               "LOADER", "GPU", "BUSY", "MFU", "CAUSE"]
    assert [line.split()[1] for line in text[1:]] == ["healthy", "slow"]
