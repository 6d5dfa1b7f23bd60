"""CPU work of a known duration, for the timing tests and the instrumentation benchmarks."""

from __future__ import annotations

import time


def spin(seconds: float) -> None:
    """Busy CPU work (sleep would hide GIL contention from a background thread)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
