"""The ``host`` collector: CPU, memory, network and disk counters read through psutil.

Devices follow node_exporter's defaults so the two agree and sums do not double count:
loopback is not network traffic, and partitions (their I/O is already counted on the whole
disk), RAM disks, zram (compressed RAM: swap, not storage) and loop devices are left out of the
disk counters (``--host.disk-device-exclude`` changes the pattern). Device-mapper volumes
(``dm-*``: LVM, dm-crypt) are kept, as node_exporter keeps them: the file systems live there.
A disk's busy time and a NIC's link speed make disk and NIC utilisation a ``rate()`` away.

Each section (cpu, memory, network, disk) is read on its own: one that fails is logged and the
others are still exported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from exporter import metrics as m
from exporter.collector import Sample, emit
from exporter.family import Family

# node_exporter's defaults (--collector.netdev.device-exclude; --collector.diskstats.device-exclude
# of 1.6 and later, which added zram to 1.5's pattern). The disk one is the default of
# --host.disk-device-exclude.
NETWORK_DEVICE_EXCLUDE = re.compile(r"^lo$")
DISK_DEVICE_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"
# /proc/stat modes that are disjoint; guest and guest_nice are already inside user and nice.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# /sys/class/net/<device>/speed is in Mbit/s; node_exporter's node_network_speed_bytes too
# multiplies by 125000.
BYTES_PER_MEGABIT = 125_000
SYSFS_NET = Path("/sys/class/net")
PROC_DISKSTATS = Path("/proc/diskstats")

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


def link_speed_bytes(sysfs_net: Path, device: str) -> float | None:
    """/sys/class/net/<device>/speed (Mbit/s) -> bytes/s; None where the kernel reports no
    speed: -1 or 0 (a link that is down, many virtual devices) or an unreadable file (EINVAL)."""
    try:  # os.open, not pathlib: a third of the cost, once per NIC and scrape
        fd = os.open(f"{sysfs_net}/{device}/speed", os.O_RDONLY)
        try:
            megabits = int(os.read(fd, 64))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    return float(megabits * BYTES_PER_MEGABIT) if megabits > 0 else None


def network_samples(per_nic: Mapping[str, Any],
                    speed: Callable[[str], float | None] = lambda _: None) -> list[Sample]:
    """psutil.net_io_counters(pernic=True) -> bytes received and sent per device, and the
    device's link speed where ``speed`` knows it."""
    samples: list[Sample] = []
    for device, io in sorted(per_nic.items()):
        if not NETWORK_DEVICE_EXCLUDE.match(device):
            samples.append((m.NETWORK_RECEIVE, (device,), float(io.bytes_recv)))
            samples.append((m.NETWORK_TRANSMIT, (device,), float(io.bytes_sent)))
            link = speed(device)
            if link is not None:
                samples.append((m.NETWORK_SPEED, (device,), link))
    return samples


def diskstats_io_seconds(path: Path) -> dict[str, float]:
    """/proc/diskstats -> each device's field 10 (milliseconds with I/O in flight) in seconds;
    empty where there is no such file (not Linux): busy time is then left out, not a failure."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    busy: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 13:  # major, minor, name, then field 1 at index 3
            busy[fields[2]] = int(fields[12]) / 1000
    return busy


def disk_samples(per_disk: Mapping[str, Any],
                 exclude: str | re.Pattern[str] = DISK_DEVICE_EXCLUDE,
                 io_seconds: Callable[[], Mapping[str, float]] = dict) -> list[Sample]:
    """psutil.disk_io_counters(perdisk=True) (bytes already x 512) -> samples per disk that
    ``exclude`` does not match. Busy time is psutil's ``busy_time`` (ms) where it has one, else
    what ``io_seconds`` (read once, only then) says for the device, else left out."""
    pattern = re.compile(exclude)
    samples: list[Sample] = []
    fallback: Mapping[str, float] | None = None
    for device, io in sorted(per_disk.items()):
        if pattern.search(device):
            continue
        samples.append((m.DISK_READS, (device,), float(io.read_count)))
        samples.append((m.DISK_WRITES, (device,), float(io.write_count)))
        samples.append((m.DISK_READ_BYTES, (device,), float(io.read_bytes)))
        samples.append((m.DISK_WRITTEN_BYTES, (device,), float(io.write_bytes)))
        busy_ms = getattr(io, "busy_time", None)
        if busy_ms is not None:
            samples.append((m.DISK_IO_TIME, (device,), busy_ms / 1000))
            continue
        fallback = io_seconds() if fallback is None else fallback
        if device in fallback:
            samples.append((m.DISK_IO_TIME, (device,), fallback[device]))
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
                 disk_exclude: str = DISK_DEVICE_EXCLUDE, sysfs_net: Path | None = None,
                 proc_diskstats: Path = PROC_DISKSTATS) -> None:
        self._ps = ps
        disk_pattern = re.compile(disk_exclude)
        self._nodename = nodename or os.environ.get(NODENAME_ENV) or os.uname().nodename
        nics = sysfs_net or SYSFS_NET  # read here, so a test can point the module at a fake tree
        # psutil raises its own Error tree, OSError for /proc, RuntimeError
        # (NotImplementedError) where a platform lacks a counter, and ValueError for a
        # /proc/diskstats line format it does not know.
        self._source_errors = (OSError, RuntimeError, ValueError, ps.Error)
        self._sections: tuple[tuple[str, Callable[[], list[Sample]]], ...] = (
            ("cpu", lambda: cpu_samples(ps.cpu_times(), ps.cpu_count())),
            ("memory", lambda: memory_samples(ps.virtual_memory())),
            ("network", lambda: network_samples(ps.net_io_counters(pernic=True, nowrap=True),
                                                lambda nic: link_speed_bytes(nics, nic))),
            ("disk", lambda: disk_samples(
                ps.disk_io_counters(perdisk=True, nowrap=True) or {}, disk_pattern,
                lambda: diskstats_io_seconds(proc_diskstats))),
        )

    def collect(self) -> Iterator[Family]:
        samples: list[Sample] = [(m.HOST_INFO, (self._nodename,), 1.0)]
        failures: list[str] = []
        for section, read in self._sections:
            try:
                samples.extend(read())
            except self._source_errors as err:
                failures.append(f"{section}: {err!r}")
        yield from emit(samples, failures)
