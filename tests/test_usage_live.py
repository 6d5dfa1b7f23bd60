"""`trainwatch usage` on a live stack (issue 40): the real exporter over the fake NVML, a real
Pushgateway and Prometheus with the shipped rules, and two real PyTorch trials in two Kubernetes
namespaces (TRAINWATCH_K8S_NAMESPACE, as the chart's downward API sets it): a loader-bound one on
the idle fake GPU in team-a, a healthy one on the busy GPU in team-b. Rendered with a 10 s rate
window, the usage group records every 10 s (Settings.usage_interval follows a window shorter
than its shipped minute), so this waits for an evaluation with both trials timed, not for a
minute; tests/test_usage.py covers longer histories on backfilled series."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from benchmarks.fake_nvml import BUSY_GPM, fake_uuid
from benchmarks.fake_nvml_exporter import IDLE_PERCENT
from benchmarks.stack import Prometheus
from prometheus.rulegen.settings import load_settings
from tests.live_stack import BUSY_GPU, FAKE_GPUS, IDLE_GPU, live_stack
from trainwatch import cli
from trainwatch.cliutil import EXIT_OK
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names

EXPERIMENT = "usage-live"
WINDOW = "10s"
IDLE = RecordNames(WINDOW).gpu_seconds_idle
SHARE = RecordNames(WINDOW).phase_share
INTERVAL = load_settings().with_overrides(rate_window=WINDOW).usage_seconds  # 10 s


def _idle_samples(prom: Prometheus, trial: str) -> dict[float, dict[str, float]]:
    """A trial's idle GPU-seconds recorded in the last 5m: per evaluation, by cause."""
    found: dict[float, dict[str, float]] = {}
    for r in prom.query(f'{IDLE}{{trial="{trial}"}}[5m]'):
        for t, v in r["values"]:
            found.setdefault(float(t), {})[r["metric"]["cause"]] = float(v)
    return found


def _share_at(prom: Prometheus, trial: str, t: float) -> float:
    """A trial's recorded dataloader_next share as Prometheus read it at ``t``."""
    query = f'{SHARE}{{trial="{trial}",phase="{names.DATALOADER_NEXT}"}}'
    [r] = prom.api("query", query=query, time=str(t))["result"]
    return float(r["value"][1])


