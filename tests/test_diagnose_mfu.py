"""`diagnose`'s MFU line (trainwatch/diagnose/mfu.py) from the recorded series, which part it
names when one is missing, and the verdict "GPU busy, MFU low"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO
from prometheus.rulegen.settings import load_settings
from trainwatch.contract import remedies
from trainwatch.contract.alerts import GPU_UNDERUTILIZED
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import render, trials
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import RankReport
from trainwatch.diagnose.mfu import NO_FLOPS, Rows, gather
from trainwatch.diagnose.verdict import Measurements, decide
from trial_instrumentation import names

N = RecordNames("5m")
KEY = ("e", "t", "0")
H100 = "NVIDIA H100 80GB HBM3"


def by_rank(series: dict[str, list[tuple[dict[str, str], float]]]) -> Callable[[str], Rows]:
    """A by_rank over canned rows, keyed by the metric the query starts with."""
    def answer(expr: str) -> Rows:
        metric = expr.split("{", 1)[0]
        return {KEY: series[metric]} if series.get(metric) else {}
    return answer


def gpus(*products: str) -> list[tuple[dict[str, str], float]]:
    return [({"uuid": f"GPU-{i}", "name": p}, 1.0) for i, p in enumerate(products)]


BF16 = [({"precision": "bf16"}, 6e9)]


@pytest.mark.parametrize(("series", "line"), [
    ({N.mfu: [({}, 0.31)], N.trial_peak_flops: [({}, 8 * 989.4e12)], names.MODEL_FLOPS: BF16,
      names.GPU_INFO: gpus(*[H100] * 8)},
     "MFU 31% of 989 TFLOPS bf16 dense on 8 × H100 80GB HBM3"),
    ({names.GPU_INFO: gpus(H100)}, f"MFU unknown: {NO_FLOPS}"),
    ({names.MODEL_FLOPS: BF16, names.GPU_INFO: gpus("NVIDIA A10G")},
     ("MFU unknown: no bf16 peak for NVIDIA A10G: give it to the exporter with "
      "--gpu.peak-flops bf16=FLOPS")),
    ({names.MODEL_FLOPS: BF16},
     "MFU unknown: no GPU of the trial has exporter series (trainwatch_trial_gpu_info ⋈ uuid)"),
    ({N.trial_peak_flops: [({}, 989.4e12)], names.MODEL_FLOPS: BF16, names.GPU_INFO: gpus(H100)},
     "MFU unknown: no samples/s over the rate window yet"),
])
def test_the_mfu_line_or_the_missing_part(series: dict[str, list[tuple[dict[str, str], float]]],
                                          line: str) -> None:
    found = gather(by_rank(series), N, experiment="e", trial="t")
    assert found[KEY].line() == line


# "GPU busy, MFU low": the verdict, decided with the deployed rules (thresholds.yaml's mfu_low
# reaches diagnose as TrainwatchGPUUnderutilized's `mfu_low` annotation), on both sides of the
# MFU threshold and of the GPU-busy threshold, and never where MFU is unknown.
def loaded_rules() -> list[dict[str, Any]]:
    """The committed rules as /api/v1/rules lists them (the annotations diagnose reads)."""
    return [{"type": "recording", "name": r["record"]} if "record" in r else
            {"type": "alerting", "name": r["alert"], "annotations": r["annotations"]}
            for path in sorted((REPO / "prometheus" / "rules").glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"] for r in group["rules"]]


DEPLOYED = Deployment.from_rules(loaded_rules())
MFU_LOW = load_settings().mfu_low(GPU_UNDERUTILIZED)
BUSY_AT = load_settings().threshold(GPU_UNDERUTILIZED)
SOURCES = {"utilization": "NVML utilization (any kernel running)",
           "sm_active": "SM activity (NVML GPM)"}


def rank_report(mfu: float | None, busy: float, source: str) -> RankReport:
    """A rank's report from recorded series: the MFU rule's (if any) and the GPU-busy rule's."""
    series = {N.trial_peak_flops: [({}, 989.4e12)], names.GPU_INFO: gpus(H100)}
    if mfu is not None:
        series |= {N.mfu: [({"precision": "bf16"}, mfu)], names.MODEL_FLOPS: BF16}
    found = gather(by_rank(series), N, experiment="e", trial="t")[KEY]
    r = RankReport("e", "t", "0", "node", "1", "1", "5m", phases=[("train_batch", 1.0)],
                   mfu=found)
    m = Measurements({"train_batch": 1.0}, 0.3, gpu_utilization=busy,
                     gpu_sm_active=busy if source == "sm_active" else None,
                     gpu_busy_recorded=busy, gpu_busy_source=source, mfu=found.value)
    r.verdict = decide(m, DEPLOYED.alerts)
    return r


