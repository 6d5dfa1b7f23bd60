"""The real ``trainwatch-exporter`` over a fake NVML, for live tests on machines without a GPU.

    python -m benchmarks.fake_nvml_exporter --web.listen-address=127.0.0.1:PORT [exporter flags]

Runs ``exporter.cli.main`` unchanged, with ``benchmarks.fake_nvml.FakeNvml`` injected at the pynvml
boundary: ``TRAINWATCH_FAKE_GPUS`` GPUs (default 2), GPU ``N`` having the stable UUID
``GPU-00000000-0000-0000-0000-00000000000N`` (N in hex, from 0) and the deterministic readings
of ``FakeGpu.deterministic(N)``, except that the GPUs listed in ``TRAINWATCH_FAKE_IDLE_GPUS``
read 5% utilization (and at most 5% on every GPM activity metric). Every NIC reports a link speed
of ``TRAINWATCH_FAKE_NIC_MEGABITS`` (default 10000: 10 GbE; 0 reads the machine's own
/sys/class/net), as a training node's NICs do where a VM's answer none. Run it from the
repository root (or with it on PYTHONPATH).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from benchmarks.fake_nvml import FakeNvml
from benchmarks.fake_sysfs import nic_speeds
from exporter.cli import main

FAKE_GPUS_ENV = "TRAINWATCH_FAKE_GPUS"
# Comma-separated indices of GPUs that read as idle (5% utilization) instead of busy.
IDLE_GPUS_ENV = "TRAINWATCH_FAKE_IDLE_GPUS"
IDLE_PERCENT = 5
NIC_MEGABITS_ENV = "TRAINWATCH_FAKE_NIC_MEGABITS"


def fake_nvml_from_env() -> FakeNvml:
    raw = os.environ.get(FAKE_GPUS_ENV, "2")
    idle = os.environ.get(IDLE_GPUS_ENV, "").replace(",", " ").split()
    if not raw.isdigit() or not all(i.isdigit() for i in idle):
        raise SystemExit(f"{FAKE_GPUS_ENV} must be a GPU count and {IDLE_GPUS_ENV} a list of "
                         f"indices, not {raw!r} and {idle!r}")
    nvml = FakeNvml.with_gpus(int(raw))
    for index in map(int, idle):
        busy = nvml.gpus[index]
        gpm = {metric: min(value, IDLE_PERCENT) for metric, value in (busy.gpm or {}).items()}
        nvml.gpus[index] = replace(busy, gpu_util=IDLE_PERCENT, gpm=gpm)
    return nvml


def run(argv: list[str]) -> int:
    megabits = os.environ.get(NIC_MEGABITS_ENV, "10000")
    if not megabits.isdigit():
        raise SystemExit(f"{NIC_MEGABITS_ENV} must be a whole number of Mbit/s, not {megabits!r}")
    if int(megabits) == 0:
        return main(argv, nvml=fake_nvml_from_env())
    with nic_speeds(int(megabits)):
        return main(argv, nvml=fake_nvml_from_env())


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
