"""A fake NVML with the functions trainwatch calls, raising the REAL pynvml exception classes.

The only stand-in the tests use: injected at the pynvml boundary (``NvmlSession(fake)`` or
``exporter.cli.main(argv, nvml=fake)``), so every ``except pynvml.NVMLError_...`` clause in the
exporter is exercised for real. Values are deterministic functions of the GPU index.

>>> nvml = FakeNvml.with_gpus(2)
>>> nvml.nvmlInit()
>>> nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(1))
'GPU-00000000-0000-0000-0000-000000000001'
"""

from __future__ import annotations

import ctypes
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

DRIVER_VERSION = "550.54.15"
# NVML field functions a board may not support, by the name the exporter calls.
POWER_FIELDS = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                "nvmlDeviceGetTotalEnergyConsumption")


# Percent-valued GPM metrics the fake integrates over time (the MiB/s ones come from the
# board's PCIe and NVLink fields).
GPM_PERCENT_METRICS = (
    pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_FP64_UTIL, pynvml.NVML_GPM_METRIC_FP32_UTIL,
    pynvml.NVML_GPM_METRIC_FP16_UTIL, pynvml.NVML_GPM_METRIC_INTEGER_UTIL)
# The H100 of issue 12: NVML utilization 99%, the SMs mostly idle.
H100_GPM = {pynvml.NVML_GPM_METRIC_SM_UTIL: 22.5, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 3.3,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 21.8, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 9.2,
            pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.0, pynvml.NVML_GPM_METRIC_FP32_UTIL: 1.5,
            pynvml.NVML_GPM_METRIC_FP16_UTIL: 0.5, pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 2.0}
H100_RESERVED_BYTES = 503_316_480  # nvmlMemory_v2.reserved on an idle H100, driver 580
# A healthy, busy GPU (what FakeGpu.deterministic reads, plus its index): most SMs active,
# tensor cores doing the matmuls. No trainwatch alert or verdict objects to it.
BUSY_GPM = {pynvml.NVML_GPM_METRIC_SM_UTIL: 60.0, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 30.0,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 45.0, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 35.0,
            pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.0, pynvml.NVML_GPM_METRIC_FP32_UTIL: 10.0,
            pynvml.NVML_GPM_METRIC_FP16_UTIL: 5.0, pynvml.NVML_GPM_METRIC_INTEGER_UTIL: 8.0}


def fake_uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012x}"


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # NVMLError.__new__ returns the matching real subclass


@dataclass
class FakeGpu:
    """One board; units are NVML's: percent, bytes, mW, mJ, degrees C, MHz, KB/s, MiB/s.

    ``gpm`` is None on a board without GPM (A100 and older); else the percent rate of each GPM
    metric id, integrated over the fake's clock (``FakeNvml.advance``). ``delays`` makes a
    function take that many seconds (a hung driver: 60), released early by
    ``FakeNvml.release``.
    """

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    gpu_util: int = 0
    mem_util: int = 0
    memory_total: int = 80 * 2**30
    memory_used: int = 0
    memory_reserved: int = 0
    power_mw: int = 0
    power_limit_mw: int = 700_000
    energy_mj: int = 0
    temperature: int = 0
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clock_event_mask: int = 0
    ecc: tuple[int, int] = (0, 0)
    pcie_kbps: tuple[int, int] = (0, 0)
    gpm: dict[int, float] | None = None
    nvlink_mibps: tuple[float, float] | None = None  # (tx, rx) over all links; None: no NVLink
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable,
    #                                                        # pending, failure
    delays: dict[str, float] = field(default_factory=dict)
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used bytes or None)
    process_util: tuple[tuple[int, int, int], ...] = ()  # (pid, sm percent, timestamp in us)
    unsupported: frozenset[str] = frozenset()
    lost: bool = False
    gpm_totals: dict[int, float] = field(default_factory=dict)  # percent x seconds, per id

    @property
    def uuid(self) -> str:
        return fake_uuid(self.index)

    @classmethod
    def deterministic(cls, index: int) -> FakeGpu:
        """A busy GPU whose every reading is a simple function of its index."""
        return cls(index=index, gpu_util=50 + index, mem_util=20 + index,
                   memory_used=(10 + index) * 2**30, power_mw=300_000 + 1000 * index,
                   energy_mj=1_000_000_000 + index, temperature=60 + index,
                   clock_event_mask=pynvml.nvmlClocksEventReasonSwPowerCap,
                   memory_reserved=H100_RESERVED_BYTES,
                   ecc=(index, 0), pcie_kbps=(1000 + index, 2000 + index),
                   gpm={metric: value + index for metric, value in BUSY_GPM.items()},
                   nvlink_mibps=(100.0 + index, 200.0 + index), remapped_rows=(index, 0, 0, 0),
                   processes=((4242 + index, (1 + index) * 2**30),),
                   process_util=((4242 + index, 40 + index, 2**62),))


