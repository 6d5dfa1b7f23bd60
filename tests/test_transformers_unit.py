"""The Hugging Face callback (trial_instrumentation/transformers.py) driven hook by hook, in
milliseconds: real torch and Accelerate dataloaders over a dataset whose items take time on a
clock the test moves, the Trainer's hooks called in ``Trainer.train()``'s order with a real
``TrainerState`` and ``TrainerControl``, and a stand-in for ``TrainingArguments`` (only its
ranks and precision flags are read; a real one cannot be several ranks in one process). So
every phase, step, fetch and sample count is exact. The real runs are
tests/test_transformers.py."""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("transformers")
import torch
from accelerate.data_loader import DataLoaderShard
from torch.utils.data import DataLoader, Dataset
from transformers import TrainerControl, TrainerState

from tests.trial_support import held_loopback_port
from trial_instrumentation import framework, names, timing
from trial_instrumentation import transformers as hf
from trial_instrumentation.transformers import TrainwatchCallback
from trial_instrumentation.trial import Trial

LOGGER = "trial_instrumentation.transformers"
# Seconds on the test's clock: distinct binary fractions, so sums are exact and no part (or
# sum of parts) stands in for another.
S_ITEM, S_TRAIN, S_LR, S_REDUCE, S_GAP = 0.0625, 0.5, 0.125, 0.03125, 0.0078125
PHASES = (names.DATALOADER_NEXT, names.TRAIN_BATCH, names.STEP_LR_SCHEDULERS,
          names.REDUCE_METRICS)


class Clock:
    def __init__(self) -> None:
        self.now = 0.015625  # perf_counter has no fixed origin: an early reading, below any part of a step

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    for module in (hf, framework, timing):
        monkeypatch.setattr(module, "perf_counter", made)
    return made


class Items(Dataset[torch.Tensor]):
    """``size`` samples, each taking S_ITEM seconds on the clock to load."""

    def __init__(self, clock: Clock, size: int) -> None:
        self.clock, self.size, self.loaded = clock, size, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        self.clock.now += S_ITEM
        self.loaded += 1
        return torch.full((3,), float(index))


@dataclass
class Args:
    """What the callback reads of ``TrainingArguments``."""

    process_index: int = 0
    world_size: int = 1
    local_process_index: int = 0
    bf16: bool = False
    fp16: bool = False
    tf32: bool = False


@pytest.fixture(scope="module")
def held_port() -> Iterator[int]:
    """A loopback port this module holds open (trial_support.held_loopback_port)."""
    with held_loopback_port() as port:
        yield port


class Made(list[TrainwatchCallback]):
    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def new(self, trial: str, **settings: Any) -> TrainwatchCallback:
        self.append(TrainwatchCallback("hf-unit", trial, pull_port=self.port, **settings))
        return self[-1]


@pytest.fixture
def made(held_port: int) -> Iterator[Made]:
    """Callbacks a test made: whatever one leaves open is finished after the test."""
    callbacks = Made(held_port)
    yield callbacks
    for callback in callbacks:
        callback._finish(clean=True)


class Run:
    """``Trainer.train()``'s calls to a callback, in its order."""

    def __init__(self, callback: TrainwatchCallback, clock: Clock, args: Args | None = None
                 ) -> None:
        self.callback, self.clock = callback, clock
        self.args, self.state, self.control = args or Args(), TrainerState(), TrainerControl()

    def call(self, hook: str, **kwargs: Any) -> None:
        getattr(self.callback, hook)(self.args, self.state, self.control, **kwargs)

    def begin(self, loader: Any) -> None:
        self.call("on_train_begin", train_dataloader=loader)

    def step(self, batches: Iterator[Any], fetches: int = 1, logs: bool = True) -> list[Any]:
        """One optimizer step: its fetches, then the step's hooks; ``logs``: it logs."""
        taken = [next(batches) for _ in range(fetches)]
        self.call("on_step_begin")
        self.clock.now += S_TRAIN
        self.call("on_optimizer_step")
        self.clock.now += S_LR
        self.call("on_step_end")
        if logs:
            self.clock.now += S_REDUCE
            self.call("on_log", logs={"loss": 1.0})
        self.clock.now += S_GAP
        return taken

    @property
    def trial(self) -> Trial:
        assert self.callback.trial is not None
        return self.callback.trial


