"""The cuda_events resolver with stand-in events: its bookkeeping needs no GPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from tests.stack import wait_until
from trial_instrumentation.names import DEFAULT_BUCKETS
from trial_instrumentation.timing import Histogram

pytest.importorskip("torch")
from trial_instrumentation.torch_timing import EventResolver  # after the skip: needs torch


class FakeEvent:
    """A recorded CUDA event: done or not, ``ms`` after its pair's start, or broken."""

    def __init__(self, ms: float = 0.0, done: bool = True,
                 error: Exception | None = None) -> None:
        self.ms, self.done, self.error = ms, done, error

    def query(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.done

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.ms - self.ms


@pytest.fixture
def resolver() -> Iterator[EventResolver]:
    r = EventResolver(poll_seconds=0.001)
    yield r
    r.stop()


def test_pairs_become_observations_in_seconds(resolver: EventResolver) -> None:
    histogram = Histogram(DEFAULT_BUCKETS)
    for ms in (2.0, 40.0):
        resolver.submit(FakeEvent(), FakeEvent(ms), histogram)  # type: ignore[arg-type]
    wait_until(lambda: sum(histogram.counts) == 2, timeout=5, what="both pairs resolved")
    assert histogram.sum == pytest.approx(0.042)
    assert resolver.drain(timeout=1)


def test_a_cuda_error_stops_timing_without_raising_or_hanging_exit(
        resolver: EventResolver, caplog: pytest.LogCaptureFixture) -> None:
    histogram = Histogram(DEFAULT_BUCKETS)
    broken = FakeEvent(error=RuntimeError("CUDA error: an illegal memory access"))
    resolver.submit(FakeEvent(), broken, histogram)  # type: ignore[arg-type]
    resolver.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation.torch_timing"):
        wait_until(lambda: caplog.records, timeout=5, what="the resolver's error log")
    assert "no longer timed" in caplog.text and "illegal memory access" in caplog.text
    started = time.monotonic()
    assert resolver.drain(timeout=5)  # nothing left to wait for: exit is not held up
    assert time.monotonic() - started < 1
    resolver.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert resolver.drain(timeout=0.01) and sum(histogram.counts) == 0
    assert len(caplog.records) == 1
