"""loader.py on its own, with a fake clock: what a step and a fetch are, how samples are
counted, and the remembered-bucket fast path (milliseconds in all; the trial-level loader
tests are in test_trial_timing.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from trial_instrumentation import loader
from trial_instrumentation.loader import Progress, TimedLoader, batch_size_of
from trial_instrumentation.profiling import StepBoundary
from trial_instrumentation.timing import Histogram

BOUNDS = (0.25, 1.0)


def fake_clock(monkeypatch: pytest.MonkeyPatch, *ticks: float) -> None:
    monkeypatch.setattr(loader, "perf_counter", iter(ticks).__next__)


def count_bisects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = loader.bisect_left

    def counting(bounds: tuple[float, ...], seconds: float) -> int:
        calls.append(1)
        return real(bounds, seconds)

    monkeypatch.setattr(loader, "bisect_left", counting)
    return calls


def run(batches: list[object], ticks: list[float], monkeypatch: pytest.MonkeyPatch,
        **kwargs: object) -> tuple[Histogram, Histogram, Progress]:
    fake_clock(monkeypatch, *ticks)
    fetch, step, progress = Histogram(BOUNDS), Histogram(BOUNDS), Progress()
    for _ in TimedLoader(batches, fetch, step, progress, **kwargs):  # type: ignore[arg-type]
        pass
    return fetch, step, progress


def test_a_step_runs_from_one_request_to_the_next_and_the_fetch_is_part_of_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Clock reads: the first request (0), the first batch (0.125), the second request (2),
    # the second batch (2.5), the end of the second step (3).
    fetch, step, progress = run([[1, 2, 3], [4]], [0.0, 0.125, 2.0, 2.5, 3.0], monkeypatch)
    assert (fetch.counts, fetch.sum) == ([1, 1, 0], 0.625)  # 0.125 and 0.5
    assert (step.counts, step.sum) == ([0, 1, 1], 3.0)  # 2 and 1, fetches included
    assert progress.samples == 4


@pytest.mark.parametrize(("fetches", "steps", "bisects"), [
    ([0.125, 0.125, 0.0], [0.25, 0.25, 0.125], 0),  # both stay in their first bucket
    ([0.5, 0.5, 0.5], [2.0, 2.0, 4.0], 2),  # one bisect each to find the bucket, then none
    ([0.125, 0.5, 0.125], [0.25, 2.0, 0.25], 4),  # every jump bisects
    ([0.25, 0.25, 0.25], [1.0, 1.0, 1.0], 1),  # on a bound: that bucket (le), no bisect again
])
def test_each_histogram_tries_its_previous_bucket_first(
        fetches: list[float], steps: list[float], bisects: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticks, start = [0.0], 0.0
    for fetched, stepped in zip(fetches, steps):
        ticks += [start + fetched, start + stepped]
        start += stepped
    calls = count_bisects(monkeypatch)
    fetch, step, _ = run(list(range(len(steps))), ticks, monkeypatch, samples=1)
    assert len(calls) == bisects
    for histogram, durations in ((fetch, fetches), (step, steps)):
        reference = Histogram(BOUNDS)
        for seconds in durations:
            reference.observe(seconds)
        assert (histogram.counts, histogram.sum) == (reference.counts, reference.sum)


def test_samples_come_from_the_batch_an_int_or_a_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [[1, 2, 3], [4, 5]]
    ticks = [0.0, 0.1, 0.2, 0.3, 0.4]
    assert run(batches, ticks, monkeypatch)[2].samples == 5
    assert run(batches, ticks, monkeypatch, samples=8)[2].samples == 16
    assert run(batches, ticks, monkeypatch, samples=lambda b: 10 * len(b))[2].samples == 50


def test_a_failing_samples_function_counts_zero_logs_and_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(batch: list[int]) -> int:
        if len(batch) == 2:
            raise KeyError("no size")
        return len(batch)

    with caplog.at_level(logging.ERROR, logger="trial_instrumentation"):
        _, step, progress = run([[1, 2, 3], [4, 5], [6]], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                                monkeypatch, samples=broken)
    assert (progress.samples, sum(step.counts)) == (4, 3)
    assert "counting samples failed" in caplog.text and "KeyError" in caplog.text


def test_a_step_left_by_break_is_counted_with_its_samples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The break comes more than twice the request's time in: 4.5 - 2, not 4.5 % 2 or 4.5 // 2.
    fake_clock(monkeypatch, 0.0, 0.125, 2.0, 2.125, 4.5)
    fetch, step, progress = Histogram(BOUNDS), Histogram(BOUNDS), Progress()
    for batch in TimedLoader([[1, 2], [3, 4, 5], [6]], fetch, step, progress):
        if batch == [3, 4, 5]:
            break
    assert (sum(fetch.counts), sum(step.counts), progress.samples) == (2, 2, 5)
    assert step.sum == 4.5  # 0 -> 2 and 2 -> 4.5 (the break)


def test_on_start_runs_once_when_iteration_starts_and_len_is_the_iterables() -> None:
    started: list[int] = []
    timed = TimedLoader([1, 2, 3], Histogram(BOUNDS), Histogram(BOUNDS), Progress(),
                        on_start=lambda: started.append(1))
    assert len(timed) == 3 and started == []
    iterator: Iterator[int] = iter(timed)
    assert next(iterator) == 1 and started == [1]
    assert list(iterator) == [2, 3] and started == [1]


@pytest.mark.parametrize(("batch", "size"), [
    ([1, 2, 3, 4], 4),  # a list of scalar samples
    ((SimpleNamespace(shape=(6, 3)), SimpleNamespace(shape=(6,))), 6),  # (inputs, targets)
    (SimpleNamespace(shape=(5, 2)), 5),  # one tensor
    (SimpleNamespace(shape=()), 1),  # a 0-d tensor: one sample
    ([[1, 2], [3, 4], [5, 6]], 2),  # ambiguous nested lists: the first field's length
    (([[1], [2], [3]], [0, 1, 0]), 3),
    ({"x": SimpleNamespace(shape=(7, 1)), "y": [0] * 7}, 7),
    ({"ids": [[1, 2], [3, 4]]}, 2),
    ([{"a": [1, 2, 3]}], 3),  # a list whose first field is a dict of fields
    ([SimpleNamespace(shape=(4, 2))], 4),  # [tensor]: its first dimension
    (([SimpleNamespace(shape=(9,)), 1],), 9),  # a field that is a list of tensors
    ([], 1), ({}, 1), ((), 1), (None, 1), (7, 1),
])
def test_batch_size_of(batch: object, size: int) -> None:
    assert batch_size_of(batch) == size


class CountingBoundary(StepBoundary):
    """A profiler's boundary as the loop sees it: armed or not, and how often a step ended."""

    __slots__ = ("ended",)

    def __init__(self, armed: bool) -> None:
        super().__init__()
        self.armed, self.ended = armed, 0

    def step_ended(self) -> None:
        self.ended += 1


