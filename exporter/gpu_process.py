"""The ``gpu_process`` collector (off by default): device memory and utilization per process,
and whom each process works for (``trainwatch_gpu_process_info``: its Kubernetes pod and
container or Slurm job, from ``<procfs>/<pid>/cgroup``; exporter/cgroup.py).

Off by default because its label set grows with every process that touches a GPU. ``pid`` is
the process id as the host sees it (NVML does not know about PID namespaces), so inside a
container it may not match ``trainwatch_trial_info{pid}``; the GPU ``uuid`` always does. The
attribution needs the host's processes under ``--path.procfs``: the host's PID namespace
(the chart's ``exporter.hostPID``) or the host's /proc mounted there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pynvml

from exporter import metrics as m
from exporter.cgroup import AttributionCache
from exporter.collector import Sample, emit
from exporter.deadline import current_deadline
from exporter.gpu_fields import FIELD_UNAVAILABLE
from exporter.lanes import LanePool
from exporter.nvml import GpuIdentity, NvmlSession

# How far back to accept utilization samples. NVML keeps one per process per sample period
# (1/6 s to 1 s); asking for the last few seconds, rather than "since my previous scrape",
# keeps the collector stateless, so two Prometheus servers scraping it both see the value.
UTILIZATION_LOOKBACK_SECONDS = 5.0


def _running_processes(nvml: Any, handle: Any) -> dict[int, float]:
    """pid -> device memory in bytes, over compute and graphics contexts."""
    used: dict[int, float] = {}
    for read in (nvml.nvmlDeviceGetComputeRunningProcesses,
                 nvml.nvmlDeviceGetGraphicsRunningProcesses):
        try:
            processes = read(handle)
        except FIELD_UNAVAILABLE:
            continue
        for proc in processes:
            # None where the driver cannot say (no permission, WDDM): unknown, not zero.
            if proc.usedGpuMemory is not None:
                used[proc.pid] = max(used.get(proc.pid, 0.0), float(proc.usedGpuMemory))
    return used


def _utilization(nvml: Any, handle: Any, since_us: int) -> dict[int, float]:
    """pid -> SM utilization (0-1) from the newest sample of each process since ``since_us``."""
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except (pynvml.NVMLError_NotFound, *FIELD_UNAVAILABLE):
        return {}  # NotFound: no process ran a kernel in the window
    newest: dict[int, tuple[int, float]] = {}
    for sample in samples:
        if sample.pid not in newest or sample.timeStamp > newest[sample.pid][0]:
            newest[sample.pid] = (sample.timeStamp, sample.smUtil / 100)
    return {pid: ratio for pid, (_, ratio) in newest.items()}


def read_processes(nvml: Any, gpu: GpuIdentity, handle: Any, since_us: int,
                   owners: AttributionCache) -> list[Sample]:
    samples: list[Sample] = []
    used, busy = _running_processes(nvml, handle), _utilization(nvml, handle, since_us)
    for pid, value in sorted(used.items()):
        samples.append((m.GPU_PROCESS_MEMORY, (*gpu.labels, str(pid)), value))
    for pid, ratio in sorted(busy.items()):
        samples.append((m.GPU_PROCESS_UTILIZATION, (*gpu.labels, str(pid)), ratio))
    for pid in sorted(used.keys() | busy.keys()):
        samples.append((m.GPU_PROCESS_INFO, (*gpu.labels, str(pid), *owners.of(pid).labels), 1.0))
    return samples


class GpuProcessCollector:
    """Per-process GPU memory and utilization, sharing the ``gpu`` collector's NVML session.

    Example (what a sample is depends on the machine's GPUs, hence no doctest)::

        registry = CollectorRegistry()
        registry.register(GpuProcessCollector(NvmlSession(pynvml)))
        registry.get_sample_value("trainwatch_gpu_process_memory_bytes", {..., "pid": "4242"})
    """

    def __init__(self, session: NvmlSession, wall_clock: Callable[[], float] = time.time,
                 owners: AttributionCache | None = None) -> None:
        self._session = session
        self._wall_clock = wall_clock
        self._owners = owners if owners is not None else AttributionCache()
        self._lanes = LanePool("gpu_process")  # a hung GPU never hangs the scrape here either

    def collect(self) -> Iterator[m.Family]:
        nvml = self._session.nvml
        since_us = int((self._wall_clock() - UTILIZATION_LOOKBACK_SECONDS) * 1e6)
        part = ("", lambda gpu, handle: read_processes(nvml, gpu, handle, since_us,
                                                       self._owners))
        reads = self._session.read_each_gpu(lambda index: [part], self._lanes,
                                            current_deadline())
        # The processes listed now; the cache forgets the rest (a pid reused later is read anew).
        self._owners.keep(int(labels[2]) for spec, labels, _ in reads.samples
                          if spec is m.GPU_PROCESS_INFO)
        yield from emit(reads.samples, reads.failures, reads.timeouts)