def timed(trial: Trial, phase: str) -> tuple[int, float]:
    if phase not in trial._state.phases:
        return 0, 0.0
    counts, total = trial._state.phases[phase].snapshot()
    return sum(counts), total


def stepped(trial: Trial) -> tuple[int, float]:
    counts, total = trial._state.step.snapshot()
    return sum(counts), total


# A step: from its first fetch to the next step's first fetch, less nothing.
STEP_PARTS = S_TRAIN + S_LR + S_REDUCE + S_GAP


# Steps, timed ---------------------------------------------------------------------------------

def test_each_step_times_its_fetch_its_parts_and_its_samples(clock: Clock, made: Made) -> None:
    run = Run(made.new("steps"), clock)
    loader = DataLoader(Items(clock, 10), batch_size=4)  # 4, 4 and 2 samples
    run.begin(loader)
    trial = run.trial
    batches = iter(loader)
    assert [b.shape[0] for b in run.step(batches)] == [4]
    assert stepped(trial) == (0, 0.0)  # not over until the next step's first fetch
    run.step(batches, logs=False)
    run.step(batches)
    run.call("on_epoch_end")
    fetch = 4 * S_ITEM, 4 * S_ITEM, 2 * S_ITEM
    assert stepped(trial) == (3, sum(fetch) + 3 * STEP_PARTS - S_REDUCE)
    assert trial._state.progress.samples == 10
    assert {phase: timed(trial, phase) for phase in PHASES} == {
        names.DATALOADER_NEXT: (3, sum(fetch)), names.TRAIN_BATCH: (3, 3 * S_TRAIN),
        names.STEP_LR_SCHEDULERS: (3, 3 * S_LR), names.REDUCE_METRICS: (2, 2 * S_REDUCE)}
    assert set(trial._state.phases) == set(PHASES)


def test_the_last_step_ends_with_the_epoch(clock: Clock, made: Made) -> None:
    run = Run(made.new("epoch-end"), clock)
    loader = DataLoader(Items(clock, 4), batch_size=4)
    run.begin(loader)
    run.step(iter(loader))
    clock.now += 2.0
    run.call("on_epoch_end")
    assert stepped(run.trial) == (1, 4 * S_ITEM + STEP_PARTS + 2.0)
    run.call("on_epoch_end")
    assert stepped(run.trial) == (1, 4 * S_ITEM + STEP_PARTS + 2.0)


def test_gradient_accumulation_counts_all_its_fetches_and_samples_in_one_step(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("accumulate"), clock)
    loader = DataLoader(Items(clock, 12), batch_size=4)
    run.begin(loader)
    batches = iter(loader)
    run.step(batches, fetches=2)
    run.step(batches, fetches=1)  # the epoch's remainder
    run.call("on_epoch_end")
    trial = run.trial
    assert stepped(trial) == (2, 12 * S_ITEM + 2 * STEP_PARTS)
    assert timed(trial, names.DATALOADER_NEXT) == (2, 12 * S_ITEM)
    assert trial._state.progress.samples == 12
    assert timed(trial, names.TRAIN_BATCH) == (2, 2 * S_TRAIN)


def test_the_optimizer_step_ends_train_batch_once_and_only_inside_a_step(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("optimizer"), clock)
    loader = DataLoader(Items(clock, 8), batch_size=4)
    run.begin(loader)
    batches = iter(loader)
    run.call("on_optimizer_step")  # before any step: nothing opens
    next(batches)
    run.call("on_step_begin")
    clock.now += S_TRAIN
    run.call("on_optimizer_step")
    clock.now += S_LR
    run.call("on_optimizer_step")  # again (a second optimizer): the scheduler phase goes on
    clock.now += S_LR
    run.call("on_step_end")
    run.call("on_optimizer_step")  # after the step's end: nothing opens
    clock.now += 1.0
    run.call("on_epoch_end")
    trial = run.trial
    assert timed(trial, names.TRAIN_BATCH) == (1, S_TRAIN)
    assert timed(trial, names.STEP_LR_SCHEDULERS) == (1, 2 * S_LR)


