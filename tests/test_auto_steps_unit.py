"""The step clock of an unmodified script (trial_instrumentation/auto/steps.py) with exact
times: each step's duration, samples, fetch and train_batch seconds, for gradient accumulation,
two optimizers, a loop without a loader, the per-batch decision at its limit, the end of the
data and close. The clock is a stand-in, so every number is known."""

from __future__ import annotations

import logging
from collections import namedtuple

import pytest

from trial_instrumentation.auto import steps as auto_steps
from trial_instrumentation.auto.steps import AutoSteps, samples_of


class Shaped:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


class Recorder:
    def __init__(self) -> None:
        self.steps: list[tuple[float, int]] = []

    def stepped(self, seconds: float, samples: int) -> None:
        self.steps.append((round(seconds, 9), samples))


class Run:
    """AutoSteps over a recorder and a clock the test sets."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, now: float = 0.0) -> None:
        self.now = now
        monkeypatch.setattr(auto_steps, "perf_counter", lambda: self.now)
        self.rec = Recorder()
        self.fetches: list[float] = []
        self.trains: list[float] = []
        self.steps = AutoSteps(self.rec, lambda s: self.fetches.append(round(s, 9)),  # type: ignore[arg-type]
                               lambda s: self.trains.append(round(s, 9)))

    def fetch(self, start: float, end: float, samples: int = 8) -> None:
        self.steps.fetched(start, end, Shaped(samples, 3))

    def optimizer(self, at: float, optimizer: object) -> None:
        self.now = at
        self.steps.optimizer_stepped(optimizer)


def test_samples_of_takes_the_leading_dimension_of_the_first_field() -> None:
    assert samples_of((Shaped(6, 2), Shaped(9))) == 6
    assert samples_of([Shaped(5, 7)]) == 5
    assert samples_of(Shaped(4, 11)) == 4
    assert samples_of({"x": Shaped(3, 2)}) == 3  # not indexed by 0
    assert samples_of([]) == 1 and samples_of(()) == 1
    assert samples_of([1, 2, 3, 4]) == 4  # scalars: a list of samples
    assert samples_of((Shaped(), Shaped())) == 1  # 0-d fields: batch_size_of's answer
    pair = namedtuple("pair", "x y")
    assert samples_of(pair(Shaped(12, 1), Shaped(12))) == 12


def test_accumulated_fetches_are_one_step_timed_from_its_first_fetch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, opt = Run(monkeypatch), object()
    run.fetch(0.0, 0.1, 8)
    run.fetch(0.3, 0.35, 6)
    run.optimizer(0.6, opt)
    assert run.rec.steps == [] and run.steps.optimizer_seen and not run.steps.per_batch
    run.fetch(1.0, 1.2, 4)  # the next step's first fetch ends the first
    assert run.rec.steps == [(1.0, 14)]
    assert run.fetches == [0.15]
    assert run.trains == [0.45]  # 0.6 - 0.0 - 0.15
    run.optimizer(1.5, opt)
    run.steps.close()
    assert run.rec.steps == [(1.0, 14), (0.5, 4)]
    assert run.fetches == [0.15, 0.2] and run.trains == [0.45, 0.3]


def test_a_second_optimizer_is_the_same_step_the_same_one_again_a_new_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, gen, critic = Run(monkeypatch), object(), object()
    run.fetch(0.0, 0.1)
    run.optimizer(0.5, gen)
    run.optimizer(0.7, critic)
    assert run.rec.steps == []
    run.optimizer(0.9, gen)  # again, no fetch between: the step ended at critic's 0.7
    assert run.rec.steps == [(0.7, 8)] and run.trains == [0.6] and run.fetches == [0.1]
    run.steps.close()  # the new one began at 0.7, trained until 0.9, fetched nothing
    assert run.rec.steps == [(0.7, 8), (0.2, 0)]
    assert run.fetches == [0.1, 0.0] and run.trains == [0.6, 0.2]


def test_without_a_loader_each_step_begins_where_the_last_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, opt = Run(monkeypatch, now=10.0), object()
    run.optimizer(10.5, opt)  # the first begins when the clock was made
    run.optimizer(11.25, opt)
    run.optimizer(12.0, opt)
    run.steps.close()
    assert run.rec.steps == [(0.5, 0), (0.75, 0), (0.75, 0)]
    assert run.trains == [0.5, 0.75, 0.75] and run.fetches == [0.0, 0.0, 0.0]
    run.steps.close()  # nothing open: nothing more
    assert len(run.rec.steps) == 3


def test_a_step_after_a_counted_one_begins_at_its_end_not_at_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, opt = Run(monkeypatch, now=1.0), object()
    run.fetch(2.0, 2.5)
    run.optimizer(3.0, opt)
    run.steps.exhausted(3.5)  # the data ended: the step ends here
    assert run.rec.steps == [(1.5, 8)]
    run.optimizer(4.25, opt)  # no fetch in this step: it began at 3.5
    run.steps.close()
    assert run.rec.steps == [(1.5, 8), (0.75, 0)]


def test_train_batch_is_never_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    run, opt = Run(monkeypatch), object()
    run.fetch(0.0, 0.5)
    run.optimizer(0.3, opt)  # the optimizer's clock read before the fetch's end
    run.steps.close()
    assert run.trains == [0.0] and run.rec.steps == [(0.3, 8)]


def test_the_end_of_the_data_ends_only_a_trained_step(monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run(monkeypatch)
    run.fetch(0.0, 0.1)
    run.steps.exhausted(0.2)  # undecided, untrained: nothing ends
    assert run.rec.steps == []
    run.optimizer(0.4, object())
    run.steps.exhausted(0.6)
    run.steps.exhausted(0.9)  # nothing open any more
    assert run.rec.steps == [(0.6, 8)]
    run.steps.close()
    assert run.rec.steps == [(0.6, 8)] and run.trains == [0.3]


def test_fetches_without_an_optimizer_become_steps_after_the_limit_and_not_before(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(auto_steps, "UNDECIDED_FETCHES", 3)
    run = Run(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.auto.steps"):
        for i in range(3):
            run.fetch(float(i), i + 0.25, i + 1)
        assert run.rec.steps == [] and not run.steps.per_batch  # 3 is the limit, not over it
        run.fetch(3.0, 3.5, 4)
        assert run.steps.per_batch and not run.steps.optimizer_seen
        assert run.rec.steps == [(1.0, 1), (1.0, 2), (1.0, 3)]  # the fourth stays open
        assert run.fetches == [0.25, 0.25, 0.25]
        run.fetch(4.5, 4.75, 5)
        assert run.rec.steps[3:] == [(1.5, 4)] and run.fetches[3:] == [0.5]
        run.steps.exhausted(6.0)
        run.steps.exhausted(7.0)  # nothing open
        run.now = 9.0
        run.steps.close()
    assert run.rec.steps[4:] == [(1.5, 5)] and run.fetches[4:] == [0.25]
    assert run.trains == []  # not timed per batch
    assert [r.getMessage() for r in caplog.records] == [
        ("trainwatch: no optimizer step in the first 3 batches: counting one step per fetched "
         "batch (train_batch is not timed)")]


def test_fetches_without_an_optimizer_are_counted_at_close(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    run = Run(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.auto.steps"):
        run.fetch(1.0, 1.5, 2)
        run.fetch(2.0, 2.25, 3)
        run.now = 4.0
        run.steps.close()
    assert run.rec.steps == [(1.0, 2), (2.0, 3)]  # the last one ends at close
    assert run.fetches == [0.5, 0.25] and run.trains == []
    assert [r.getMessage().split(":")[1] for r in caplog.records] == [
        " no optimizer step before the end"]


def test_close_with_nothing_fetched_or_trained_records_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    run = Run(monkeypatch)
    with caplog.at_level(logging.WARNING):
        run.steps.close()
    assert run.rec.steps == [] and run.fetches == [] and caplog.records == []
    assert not run.steps.per_batch


def test_an_optimizer_after_the_per_batch_decision_is_still_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auto_steps, "UNDECIDED_FETCHES", 1)
    run = Run(monkeypatch)
    run.fetch(0.0, 0.5)
    run.fetch(1.0, 1.5)  # over the limit: per batch, the second open
    assert run.rec.steps == [(1.0, 8)]
    run.optimizer(2.0, object())
    assert not run.steps.optimizer_seen  # decided already: it stays per batch
    run.fetch(3.0, 3.5)
    assert run.rec.steps[1:] == [(2.0, 8)] and run.trains == [0.5]


def test_the_limit_is_64_fetches_without_an_optimizer(monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run(monkeypatch)
    for i in range(64):
        run.fetch(float(i), i + 0.5)
    assert not run.steps.per_batch and run.rec.steps == []
    run.fetch(64.0, 64.5)
    assert run.steps.per_batch and len(run.rec.steps) == 64
