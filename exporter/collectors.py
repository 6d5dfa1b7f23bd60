"""The table of collectors: name -> default on/off, help, and how to build it.

The CLI turns each row into ``--collector.NAME`` / ``--no-collector.NAME`` (node_exporter's
``registerCollector``). Builders import their modules only when the collector is enabled, so
``--no-collector.gpu`` never loads NVML bindings.

>>> from exporter.config import merge
>>> registry = build_registry(merge(file={}, flags={"collector.gpu": False}))
>>> registry.get_sample_value("trainwatch_scrape_collector_success", {"collector": "host"})
1.0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exporter import __version__
from exporter.collector import Collector, Registry, ScrapeCollector

if TYPE_CHECKING:
    from exporter.config import Settings
    from exporter.nvml import NvmlSession


class Sources:
    """What collectors read from, made on first use and shared (one NVML session per process).

    ``nvml`` is the NVML module to use; ``None`` means the real ``pynvml``.
    """

    def __init__(self, settings: Settings, nvml: Any | None = None) -> None:
        self.settings = settings
        self._nvml = nvml
        self._session: NvmlSession | None = None

    def nvml_session(self) -> NvmlSession:
        if self._session is None:
            from exporter.nvml import NvmlSession

            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._session = NvmlSession(self._nvml, self.settings.gpu_nvml_retry_seconds)
            self._session.available()  # try NVML now, so "no GPU" is logged at startup
        return self._session


def _gpu(sources: Sources) -> Collector:
    from exporter.gpu import GpuCollector
    from exporter.peak_flops import PeakTable, parse_overrides

    settings = sources.settings
    collector = GpuCollector(sources.nvml_session(), settings.gpu_pcie_throughput,
                             PeakTable(parse_overrides(settings.gpu_peak_flops)))
    collector.prime()  # GPM's first sample, so the first scrape has an interval to report
    return collector


def _gpu_process(sources: Sources) -> Collector:
    from exporter.cgroup import AttributionCache
    from exporter.gpu_process import GpuProcessCollector

    return GpuProcessCollector(sources.nvml_session(),
                               owners=AttributionCache(sources.settings.path_procfs))


def _host(sources: Sources) -> Collector:
    import psutil

    from exporter.host import HostCollector

    return HostCollector(psutil, disk_exclude=sources.settings.host_disk_device_exclude)


@dataclass(frozen=True)
class CollectorEntry:
    default: bool
    help: str
    build: Callable[[Sources], Collector]


COLLECTORS: dict[str, CollectorEntry] = {
    "gpu": CollectorEntry(True, "NVIDIA GPUs through NVML", _gpu),
    "host": CollectorEntry(True, "CPU, memory, network and disk through psutil", _host),
    "gpu_process": CollectorEntry(False, "GPU memory and utilization per process, and its pod "
                                  "or Slurm job", _gpu_process),
}


def build_registry(settings: Settings, nvml: Any | None = None) -> Registry:
    """A fresh registry serving the enabled collectors, wrapped for success/duration metrics."""
    sources = Sources(settings, nvml)
    # merge() fills in every collector of the table, so each enabled name has an entry.
    enabled = {name: COLLECTORS[name].build(sources) for name in settings.enabled_collectors}
    registry = Registry()
    registry.register(ScrapeCollector(enabled, __version__))
    return registry
