"""The real ``trainwatch-exporter`` over a fake NVML, for live tests on machines without a GPU.

    python -m tests.fake_nvml_exporter --web.listen-address=127.0.0.1:PORT [exporter flags]

Runs ``exporter.cli.main`` unchanged, with ``tests.fake_nvml.FakeNvml`` injected at the pynvml
boundary: ``TRAINWATCH_FAKE_GPUS`` GPUs (default 2), GPU ``N`` having the stable UUID
``GPU-00000000-0000-0000-0000-00000000000N`` (N in hex, from 0) and the deterministic readings
of ``FakeGpu.deterministic(N)``. Run it from the repository root (or with it on PYTHONPATH).
"""

from __future__ import annotations

import os
import sys

from exporter.cli import main
from tests.fake_nvml import FakeNvml

FAKE_GPUS_ENV = "TRAINWATCH_FAKE_GPUS"


def fake_nvml_from_env() -> FakeNvml:
    raw = os.environ.get(FAKE_GPUS_ENV, "2")
    if not raw.isdigit():
        raise SystemExit(f"{FAKE_GPUS_ENV} must be a GPU count, not {raw!r}")
    return FakeNvml.with_gpus(int(raw))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], nvml=fake_nvml_from_env()))