def test_usage_by_namespace_on_a_live_stack(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    with live_stack(tmp_path, rate_window=WINDOW, for_="3s") as live:
        # The exporter's GPUs recorded busy before a trial holds one: Prometheus applies its
        # targets a few seconds after it is ready, and a usage evaluation between the trials'
        # first scrape and the exporter's would hold a GPU nothing reports, counted never busy.
        live.prometheus.wait_for_series(f"count({RecordNames(WINDOW).gpu_busy}) == {FAKE_GPUS}", 30)
        common = ("--workers", "0", "--batch-size", "8", "--steps", "100000",
                  "--max-seconds", "150")
        for trial, gpu, namespace, extra in (("slow", IDLE_GPU, "team-a", ("--loader-delay",
                                                                           "0.05")),
                                             ("healthy", BUSY_GPU, "team-b", ())):
            live.start_trial(EXPERIMENT, trial, *common, *extra,
                             env={"TRAINWATCH_GPU_UUIDS": fake_uuid(gpu),
                                  "TRAINWATCH_K8S_NAMESPACE": namespace})
        prom = live.prometheus
        # A usage evaluation that split the slow trial's idle minute by its shares, and one
        # that counted the healthy trial's.
        prom.wait_for_series(f'{IDLE}{{trial="slow",cause="data"}} > 0', 80)
        prom.wait_for_series(f'{IDLE}{{trial="healthy",cause="other"}}', 10)
        # Both trials' records as the command reads them (no usage evaluation between).
        for _ in range(5):
            samples, healthy = _idle_samples(prom, "slow"), _idle_samples(prom, "healthy")
            code = cli.main(["usage", "--prometheus", prom.url, "--by", "namespace", "--since",
                             "5m", "--format", "json"])
            out, err = capsys.readouterr()
            assert code == EXIT_OK, err
            if (_idle_samples(prom, "slow"), _idle_samples(prom, "healthy")) == (samples, healthy):
                break
        # What the slow trial's own timings say: its dataloader_next share of step time.
        [(_, share)] = [(r["metric"], float(r["value"][1])) for r in prom.query(
            f'sum({names.PHASE_SECONDS}_sum{{trial="slow",phase="{names.DATALOADER_NEXT}"}})'
            f' / sum({names.STEP_SECONDS}_sum{{trial="slow"}})')]
        # The slow trial's recorded loader share where each usage evaluation split its idle
        # GPU-seconds (the latest at or before it: the usage group may run first at an instant).
        recorded = {t: _share_at(prom, "slow", t) for t, c in samples.items() if "data" in c}
        recorded_healthy = {t: _share_at(prom, "healthy", t) for t, c in healthy.items()
                            if "data" in c}
        for name, proc in live.trials.items():
            assert proc.poll() is None, live.trial_log(name)
    found = json.loads(out)
    groups = {g["group"]: g for g in found["groups"]}
    assert set(groups) == {"team-a", "team-b"}, groups
    a, b = groups["team-a"], groups["team-b"]
    # One GPU each, held for at least one usage interval (10 s, not the shipped minute).
    assert INTERVAL == 10
    assert a["held_gpu_seconds"] >= INTERVAL and b["held_gpu_seconds"] >= INTERVAL
    # The idle fake GPU (5% busy) leaves nearly all of the slow trial's minute idle, and the
    # loader-bound trial's idle GPU-seconds go to waiting on data as its timings say.
    # An interval evaluated before the trial's first shares were recorded is all "other"; the
    # data share applies to the idle GPU-seconds of the intervals after.
    idle = a["held_gpu_seconds"] - a["busy_gpu_seconds"]
    assert share > 0.5 and idle > 0.9 * a["held_gpu_seconds"]
    assert sum(sum(c.values()) for c in samples.values()) == pytest.approx(idle)
    shared = sum(sum(c.values()) for c in samples.values() if "data" in c)
    assert shared >= 0.9 * INTERVAL
    assert all(set(c) == {"other"} for c in samples.values() if "data" not in c), samples
    # Each interval's data GPU-seconds are its idle ones times the loader share recorded then
    # (within a second's drift of it), and those shares are what its timings say over its life.
    assert a["wasted_by_cause"]["data"] == pytest.approx(
        sum(sum(samples[t].values()) * recorded[t] for t in recorded), rel=0.03), (samples, recorded)
    assert all(v == pytest.approx(share, abs=0.25) for v in recorded.values()), (recorded, share)
    # The healthy trial's too, by its own shares (CPU-bound under load, its in-process loader
    # may wait a third of its steps): a smaller part of its waste than the slow trial's.
    assert b["wasted_by_cause"]["data"] == pytest.approx(
        sum(sum(healthy[t].values()) * recorded_healthy[t] for t in recorded_healthy),
        rel=0.03, abs=0.1), (healthy, recorded_healthy)  # abs: a small share's drift
    assert b["wasted_by_cause"]["data"] / b["wasted_gpu_seconds"] < \
        a["wasted_by_cause"]["data"] / a["wasted_gpu_seconds"]
    for g in (a, b, found["total"]):  # held = busy + wasted, the causes adding up to wasted
        assert g["held_gpu_seconds"] == pytest.approx(
            g["busy_gpu_seconds"] + g["wasted_gpu_seconds"])
        assert g["wasted_gpu_seconds"] == pytest.approx(sum(g["wasted_by_cause"].values()))
    assert (a["top_offender"]["experiment"], a["top_offender"]["trial"]) == (EXPERIMENT, "slow")
    assert (b["top_offender"]["experiment"], b["top_offender"]["trial"]) == \
        (EXPERIMENT, "healthy")
    # Busy as the GPU-busy rule reads each GPU: the idle one 5% busy, the busy one's GPM SM
    # activity (60%), not its NVML utilization (50%).
    assert a["busy_gpu_seconds"] == pytest.approx(IDLE_PERCENT / 100 * a["held_gpu_seconds"],
                                                  rel=0.02)
    sm_active = BUSY_GPM[pynvml.NVML_GPM_METRIC_SM_UTIL] / 100
    assert b["busy_gpu_seconds"] == pytest.approx(sm_active * b["held_gpu_seconds"], rel=0.02)
    # The total is the two groups' sum, figure by figure.
    for key in ("held_gpu_seconds", "busy_gpu_seconds", "wasted_gpu_seconds",
                "busy_low_mfu_gpu_seconds"):
        assert found["total"][key] == pytest.approx(a[key] + b[key]), key
