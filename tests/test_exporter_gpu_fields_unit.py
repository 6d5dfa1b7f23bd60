"""exporter.gpu_fields' readers called directly on the fake NVML: each one's samples in base
units and order, the fallbacks for older drivers and nvidia-ml-py, and which errors leave a
field out and which fail the GPU."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from benchmarks.fake_nvml import DRIVER_VERSION, FakeGpu, FakeNvml
from exporter import gpu_fields
from exporter import metrics as m
from exporter.gpu_fields import (
    CLOCK_EVENT_REASONS,
    READERS,
    pcie_rx,
    pcie_tx,
    read_fields,
    read_gpu,
)
from exporter.nvml import GpuIdentity

LABELS = ("3", "GPU-c")


def board(**values: Any) -> tuple[FakeNvml, FakeGpu]:
    gpu = FakeGpu(index=0, **values)
    return FakeNvml([gpu]), gpu


def test_utilization_is_a_fraction_of_each_rate() -> None:
    nvml, gpu = board(gpu_util=87, mem_util=33)
    assert gpu_fields._utilization(nvml, gpu, LABELS) == [
        (m.GPU_UTILIZATION, LABELS, 0.87), (m.GPU_MEMORY_UTILIZATION, LABELS, 0.33)]


def test_memory_v2_splits_the_reservation_out() -> None:
    nvml, gpu = board(memory_total=8000, memory_used=1200, memory_reserved=300)
    assert gpu_fields._memory(nvml, gpu, LABELS) == [
        (m.GPU_MEMORY_FREE, LABELS, 6500.0), (m.GPU_MEMORY_USED, LABELS, 1200.0),
        (m.GPU_MEMORY_RESERVED, LABELS, 300.0), (m.GPU_MEMORY_TOTAL, LABELS, 8000.0)]
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 0


@pytest.mark.parametrize("missing", [
    pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED), TypeError("unexpected keyword 'version'"),
    pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
    pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)])
def test_memory_falls_back_to_v1_without_v2(missing: Exception) -> None:
    nvml, gpu = board(memory_total=8000, memory_used=1200, memory_reserved=300)
    v1 = nvml.nvmlDeviceGetMemoryInfo

    def older(handle: Any, version: int | None = None) -> Any:
        if version is not None:
            raise missing
        return v1(handle)

    nvml.nvmlDeviceGetMemoryInfo = older  # type: ignore[method-assign]
    assert gpu_fields._memory(nvml, gpu, LABELS) == [
        (m.GPU_MEMORY_FREE, LABELS, 6500.0), (m.GPU_MEMORY_USED, LABELS, 1500.0),
        (m.GPU_MEMORY_TOTAL, LABELS, 8000.0)]


def test_memory_without_v2_in_pynvml_asks_v1_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pynvml, "nvmlMemory_v2")
    nvml, gpu = board(memory_total=8000, memory_used=1200, memory_reserved=300)
    asked: list[Any] = []
    v1 = nvml.nvmlDeviceGetMemoryInfo

    def recorded(handle: Any, **kwargs: Any) -> Any:
        asked.append(kwargs)
        return v1(handle)

    nvml.nvmlDeviceGetMemoryInfo = recorded  # type: ignore[method-assign]
    samples = gpu_fields._memory(nvml, gpu, LABELS)
    assert asked == [{}]
    assert [spec for spec, _, _ in samples] == [m.GPU_MEMORY_FREE, m.GPU_MEMORY_USED,
                                                m.GPU_MEMORY_TOTAL]


def test_a_failing_gpu_fails_the_memory_read() -> None:
    nvml, gpu = board()
    gpu.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        gpu_fields._memory(nvml, gpu, LABELS)


def test_power_energy_and_clocks_in_base_units() -> None:
    nvml, gpu = board(power_mw=412_345, power_limit_mw=699_500, energy_mj=123_456_789,
                      temperature=71, sm_clock_mhz=1755, mem_clock_mhz=2619)
    assert gpu_fields._power(nvml, gpu, LABELS) == [(m.GPU_POWER, LABELS, pytest.approx(412.345))]
    assert gpu_fields._power_limit(nvml, gpu, LABELS) == [
        (m.GPU_POWER_LIMIT, LABELS, pytest.approx(699.5))]
    assert gpu_fields._energy(nvml, gpu, LABELS) == [
        (m.GPU_ENERGY, LABELS, pytest.approx(123_456.789))]
    [(spec, labels, celsius)] = gpu_fields._temperature(nvml, gpu, LABELS)
    assert (spec, labels, celsius, type(celsius)) == (m.GPU_TEMPERATURE, LABELS, 71.0, float)
    assert gpu_fields._sm_clock(nvml, gpu, LABELS) == [(m.GPU_SM_CLOCK, LABELS, 1755e6)]
    assert gpu_fields._memory_clock(nvml, gpu, LABELS) == [(m.GPU_MEMORY_CLOCK, LABELS, 2619e6)]
    assert (gpu_fields.MILLI, gpu_fields.MEGA, gpu_fields.KIB) == (1e-3, 1e6, 1024)


def test_each_clock_event_reason_is_one_series() -> None:
    mask = (pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwSlowdown
            | pynvml.nvmlClocksEventReasonDisplayClockSetting)
    nvml, gpu = board(clock_event_mask=mask)
    samples = gpu_fields._clock_events(nvml, gpu, LABELS)
    assert [labels for _, labels, _ in samples] == [(*LABELS, r) for _, r in CLOCK_EVENT_REASONS]
    assert {labels[2]: value for _, labels, value in samples} == {
        "gpu_idle": 1.0, "applications_clocks_setting": 0.0, "sw_power_cap": 0.0,
        "hw_slowdown": 1.0, "sync_boost": 0.0, "sw_thermal_slowdown": 0.0,
        "hw_thermal_slowdown": 0.0, "hw_power_brake_slowdown": 0.0,
        "display_clock_setting": 1.0}
    assert {spec for spec, _, _ in samples} == {m.GPU_CLOCK_EVENT}
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0


def test_clock_reasons_fall_back_where_pynvml_lacks_the_new_name() -> None:
    class Older:
        def __init__(self, nvml: FakeNvml) -> None:
            self._nvml = nvml

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
            return self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)

    nvml, gpu = board(clock_event_mask=pynvml.nvmlClocksEventReasonSyncBoost)
    samples = gpu_fields._clock_events(Older(nvml), gpu, LABELS)
    assert [labels[2] for _, labels, value in samples if value == 1.0] == ["sync_boost"]


def test_an_unsupported_clock_reason_read_is_not_retried_with_the_old_name() -> None:
    nvml, gpu = board(unsupported=frozenset({"nvmlDeviceGetCurrentClocksEventReasons"}))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        gpu_fields._clock_events(nvml, gpu, LABELS)
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0


def test_ecc_counts_each_kind() -> None:
    nvml, gpu = board(ecc=(17, 4))
    assert gpu_fields._ecc(nvml, gpu, LABELS) == [
        (m.GPU_ECC_ERRORS, (*LABELS, "corrected"), 17.0),
        (m.GPU_ECC_ERRORS, (*LABELS, "uncorrected"), 4.0)]


@pytest.mark.parametrize(("rows", "pending", "failure"), [
    ((9, 2, 0, 1), 0.0, 1.0), ((9, 2, 1, 0), 1.0, 0.0), ((0, 0, 0, 0), 0.0, 0.0)])
def test_remapped_rows(rows: tuple[int, int, int, int], pending: float, failure: float) -> None:
    nvml, gpu = board(remapped_rows=rows)
    assert gpu_fields._remapped_rows(nvml, gpu, LABELS) == [
        (m.GPU_REMAPPED_ROWS, (*LABELS, "correctable"), float(rows[0])),
        (m.GPU_REMAPPED_ROWS, (*LABELS, "uncorrectable"), float(rows[1])),
        (m.GPU_ROW_REMAP_PENDING, LABELS, pending), (m.GPU_ROW_REMAP_FAILURE, LABELS, failure)]


def test_pcie_directions_in_bytes() -> None:
    nvml, gpu = board(pcie_kbps=(300, 701))
    assert pcie_tx(nvml, gpu, LABELS) == [(m.GPU_PCIE_TX, LABELS, 300 * 1024)]
    assert pcie_rx(nvml, gpu, LABELS) == [(m.GPU_PCIE_RX, LABELS, 701 * 1024)]


def test_read_gpu_starts_with_the_info_series_then_every_reader() -> None:
    nvml, gpu = board(temperature=55)
    identity = GpuIdentity(index=3, uuid="GPU-c", name="NVIDIA H100 PCIe",
                           pci_bus_id="00000000:3B:00.0")
    samples = read_gpu(nvml, identity, gpu, DRIVER_VERSION)
    assert samples[0] == (m.GPU_INFO, ("3", "GPU-c", "NVIDIA H100 PCIe", "00000000:3B:00.0",
                                       DRIVER_VERSION), 1.0)
    assert samples[1:] == read_fields(nvml, LABELS, gpu, READERS)
    assert (m.GPU_TEMPERATURE, LABELS, 55.0) in samples
    only = read_gpu(nvml, identity, gpu, "1.2", readers=(gpu_fields._temperature,))
    assert only == [(m.GPU_INFO, ("3", "GPU-c", "NVIDIA H100 PCIe", "00000000:3B:00.0", "1.2"),
                     1.0), (m.GPU_TEMPERATURE, LABELS, 55.0)]


def test_an_unavailable_field_is_left_out_and_the_others_read() -> None:
    nvml, gpu = board(temperature=41, power_mw=2500,
                      unsupported=frozenset({"nvmlDeviceGetPowerUsage"}))
    readers = (gpu_fields._power, gpu_fields._temperature, gpu_fields._power_limit)
    assert [spec for spec, _, _ in read_fields(nvml, LABELS, gpu, readers)] == [
        m.GPU_TEMPERATURE, m.GPU_POWER_LIMIT]


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_a_field_the_driver_cannot_give_is_left_out(code: int) -> None:
    def refuses(nvml: Any, handle: Any, labels: tuple[str, ...]) -> list[Any]:
        raise pynvml.NVMLError(code)

    nvml, gpu = board(temperature=41)
    assert read_fields(nvml, LABELS, gpu, (refuses, gpu_fields._temperature)) == [
        (m.GPU_TEMPERATURE, LABELS, 41.0)]


def test_a_failing_gpu_fails_the_whole_read() -> None:
    nvml, gpu = board()
    gpu.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        read_fields(nvml, LABELS, gpu, READERS)
