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

from collections.abc import Iterator
from functools import partial
from typing import Any

import pynvml

from exporter.collector import CollectorError, Sample, emit
from exporter.deadline import current_deadline
from exporter.family import Family
from exporter.gpm import PCIE_SPECS, GpmSampler
from exporter.gpu_fields import (  # re-exported: the names other modules and tests know
    CLOCK_EVENT_REASONS,
    FIELD_UNAVAILABLE,
    READERS,
    Reader,
    pcie_rx,
    pcie_tx,
    read_fields,
    read_gpu,
)
from exporter.lanes import LanePool
from exporter.metrics import GPU_NVML_ABSENT, GPU_PEAK_FLOPS
from exporter.nvml import GpuIdentity, GpuPart, NvmlSession
from exporter.peak_flops import PeakTable

__all__ = ["CLOCK_EVENT_REASONS", "FIELD_UNAVAILABLE", "READERS", "GpuCollector", "read_gpu"]


class GpuCollector:
    """NVML device metrics for every GPU of the node, GPM activity included.

    Example (what a sample is depends on the machine's GPUs, hence no doctest)::

        registry = CollectorRegistry()
        registry.register(GpuCollector(NvmlSession(pynvml), pcie_throughput=False))
        registry.get_sample_value("trainwatch_gpu_power_watts", {"gpu": "0", "uuid": uuid})
    """

    def __init__(self, session: NvmlSession, pcie_throughput: bool = True,
                 peaks: PeakTable | None = None) -> None:
        self._session = session
        self._pcie = pcie_throughput
        self._peaks = peaks or PeakTable()
        self._lanes = LanePool("gpu")
        self._gpm: dict[int, GpmSampler] = {}
        # A GPU's peak samples by its label values: its product's table row, made once.
        self._peak_samples: dict[tuple[str, ...], list[Sample]] = {}

    def prime(self) -> None:
        """Take every GPU's first GPM sample now, in the background, so that the first scrape
        already has an interval to report."""
        self._lanes.lane("nvml").submit(self._prime_all)

    def collect(self) -> Iterator[Family]:
        # Whether NVML is absent is part of every scrape, whatever else fails.
        try:
            reads = self._session.read_each_gpu(self._parts, self._lanes, current_deadline())
        except CollectorError:
            yield self._nvml_absent()
            raise
        yield self._nvml_absent()
        yield from emit(reads.samples, reads.failures, reads.timeouts)

    def _nvml_absent(self) -> Family:
        family = Family(GPU_NVML_ABSENT)
        family.add_metric((), 1.0 if self._session.absent else 0.0)
        return family

    def _sampler(self, index: int) -> GpmSampler:
        found = self._gpm.get(index)  # a sampler is made once per GPU, not per call
        if found is None:
            found = self._gpm.setdefault(index, GpmSampler(self._session.nvml))
        return found

    def _parts(self, index: int) -> list[GpuPart]:
        # Until GPM support is known (the first read), PCIe is sampled the old way.
        gpm_pcie = self._sampler(index).supported is True
        parts: list[GpuPart] = [("", partial(self._read_device, self._pcie and gpm_pcie))]
        if self._pcie and not gpm_pcie:
            parts += [("pcie-tx", partial(self._read_fields, (pcie_tx,))),
                      ("pcie-rx", partial(self._read_fields, (pcie_rx,)))]
        return parts

    def _read_device(self, gpm_pcie: bool, gpu: GpuIdentity, handle: Any) -> list[Sample]:
        session = self._session
        samples = read_gpu(session.nvml, gpu, handle, session.driver_version)
        labels = gpu.labels
        peaks = self._peak_samples.get(labels)
        if peaks is None:
            peaks = self._peak_samples[labels] = [
                (GPU_PEAK_FLOPS, (*labels, dtype), flops)
                for dtype, flops in self._peaks.peaks(gpu.name).items()]
        samples += peaks
        for spec, extra, value in self._sampler(gpu.index).read(handle):
            if gpm_pcie or spec not in PCIE_SPECS:
                samples.append((spec, labels + extra, value))
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
