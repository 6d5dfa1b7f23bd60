"""A stand-in for /sys/class/net where this machine's NICs report no link speed (a VM's virtio
NIC answers -1), so tests that expect every exporter metric served see
``trainwatch_network_speed_bytes`` too."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from exporter import host

MEGABITS = 10_000  # a 10 GbE link


@contextlib.contextmanager
def nic_speeds(megabits: int = MEGABITS) -> Iterator[Path]:
    """Every NIC psutil lists gets a ``speed`` file; HostCollectors built inside read it."""
    with tempfile.TemporaryDirectory() as root, pytest.MonkeyPatch.context() as patch:
        for nic in psutil.net_io_counters(pernic=True):
            (Path(root) / nic).mkdir()
            (Path(root) / nic / "speed").write_text(f"{megabits}\n")
        patch.setattr(host, "SYSFS_NET", Path(root))
        yield Path(root)
