"""GPM activity, memory v2, row remapping and the concurrent PCIe fallback, over the fake NVML
(real pynvml structures and exception classes). The same reads on a real GPU:
tests/test_exporter_gpu.py::test_real_gpm_and_memory_v2 (skipped without one)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import pynvml
import pytest
from prometheus_client import CollectorRegistry

from benchmarks.fake_nvml import H100_GPM, H100_RESERVED_BYTES, FakeGpu, FakeNvml, fake_uuid
from exporter.collector import ScrapeCollector
from exporter.gpu import GpuCollector
from exporter.nvml import NvmlSession

MIB = 2**20
GPM_RATIOS = ("trainwatch_gpu_sm_active_ratio", "trainwatch_gpu_sm_occupancy_ratio",
              "trainwatch_gpu_tensor_active_ratio", "trainwatch_gpu_dram_active_ratio",
              "trainwatch_gpu_pipe_active_ratio", "trainwatch_gpu_nvlink_transmit_bytes_per_second",
              "trainwatch_gpu_nvlink_receive_bytes_per_second")


def registry_for(nvml: Any, pcie: bool = True, prime: bool = True) -> CollectorRegistry:
    collector = GpuCollector(NvmlSession(nvml, retry_seconds=60), pcie_throughput=pcie)
    if prime:
        collector.prime()  # in the background: wait until each GPM board took its first sample
        boards = sum(1 for board in nvml.gpus if board.gpm is not None and not board.lost
                     and "nvmlGpmQueryDeviceSupport" not in board.unsupported)
        deadline = time.monotonic() + 5
        while nvml.calls["nvmlGpmSampleGet"] < boards and time.monotonic() < deadline:
            time.sleep(0.001)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu": collector}, version="test"))
    return registry


def gpu(index: int, **extra: str) -> dict[str, str]:
    return {"gpu": str(index), "uuid": fake_uuid(index), **extra}


def names_of(registry: CollectorRegistry, index: int) -> set[str]:
    return {s.name for family in registry.collect() for s in family.samples
            if s.labels.get("gpu") == str(index)}


def success(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("trainwatch_scrape_collector_success", {"collector": "gpu"})


def test_gpm_values_in_base_units_and_pcie_from_gpm() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[0].gpm = dict(H100_GPM)  # issue 12's H100: NVML utilization 99%, SMs 22.5%
    value = registry_for(nvml).get_sample_value
    assert value("trainwatch_gpu_sm_active_ratio", gpu(0)) == 0.225
    assert value("trainwatch_gpu_sm_occupancy_ratio", gpu(0)) == 0.033
    assert value("trainwatch_gpu_tensor_active_ratio", gpu(0)) == 0.218
    assert value("trainwatch_gpu_dram_active_ratio", gpu(0)) == 0.092
    assert value("trainwatch_gpu_sm_active_ratio", gpu(1)) == 0.61
    pipes = {p: value("trainwatch_gpu_pipe_active_ratio", gpu(1, pipe=p))
             for p in ("fp64", "fp32", "fp16", "integer")}
    assert pipes == {"fp64": 0.01, "fp32": 0.11, "fp16": 0.06, "integer": 0.09}
    assert value("trainwatch_gpu_nvlink_transmit_bytes_per_second", gpu(1)) == 101 * MIB
    assert value("trainwatch_gpu_nvlink_receive_bytes_per_second", gpu(1)) == 201 * MIB
    # PCIe from GPM: same bytes/s as the sampled call would give, without its 20 ms.
    assert value("trainwatch_gpu_pcie_transmit_bytes_per_second", gpu(1)) == 1001 * 1024
    assert value("trainwatch_gpu_pcie_receive_bytes_per_second", gpu(1)) == 2001 * 1024
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert nvml.calls["nvmlGpmSampleAlloc"] == 4  # two per GPU, reused at every scrape
    assert value("trainwatch_scrape_collector_success", {"collector": "gpu"}) == 1


def test_each_value_is_the_average_since_the_previous_scrape() -> None:
    nvml = FakeNvml.with_gpus(1)
    board = nvml.gpus[0]
    assert board.gpm is not None
    r = registry_for(nvml)  # the first sample is taken at start-up
    board.gpm[pynvml.NVML_GPM_METRIC_SM_UTIL] = 20.0
    nvml.advance(10)
    board.gpm[pynvml.NVML_GPM_METRIC_SM_UTIL] = 60.0
    nvml.advance(10)
    assert r.get_sample_value("trainwatch_gpu_sm_active_ratio", gpu(0)) == pytest.approx(0.4)
    nvml.advance(5)  # the next scrape covers only what came after this one
    assert r.get_sample_value("trainwatch_gpu_sm_active_ratio", gpu(0)) == pytest.approx(0.6)


def test_without_a_startup_sample_the_first_scrape_leaves_gpm_out() -> None:
    r = registry_for(FakeNvml.with_gpus(1), prime=False)
    first = names_of(r, 0)
    assert "trainwatch_gpu_sm_active_ratio" not in first
    assert "trainwatch_gpu_utilization_ratio" in first
    assert "trainwatch_gpu_sm_active_ratio" in names_of(r, 0)


def test_a_board_without_gpm_leaves_gpm_out_and_keeps_everything_else() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[1].gpm = None  # an A100: nvmlGpmQueryDeviceSupport says no
    r = registry_for(nvml)
    for _ in range(2):
        names = names_of(r, 1)
        assert not names & set(GPM_RATIOS)
        assert {"trainwatch_gpu_utilization_ratio", "trainwatch_gpu_memory_used_bytes",
                "trainwatch_gpu_remapped_rows"} <= names
        assert r.get_sample_value("trainwatch_gpu_pcie_receive_bytes_per_second",
                                  gpu(1)) == 2001 * 1024  # sampled the old way
        assert "trainwatch_gpu_sm_active_ratio" in names_of(r, 0)
        assert success(r) == 1
    assert nvml.calls["nvmlGpmSampleGet"] > 0


def test_gpm_missing_from_the_driver_is_not_a_failure() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].unsupported = frozenset({"nvmlGpmQueryDeviceSupport"})
    r = registry_for(nvml)
    assert not names_of(r, 0) & set(GPM_RATIOS)
    assert success(r) == 1


def test_a_metric_the_board_lacks_is_left_out_alone() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpus[0].nvlink_mibps = None  # a PCIe card: no NVLink
    r = registry_for(nvml)
    names = names_of(r, 0)
    assert "trainwatch_gpu_nvlink_transmit_bytes_per_second" not in names
    assert "trainwatch_gpu_tensor_active_ratio" in names


def test_a_gpu_lost_between_two_samples_drops_only_its_series() -> None:
    nvml = FakeNvml.with_gpus(2)
    r = registry_for(nvml)
    assert "trainwatch_gpu_sm_active_ratio" in names_of(r, 1)
    nvml.gpus[1].lost = True
    assert names_of(r, 1) == set()
    assert r.get_sample_value("trainwatch_gpu_sm_active_ratio", gpu(0)) == pytest.approx(0.6)
    assert success(r) == 0
    nvml.gpus[1].lost = False
    # Back, with a fresh interval: one scrape to take its first sample, then values again.
    assert "trainwatch_gpu_utilization_ratio" in names_of(r, 1)
    assert r.get_sample_value("trainwatch_gpu_sm_active_ratio", gpu(1)) == pytest.approx(0.61)
    assert success(r) == 1


def test_memory_as_nvidia_smi_reports_it() -> None:
    nvml = FakeNvml([FakeGpu(index=0, memory_used=0, memory_reserved=H100_RESERVED_BYTES)])
    value = registry_for(nvml).get_sample_value
    assert value("trainwatch_gpu_memory_used_bytes", gpu(0)) == 0  # idle: nvidia-smi says 0 MiB
    assert value("trainwatch_gpu_memory_reserved_bytes", gpu(0)) == H100_RESERVED_BYTES
    assert value("trainwatch_gpu_memory_free_bytes", gpu(0)) == 80 * 2**30 - H100_RESERVED_BYTES
    assert value("trainwatch_gpu_memory_total_bytes", gpu(0)) == 80 * 2**30


def test_memory_falls_back_to_v1_where_the_driver_lacks_v2() -> None:
    board = FakeGpu(index=0, memory_used=2**30, memory_reserved=H100_RESERVED_BYTES,
                    unsupported=frozenset({"nvmlDeviceGetMemoryInfo_v2"}))
    value = registry_for(FakeNvml([board])).get_sample_value
    assert value("trainwatch_gpu_memory_used_bytes", gpu(0)) == 2**30 + H100_RESERVED_BYTES
    assert value("trainwatch_gpu_memory_reserved_bytes", gpu(0)) is None


def test_row_remapping() -> None:
    nvml = FakeNvml([FakeGpu(index=0, remapped_rows=(3, 1, 1, 0)),
                     FakeGpu(index=1, unsupported=frozenset({"nvmlDeviceGetRemappedRows"}))])
    r = registry_for(nvml)
    value = r.get_sample_value
    assert value("trainwatch_gpu_remapped_rows", gpu(0, kind="correctable")) == 3
    assert value("trainwatch_gpu_remapped_rows", gpu(0, kind="uncorrectable")) == 1
    assert value("trainwatch_gpu_row_remap_pending", gpu(0)) == 1
    assert value("trainwatch_gpu_row_remap_failure", gpu(0)) == 0
    assert not {"trainwatch_gpu_remapped_rows", "trainwatch_gpu_row_remap_pending",
                "trainwatch_gpu_row_remap_failure"} & names_of(r, 1)
    assert success(r) == 1


def test_pcie_fallback_samples_every_gpu_and_direction_at_once() -> None:
    boards = [FakeGpu(index=i, pcie_kbps=(10 + i, 20 + i),
                      delays={"nvmlDeviceGetPcieThroughput": 0.020}) for i in range(8)]
    nvml = FakeNvml(boards)  # no GPM: an 8-GPU A100 node, where NVML samples 20 ms per call
    r = registry_for(nvml)
    r.get_sample_value("trainwatch_gpu_info")  # lanes started
    took = []
    for _ in range(5):
        start = time.perf_counter()
        families = list(r.collect())
        took.append(time.perf_counter() - start)
    pcie = {(s.labels["gpu"], s.name): s.value for f in families for s in f.samples
            if s.name.startswith("trainwatch_gpu_pcie_")}
    assert len(pcie) == 16 and pcie[("7", "trainwatch_gpu_pcie_receive_bytes_per_second")] == 27 * 1024
    assert statistics.median(took) < 0.060, took  # one after another: 8 x 2 x 20 ms = 320 ms
