"""timing.py's parts on their own: bucket validation, the histogram, and the phase timer's
remembered-bucket fast path (pure functions and a fake clock: milliseconds in all)."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from trial_instrumentation import timing
from trial_instrumentation.timing import Histogram, Phase, validate_buckets


@pytest.mark.parametrize("good", [[0.5], [1], (0.001, 0.5, 1, 60), range(1, 4)])
def test_finite_positive_rising_bounds_are_accepted(good: object) -> None:
    assert validate_buckets(good) == tuple(float(b) for b in good)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("bad", "message"), [
    (5, "buckets must be a sequence of numbers, got 5"),
    ([None], "buckets must be a sequence of numbers"),
    (["fast"], "buckets must be a sequence of numbers"),
    ([], "buckets must not be empty"),
    ([0.0, 1.0], "buckets must be finite and > 0"),
    ([-1.0], "buckets must be finite and > 0"),
    ([1.0, math.inf], "buckets must be finite and > 0"),
    ([math.nan], "buckets must be finite and > 0"),
    ([1.0, 1.0], "buckets must be strictly increasing"),
    ([2.0, 1.0], "buckets must be strictly increasing"),
    ([1.0, 3.0, 2.0], "buckets must be strictly increasing"),
])
def test_bad_bounds_name_the_setting_and_the_problem(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        validate_buckets(bad)  # type: ignore[arg-type]
    renamed = message.replace("buckets", "TRAINWATCH_BUCKETS", 1)
    with pytest.raises(ValueError, match="^" + re.escape(renamed)):
        validate_buckets(bad, "TRAINWATCH_BUCKETS")  # type: ignore[arg-type]


def test_histogram_counts_each_bucket_and_inf_apart() -> None:
    h = Histogram((0.5, 1.0))
    for seconds in (0.0, 0.5, 0.75, 1.0, 1.5, 100.0):
        h.observe(seconds)
    assert h.snapshot() == ([2, 2, 2], 103.75)
    counts, _ = h.snapshot()
    counts[0] = 99  # a copy: the pusher's snapshot never changes the live counts
    assert h.counts == [2, 2, 2]


@pytest.mark.parametrize("bounds", [(1.0,), (0.5, 1.0), (0.25, 0.5, 1.0)])
def test_one_bucket_per_bound_and_one_for_inf(bounds: tuple[float, ...]) -> None:
    h = Histogram(bounds)
    for seconds in (*bounds, 2.0):
        h.observe(seconds)
    assert h.counts == [1] * (len(bounds) + 1)


def observe_all(phase: Phase, durations: list[float], monkeypatch: pytest.MonkeyPatch) -> int:
    """Time ``durations`` with a fake clock; how many times the phase had to bisect."""
    clock = iter(itertools.chain.from_iterable((0.0, d) for d in durations))
    monkeypatch.setattr(timing, "perf_counter", lambda: next(clock))
    bisects = 0
    real_bisect = timing.bisect_left

    def counting_bisect(bounds: tuple[float, ...], seconds: float) -> int:
        nonlocal bisects
        bisects += 1
        return real_bisect(bounds, seconds)

    monkeypatch.setattr(timing, "bisect_left", counting_bisect)
    for _ in durations:
        with phase:
            pass
    return bisects


@pytest.mark.parametrize(("durations", "counts", "bisects"), [
    # The first bucket is remembered from the start: a phase that stays fast never bisects,
    # a zero-length one (the clock did not move) included.
    ([0.01, 0.0, 0.1, 0.05], [4, 0, 0], 0),
    # A phase that settles in a bucket bisects once to find it, then never again.
    ([0.5, 0.7, 1.0, 0.6], [0, 4, 0], 1),
    ([5.0, 5.0, 9.0], [0, 0, 3], 1),
    # Every jump between buckets bisects; a value on a bound stays in that bucket (le).
    ([0.1, 0.5, 0.1, 2.0, 1.0], [2, 2, 1], 4),
])
def test_the_previous_bucket_is_tried_before_bisecting(
        durations: list[float], counts: list[int], bisects: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    phase = Phase("p", Histogram((0.1, 1.0)))
    assert observe_all(phase, durations, monkeypatch) == bisects
    assert phase.histogram.counts == counts
    assert phase.histogram.sum == pytest.approx(sum(durations))


def test_a_decorated_function_keeps_its_name_and_docstring() -> None:
    phase = Phase("p", Histogram((1.0,)))

    @phase
    def train_step(batch: int) -> int:
        """One step."""
        return batch * 2

    assert (train_step.__name__, train_step.__doc__, train_step(21)) == ("train_step",
                                                                         "One step.", 42)
    assert sum(phase.histogram.counts) == 1
