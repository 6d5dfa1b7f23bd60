"""The gpu collector's defaults, as `trainwatch-exporter` builds it without flags."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporter.collector import ScrapeCollector
from exporter.gpu import GpuCollector
from exporter.nvml import NvmlSession
from tests.fake_nvml import FakeNvml, fake_uuid


def test_pcie_throughput_is_on_unless_switched_off() -> None:
    registry = CollectorRegistry()
    session = NvmlSession(FakeNvml.with_gpus(1), retry_seconds=60)
    registry.register(ScrapeCollector({"gpu": GpuCollector(session)}, version="test"))
    labels = {"gpu": "0", "uuid": fake_uuid(0)}
    assert registry.get_sample_value("trainwatch_gpu_pcie_receive_bytes_per_second",
                                     labels) is not None
    assert registry.get_sample_value("trainwatch_gpu_pcie_transmit_bytes_per_second",
                                     labels) is not None
