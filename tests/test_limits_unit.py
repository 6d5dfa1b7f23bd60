"""limits.loader_limit and limits.step_limit on a clock the test moves: which batches and steps
are counted, when the measurement ends, and the CUDA waits at both ends of a step's."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from trial_instrumentation import limits


class Clock:
    """Starts at 0: a measurement that starts late is not read the same by `now % start`."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(limits, "perf_counter", fake)
    return fake


class Loader:
    """Batches of scalar samples of the given sizes; each takes ``tick`` seconds to arrive."""

    def __init__(self, clock: Clock, sizes: list[int], tick: float = 0.5) -> None:
        self.clock, self.sizes, self.tick, self.passes = clock, sizes, tick, 0

    def __iter__(self) -> Iterator[list[float]]:
        self.passes += 1
        assert self.passes < 100, "the measurement never ended"
        for size in self.sizes:
            self.clock.now += self.tick
            yield [0.0] * size


def test_the_first_batch_starts_the_clock_and_the_batch_that_reaches_the_time_ends_it(
        clock: Clock) -> None:
    # 5 arrives at 0.5 s (not counted), 2 at 1.0 s, 3 at 1.5 s: one second since the first.
    loader = Loader(clock, [5, 2, 3, 4, 6])
    assert limits.loader_limit(loader, seconds=1.0) == 5.0


def test_a_batch_before_the_time_is_up_does_not_end_it(clock: Clock) -> None:
    loader = Loader(clock, [5, 2, 3, 5, 6])
    assert limits.loader_limit(loader, seconds=1.25) == pytest.approx(6.667, abs=1e-3)  # 10 / 1.5


def test_a_loader_that_runs_out_is_iterated_again(clock: Clock) -> None:
    loader = Loader(clock, [5, 2])
    assert limits.loader_limit(loader, seconds=1.0) == (2 + 5) / 1.0
    assert loader.passes == 2


def test_a_loaders_samples_are_counted_as_told(clock: Clock) -> None:
    assert limits.loader_limit(Loader(clock, [5, 2, 3]), seconds=1.0, samples=7) == 14.0
    assert limits.loader_limit(Loader(clock, [5, 2, 3]), seconds=1.0,
                               samples=lambda batch: 3 * len(batch)) == 15.0


def test_an_iterator_used_up_before_the_time_is_refused_saying_so(clock: Clock) -> None:
    """A generator runs out once: "yielded no batch" would be wrong after it yielded three."""
    batches = iter(Loader(clock, [5, 2, 3], tick=0.25))
    with pytest.raises(ValueError) as refused:
        limits.loader_limit(batches, seconds=2.0)
    assert str(refused.value) == (
        "the loader ran out after 3 batches in 0.5s of the 2s asked and yielded none when "
        "iterated again: pass a loader that can be iterated again (a DataLoader, a list), not "
        "an iterator, or fewer seconds")
    clock.now = 0.0
    assert limits.loader_limit(iter(Loader(clock, [5, 2, 3], tick=0.25)), seconds=0.5) == 10.0


def test_an_empty_loader_and_no_time_are_refused() -> None:
    with pytest.raises(ValueError, match="the loader yielded no batch"):
        limits.loader_limit([], seconds=0.5)
    for seconds in (0, -0.5, float("nan")):
        with pytest.raises(ValueError, match=rf"seconds must be > 0, got {seconds!r}"):
            limits.loader_limit([[1.0]], seconds=seconds)
        with pytest.raises(ValueError, match="seconds must be > 0"):
            limits.step_limit(lambda batch: None, [1.0], seconds=seconds)


class Step:
    """A step that takes ``tick`` seconds and counts its calls."""

    def __init__(self, clock: Clock, tick: float = 0.25) -> None:
        self.clock, self.tick, self.calls = clock, tick, 0

    def __call__(self, batch: Any) -> None:
        self.calls += 1
        assert self.calls < 1000, "the measurement never ended"
        self.clock.now += self.tick


def test_the_step_runs_until_the_time_is_reached_after_its_warmup(clock: Clock) -> None:
    step = Step(clock)
    assert limits.step_limit(step, [1.0] * 8, seconds=1.0) == 4 * 8 / 1.0
    assert step.calls == 1 + 4
    step = Step(clock)
    assert limits.step_limit(step, [1.0] * 8, seconds=1.1, warmup=3) == 5 * 8 / 1.25
    assert step.calls == 3 + 5
    step = Step(clock, tick=0.375)
    assert limits.step_limit(step, [1.0] * 8, seconds=1.0) == pytest.approx(21.333, abs=1e-3)
    assert step.calls == 1 + 3  # 3 steps in 1.125 s
    step = Step(clock)
    assert limits.step_limit(step, [1.0] * 8, seconds=0.5, warmup=0, samples=3) == 2 * 3 / 0.5
    assert step.calls == 2


class Cuda:
    def __init__(self, available: bool, initialized: bool) -> None:
        self.available, self.initialized, self.synchronized = available, initialized, 0

    def is_available(self) -> bool:
        return self.available

    def is_initialized(self) -> bool:
        return self.initialized

    def synchronize(self) -> None:
        self.synchronized += 1


@pytest.mark.parametrize(("available", "initialized", "waits"),
                         [(True, True, 2), (True, False, 0), (False, True, 0), (False, False, 0)])
def test_queued_cuda_work_is_waited_for_only_where_cuda_is_in_use(
        clock: Clock, monkeypatch: pytest.MonkeyPatch, available: bool, initialized: bool,
        waits: int) -> None:
    cuda = Cuda(available, initialized)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    limits.step_limit(Step(clock), [1.0], seconds=0.5)
    assert cuda.synchronized == waits


def test_without_torch_nothing_is_waited_for(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert limits.step_limit(Step(clock), [1.0, 2.0], seconds=0.5) == 2 * 2 / 0.5


def test_by_default_each_side_is_measured_for_ten_seconds(clock: Clock) -> None:
    step = Step(clock)
    assert limits.step_limit(step, [1.0] * 2) == 2 * 40 / 10.0
    assert step.calls == 1 + 40
    loader = Loader(clock, [3, 1])
    assert limits.loader_limit(loader) == (3 + 1) * 10 / 10.0
    assert loader.passes == 11  # 20 batches after the first, 2 a pass
