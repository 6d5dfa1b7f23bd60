"""The ``host`` collector: CPU, memory, network and disk counters read through psutil.

Devices follow node_exporter's defaults so the two agree and sums do not double count:
loopback is not network traffic, and partitions (their I/O is already counted on the whole
disk), RAM disks, zram (compressed RAM: swap, not storage) and loop devices are left out of the
disk counters (``--host.disk-device-exclude`` changes the pattern). Device-mapper volumes
(``dm-*``: LVM, dm-crypt) are kept, as node_exporter keeps them: the file systems live there.

Each section (cpu, memory, network, disk) is read on its own: one that fails is logged and the
others are still exported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import Metric

from exporter import metrics as m
from exporter.collector import Sample, emit

# node_exporter's defaults (--collector.netdev.device-exclude; --collector.diskstats.device-exclude
# of 1.6 and later, which added zram to 1.5's pattern). The disk one is the default of
# --host.disk-device-exclude.
NETWORK_DEVICE_EXCLUDE = re.compile(r"^lo$")
DISK_DEVICE_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"
# /proc/stat modes that are disjoint; guest and guest_nice are already inside user and nice.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# The node's name for the join to trainwatch_trial_info{nodename}; the trial reads the same
# variable. On Kubernetes both take it from the downward API (spec.nodeName), because a pod's
# hostname is the pod's name and node hostnames need not equal node names.
NODENAME_ENV = "TRAINWATCH_NODENAME"


def cpu_samples(times: Any, cpu_count: int | None) -> list[Sample]:
    """psutil.cpu_times() (seconds, all CPUs) -> samples; modes the OS lacks are left out."""
    samples: list[Sample] = [(m.CPU_SECONDS, (mode,), float(getattr(times, mode)))
                             for mode in CPU_MODES if hasattr(times, mode)]
    if cpu_count:
        samples.append((m.CPU_COUNT, (), float(cpu_count)))
    return samples


def memory_samples(memory: Any) -> list[Sample]:
    """psutil.virtual_memory() (bytes) -> samples."""
    return [(m.MEMORY_AVAILABLE, (), float(memory.available)),
            (m.MEMORY_TOTAL, (), float(memory.total))]


def network_samples(per_nic: Mapping[str, Any]) -> list[Sample]:
    """psutil.net_io_counters(pernic=True) -> bytes received and sent per device."""
    samples: list[Sample] = []
    for device, io in sorted(per_nic.items()):
        if not NETWORK_DEVICE_EXCLUDE.match(device):
            samples.append((m.NETWORK_RECEIVE, (device,), float(io.bytes_recv)))
            samples.append((m.NETWORK_TRANSMIT, (device,), float(io.bytes_sent)))
    return samples


def disk_samples(per_disk: Mapping[str, Any],
                 exclude: str | re.Pattern[str] = DISK_DEVICE_EXCLUDE) -> list[Sample]:
    """psutil.disk_io_counters(perdisk=True) (bytes already x 512) -> samples per disk that
    ``exclude`` does not match."""
    pattern = re.compile(exclude)
    samples: list[Sample] = []
    for device, io in sorted(per_disk.items()):
        if pattern.search(device):
            continue
        samples.append((m.DISK_READS, (device,), float(io.read_count)))
        samples.append((m.DISK_WRITES, (device,), float(io.write_count)))
        samples.append((m.DISK_READ_BYTES, (device,), float(io.read_bytes)))
        samples.append((m.DISK_WRITTEN_BYTES, (device,), float(io.write_bytes)))
    return samples


class HostCollector:
    """Host metrics through psutil (passed in, so a test can hand it something else).

    >>> import psutil
    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> registry.register(HostCollector(psutil))
    >>> registry.get_sample_value("trainwatch_cpu_seconds_total", {"mode": "idle"}) > 0
    True
    """

    def __init__(self, ps: Any, nodename: str | None = None,
                 disk_exclude: str = DISK_DEVICE_EXCLUDE) -> None:
        self._ps = ps
        disk_pattern = re.compile(disk_exclude)
        self._nodename = nodename or os.environ.get(NODENAME_ENV) or os.uname().nodename
        # psutil raises its own Error tree, OSError for /proc, RuntimeError
        # (NotImplementedError) where a platform lacks a counter, and ValueError for a
        # /proc/diskstats line format it does not know.
        self._source_errors = (OSError, RuntimeError, ValueError, ps.Error)
        self._sections: tuple[tuple[str, Callable[[], list[Sample]]], ...] = (
            ("cpu", lambda: cpu_samples(ps.cpu_times(), ps.cpu_count())),
            ("memory", lambda: memory_samples(ps.virtual_memory())),
            ("network", lambda: network_samples(ps.net_io_counters(pernic=True, nowrap=True))),
            ("disk", lambda: disk_samples(ps.disk_io_counters(perdisk=True, nowrap=True) or {},
                                          disk_pattern)),
        )

    def collect(self) -> Iterator[Metric]:
        samples: list[Sample] = [(m.HOST_INFO, (self._nodename,), 1.0)]
        failures: list[str] = []
        for section, read in self._sections:
            try:
                samples.extend(read())
            except self._source_errors as err:
                failures.append(f"{section}: {err!r}")
        yield from emit(samples, failures)
