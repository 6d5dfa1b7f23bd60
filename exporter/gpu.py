"""The ``gpu`` collector: NVIDIA GPU state read through NVML at scrape time.

A field the board does not support (power, energy, ECC, PCIe counters, clock event reasons) is
left out, never exported as 0. A GPU that fails mid-read (``NVMLError_GpuIsLost`` and friends)
loses all its series for that scrape; the other GPUs are exported and the collector reports
success 0 so the failure is visible.

PCIe throughput costs time: NVML samples a byte counter for 20 ms per direction, so 40 ms per
GPU per scrape (320 ms on an 8-GPU node). Switch it off with ``--no-gpu.pcie-throughput`` when
that matters more than the metric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pynvml
from prometheus_client.core import Metric

from exporter import metrics as m
from exporter.collector import Sample, emit
from exporter.nvml import GpuIdentity, NvmlSession

# Errors that mean "this board or driver cannot tell us this field": omit the field, keep the GPU.
FIELD_UNAVAILABLE: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission)

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

# A reader turns one NVML call (or a pair) into (spec, extra label values, value) triples.
Reading = list[tuple[m.MetricSpec, tuple[str, ...], float]]
Reader = Callable[[Any, Any], Reading]


def _utilization(nvml: Any, handle: Any) -> Reading:
    rates = nvml.nvmlDeviceGetUtilizationRates(handle)
    return [(m.GPU_UTILIZATION, (), rates.gpu / 100), (m.GPU_MEMORY_UTILIZATION, (), rates.memory / 100)]


def _memory(nvml: Any, handle: Any) -> Reading:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    return [(m.GPU_MEMORY_FREE, (), float(mem.free)), (m.GPU_MEMORY_USED, (), float(mem.used)),
            (m.GPU_MEMORY_TOTAL, (), float(mem.total))]


def _power(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_POWER, (), nvml.nvmlDeviceGetPowerUsage(handle) * MILLI)]


def _power_limit(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_POWER_LIMIT, (), nvml.nvmlDeviceGetEnforcedPowerLimit(handle) * MILLI)]


def _energy(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_ENERGY, (), nvml.nvmlDeviceGetTotalEnergyConsumption(handle) * MILLI)]


def _temperature(nvml: Any, handle: Any) -> Reading:
    celsius = nvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    return [(m.GPU_TEMPERATURE, (), float(celsius))]


def _sm_clock(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_SM_CLOCK, (), nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) * MEGA)]


def _memory_clock(nvml: Any, handle: Any) -> Reading:
    mhz = nvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    return [(m.GPU_MEMORY_CLOCK, (), mhz * MEGA)]


def _clock_events(nvml: Any, handle: Any) -> Reading:
    try:
        mask = nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except (AttributeError, pynvml.NVMLError_FunctionNotFound):
        # nvidia-ml-py or a driver older than the 2023 rename only has the throttle name.
        mask = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
    return [(m.GPU_CLOCK_EVENT, (reason,), 1.0 if mask & bit else 0.0)
            for bit, reason in CLOCK_EVENT_REASONS]


def _ecc(nvml: Any, handle: Any) -> Reading:
    # Volatile counters: since the driver loaded, so rate() sees fresh errors promptly.
    return [(m.GPU_ECC_ERRORS, (kind,),
             float(nvml.nvmlDeviceGetTotalEccErrors(handle, code, pynvml.NVML_VOLATILE_ECC)))
            for kind, code in ECC_ERROR_TYPES]


def _pcie(nvml: Any, handle: Any) -> Reading:
    tx = nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    return [(m.GPU_PCIE_TX, (), tx * KIB), (m.GPU_PCIE_RX, (), rx * KIB)]


READERS: tuple[Reader, ...] = (_utilization, _memory, _power, _power_limit, _energy,
                               _temperature, _sm_clock, _memory_clock, _clock_events, _ecc)


def read_gpu(nvml: Any, gpu: GpuIdentity, handle: Any, driver_version: str,
             readers: tuple[Reader, ...] = READERS) -> list[Sample]:
    """Every sample of one GPU; raises ``pynvml.NVMLError`` if the GPU itself fails."""
    labels = gpu.labels
    samples: list[Sample] = [
        (m.GPU_INFO, (*labels, gpu.name, gpu.pci_bus_id, driver_version), 1.0)]
    for reader in readers:
        try:
            reading = reader(nvml, handle)
        except FIELD_UNAVAILABLE:
            continue
        samples.extend((spec, labels + extra, value) for spec, extra, value in reading)
    return samples


class GpuCollector:
    """NVML device metrics for every GPU of the node.

    >>> import pynvml
    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> registry.register(GpuCollector(NvmlSession(pynvml), pcie_throughput=False))
    >>> # registry.get_sample_value("trainwatch_gpu_power_watts", {"gpu": "0", "uuid": uuid})
    """

    def __init__(self, session: NvmlSession, pcie_throughput: bool = True) -> None:
        self._session = session
        self._readers = READERS + (_pcie,) if pcie_throughput else READERS

    def collect(self) -> Iterator[Metric]:
        session = self._session
        samples, failures = session.read_each_gpu(
            lambda gpu, handle: read_gpu(session.nvml, gpu, handle, session.driver_version,
                                         self._readers))
        yield from emit(samples, failures)