@dataclass
class FakeNvml:
    """The subset of the ``pynvml`` module the exporter uses; ``calls`` counts each function."""

    gpus: list[FakeGpu]
    library_present: bool = True
    calls: Counter[str] = field(default_factory=Counter)
    now: float = 0.0  # the GPM clock, in seconds; moved only by advance()
    release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # GPM samples by the address their (real, opaque) c_nvmlGpmSample_t pointer holds.
    _gpm_samples: dict[int, tuple[int, float, dict[int, float]] | None] = field(
        default_factory=dict)

    @classmethod
    def with_gpus(cls, count: int) -> FakeNvml:
        return cls([FakeGpu.deterministic(i) for i in range(count)])

    def gpm_rates(self, gpu: FakeGpu) -> dict[int, float]:
        """The board's GPM metric id -> value now (percent, or MiB/s for PCIe and NVLink)."""
        rates = dict(gpu.gpm or {})
        rates[pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC] = gpu.pcie_kbps[0] / 1024
        rates[pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC] = gpu.pcie_kbps[1] / 1024
        if gpu.nvlink_mibps is not None:
            rates[pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC] = gpu.nvlink_mibps[0]
            rates[pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC] = gpu.nvlink_mibps[1]
        return rates

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of fake time pass at every board's current GPM rates."""
        for gpu in self.gpus:
            for metric, rate in self.gpm_rates(gpu).items():
                gpu.gpm_totals[metric] = gpu.gpm_totals.get(metric, 0.0) + rate * seconds
        self.now += seconds

    def _device(self, handle: FakeGpu, function: str) -> FakeGpu:
        with self._lock:
            self.calls[function] += 1
        delay = handle.delays.get(function)
        if delay:
            self.release.wait(delay)  # NVML releases the GIL; so does this wait
        if handle.lost:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in handle.unsupported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if not self.library_present:
            raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlSystemGetDriverVersion(self) -> str:
        return DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        self.calls["nvmlDeviceGetCount"] += 1
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if index >= len(self.gpus):
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._device(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._device(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        gpu = self._device(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x17 + gpu.index:02X}:00.0")

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        gpu = self._device(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=gpu.gpu_util, memory=gpu.mem_util)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: int | None = None) -> Any:
        if not version:  # v1: `used` is total - free, the driver's reservation included
            gpu = self._device(h, "nvmlDeviceGetMemoryInfo")
            memory = pynvml.c_nvmlMemory_t()
            memory.total, memory.used = gpu.memory_total, gpu.memory_used + gpu.memory_reserved
            memory.free = gpu.memory_total - memory.used
            return memory
        gpu = self._device(h, "nvmlDeviceGetMemoryInfo_v2")
        if version != pynvml.nvmlMemory_v2:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        memory2 = pynvml.c_nvmlMemory_v2_t()
        memory2.version, memory2.total = version, gpu.memory_total
        memory2.reserved, memory2.used = gpu.memory_reserved, gpu.memory_used
        memory2.free = gpu.memory_total - gpu.memory_used - gpu.memory_reserved
        return memory2

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._device(h, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        gpu = self._device(h, "nvmlDeviceGetClockInfo")
        return {pynvml.NVML_CLOCK_SM: gpu.sm_clock_mhz, pynvml.NVML_CLOCK_MEM: gpu.mem_clock_mhz}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetCurrentClocksEventReasons").clock_event_mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_event_mask

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter: int) -> int:
        assert counter == pynvml.NVML_VOLATILE_ECC
        return self._device(h, "nvmlDeviceGetTotalEccErrors").ecc[error_type]

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        return self._device(h, "nvmlDeviceGetPcieThroughput").pcie_kbps[counter]

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        gpu = self._device(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[Any]:
        self._device(h, "nvmlDeviceGetGraphicsRunningProcesses")
        return []

    def nvmlDeviceGetProcessUtilization(self, h: FakeGpu, since_us: int) -> list[Any]:
        gpu = self._device(h, "nvmlDeviceGetProcessUtilization")
        samples = [SimpleNamespace(pid=pid, smUtil=sm, memUtil=0, timeStamp=ts)
                   for pid, sm, ts in gpu.process_util if ts > since_us]
        if not samples:
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        return self._device(h, "nvmlDeviceGetRemappedRows").remapped_rows

    # --- GPM, with the real pynvml structures ---

    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> Any:
        gpu = self._device(h, "nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm is not None)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        with self._lock:
            self.calls["nvmlGpmSampleAlloc"] += 1
            address = 0x1000 * self.calls["nvmlGpmSampleAlloc"]  # never reused, even once freed
            self._gpm_samples[address] = None
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        """Frees it: a freed sample (or one freed twice) is an invalid argument from then on."""
        with self._lock:
            self.calls["nvmlGpmSampleFree"] += 1
        del self._gpm_samples[self._address(sample)]

    def gpm_samples_held(self) -> int:
        """Samples allocated and not freed."""
        return len(self._gpm_samples)

    def nvmlGpmSampleGet(self, h: FakeGpu, sample: Any) -> Any:
        gpu = self._device(h, "nvmlGpmSampleGet")
        if gpu.gpm is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_samples[self._address(sample)] = (gpu.index, self.now, dict(gpu.gpm_totals))
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        with self._lock:
            self.calls["nvmlGpmMetricsGet"] += 1
        if not isinstance(request, pynvml.c_nvmlGpmMetricsGet_t):
            raise TypeError("nvmlGpmMetricsGet takes a c_nvmlGpmMetricsGet_t")
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise _error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._gpm_samples.get(self._address(request.sample1))
        second = self._gpm_samples.get(self._address(request.sample2))
        if first is None or second is None or first[0] != second[0] or second[1] < first[1]:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[first[0]]
        rates, seconds = self.gpm_rates(gpu), second[1] - first[1]
        for i in range(request.numMetrics):
            result = request.metrics[i]
            if result.metricId not in rates:
                result.nvmlReturn, result.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
                continue
            if seconds > 0:  # the average over the interval, as GPM computes it
                total = second[2].get(result.metricId, 0.0) - first[2].get(result.metricId, 0.0)
                result.value = total / seconds
            else:
                result.value = rates[result.metricId]
            result.nvmlReturn = pynvml.NVML_SUCCESS
        return request

    def _address(self, sample: Any) -> int:
        address = ctypes.cast(sample, ctypes.c_void_p).value
        if address not in self._gpm_samples:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return address
