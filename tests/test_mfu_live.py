"""MFU end to end: a real trial that declares its FLOPs per sample, pushing to a real
Pushgateway, the fake-NVML exporter with a --gpu.peak-flops override, and the recording rules
in a real Prometheus."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.fake_nvml import fake_uuid
from tests.live_stack import live_stack
from trainwatch.contract.records import RecordNames

PEAK, FLOPS = 2e12, 1e9  # the override (bf16) and the trial's FLOPs per sample
WINDOW = "10s"
# A trial of 10-sample steps of ~50 ms on fake GPUs 0 and 1 (one rank on two GPUs: their
# peaks add up), declaring bf16 and FLOPS.
TRIAL = f"""
import sys, time
from trial_instrumentation import Trial
with Trial("live-mfu", "mfu", pushgateway=sys.argv[1], push_interval=0.5,
           gpu_uuids=["{fake_uuid(0)}", "{fake_uuid(1)}"], flops_per_sample={FLOPS!r}, precision="bf16") as trial:
    for _ in trial.loader(iter(int, 1), samples=10):
        with trial.phase("train_batch"):
            time.sleep(0.05)
"""


def value(rows: list[dict[str, object]]) -> float:
    [row] = rows
    return float(row["value"][1])  # type: ignore[index]


def test_prometheus_mfu_is_samples_per_second_times_flops_over_the_peak(tmp_path: Path) -> None:
    names = RecordNames(WINDOW)
    with live_stack(tmp_path, rate_window=WINDOW, for_="5s",
                    exporter_args=(f"--gpu.peak-flops=bf16={PEAK!r}",)) as live:
        prom = live.prometheus
        live.start_process("mfu", [sys.executable, "-c", TRIAL, live.pushgateway.url])
        # A whole window of MFU records. Each is the samples/s record of its own evaluation times
        # FLOPs over the peak (chained), so the two windows' averages agree whether or not the
        # rate still ramps up; a young run's samples/s is over its own age (no ramp to wait out).
        prom.wait_for_series(f'count_over_time({names.mfu}{{trial="mfu", precision="bf16"}}'
                             f"[{WINDOW}]) >= 9", 60)
        mfu = value(prom.query(f'avg_over_time({names.mfu}{{trial="mfu"}}[{WINDOW}])'))
        samples = value(prom.query(f'avg_over_time({names.samples_rate}{{trial="mfu"}}'
                                   f"[{WINDOW}])"))
        assert samples > 50, live.trial_log("mfu")
        assert mfu == pytest.approx(samples * FLOPS / (2 * PEAK), rel=0.02)
        peak = value(prom.query(f'{names.trial_peak_flops}{{trial="mfu"}}'))
        assert peak == 2 * PEAK  # the override on each GPU, not the H100's 989.4e12
        # One rank: the trial's MFU is that rank's (both recorded in one evaluation).
        now = prom.query(f'{names.mfu} or {names.trial_mfu}')
        assert len(now) == 2 and float(now[0]["value"][1]) == float(now[1]["value"][1])
        said = diagnose(prom.url)
        # Per GPU, as the datasheet says it: 2 TFLOPS, not the rank's 4; the MFU in whole
        # percent, as recorded (about 5%).
        found = re.search(r"MFU (\d+)% of 2 TFLOPS bf16 dense on 2 × H100 80GB HBM3", said)
        assert found, said
        assert abs(int(found[1]) - 100 * mfu) <= 1, (said, mfu)


def diagnose(prometheus: str) -> str:
    trainwatch = Path(sys.executable).parent / "trainwatch"
    done = subprocess.run([str(trainwatch), "diagnose", "--experiment", "live-mfu", "--trial",
                           "mfu", "--prometheus", prometheus], capture_output=True, text=True,
                          timeout=60, check=False)
    return done.stdout + done.stderr
