"""The exporter series the shared contract names (trainwatch.contract.figures) are series the
exporter serves: the exporter may not import the contract (docs/design.md, import
boundaries), so this is where the two meet."""

from __future__ import annotations

from exporter import metrics
from trainwatch.contract.figures import BUSY_METRICS, GPU_INFO, HOST_INFO


def exported() -> set[str]:
    return {spec.name for spec in vars(metrics).values() if isinstance(spec, metrics.MetricSpec)}


def test_every_exporter_series_the_contract_reads_is_exported() -> None:
    names = exported()
    assert len(names) > 20  # the specs were found
    assert HOST_INFO in names and GPU_INFO in names
    assert set(BUSY_METRICS.values()) <= names
    assert "trainwatch_gpu_no_such_series" not in names
