"""The gpu collector's defaults, as `trainwatch-exporter` builds it without flags."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from benchmarks.fake_nvml import H100_GPM, FakeNvml, fake_uuid
from exporter.collector import ScrapeCollector
from exporter.gpu import GpuCollector
from exporter.nvml import NvmlSession


def test_pcie_throughput_is_on_unless_switched_off() -> None:
    registry = CollectorRegistry()
    session = NvmlSession(FakeNvml.with_gpus(1), retry_seconds=60)
    registry.register(ScrapeCollector({"gpu": GpuCollector(session)}, version="test"))
    labels = {"gpu": "0", "uuid": fake_uuid(0)}
    assert registry.get_sample_value("trainwatch_gpu_pcie_receive_bytes_per_second",
                                     labels) is not None
    assert registry.get_sample_value("trainwatch_gpu_pcie_transmit_bytes_per_second",
                                     labels) is not None


def test_switched_off_pcie_stays_off_on_a_gpm_board() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].gpm = dict(H100_GPM)  # GPM reports PCIe bytes too: they must not leak out
    collector = GpuCollector(NvmlSession(nvml, retry_seconds=60), pcie_throughput=False)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu": collector}, version="test"))
    labels = {"gpu": "0", "uuid": fake_uuid(0)}
    registry.get_sample_value("trainwatch_gpu_sm_active_ratio", labels)  # learns GPM support
    nvml.advance(1.0)  # the next read has an interval to report
    names = {s.name for family in registry.collect() for s in family.samples}
    assert "trainwatch_gpu_sm_active_ratio" in names
    assert not {n for n in names if n.startswith("trainwatch_gpu_pcie_")}, names
