"""What the Lightning and Hugging Face callbacks share (trial_instrumentation/framework.py),
driven directly: settings checked when the callback is made, the step clock over a real
(enabled, never started) trial's recorder, and the step limit over the loop's own steps."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from trial_instrumentation import framework, names
from trial_instrumentation.framework import (
    StepClock,
    StepConsumption,
    callback_settings,
    limit_seconds,
    measure_loader_limit,
    start_measuring,
    with_precision,
)
from trial_instrumentation.trial import Trial

LOGGER = "trial_instrumentation.framework"


@pytest.fixture
def trial() -> Iterator[Trial]:
    made = Trial(experiment="fw", trial="unit", pull_port=0, rank=0, world_size=1)
    yield made
    made.close()


def _steps(trial: Trial) -> tuple[list[int], float]:
    return trial._state.step.snapshot()


def _fetch(trial: Trial) -> tuple[list[int], float]:
    return trial._state.phases[names.DATALOADER_NEXT].snapshot()


# callback_settings -------------------------------------------------------------------------

def test_the_ranks_are_refused_by_name_and_what_gives_them() -> None:
    with pytest.raises(ValueError) as refused:
        callback_settings("e", "t", None, {"rank": 1, "local_rank": 0, "push_interval": 5},
                          "Lightning's trainer")
    assert str(refused.value) == ("TrainwatchCallback takes ['local_rank', 'rank'] from "
                                  "Lightning's trainer; leave them out")
    with pytest.raises(ValueError, match=r"\['world_size'\] from the Trainer"):
        callback_settings("e", "t", None, {"world_size": 2}, "the Trainer")


def test_the_settings_are_the_arguments_and_are_checked_now() -> None:
    settings = callback_settings("exp", "tr", "http://pgw:9091", {"push_interval": 7.5},
                                 "x")
    assert settings == {"experiment": "exp", "trial": "tr", "pushgateway": "http://pgw:9091",
                        "push_interval": 7.5}
    with pytest.raises(ValueError, match="push_interval"):
        callback_settings("exp", "tr", None, {"push_interval": "soon"}, "x")
    # FLOPs without a precision: the framework's precision comes later; nothing is added now.
    flops = callback_settings("exp", "tr", None, {"flops_per_sample": 1e9}, "x")
    assert "precision" not in flops
    with pytest.raises(ValueError, match="flops_per_sample"):
        callback_settings("exp", "tr", None, {"flops_per_sample": -5.0}, "x")


def test_with_precision_fills_in_the_frameworks_only_where_flops_have_none() -> None:
    plain = {"experiment": "e"}
    assert with_precision(plain, "bf16") is plain
    given = {"flops_per_sample": 2e9, "precision": "fp16"}
    assert with_precision(given, "bf16") is given
    missing = {"flops_per_sample": 2e9}
    assert with_precision(missing, "bf16") == {"flops_per_sample": 2e9, "precision": "bf16"}
    assert missing == {"flops_per_sample": 2e9}  # a copy, the original untouched
    assert with_precision({"flops_per_sample": None}, "bf16") == {"flops_per_sample": None}


@pytest.mark.parametrize("value", [0, 0.0, -1.5, True, False, float("nan")])
def test_a_measuring_time_that_is_not_positive_seconds_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="measure_limits="):
        limit_seconds(value)


def test_a_measuring_time_is_seconds_or_none() -> None:
    assert limit_seconds(None) is None
    assert limit_seconds(3) == 3.0 and isinstance(limit_seconds(3), float)
    assert limit_seconds(0.25) == 0.25


# StepConsumption ---------------------------------------------------------------------------

def test_the_step_limit_skips_the_first_step_and_leaves_out_the_fetches() -> None:
    published: list[float] = []
    consumption = StepConsumption(1.0, published.append)
    consumption.add(9.0, 0.0, 1000)  # warm-up: not counted
    assert (consumption.busy, consumption.samples) == (0.0, 0)
    consumption.add(0.5, 0.25, 32)
    consumption.add(0.5, 0.75, 8)  # a fetch longer than its step counts no time, its samples
    assert (consumption.busy, consumption.samples, published) == (0.25, 40, [])
    consumption.add(1.0, 0.25, 24)  # busy reaches exactly 1.0 s: published
    assert published == [64 / 1.0]
    assert consumption.done
    consumption.add(1.0, 0.0, 100)  # after that: nothing more
    consumption.finish()
    assert published == [64.0]
    assert (consumption.busy, consumption.samples) == (1.0, 64)


def test_the_step_limit_waits_for_its_seconds_and_the_fit_end_publishes_what_there_is() -> None:
    published: list[float] = []
    consumption = StepConsumption(2.0, published.append)
    consumption.add(0.1, 0.0, 1)
    consumption.add(1.5, 0.5, 30)
    assert published == []  # 1.0 s of 2.0
    consumption.finish()
    assert published == [30.0]
    consumption.finish()
    assert published == [30.0]


def test_nothing_counted_publishes_nothing_and_can_still_publish_later() -> None:
    published: list[float] = []
    no_time = StepConsumption(1.0, published.append)
    no_time.finish()  # no step at all
    no_time.add(0.5, 0.0, 10)  # the warm-up
    no_time.finish()
    no_time.add(0.5, 0.5, 10)  # samples, but all fetch: no time
    no_time.finish()
    assert published == [] and not no_time.done
    no_time.add(0.25, 0.0, 5)
    no_time.finish()
    assert published == [15 / 0.25]
    no_samples = StepConsumption(1.0, published.append)
    no_samples.add(0.5, 0.0, 10)
    no_samples.add(0.5, 0.0, 0)  # time, but no samples
    no_samples.finish()
    assert published == [60.0] and not no_samples.done
    no_samples.add(0.25, 0.0, 15)
    no_samples.finish()
    assert published == [60.0, 15 / 0.75]


def test_a_failing_publish_is_logged_once_and_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    def publish(rate: float) -> None:
        raise RuntimeError("gateway gone")

    consumption = StepConsumption(0.5, publish)
    consumption.add(1.0, 0.0, 1)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        consumption.add(1.0, 0.0, 1)
        consumption.finish()
    assert consumption.done
    assert [r.getMessage() for r in caplog.records] == [
        "trainwatch: publishing the step limit failed"]


# The loader's limit and start_measuring ----------------------------------------------------

def test_the_loaders_limit_is_measured_and_published(trial: Trial) -> None:
    rate = measure_loader_limit(trial, 0.02, 4, iter(range(10**9)))
    assert rate is not None and rate > 0
    assert trial._state.limits[names.LOADER_LIMIT] == rate


def test_a_loader_that_fails_is_logged_and_training_goes_on(
        trial: Trial, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert measure_loader_limit(trial, 0.02, 4, []) is None
    assert names.LOADER_LIMIT not in trial._state.limits
    assert "measuring the loader's limit failed" in caplog.records[0].getMessage()


def test_a_loader_that_raises_mid_measurement_is_logged_and_training_goes_on(
        trial: Trial, caplog: pytest.LogCaptureFixture) -> None:
    """A dataset that raises while the limit is measured (a missing item's KeyError, a worker's
    RuntimeError: anything, not only the ValueError of a loader with no batch)."""
    def dataset() -> Iterator[int]:
        yield from range(3)
        raise KeyError("item 3")

    class Loader:
        def __iter__(self) -> Iterator[int]:
            return dataset()

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert measure_loader_limit(trial, 60.0, 4, Loader()) is None
    assert names.LOADER_LIMIT not in trial._state.limits
    assert [r.getMessage() for r in caplog.records] == [
        "trainwatch: measuring the loader's limit failed; training goes on without it"]


def test_start_measuring_publishes_both_limits_and_hands_them_over(
        trial: Trial, caplog: pytest.LogCaptureFixture) -> None:
    clock = StepClock(trial, 8)
    done: list[tuple[float, float]] = []
    with caplog.at_level(logging.INFO, logger=LOGGER):
        start_measuring(trial, clock, 0.02, 8, range(10**9), done.append)
        loader = trial._state.limits[names.LOADER_LIMIT]
        assert clock.consumption is not None
        assert clock.consumption.seconds == 0.02
        assert done == [] and names.STEP_LIMIT not in trial._state.limits
        clock.consumption.add(1.0, 0.0, 8)
        clock.consumption.add(0.5, 0.25, 8)
    assert trial._state.limits[names.STEP_LIMIT] == 32.0
    assert done == [(loader, 32.0)]
    assert caplog.records[-1].getMessage() == (
        f"trainwatch: the loader delivers {loader:.0f} samples/s alone (for 0.02s); the step "
        "consumes 32 samples/s (the loop's own steps, their fetches left out)")


def test_without_the_loaders_limit_the_steps_is_published_and_nothing_handed_over(
        trial: Trial, caplog: pytest.LogCaptureFixture) -> None:
    clock = StepClock(trial, 8)
    done: list[tuple[float, float]] = []
    with caplog.at_level(logging.INFO, logger=LOGGER):
        start_measuring(trial, clock, 0.02, 8, [], done.append)  # the loader fails
        assert clock.consumption is not None
        clock.consumption.add(1.0, 0.0, 8)
        clock.consumption.add(0.5, 0.0, 10)
    assert trial._state.limits[names.STEP_LIMIT] == 20.0
    assert done == []
    assert "the loader delivers ? samples/s alone" in caplog.records[-1].getMessage()


def test_under_several_ranks_only_the_loaders_limit_is_measured(
        caplog: pytest.LogCaptureFixture) -> None:
    for world_size in (2, 1):
        ranked = Trial(experiment="fw", trial=f"ranks-{world_size}", pull_port=0, rank=0,
                       world_size=world_size)
        try:
            clock = StepClock(ranked, 8)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger=LOGGER):
                start_measuring(ranked, clock, 0.02, 8, range(10**9), lambda rates: None)
            assert names.LOADER_LIMIT in ranked._state.limits
            said = [r.getMessage() for r in caplog.records]
            if world_size == 2:
                assert clock.consumption is None
                assert said == [("trainwatch: the step's limit is not measured under 2 "
                                 "ranks: their steps include the gradient exchange; "
                                 "measure_limits= in a one-rank run of the same script gives "
                                 "the single-rank limit")]
            else:
                assert clock.consumption is not None
                assert said == []
        finally:
            ranked.close()


# StepClock ---------------------------------------------------------------------------------

def test_samples_are_counted_as_given_by_function_or_inferred(
        trial: Trial, caplog: pytest.LogCaptureFixture) -> None:
    batch = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert StepClock(trial, 5).count(batch) == 5
    assert StepClock(trial, 0).count(batch) == 0
    assert StepClock(trial, lambda b: 2 * len(b)).count(batch) == 6
    assert StepClock(trial, lambda b: 2.9).count(batch) == 2  # an int, as the counters take
    assert StepClock(trial, None).count(([[0]] * 7, [1] * 7)) == 7

    def broken(b: Any) -> int:
        raise KeyError("labels")

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert StepClock(trial, broken).count(batch) == 0
    assert [r.getMessage() for r in caplog.records] == [
        "trainwatch: counting samples failed; counting 0 for this batch"]


def test_a_step_runs_from_its_first_fetch_to_its_end(trial: Trial) -> None:
    clock = StepClock(trial, 8)
    clock.fetch_begins(10.0)
    clock.fetch_begins(10.5)  # a second fetch (gradient accumulation): the first one counts
    clock._fetched = 0.375
    clock.begin_step(11.0, 16)
    clock.end_step(12.25)
    counts, total = _steps(trial)
    assert (sum(counts), total) == (1, 2.25)
    assert _fetch(trial)[1] == 0.375
    assert trial._state.progress.samples == 16
    clock.end_step(20.0)  # no step running: nothing
    assert sum(_steps(trial)[0]) == 1
    # Without a fetch the step starts at begin_step's time; the fetch time was given away.
    clock.begin_step(30.0, 4)
    clock.end_step(30.5)
    counts, total = _steps(trial)
    assert (sum(counts), total) == (2, 2.75)
    assert _fetch(trial)[1] == 0.375
    assert sum(_fetch(trial)[0]) == 2  # each step hands over its fetch time, 0 included
    assert trial._state.progress.samples == 20


def test_a_step_ended_without_a_time_is_timed_by_the_clock(trial: Trial,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framework, "perf_counter", lambda: 105.5)
    clock = StepClock(trial, 8)
    clock.begin_step(100.0, 8)
    clock.end_step()
    assert _steps(trial)[1] == 5.5


def test_each_step_feeds_the_step_limit_with_its_own_fetch_time(trial: Trial) -> None:
    clock = StepClock(trial, 8)
    seen: list[tuple[float, float, int]] = []

    class Recording(StepConsumption):
        def add(self, step_seconds: float, fetch_seconds: float, samples: int) -> None:
            seen.append((step_seconds, fetch_seconds, samples))

    clock.consumption = Recording(1.0, lambda rate: None)
    clock.fetch_begins(1.0)
    clock._fetched = 0.25
    clock.begin_step(2.0, 12)
    clock._fetched = 0.5  # the next step's fetch, under way: not this step's
    clock.end_step(4.0)
    assert seen == [(3.0, 0.25, 12)]
    clock.end_step(5.0)
    assert seen == [(3.0, 0.25, 12)]


def test_finish_measuring_publishes_a_short_loops_limit(trial: Trial) -> None:
    clock = StepClock(trial, 8)
    clock.finish_measuring()  # nothing measured: nothing happens
    published: list[float] = []
    clock.consumption = StepConsumption(100.0, published.append)
    clock.consumption.add(1.0, 0.0, 8)
    clock.consumption.add(0.5, 0.0, 8)
    clock.finish_measuring()
    assert published == [16.0]


def test_a_first_step_without_a_fetch_hands_over_no_fetch_time(trial: Trial) -> None:
    clock = StepClock(trial, 8)
    clock.begin_step(5.0, 8)
    clock.end_step(5.5)
    assert _fetch(trial) == ([1] + [0] * (len(_fetch(trial)[0]) - 1), 0.0)
    assert _steps(trial)[1] == 0.5


def test_a_negative_sample_count_publishes_no_rate() -> None:
    # A user's samples function that returns a negative number: no made-up negative rate.
    published: list[float] = []
    consumption = StepConsumption(1.0, published.append)
    consumption.add(0.5, 0.0, 4)  # the warm-up
    consumption.add(0.5, 0.0, -4)
    consumption.finish()
    assert published == [] and not consumption.done


def test_the_step_limit_is_samples_over_seconds_not_rounded() -> None:
    published: list[float] = []
    consumption = StepConsumption(5.0, published.append)
    consumption.add(0.5, 0.0, 10)  # the warm-up
    consumption.add(0.75, 0.0, 10)
    consumption.finish()
    assert published == [pytest.approx(10 / 0.75)]
    assert published[0] != 13.0