def test_a_step_that_ends_without_an_optimizer_step_is_all_train_batch(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("no-optimizer"), clock)
    loader = DataLoader(Items(clock, 4), batch_size=4)
    run.begin(loader)
    next(iter(loader))
    run.call("on_step_begin")
    clock.now += S_TRAIN
    run.call("on_step_end")  # the optimizer step was skipped (an overflow under fp16)
    clock.now += 1.0
    run.call("on_epoch_end")
    assert timed(run.trial, names.TRAIN_BATCH) == (1, S_TRAIN)
    assert timed(run.trial, names.STEP_LR_SCHEDULERS) == (0, 0.0)


def test_only_a_log_after_a_steps_end_is_its_reduce_metrics(clock: Clock, made: Made) -> None:
    run = Run(made.new("logs"), clock)
    loader = DataLoader(Items(clock, 8), batch_size=4)
    run.begin(loader)
    batches = iter(loader)
    run.call("on_log", logs={})  # before any step
    run.step(batches)
    clock.now += 1.0
    run.call("on_log", logs={})  # a second log of the same step: not the step's again
    next(batches)  # the next step's fetch ends the step: a log after it is no step's
    clock.now += 2.0
    run.call("on_log", logs={})
    run.call("on_step_begin")
    clock.now += S_TRAIN
    run.call("on_step_end")
    run.call("on_epoch_end")  # the epoch's end ends the step: its log after it is not timed
    clock.now += 4.0
    run.call("on_log", logs={})
    assert timed(run.trial, names.REDUCE_METRICS) == (1, S_REDUCE)


# The epoch's end, and a fetch that finds the data's end ----------------------------------------

def test_a_fetch_that_finds_the_end_of_the_data_starts_no_step(clock: Clock, made: Made) -> None:
    """An iterable dataset shorter than the Trainer's count of steps: the Trainer asks once
    more, the loader ends. What comes between the epochs (an evaluation, a checkpoint) is no
    step's, and the next epoch's first step starts at its own first fetch."""
    run = Run(made.new("data-end"), clock)
    loader = DataLoader(Items(clock, 4), batch_size=4)
    run.begin(loader)
    batches = iter(loader)
    run.step(batches)
    with pytest.raises(StopIteration):
        next(batches)
    run.call("on_epoch_end")
    clock.now += 30.0  # the epoch's evaluation and checkpoint
    run.step(iter(loader))
    run.call("on_epoch_end")
    trial = run.trial
    assert stepped(trial) == (2, 2 * (4 * S_ITEM + STEP_PARTS))
    assert timed(trial, names.DATALOADER_NEXT) == (2, 8 * S_ITEM)
    assert trial._state.progress.samples == 8


