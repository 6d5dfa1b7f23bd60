"""One NVML session shared by the GPU collectors: initialised once, lazily, retried cheaply.

No GPU or no driver is a normal state: the first failed ``nvmlInit`` is logged once and every
scrape until the next retry fails fast with ``CollectorError`` (no dlopen per scrape). A
driver loaded after the exporter started is picked up at the next retry.

``read_each_gpu`` runs each GPU's reads on that GPU's own lane (``exporter.lanes``), all at
once, and stops waiting at the scrape's deadline: a hung driver costs a scrape its deadline
once, then that GPU is skipped until the stuck call returns.

``nvml`` is the ``pynvml`` module in production and a fake with the same functions in tests;
the exceptions caught are always the real ``pynvml`` classes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import pynvml

from exporter.collector import CollectorError, CollectorTimeout, Sample
from exporter.lanes import Job, LanePool, ReadTimeout

log = logging.getLogger(__name__)

DEFAULT_RETRY_SECONDS = 60.0


def text(value: str | bytes) -> str:
    """NVML strings are bytes in older nvidia-ml-py releases, str in newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@dataclass
class GpuReads:
    """What one scrape read from the GPUs, and what failed or missed its deadline, for the log."""

    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GpuIdentity:
    """What does not change while a GPU is attached; read once per GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str

    @cached_property  # made once per GPU, not once per sample
    def labels(self) -> tuple[str, str]:
        return str(self.index), self.uuid


# One read of one GPU on one lane: (identity, handle) -> samples; raises pynvml.NVMLError.
GpuRead = Callable[["GpuIdentity", Any], list[Sample]]
# (lane suffix, read): parts with different suffixes run concurrently; "" is the GPU's main lane.
GpuPart = tuple[str, GpuRead]


# A read handed to a GPU's lane: (GPU index, whether it is the GPU's main read, its job or why
# its lane refused it).
_Submitted = tuple[int, bool, "Job | ReadTimeout"]


def _abandon(jobs: Sequence[_Submitted]) -> None:
    """Stop waiting for ``jobs``: one not started yet is skipped by its lane."""
    for _, _, job in jobs:
        if isinstance(job, Job):
            job.abandon()


# What NVML says on a machine without NVIDIA's library or driver (no GPU there, or none given
# to this container); any other init error (e.g. a driver/library version mismatch) is a fault.
NO_NVML = (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)


class NvmlSession:
    """NVML initialised at most once; GPU identities cached; thread-safe for concurrent scrapes.

    Example (the answer depends on the machine, hence no doctest)::

        session = NvmlSession(pynvml, retry_seconds=60)
        session.available()  # False, logged once, on a machine without a GPU
    """

    def __init__(self, nvml: Any, retry_seconds: float = DEFAULT_RETRY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if retry_seconds < 0:
            raise ValueError(f"retry_seconds must be >= 0, not {retry_seconds}")
        self.nvml = nvml
        self.driver_version = ""
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._initialised = False
        self._next_try = float("-inf")
        self._unavailable = ""
        self._identities: dict[int, GpuIdentity] = {}
        self._last_count = 0  # GPUs the latest scrape counted (a guess for the next one)
        # No NVML library or no driver on this machine: nothing to read, which is not a failure.
        self.absent = False

    def available(self) -> bool:
        try:
            self.require()
        except CollectorError:
            return False
        return True

    def require(self) -> None:
        """Return once NVML is initialised; raise ``CollectorError`` while it is unavailable."""
        if self._initialised:
            return
        with self._lock:
            if self._initialised:
                return
            now = self._clock()
            if now < self._next_try:
                raise CollectorError(self._unavailable, logged=True)
            try:
                self.nvml.nvmlInit()
                self.driver_version = text(self.nvml.nvmlSystemGetDriverVersion())
                count = self.nvml.nvmlDeviceGetCount()
            except pynvml.NVMLError as err:
                first = not self._unavailable
                self.absent = isinstance(err, NO_NVML)
                self._unavailable = f"NVML unavailable ({err}); no GPU metrics"
                self._next_try = now + self._retry_seconds
                if first:
                    log.warning("%s; host metrics are unaffected, retrying every %gs",
                                self._unavailable, self._retry_seconds)
                raise CollectorError(self._unavailable, logged=True) from None
            self._initialised = True
            self.absent = False  # a driver loaded since the failed try: the GPUs are here now
            log.info("NVML initialised: driver %s, %d GPU(s)", self.driver_version, count)

    def read_each_gpu(self, parts: Callable[[int], Sequence[GpuPart]], lanes: LanePool,
                      deadline: float) -> GpuReads:
        """Run every part of every GPU on its own lane, concurrently, until ``deadline``.

        ``parts(index)`` names the reads of GPU ``index``: (lane suffix, read), its main read
        (suffix "") first. A GPU with a part that raises an NVML error (lost, fallen off the
        bus), or whose main read misses the deadline, contributes no samples at all; another
        part that misses it is left out alone. What missed the deadline goes to ``timeouts``.
        """
        try:
            counting = lanes.lane("nvml").submit(self._count)
        except ReadTimeout as err:
            raise CollectorTimeout(str(err)) from None
        # The GPUs the previous scrape counted are read while this one counts, so the count
        # costs no hand-off of its own; the count then says which of them, and which more,
        # this scrape keeps.
        guess = self._last_count
        jobs = self._submit(parts, lanes, range(guess))
        try:
            count = counting.wait(deadline)
        except BaseException as err:
            _abandon(jobs)
            if isinstance(err, ReadTimeout):
                raise CollectorTimeout(str(err)) from None
            raise
        self._last_count = count
        if count > guess:
            jobs += self._submit(parts, lanes, range(guess, count))
        elif count < guess:
            _abandon([job for job in jobs if job[0] >= count])
            jobs = [job for job in jobs if job[0] < count]
        reads = GpuReads()
        by_gpu: dict[int, list[Sample]] = {}
        dropped: set[int] = set()
        for index, main, job in jobs:
            try:
                if isinstance(job, ReadTimeout):
                    raise job
                by_gpu.setdefault(index, []).extend(job.wait(deadline))
            except ReadTimeout as err:
                reads.timeouts.append(f"GPU {index}: {err}")
                if main:
                    dropped.add(index)
            except pynvml.NVMLError as err:
                if index not in dropped:  # one line per lost GPU, not one per part
                    reads.failures.append(f"GPU {index}: {err}")
                dropped.add(index)
        for index, samples in by_gpu.items():
            if index not in dropped:
                reads.samples.extend(samples)
        return reads

    def _submit(self, parts: Callable[[int], Sequence[GpuPart]], lanes: LanePool,
                indices: range) -> list[_Submitted]:
        jobs: list[_Submitted] = []
        for index in indices:
            for suffix, read in parts(index):
                lane = lanes.lane(f"gpu{index}-{suffix}" if suffix else f"gpu{index}")
                try:
                    job: Job | ReadTimeout = lane.submit(partial(self._read_one, index, read))
                except ReadTimeout as err:  # still stuck in an earlier scrape's read
                    job = err
                jobs.append((index, not suffix, job))
        return jobs

    def _count(self) -> int:
        self.require()
        try:
            return int(self.nvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as err:
            raise CollectorError(f"cannot count GPUs: {err}") from None

    def _read_one(self, index: int, read: GpuRead) -> list[Sample]:
        handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        return read(self.identity(index, handle), handle)

    def identity(self, index: int, handle: Any) -> GpuIdentity:
        """The GPU's identity, read on first use; raises ``pynvml.NVMLError`` like any read."""
        found = self._identities.get(index)
        if found is None:
            found = GpuIdentity(index=index, uuid=text(self.nvml.nvmlDeviceGetUUID(handle)),
                                name=text(self.nvml.nvmlDeviceGetName(handle)),
                                pci_bus_id=text(self.nvml.nvmlDeviceGetPciInfo(handle).busId))
            self._identities[index] = found
        return found