@pytest.mark.parametrize(("mfu", "busy", "source", "kind"), [
    (MFU_LOW * 0.6, 0.95, "utilization", "low_mfu"),
    (MFU_LOW * 0.6, 0.8, "sm_active", "low_mfu"),
    (MFU_LOW * 0.6, BUSY_AT, "sm_active", "low_mfu"),  # busy exactly at the threshold
    (MFU_LOW, 0.95, "utilization", "gpu_bound"),  # MFU exactly at mfu_low is not low
    (MFU_LOW * 2, 0.95, "sm_active", "gpu_bound"),
    (MFU_LOW * 0.6, BUSY_AT * 0.8, "utilization", "underused_gpu"),  # not busy: underused
    (None, 0.95, "utilization", "gpu_bound"),  # no FLOPs figure: no MFU, never claimed
])
def test_a_busy_gpu_with_low_mfu_gets_its_own_verdict(mfu: float | None, busy: float,
                                                     source: str, kind: str) -> None:
    r = rank_report(mfu, busy, source)
    assert r.verdict is not None and r.verdict.kind == kind
    text = render.report_text(r)
    if kind != "low_mfu":
        assert "MFU low" not in text and remedies.LOW_MFU not in text
        return
    assert r.verdict.exit_code == 1  # a finding, as the other GPU-side verdicts are
    assert (f"VERDICT: GPU busy, MFU low: {mfu:.1%} < threshold {MFU_LOW:.1%}"
            in text.splitlines())
    assert (f"  measured: model FLOPs utilization (MFU), while GPU busy {busy:.1%} by "
            f"{SOURCES[source]} (at least {BUSY_AT:.0%}), over the last 5m") in text.splitlines()
    assert f"  MFU {mfu:.0%} of 989 TFLOPS bf16 dense on 1 × H100 80GB HBM3" in text
    assert f"  what to change: {remedies.LOW_MFU}" in text.splitlines()
    assert "`trainwatch profile`" in remedies.LOW_MFU


def test_rules_without_the_mfu_annotation_never_claim_low_mfu() -> None:
    older = [{**r, "annotations": {k: v for k, v in r.get("annotations", {}).items()
                                   if k != "mfu_low"}} for r in loaded_rules()]
    deployed = Deployment.from_rules(older)
    assert deployed.alerts[GPU_UNDERUTILIZED].mfu_low is None
    assert DEPLOYED.alerts[GPU_UNDERUTILIZED].mfu_low == MFU_LOW
    m = Measurements({"train_batch": 1.0}, gpu_utilization=0.95, mfu=0.01)
    assert decide(m, deployed.alerts).kind == "gpu_bound"
    assert decide(m, DEPLOYED.alerts).kind == "low_mfu"


def test_trials_names_low_mfu_as_the_cause_only_with_an_mfu() -> None:
    busy = {"train_batch": 1.0}
    assert trials._cause(DEPLOYED, busy, 0.95, MFU_LOW / 2) == "low_mfu"
    assert trials._cause(DEPLOYED, busy, 0.95, None) == "gpu_bound"
    assert trials._cause(DEPLOYED, busy, 0.95, MFU_LOW) == "gpu_bound"


def test_the_docs_quote_the_deployed_mfu_threshold() -> None:
    text = " ".join((REPO / "docs" / "instrumentation.md").read_text().split())
    said = text.split('**"GPU busy, MFU low".**', 1)[1].split("**", 1)[0]
    assert f"`mfu_low` ({MFU_LOW:.0%};" in said and f"threshold, {BUSY_AT:.0%})" in said
    assert f"threshold {MFU_LOW:.1%}" in said