def test_the_loader_yields_its_batches_unchanged_and_ends_cleanly(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("unchanged"), clock)
    loader = DataLoader(Items(clock, 10), batch_size=4)
    run.begin(loader)
    assert [batch[:, 0].tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [batch[:, 0].tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


# The loader's class, swapped for train() and given back -----------------------------------------

def test_accelerates_loader_is_timed_during_train_and_given_its_class_back(
        clock: Clock, made: Made) -> None:
    callback = made.new("shard")
    run = Run(callback, clock)
    items = Items(clock, 8)
    loader = DataLoaderShard(items, batch_size=4)
    run.begin(loader)
    timed_class = type(loader)
    assert timed_class is not DataLoaderShard and issubclass(timed_class, DataLoaderShard)
    assert timed_class.__name__ == "DataLoaderShard"
    batches = iter(loader)
    run.step(batches)
    run.step(batches)
    run.call("on_epoch_end")
    trial = run.trial
    # Accelerate fetches one batch ahead: the first next() loads both batches.
    assert timed(trial, names.DATALOADER_NEXT) == (2, 8 * S_ITEM)
    assert trial._state.progress.samples == 8
    run.call("on_train_end")
    assert type(loader) is DataLoaderShard and callback.trial is None
    assert trial._state.exit_reason == names.EXIT_CLEAN
    assert [b[:, 0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # untimed now
    assert stepped(trial)[0] == 2 and timed(trial, names.DATALOADER_NEXT)[0] == 2


def test_a_second_train_closes_the_first_failed_and_times_the_loader_once(
        clock: Clock, made: Made) -> None:
    callback = made.new("again")
    run = Run(callback, clock)
    loader = DataLoader(Items(clock, 8), batch_size=4)
    run.begin(loader)
    first = run.trial
    run.step(iter(loader))  # then train() raised: no on_train_end
    run.begin(loader)  # the next train()
    assert first._state.exit_reason == names.EXIT_FAILED
    assert stepped(first) == (1, 4 * S_ITEM + STEP_PARTS)  # its open step counted
    second = run.trial
    assert second is not first
    assert type(loader).__mro__[1] is DataLoader  # wrapped once, around the original
    assert type(loader)._trainwatch_original is DataLoader
    batches = iter(loader)
    run.step(batches)
    run.step(batches)
    run.call("on_train_end")
    assert type(loader) is DataLoader
    assert stepped(second) == (2, 8 * S_ITEM + 2 * STEP_PARTS)
    assert timed(second, names.DATALOADER_NEXT) == (2, 8 * S_ITEM)
    assert stepped(first)[0] == 1


def test_a_loader_whose_class_cannot_be_swapped_is_said_and_steps_are_still_timed(
        clock: Clock, made: Made, caplog: pytest.LogCaptureFixture) -> None:
    run = Run(made.new("unswappable"), clock)
    loader = [torch.zeros(4, 3), torch.zeros(4, 3)]  # a list: its layout forbids it
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.begin(loader)
    said = [r for r in caplog.records if r.name == LOGGER]
    assert [r.getMessage() for r in said] == [
        "trainwatch: cannot time list; dataloader_next and samples are not measured"]
    assert said[0].exc_info and said[0].exc_info[0] is TypeError  # with the reason
    assert type(loader) is list
    batches = iter(loader)
    run.step(batches)
    run.step(batches)
    run.call("on_epoch_end")
    run.call("on_train_end")
    assert type(loader) is list


def test_without_a_dataloader_steps_run_from_one_step_begin_to_the_next(
        clock: Clock, made: Made, caplog: pytest.LogCaptureFixture) -> None:
    callback = made.new("no-loader")
    run = Run(callback, clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run.begin(None)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        ("trainwatch: the Trainer gave no train_dataloader; dataloader_next and samples are "
         "not measured")]
    trial = run.trial
    clock.now += 1.0
    run.step(iter([None]))
    run.step(iter([None]))
    run.call("on_epoch_end")
    # Each step from its on_step_begin; no fetch, so each hands over 0 s of fetching.
    assert stepped(trial) == (2, 2 * STEP_PARTS)
    assert timed(trial, names.DATALOADER_NEXT) == (2, 0.0)
    assert trial._state.progress.samples == 0
    run.call("on_train_end")
    assert trial._state.exit_reason == names.EXIT_CLEAN


# Ranks, exit, unconfigured -----------------------------------------------------------------------

@pytest.mark.parametrize(("world_size", "local_rank"), [(1, None), (2, 1), (4, 1)])
def test_the_ranks_come_from_the_arguments_and_one_rank_has_no_local_rank(
        clock: Clock, made: Made, world_size: int, local_rank: int | None) -> None:
    run = Run(made.new(f"ranks-{world_size}"), clock,
              Args(process_index=world_size - 1, world_size=world_size, local_process_index=1))
    run.begin(None)
    cfg = run.trial.config
    assert (cfg.rank, cfg.world_size, cfg.local_rank) == (world_size - 1, world_size, local_rank)


def test_flops_per_sample_takes_its_precision_from_the_arguments(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("flops", flops_per_sample=3.5e6), clock, Args(bf16=True))
    run.begin(None)
    assert run.trial._state.model_flops == ("bf16", 3.5e6)


class ExitHooks:
    """``atexit.register`` and ``unregister``, heard (running one is the interpreter's exit)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.registered: list[tuple[Callable[..., Any], dict[str, Any]]] = []
        self.unregistered: list[Callable[..., Any]] = []
        monkeypatch.setattr(atexit, "register", self.register)
        monkeypatch.setattr(atexit, "unregister", self.unregistered.append)

    def register(self, function: Callable[..., Any], **kwargs: Any) -> None:
        self.registered.append((function, kwargs))

    def exit(self) -> None:
        for function, kwargs in self.registered:
            if function not in self.unregistered:
                function(**kwargs)


def test_a_train_that_never_ends_is_closed_failed_at_exit_with_its_open_step(
        clock: Clock, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = ExitHooks(monkeypatch)
    callback = made.new("atexit")
    run = Run(callback, clock)
    loader = DataLoader(Items(clock, 8), batch_size=4)
    run.begin(loader)
    trial = run.trial
    assert hooks.registered == [(callback._finish, {"clean": False})]
    hooks.unregistered.clear()  # on_train_begin's own finish of a previous train()
    run.step(iter(loader))
    hooks.exit()
    assert trial._state.exit_reason == names.EXIT_FAILED
    assert stepped(trial) == (1, 4 * S_ITEM + STEP_PARTS)
    assert type(loader) is DataLoader and callback.trial is None
    assert hooks.unregistered == [callback._finish]


def test_a_clean_train_end_is_clean_and_leaves_no_exit_hook(
        clock: Clock, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = ExitHooks(monkeypatch)
    callback = made.new("clean")
    run = Run(callback, clock)
    run.begin(None)
    trial = run.trial
    run.call("on_train_end")
    assert trial._state.exit_reason == names.EXIT_CLEAN and callback.trial is None
    assert hooks.unregistered[-1] == callback._finish
    hooks.exit()  # the hook was taken back: the clean close stands
    run.call("on_train_end")  # again: nothing more
    assert trial._state.exit_reason == names.EXIT_CLEAN


def test_unconfigured_the_loader_is_left_alone_and_the_hooks_do_nothing(
        clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (names.ENV_PUSHGATEWAY, names.ENV_PULL_PORT):
        monkeypatch.delenv(variable, raising=False)
    callback = TrainwatchCallback(measure_limits=0.01)
    run = Run(callback, clock)
    items = Items(clock, 8)
    loader = DataLoader(items, batch_size=4)
    run.begin(loader)
    trial = run.trial
    assert not trial.enabled and trial._state.started_at is not None
    assert type(loader) is DataLoader and items.loaded == 0 and callback._timer is None
    run.step(iter(loader))
    run.call("on_epoch_end")
    run.call("on_train_end")
    assert callback.trial is None and callback.limits is None
    assert trial._state.exit_reason == names.EXIT_CLEAN
    assert stepped(trial) == (0, 0.0) and trial._state.phases == {}


# measure_limits= ------------------------------------------------------------------------------

def test_measure_limits_measures_the_loader_before_the_trial_starts_then_the_real_steps(
        clock: Clock, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    callback = made.new("limits", measure_limits=0.5, samples=6)
    run = Run(callback, clock)
    items = Items(clock, 64)
    loader = DataLoaderShard(items, batch_size=4)
    seen: dict[str, Any] = {}

    def measure(self: Trial, measured: Any, seconds: float, samples: Any) -> float:
        # The trainer's own loader under Accelerate's, iterated before the clock started
        # and before the loader is timed.
        seen.update(loader=measured, started=self._state.started_at, timed=type(loader),
                    seconds=seconds, samples=samples)
        return 24.0

    monkeypatch.setattr(Trial, "measure_loader_limit", measure)
    run.begin(loader)
    assert seen == {"loader": loader.base_dataloader, "started": None, "timed": DataLoaderShard,
                    "seconds": 0.5, "samples": 6}
    trial = run.trial
    assert trial._state.started_at is not None
    batches = iter(loader)
    run.step(batches)  # the warm-up: not counted
    run.step(batches)
    assert callback.limits is None
    run.step(batches)  # ends the second: 0.5 s of it less its fetch reached
    assert callback.limits == (24.0, 6 / STEP_PARTS)
    assert trial._state.limits[names.STEP_LIMIT] == 6 / STEP_PARTS


def test_a_train_shorter_than_measure_limits_publishes_its_steps_at_its_end(
        clock: Clock, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    callback = made.new("short", measure_limits=1000.0, samples=6)
    run = Run(callback, clock)
    loader = DataLoader(Items(clock, 12), batch_size=4)
    monkeypatch.setattr(Trial, "measure_loader_limit", lambda *args: 24.0)
    run.begin(loader)
    batches = iter(loader)
    for _ in range(3):
        run.step(batches)
    assert callback.limits is None
    run.call("on_train_end")
    # The second and the third steps (the third ended by the close), less their fetches.
    assert callback.limits == (24.0, 12 / (2 * STEP_PARTS))


def test_without_measure_limits_or_a_loader_nothing_is_measured(
        clock: Clock, made: Made, caplog: pytest.LogCaptureFixture) -> None:
    callback = made.new("no-limits")
    run = Run(callback, clock)
    items = Items(clock, 12)
    loader = DataLoader(items, batch_size=4)
    run.begin(loader)
    trial = run.trial
    batches = iter(loader)
    for _ in range(3):
        run.step(batches)
    assert items.loaded == 12  # the Trainer's own batches only
    run.call("on_train_end")
    assert callback.limits is None and trial._state.limits == {}
    callback = made.new("no-loader-limits", measure_limits=0.01)
    run = Run(callback, clock)
    with caplog.at_level(logging.INFO):
        run.begin(None)
        trial = run.trial
        for _ in range(3):
            run.step(iter([None]))
        run.call("on_train_end")
    assert not [r for r in caplog.records if r.name == "trial_instrumentation.framework"]
    assert names.LOADER_LIMIT not in trial._state.limits
    assert names.STEP_LIMIT not in trial._state.limits and callback.limits is None


def test_without_transformers_the_import_says_which_extra_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # not installed
    monkeypatch.delitem(sys.modules, "trial_instrumentation.transformers")
    with pytest.raises(ImportError) as refused:
        importlib.import_module("trial_instrumentation.transformers")
    assert str(refused.value) == ("trial_instrumentation.transformers needs transformers: "
                                  "pip install 'trainwatch[transformers]'")
    assert isinstance(refused.value.__cause__, ImportError)


def test_the_settings_after_the_gateway_are_keywords_only(held_port: int) -> None:
    with pytest.raises(TypeError):
        TrainwatchCallback("hf-unit", "positional", None, 4)  # type: ignore[misc]
    callback = TrainwatchCallback(experiment="hf-unit", trial="keywords", pushgateway=None,
                                  samples=4, pull_port=held_port)
    assert callback._args == {"experiment": "hf-unit", "trial": "keywords",
                              "pushgateway": None, "pull_port": held_port}
    assert callback._samples == 4


def test_reduce_metrics_is_the_time_from_the_steps_end_to_its_log(
        clock: Clock, made: Made) -> None:
    run = Run(made.new("early-log"), clock)
    run.begin(None)
    run.call("on_step_begin")
    run.call("on_step_end")  # at the clock's first, early reading
    clock.now += 0.5
    run.call("on_log", logs={})
    assert timed(run.trial, names.REDUCE_METRICS) == (1, 0.5)


def test_a_rank_given_to_the_callback_is_refused_naming_what_gives_it() -> None:
    """The ranks come from the Trainer's own TrainingArguments: the error says so."""
    from transformers import TrainingArguments
    with pytest.raises(ValueError) as refused:
        TrainwatchCallback("exp", "t", rank=1)
    assert f"from {TrainingArguments.__name__}; leave them out" in str(refused.value)
