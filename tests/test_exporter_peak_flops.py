"""trainwatch_gpu_peak_flops over the fake NVML: the datasheet table, an unknown product (no
series, one log line) and --gpu.peak-flops."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from benchmarks.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from exporter.cli import parse_settings
from exporter.collector import ScrapeCollector
from exporter.config import ConfigError
from exporter.gpu import GpuCollector
from exporter.nvml import NvmlSession
from exporter.peak_flops import DTYPES, PEAK_FLOPS, PeakTable, parse_overrides
from tests.test_exporter_e2e import nvml_answers

PEAK = "trainwatch_gpu_peak_flops"


def registry_for(nvml: FakeNvml, peaks: PeakTable) -> CollectorRegistry:
    collector = GpuCollector(NvmlSession(nvml, retry_seconds=60), pcie_throughput=False,
                             peaks=peaks)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu": collector}, version="test"))
    return registry


def peaks_of(registry: CollectorRegistry, index: int = 0) -> dict[str, float]:
    return {s.labels["dtype"]: s.value for family in registry.collect()
            for s in family.samples
            if s.name == PEAK and s.labels["gpu"] == str(index)
            and s.labels["uuid"] == fake_uuid(index)}


def test_the_fake_h100_publishes_its_datasheet_dense_bf16_peak() -> None:
    registry = registry_for(FakeNvml([FakeGpu(index=0, name="NVIDIA H100 80GB HBM3")]),
                            PeakTable())
    peaks = peaks_of(registry)
    assert peaks["bf16"] == 989.4e12 and peaks["fp16"] == 989.4e12
    assert peaks["fp8"] == 1978.9e12 and peaks["tf32"] == 494.7e12


def test_an_unknown_product_publishes_no_peak_and_logs_once(
        caplog: pytest.LogCaptureFixture) -> None:
    registry = registry_for(FakeNvml([FakeGpu(index=0, name="NVIDIA Imaginary X1")]),
                            PeakTable())
    with caplog.at_level(logging.INFO, logger="exporter.gpu"):
        for _ in range(3):
            assert peaks_of(registry) == {}
    said = [r.getMessage() for r in caplog.records if "peak FLOPs" in r.getMessage()]
    assert len(said) == 1 and "'NVIDIA Imaginary X1'" in said[0]
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "gpu"}) == 1.0


def test_the_flag_overrides_the_table_and_lets_unknown_boards_in() -> None:
    settings = parse_settings(["--gpu.peak-flops", "bf16=1e15, fp8=2e15"])
    peaks = PeakTable(parse_overrides(settings.gpu_peak_flops))
    nvml = FakeNvml([FakeGpu(index=0, name="NVIDIA H100 80GB HBM3"),
                     FakeGpu(index=1, name="NVIDIA Imaginary X1")])
    registry = registry_for(nvml, peaks)
    assert peaks_of(registry, 0) == {**PEAK_FLOPS["NVIDIA H100 80GB HBM3"],
                                     "bf16": 1e15, "fp8": 2e15}
    assert peaks_of(registry, 1) == {"bf16": 1e15, "fp8": 2e15}


@pytest.mark.parametrize("bad", ["bf16", "int4=1e12", "bf16=fast", "bf16=0", "bf16=inf"])
def test_a_bad_override_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="gpu.peak_flops"):
        parse_settings(["--gpu.peak-flops", bad])


def test_the_table_is_dense_and_in_flops() -> None:
    for name, peaks in PEAK_FLOPS.items():
        assert set(peaks) <= set(DTYPES), name
        # Tensor-core peaks over plain FP32 on every board listed (a sparse or TFLOP/s
        # figure typed in by mistake breaks one of these bounds).
        assert 1e12 < peaks["fp32"] < 200e12, name
        for dtype in ("tf32", "bf16", "fp16", "fp8"):
            if dtype in peaks:
                assert peaks["fp32"] < peaks[dtype] < 5e15, (name, dtype)
        if "bf16" in peaks and "tf32" in peaks:
            assert peaks["bf16"] == pytest.approx(2 * peaks["tf32"], rel=0.02), name
        # Per architecture: FP8 twice BF16 (Hopper, Ada, Blackwell), FP16 the same as BF16.
        if "bf16" in peaks and "fp8" in peaks:
            assert peaks["fp8"] == pytest.approx(2 * peaks["bf16"], rel=0.02), name
        if "bf16" in peaks:
            assert peaks["fp16"] == peaks["bf16"], name
    # Boards whose datasheets print the same GPU's figures.
    for same in ("NVIDIA H200", "NVIDIA GH200 480GB"):
        assert PEAK_FLOPS[same] == PEAK_FLOPS["NVIDIA H100 80GB HBM3"], same
    assert PEAK_FLOPS["NVIDIA H200 NVL"] == PEAK_FLOPS["NVIDIA H100 NVL"]
    a100 = [peaks for name, peaks in PEAK_FLOPS.items() if name.startswith("NVIDIA A100")]
    assert len(a100) == 4 and all(peaks == a100[0] for peaks in a100)
    # The figures the issue names (H100 SXM and A100 dense, in TFLOP/s).
    assert {k: v / 1e12 for k, v in PEAK_FLOPS["NVIDIA H100 80GB HBM3"].items()} == {
        "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
    assert {k: v / 1e12 for k, v in a100[0].items()} == {
        "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}


@pytest.mark.gpu
@pytest.mark.skipif(not nvml_answers(), reason="no NVML (no NVIDIA driver) on this machine")
def test_real_nvml_publishes_the_table_figures_for_a_listed_product() -> None:
    import pynvml

    registry = registry_for(pynvml, PeakTable())  # type: ignore[arg-type]
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name, uuid = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle)
    found = {s.labels["dtype"]: s.value for family in registry.collect() for s in family.samples
             if s.name == PEAK and s.labels["uuid"] == uuid}
    # The product name NVML reports is the table's key; an unlisted board publishes nothing.
    assert found == PEAK_FLOPS.get(name, {}), f"NVML product name {name!r}"
