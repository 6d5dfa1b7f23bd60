"""The ``gpu`` collector: NVIDIA GPU state read through NVML at scrape time.

A field the board does not support (power, energy, ECC, GPM, row remapping, clock event
reasons) is left out, never exported as 0. A GPU that fails mid-read (``NVMLError_GpuIsLost``
and friends) loses all its series for that scrape; the other GPUs are exported and the
collector reports success 0 so the failure is visible.

Each GPU is read on its own lane (``exporter.lanes``), all GPUs at once, until the scrape's
deadline (``exporter.deadline``): a GPU whose driver hangs is left out of the scrape and
counted in ``trainwatch_scrape_collector_timeouts_total``, and it is not asked again until
the stuck call returns.

Activity (SM, tensor, DRAM, pipes, NVLink) comes from GPM (``exporter.gpm``), and so does
PCIe throughput where GPM works: free, and averaged since the previous scrape. Elsewhere NVML
samples PCIe for 20 ms per direction; both directions of every GPU are sampled concurrently,
so a scrape pays ~20 ms once. ``--no-gpu.pcie-throughput`` drops the PCIe series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pynvml
from prometheus_client.core import Metric

from exporter import metrics as m
from exporter.collector import CollectorError, Sample, emit
from exporter.deadline import current_deadline
from exporter.gpm import PCIE_SPECS, GpmSampler
from exporter.lanes import LanePool
from exporter.nvml import GpuIdentity, GpuPart, NvmlSession

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
    # v2 splits the driver's reservation (~500 MB on an H100) out of `used`, as nvidia-smi
    # does; v1's `used` is total - free, reservation included. v1 only where v2 is missing.
    version = getattr(pynvml, "nvmlMemory_v2", None)
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=version) if version else None
    except (TypeError, *FIELD_UNAVAILABLE):  # TypeError: nvidia-ml-py without `version=`
        mem = None
    reserved: Reading = []
    if mem is None:
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    else:
        reserved = [(m.GPU_MEMORY_RESERVED, (), float(mem.reserved))]
    return [(m.GPU_MEMORY_FREE, (), float(mem.free)), (m.GPU_MEMORY_USED, (), float(mem.used)),
            *reserved, (m.GPU_MEMORY_TOTAL, (), float(mem.total))]


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


def _remapped_rows(nvml: Any, handle: Any) -> Reading:
    correctable, uncorrectable, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
    return [(m.GPU_REMAPPED_ROWS, ("correctable",), float(correctable)),
            (m.GPU_REMAPPED_ROWS, ("uncorrectable",), float(uncorrectable)),
            (m.GPU_ROW_REMAP_PENDING, (), 1.0 if pending else 0.0),
            (m.GPU_ROW_REMAP_FAILURE, (), 1.0 if failure else 0.0)]


def _pcie_tx(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_PCIE_TX, (),
             nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * KIB)]


def _pcie_rx(nvml: Any, handle: Any) -> Reading:
    return [(m.GPU_PCIE_RX, (),
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
            reading = reader(nvml, handle)
        except FIELD_UNAVAILABLE:
            continue
        samples.extend((spec, labels + extra, value) for spec, extra, value in reading)
    return samples


class GpuCollector:
    """NVML device metrics for every GPU of the node, GPM activity included.

    >>> import pynvml
    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> registry.register(GpuCollector(NvmlSession(pynvml), pcie_throughput=False))
    >>> # registry.get_sample_value("trainwatch_gpu_power_watts", {"gpu": "0", "uuid": uuid})
    """

    def __init__(self, session: NvmlSession, pcie_throughput: bool = True) -> None:
        self._session = session
        self._pcie = pcie_throughput
        self._lanes = LanePool("gpu")
        self._gpm: dict[int, GpmSampler] = {}

    def prime(self) -> None:
        """Take every GPU's first GPM sample now, in the background, so that the first scrape
        already has an interval to report."""
        self._lanes.lane("nvml").submit(self._prime_all)

    def collect(self) -> Iterator[Metric]:
        reads = self._session.read_each_gpu(self._parts, self._lanes, current_deadline())
        yield from emit(reads.samples, reads.failures, reads.timeouts)

    def _sampler(self, index: int) -> GpmSampler:
        return self._gpm.setdefault(index, GpmSampler(self._session.nvml))

    def _parts(self, index: int) -> list[GpuPart]:
        # Until GPM support is known (the first read), PCIe is sampled the old way.
        gpm_pcie = self._sampler(index).supported is True
        parts: list[GpuPart] = [("", partial(self._read_device, self._pcie and gpm_pcie))]
        if self._pcie and not gpm_pcie:
            parts += [("pcie-tx", partial(self._read_fields, (_pcie_tx,))),
                      ("pcie-rx", partial(self._read_fields, (_pcie_rx,)))]
        return parts

    def _read_device(self, gpm_pcie: bool, gpu: GpuIdentity, handle: Any) -> list[Sample]:
        session = self._session
        samples = read_gpu(session.nvml, gpu, handle, session.driver_version)
        for spec, extra, value in self._sampler(gpu.index).read(handle):
            if gpm_pcie or spec not in PCIE_SPECS:
                samples.append((spec, gpu.labels + extra, value))
        return samples

    def _read_fields(self, readers: tuple[Reader, ...], gpu: GpuIdentity,
                     handle: Any) -> list[Sample]:
        return read_fields(self._session.nvml, gpu.labels, handle, readers)

    def _prime_all(self) -> None:
        nvml = self._session.nvml
        try:
            self._session.require()
            count = nvml.nvmlDeviceGetCount()
        except (CollectorError, pynvml.NVMLError):
            return  # logged by the session; the first scrape reports it
        for index in range(count):
            self._lanes.lane(f"gpu{index}").submit(partial(self._prime_one, index))

    def _prime_one(self, index: int) -> None:
        try:
            self._sampler(index).read(self._session.nvml.nvmlDeviceGetHandleByIndex(index))
        except pynvml.NVMLError:
            pass  # the first scrape reads this GPU again and reports what fails
