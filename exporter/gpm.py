"""NVML GPU Performance Monitoring (GPM): what the SMs, tensor cores and memory really do.

``nvmlDeviceGetUtilizationRates`` says whether *any* kernel ran; on an H100 it read 99% while
GPM said 22.5% of SMs were busy. GPM computes each metric over the interval between two
samples, so each GPU keeps its previous sample and the next scrape computes against it: the
values cover the time since the previous scrape and nothing waits. Costs measured on an H100:
``nvmlGpmSampleGet`` 0.1-0.8 ms, ``nvmlGpmMetricsGet`` 1.6-5.4 ms per GPU.

GPM is Hopper and newer; elsewhere ``nvmlGpmQueryDeviceSupport`` says no (or the driver lacks
the function) and every GPM series is left out. A metric the board does not support comes back
with its own error code and is left out alone. MIG is left out: a slice's activity needs
``nvmlGpmMigSampleGet`` per GPU instance, which trainwatch does not read, so on a GPU in MIG
mode these series describe the whole GPU, or are absent where the driver refuses (a refused
``nvmlGpmSampleGet`` switches GPM off for that GPU, the GPU's other series stay).
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any

import pynvml

from exporter import metrics as m

# Divisors to base units (a division keeps 23.5% exactly 0.235 in the exposition).
PERCENT = 100.0
PER_MIB = 1.0 / 2**20
PCIE_SPECS = (m.GPU_PCIE_TX, m.GPU_PCIE_RX)

# (GPM metric id, spec, extra label values, divisor to base units). Ids are NVML's ABI.
GPM_METRICS: tuple[tuple[int, m.MetricSpec, tuple[str, ...], float], ...] = (
    (pynvml.NVML_GPM_METRIC_SM_UTIL, m.GPU_SM_ACTIVE, (), PERCENT),
    (pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, m.GPU_SM_OCCUPANCY, (), PERCENT),
    (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, m.GPU_TENSOR_ACTIVE, (), PERCENT),
    (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, m.GPU_DRAM_ACTIVE, (), PERCENT),
    (pynvml.NVML_GPM_METRIC_FP64_UTIL, m.GPU_PIPE_ACTIVE, ("fp64",), PERCENT),
    (pynvml.NVML_GPM_METRIC_FP32_UTIL, m.GPU_PIPE_ACTIVE, ("fp32",), PERCENT),
    (pynvml.NVML_GPM_METRIC_FP16_UTIL, m.GPU_PIPE_ACTIVE, ("fp16",), PERCENT),
    (pynvml.NVML_GPM_METRIC_INTEGER_UTIL, m.GPU_PIPE_ACTIVE, ("integer",), PERCENT),
    (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, m.GPU_PCIE_TX, (), PER_MIB),
    (pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, m.GPU_PCIE_RX, (), PER_MIB),
    (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, m.GPU_NVLINK_TX, (), PER_MIB),
    (pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, m.GPU_NVLINK_RX, (), PER_MIB),
)
# "No GPM here": an older board, driver or nvidia-ml-py. Not a failure of the GPU.
GPM_UNAVAILABLE: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoPermission, AttributeError)

Reading = list[tuple[m.MetricSpec, tuple[str, ...], float]]


def _results_layout(count: int) -> struct.Struct:
    """Each of the first ``count`` results' (nvmlReturn, value) in ``c_nvmlGpmMetricsGet_t``,
    read in one ``unpack_from`` at ``metrics``' offset, laid out by the structures' own
    offsets: one call instead of ``count`` ctypes views through pynvml's ``__getattribute__``
    (about 11 us less per GPU and scrape on the development VM)."""
    metric = pynvml.c_nvmlGpmMetric_t
    size, code, value = ctypes.sizeof(metric), metric.nvmlReturn.offset, metric.value.offset
    parts, position = [], 0
    for i in range(count):
        parts.append(f"{i * size + code - position}xI")
        parts.append(f"{i * size + value - (i * size + code + 4)}xd")
        position = i * size + value + 8
    return struct.Struct("=" + "".join(parts))


_RESULTS = _results_layout(len(GPM_METRICS))
_RESULTS_OFFSET = pynvml.c_nvmlGpmMetricsGet_t.metrics.offset
_SUCCESS = pynvml.NVML_SUCCESS
_set_field = ctypes.Structure.__setattr__


def gpm_supported(nvml: Any, handle: Any) -> bool:
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except GPM_UNAVAILABLE:
        return False


class GpmSampler:
    """One GPU's GPM state: whether it has GPM, and the sample the next read computes against.

    Not thread-safe: the gpu collector calls it only from that GPU's lane, one read at a time.
    ``read()`` raises ``pynvml.NVMLError`` when the GPU itself fails (then the previous sample
    is freed, so a GPU that comes back starts a fresh interval).
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.supported: bool | None = None  # None: not asked yet
        self._previous: Any = None
        self._spare: Any = None
        self._request: Any = None

    def read(self, handle: Any) -> Reading:
        """Take a sample; the metrics since the previous one ([] on the first read)."""
        if self.supported is None:
            self.supported = gpm_supported(self._nvml, handle)
        if not self.supported:
            return []
        current = self._spare if self._spare is not None else self._nvml.nvmlGpmSampleAlloc()
        self._spare = None
        try:
            self._nvml.nvmlGpmSampleGet(handle, current)
        except GPM_UNAVAILABLE:  # e.g. a GPU switched into MIG mode: GPM is off, the GPU is fine
            self.supported = False  # for good: neither sample is needed again
            self._drop_previous()
            self._nvml.nvmlGpmSampleFree(current)
            return []
        except pynvml.NVMLError:
            self._spare = current
            self._drop_previous()
            raise
        previous, self._previous, self._spare = self._previous, current, self._previous
        return [] if previous is None else self._metrics(previous, current)

    def _drop_previous(self) -> None:
        """Free the sample the next read would have computed against (a failed sample ends
        the interval, and a sample left unfreed is held by NVML for the process's life)."""
        previous, self._previous = self._previous, None
        if previous is not None:
            self._nvml.nvmlGpmSampleFree(previous)

    def _metrics(self, first: Any, second: Any) -> Reading:
        request = self._request
        if request is None:
            request = self._request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(GPM_METRICS)
            for i, (metric_id, *_) in enumerate(GPM_METRICS):
                request.metrics[i].metricId = metric_id
        # ctypes' own setter: pynvml's __setattr__ only adds a str check around it
        _set_field(request, "sample1", first)
        _set_field(request, "sample2", second)
        try:
            self._nvml.nvmlGpmMetricsGet(request)
        except GPM_UNAVAILABLE:
            return []
        results = _RESULTS.unpack_from(request, _RESULTS_OFFSET)  # (code, value) per metric
        reading: Reading = []
        for i, (_, spec, labels, divisor) in enumerate(GPM_METRICS):
            code, value = results[2 * i], results[2 * i + 1]
            if code == _SUCCESS and math.isfinite(value):
                reading.append((spec, labels, value / divisor))
        return reading
