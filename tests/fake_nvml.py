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

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

DRIVER_VERSION = "550.54.15"
# NVML field functions a board may not support, by the name the exporter calls.
POWER_FIELDS = ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                "nvmlDeviceGetTotalEnergyConsumption")


def fake_uuid(index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-{index:012x}"


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # NVMLError.__new__ returns the matching real subclass


@dataclass
class FakeGpu:
    """One board; units are NVML's: percent, bytes, mW, mJ, degrees C, MHz, KB/s."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    gpu_util: int = 0
    mem_util: int = 0
    memory_total: int = 80 * 2**30
    memory_used: int = 0
    power_mw: int = 0
    power_limit_mw: int = 700_000
    energy_mj: int = 0
    temperature: int = 0
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clock_event_mask: int = 0
    ecc: tuple[int, int] = (0, 0)
    pcie_kbps: tuple[int, int] = (0, 0)
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used bytes or None)
    process_util: tuple[tuple[int, int, int], ...] = ()  # (pid, sm percent, timestamp in us)
    unsupported: frozenset[str] = frozenset()
    lost: bool = False

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
                   ecc=(index, 0), pcie_kbps=(1000 + index, 2000 + index),
                   processes=((4242 + index, (1 + index) * 2**30),),
                   process_util=((4242 + index, 40 + index, 2**62),))


@dataclass
class FakeNvml:
    """The subset of the ``pynvml`` module the exporter uses; ``calls`` counts each function."""

    gpus: list[FakeGpu]
    library_present: bool = True
    calls: Counter[str] = field(default_factory=Counter)

    @classmethod
    def with_gpus(cls, count: int) -> FakeNvml:
        return cls([FakeGpu.deterministic(i) for i in range(count)])

    def _device(self, handle: FakeGpu, function: str) -> FakeGpu:
        self.calls[function] += 1
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

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        gpu = self._device(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used,
                               free=gpu.memory_total - gpu.memory_used)

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