@pytest.mark.parametrize("armed", [True, False])
def test_a_break_ends_the_step_at_the_profilers_boundary_only_while_armed(armed: bool) -> None:
    """The step a ``break`` leaves is a step like the others for a capture (it counts toward
    it, or starts a pending one); with nothing asked the boundary is never called."""
    boundary = CountingBoundary(armed)
    step = Histogram((1.0,))
    timed = TimedLoader([[1], [2], [3]], Histogram((1.0,)), step, Progress(), boundary=boundary)
    for batch in timed:
        if batch == [2]:
            break
    assert sum(step.counts) == 2  # the first step and the one the break closed
    assert boundary.ended == (2 if armed else 0)


def test_a_profilers_time_at_the_step_boundary_is_in_no_step_and_no_fetch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An armed boundary's work (a capture's start, its steps, its write) lies between two
    steps: the next step and its fetch start once it is done, not when the last step ended."""
    boundary = CountingBoundary(armed=True)
    # Clock reads: the first request (0), the first batch (0.125), the first step's end (2),
    # the boundary done (10: 8 s of profiler work), the second batch (10.5), the second
    # step's end (11), the boundary done again (12).
    fetch, step, progress = run([[1, 2, 3], [4]], [0.0, 0.125, 2.0, 10.0, 10.5, 11.0, 12.0],
                                monkeypatch, boundary=boundary)
    assert boundary.ended == 2
    assert (fetch.counts, fetch.sum) == ([1, 1, 0], 0.625)  # 0.125 and 0.5, not 0.125 and 8
    assert (step.counts, step.sum) == ([0, 1, 1], 3.0)  # 2 and 1, not 2 and 8.5
    assert progress.samples == 4

