"""A stand-in for /sys/class/net where this machine's NICs report no link speed (a VM's virtio
NIC answers -1), so that tests and the fake-GPU exporter (benchmarks/fake_nvml_exporter.py)
serve ``trainwatch_network_speed_bytes`` as a node with real NICs does."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from exporter import host

MEGABITS = 10_000  # a 10 GbE link


@contextlib.contextmanager
def nic_speeds(megabits: int = MEGABITS) -> Iterator[Path]:
    """Every NIC psutil lists gets a ``speed`` file; HostCollectors built inside read it."""
    saved = host.SYSFS_NET
    with tempfile.TemporaryDirectory() as root:
        for nic in psutil.net_io_counters(pernic=True):
            (Path(root) / nic).mkdir()
            (Path(root) / nic / "speed").write_text(f"{megabits}\n")
        host.SYSFS_NET = Path(root)
        try:
            yield Path(root)
        finally:
            host.SYSFS_NET = saved
