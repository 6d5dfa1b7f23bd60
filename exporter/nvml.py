"""One NVML session shared by the GPU collectors: initialised once, lazily, retried cheaply.

No GPU or no driver is a normal state: the first failed ``nvmlInit`` is logged once and every
scrape until the next retry fails fast with ``CollectorError`` (no dlopen per scrape). A
driver loaded after the exporter started is picked up at the next retry.

``nvml`` is the ``pynvml`` module in production and a fake with the same functions in tests;
the exceptions caught are always the real ``pynvml`` classes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.collector import CollectorError, Sample

log = logging.getLogger(__name__)

DEFAULT_RETRY_SECONDS = 60.0


def text(value: str | bytes) -> str:
    """NVML strings are bytes in older nvidia-ml-py releases, str in newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class GpuIdentity:
    """What does not change while a GPU is attached; read once per GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str

    @property
    def labels(self) -> tuple[str, str]:
        return str(self.index), self.uuid


class NvmlSession:
    """NVML initialised at most once; GPU identities cached; thread-safe for concurrent scrapes.

    >>> import pynvml
    >>> session = NvmlSession(pynvml, retry_seconds=60)
    >>> session.available() in (True, False)  # False, logged once, on a machine without a GPU
    True
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
                self._unavailable = f"NVML unavailable ({err}); no GPU metrics"
                self._next_try = now + self._retry_seconds
                if first:
                    log.warning("%s; host metrics are unaffected, retrying every %gs",
                                self._unavailable, self._retry_seconds)
                raise CollectorError(self._unavailable, logged=True) from None
            self._initialised = True
            log.info("NVML initialised: driver %s, %d GPU(s)", self.driver_version, count)

    def read_each_gpu(self, read: Callable[[GpuIdentity, Any], list[Sample]]
                      ) -> tuple[list[Sample], list[str]]:
        """Run ``read`` on every GPU. A GPU whose read raises an NVML error (lost, fallen off
        the bus) contributes no samples at all, and its error is returned for the log."""
        self.require()
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            raise CollectorError(f"cannot count GPUs: {err}") from None
        samples: list[Sample] = []
        failures: list[str] = []
        for index in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                samples.extend(read(self.identity(index, handle), handle))
            except pynvml.NVMLError as err:
                failures.append(f"GPU {index}: {err}")
        return samples, failures

    def identity(self, index: int, handle: Any) -> GpuIdentity:
        """The GPU's identity, read on first use; raises ``pynvml.NVMLError`` like any read."""
        found = self._identities.get(index)
        if found is None:
            found = GpuIdentity(index=index, uuid=text(self.nvml.nvmlDeviceGetUUID(handle)),
                                name=text(self.nvml.nvmlDeviceGetName(handle)),
                                pci_bus_id=text(self.nvml.nvmlDeviceGetPciInfo(handle).busId))
            self._identities[index] = found
        return found
