"""What NVML tells about one GPU, field by field: one reader per NVML call, in base units.

A reader raises one of ``FIELD_UNAVAILABLE`` when the board or driver cannot tell (the field is
left out, never exported as 0) and any other ``pynvml.NVMLError`` when the GPU itself fails.
The ``gpu`` collector (``exporter.gpu``) decides which readers run where and when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from exporter import metrics as m
from exporter.collector import Sample
from exporter.nvml import GpuIdentity

# Errors that mean "this board or driver cannot tell us this field": omit the field, keep the GPU.
FIELD_UNAVAILABLE: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission)
# Memory v2 missing: the driver lacks it, or nvidia-ml-py predates `version=` (TypeError).
MEMORY_V2_UNAVAILABLE: tuple[type[Exception], ...] = (TypeError, *FIELD_UNAVAILABLE)

# Bit of nvmlDeviceGetCurrentClocksEventReasons -> `reason` label; the bits are NVML's ABI.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (pynvml.nvmlClocksEventReasonGpuIdle, "gpu_idle"),
    (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, "sw_power_cap"),
    (pynvml.nvmlClocksEventReasonHwSlowdown, "hw_slowdown"),
    (pynvml.nvmlClocksEventReasonSyncBoost, "sync_boost"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"),
    (pynvml.nvmlClocksEventReasonDisplayClockSetting, "display_clock_setting"),
)
ECC_ERROR_TYPES = (("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                   ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED))
MILLI = 1e-3
MEGA = 1e6
KIB = 1024  # NVML reports PCIe throughput in KB/s, counted in 1024-byte units

# A reader turns one NVML call (or a pair) into samples of one GPU, given its label values
# (gpu, uuid): each sample made once, in its final form.
Labels = tuple[str, ...]
Reading = list[Sample]
Reader = Callable[[Any, Any, Labels], Reading]


def _utilization(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return [(m.GPU_UTILIZATION, gpu, rates.gpu / 100), (m.GPU_MEMORY_UTILIZATION, gpu, rates.memory / 100)]


def _memory(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    # v2 splits the driver's reservation (~500 MB on an H100) out of `used`, as nvidia-smi
    # does; v1's `used` is total - free, reservation included. v1 only where v2 is missing.
    version = getattr(pynvml, "nvmlMemory_v2", None)
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=version) if version else None
    except MEMORY_V2_UNAVAILABLE:
        mem = None
    reserved: Reading = []
    if mem is None:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    else:
        reserved = [(m.GPU_MEMORY_RESERVED, gpu, float(mem.reserved))]
    return [(m.GPU_MEMORY_FREE, gpu, float(mem.free)), (m.GPU_MEMORY_USED, gpu, float(mem.used)),
            *reserved, (m.GPU_MEMORY_TOTAL, gpu, float(mem.total))]


def _power(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_POWER, gpu, nvml.nvmlDeviceGetPowerUsage(handle) * MILLI)]


def _power_limit(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_POWER_LIMIT, gpu, nvml.nvmlDeviceGetEnforcedPowerLimit(handle) * MILLI)]


def _energy(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_ENERGY, gpu, nvml.nvmlDeviceGetTotalEnergyConsumption(handle) * MILLI)]


def _temperature(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    celsius = nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    return [(m.GPU_TEMPERATURE, gpu, float(celsius))]


def _sm_clock(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_SM_CLOCK, gpu, nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) * MEGA)]


def _memory_clock(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    mhz = nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    return [(m.GPU_MEMORY_CLOCK, gpu, mhz * MEGA)]


def _clock_events(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    try:
        mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except (AttributeError, pynvml.NVMLError_FunctionNotFound):
        # nvidia-ml-py or a driver older than the 2023 rename only has the throttle name.
        mask = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
    return [(m.GPU_CLOCK_EVENT, (*gpu, reason), 1.0 if mask & bit else 0.0)
            for bit, reason in CLOCK_EVENT_REASONS]


def _ecc(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    # Volatile counters: since the driver loaded, so rate() sees fresh errors promptly.
    return [(m.GPU_ECC_ERRORS, (*gpu, kind),
             float(nvml.nvmlDeviceGetTotalEccErrors(handle, code, pynvml.NVML_VOLATILE_ECC)))
            for kind, code in ECC_ERROR_TYPES]


def _remapped_rows(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    correctable, uncorrectable, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return [(m.GPU_REMAPPED_ROWS, (*gpu, "correctable"), float(correctable)),
            (m.GPU_REMAPPED_ROWS, (*gpu, "uncorrectable"), float(uncorrectable)),
            (m.GPU_ROW_REMAP_PENDING, gpu, 1.0 if pending else 0.0),
            (m.GPU_ROW_REMAP_FAILURE, gpu, 1.0 if failure else 0.0)]


def pcie_tx(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_PCIE_TX, gpu,
             nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * KIB)]


def pcie_rx(nvml: Any, handle: Any, gpu: Labels) -> Reading:
    return [(m.GPU_PCIE_RX, gpu,
             nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * KIB)]


READERS: tuple[Reader, ...] = (_utilization, _memory, _power, _power_limit, _energy,
                               _temperature, _sm_clock, _memory_clock, _clock_events, _ecc,
                               _remapped_rows)


def read_gpu(nvml: Any, gpu: GpuIdentity, handle: Any, driver_version: str,
             readers: tuple[Reader, ...] = READERS) -> list[Sample]:
    """Every sample of one GPU; raises ``pynvml.NVMLError`` if the GPU itself fails."""
    labels = gpu.labels
    samples: list[Sample] = [
        (m.GPU_INFO, (*labels, gpu.name, gpu.pci_bus_id, driver_version), 1.0)]
    samples.extend(read_fields(nvml, labels, handle, readers))
    return samples


def read_fields(nvml: Any, labels: tuple[str, ...], handle: Any,
                readers: tuple[Reader, ...]) -> list[Sample]:
    samples: list[Sample] = []
    for reader in readers:
        try:
            samples += reader(nvml, handle, labels)
        except FIELD_UNAVAILABLE:
            continue
    return samples
