"""The limit benchmarks: accuracy against pipelines of known cost, publication, and
`trainwatch diagnose` naming the slower side on a live stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service, wait_until
from tests.live_stack import live_stack
from tests.trial_support import EXAMPLES, pushed_value
from trial_instrumentation import limits, names

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader

sys.path.insert(0, str(EXAMPLES))
from pytorch_loop import SlowDataset, make_loader, parse_args

# A loader of 25 samples per 50 ms: 500 samples/s. Long sleeps: on a loaded machine a sleep
# wakes milliseconds late, which 20 ms batches felt as -15% (measured, load average 11).
BATCH, DELAY = 25, 0.05
TRAINWATCH = Path(sys.executable).parent / "trainwatch"


def slow_loader(delay: float = DELAY) -> DataLoader:  # type: ignore[type-arg]
    args = parse_args(["--batch-size", str(BATCH), "--workers", "0", "--steps", "40"])
    return make_loader(args, SlowDataset(40 * BATCH, delay))


def test_loader_limit_is_the_pipelines_rate() -> None:
    rate = limits.loader_limit(slow_loader(), seconds=2.0)
    # sleep() never returns early, so the rate cannot beat BATCH / DELAY; a loaded machine
    # oversleeps a little.
    assert 0.85 * BATCH / DELAY <= rate <= 1.01 * BATCH / DELAY


def test_step_limit_is_the_steps_rate() -> None:
    batch = torch.zeros(BATCH, 4)
    rate = limits.step_limit(lambda b: time.sleep(DELAY), batch, seconds=2.0)
    assert 0.85 * BATCH / DELAY <= rate <= 1.01 * BATCH / DELAY


def test_bad_input_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="seconds must be > 0"):
        limits.loader_limit([[1]], seconds=0)
    with pytest.raises(ValueError, match="no batch"):
        limits.loader_limit([], seconds=0.1)


def test_limits_are_published_in_the_trials_group(pushgateway: Service) -> None:
    with ti.Trial(experiment="limits", trial="pub", pushgateway=pushgateway.url,
                  push_interval=0.1) as trial:
        assert pushed_value(pushgateway, names.LOADER_LIMIT) is None  # not before measured
        loader = trial.measure_loader_limit(slow_loader(0.005), seconds=0.3)
        wait_until(lambda: pushed_value(pushgateway, names.LOADER_LIMIT, trial="pub") == loader,
                   what="the loader limit pushed")
        # The step limit, not measured yet, is not in the group (no made-up zero beside it).
        assert pushed_value(pushgateway, names.STEP_LIMIT, trial="pub") is None
        step = trial.measure_step_limit(lambda b: None, [0] * 7, seconds=0.1)
        for name, value in ((names.LOADER_LIMIT, loader), (names.STEP_LIMIT, step)):
            wait_until(lambda n=name, v=value: pushed_value(pushgateway, n, trial="pub") == v,
                       what=f"{name} pushed")


def test_diagnose_names_the_slower_side(tmp_path: Path) -> None:
    experiment, delay, batch = "limits-live", 0.05, 20
    with live_stack(tmp_path, rate_window="10s", for_="3s") as stack:
        argv = [sys.executable, str(EXAMPLES / "limits.py"), "--limit-seconds", "2",
                "--loader-delay", str(delay), "--batch-size", str(batch), "--workers", "0",
                "--steps", "100000", "--experiment", experiment, "--trial", "t",
                "--pushgateway", stack.pushgateway.url, "--push-interval", "0.5"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        with open(tmp_path / "trial.log", "wb") as log:
            stack.trials["t"] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                 env=env, start_new_session=True)
        stack.prometheus.wait_for_series(f'{names.STEP_LIMIT}{{experiment="{experiment}"}}', 60)

        def diagnose(*fmt: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(TRAINWATCH), "diagnose", "--experiment", experiment,
                                   "--prometheus", stack.prometheus.url, *fmt],
                                  capture_output=True, text=True, timeout=30, check=False)

        [report] = json.loads(diagnose("--format", "json").stdout)["reports"]
        text = diagnose().stdout
    # The loader delivers batch / delay samples/s; the tiny CPU step consumes many times that.
    assert 0.85 * batch / delay <= report["loader_limit"] <= 1.01 * batch / delay
    assert report["step_limit"] > 2 * report["loader_limit"]
    needed = report["step_limit"] / report["loader_limit"]
    assert report["limits_advice"].endswith(f"the loader must get {needed:.1f}x faster")
    assert f"measured limits: {report['limits_advice']}" in text
