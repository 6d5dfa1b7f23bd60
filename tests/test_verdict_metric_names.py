"""What `diagnose` calls each measurement: only the GPU-busy check is named after the busy
rule's source; every other check keeps its own name whatever that source is."""

from __future__ import annotations

import pytest

from trainwatch.contract.checks import CHECKS
from trainwatch.diagnose.verdict import METRICS, Measurements, metric_of

WITH_SOURCE = Measurements(phase_shares={}, gpu_busy_recorded=0.9, gpu_busy_source="sm_active")


@pytest.mark.parametrize("measurement", sorted({c[3] for c in CHECKS} - {"gpu_busy"}))
def test_every_other_check_keeps_its_own_name_when_the_busy_rule_has_a_source(
        measurement: str) -> None:
    assert metric_of(WITH_SOURCE, measurement) == METRICS[measurement]


def test_the_gpu_busy_check_is_named_after_the_busy_rules_source_or_what_it_falls_back_to() -> None:
    assert metric_of(WITH_SOURCE, "gpu_busy") == "SM activity (NVML GPM)"
    older = Measurements(phase_shares={}, gpu_utilization=0.9)
    assert metric_of(older, "gpu_busy") == METRICS["gpu_utilization"]
    with_gpm = Measurements(phase_shares={}, gpu_utilization=0.9, gpu_sm_active=0.2)
    assert metric_of(with_gpm, "gpu_busy") == METRICS["gpu_sm_active"]
