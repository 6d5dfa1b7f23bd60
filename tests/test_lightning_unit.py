"""The Lightning callback (trial_instrumentation/lightning.py) driven hook by hook, in
milliseconds: a real ``Trainer`` (never fitted) whose profiler is announced Lightning's own
action names, a stand-in for its logger connector (its two per-step methods need a running
fit), and a clock the test moves, so every phase, step, fetch and sample count is exact.
The real fits are tests/test_lightning.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

pl = pytest.importorskip("lightning.pytorch")
import torch
from lightning.pytorch.profilers import PassThroughProfiler, Profiler
from lightning.pytorch.trainer.states import TrainerFn

from tests.trial_support import held_loopback_port
from trial_instrumentation import framework, lightning, names, timing
from trial_instrumentation.lightning import TrainwatchCallback, _TimingProfiler
from trial_instrumentation.trial import Trial

LOGGER = "trial_instrumentation.lightning"
# Lightning's action names, as its profiler hears them.
FETCH = "[_TrainingEpochLoop].train_dataloader_next"
TO_DEVICE = "[Strategy]SingleDeviceStrategy.batch_to_device"
TRAIN = "run_training_batch"
LR = "[LightningModule]Classifier.lr_scheduler_step"
# Seconds each part of a step takes on the test's clock: distinct binary fractions, so sums
# are exact and no two parts (or a part and a sum of others) can stand in for each other.
S_FETCH, S_TO_DEVICE, S_TRAIN, S_LR = 0.25, 0.125, 0.5, 0.0625
S_REDUCE, S_FROM, S_GAP = 0.03125, 0.015625, 0.00390625
INNER = 1 / 1024  # what the trainer's own profiler takes at each start and each stop
TIMED = (names.TO_DEVICE, names.TRAIN_BATCH, names.STEP_LR_SCHEDULERS, names.REDUCE_METRICS,
         names.FROM_DEVICE)


class Clock:
    def __init__(self) -> None:
        self.now = 0.015625  # perf_counter has no fixed origin: an early reading, below any part of a step

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    for module in (lightning, framework, timing):
        monkeypatch.setattr(module, "perf_counter", made)
    return made


class Recording(Profiler):  # type: ignore[misc]
    """The trainer's own profiler: hears every action, takes INNER seconds at each call."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.heard: list[tuple[str, Any]] = []

    def start(self, action_name: str) -> None:
        self.clock.now += INNER
        self.heard.append(("start", action_name))

    def stop(self, action_name: str) -> None:
        self.clock.now += INNER
        self.heard.append(("stop", action_name))

    def summary(self) -> str:
        return "the inner summary"

    def describe(self) -> None:
        self.heard.append(("describe", None))

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.heard.append(("setup", (args, kwargs)))

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self.heard.append(("teardown", (args, kwargs)))


class Connector:
    """The logger connector's two per-step methods (Lightning's run them inside a fit): each
    takes its seconds on the clock and answers something of its own."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[str] = []

    def on_batch_end(self) -> str:
        self.calls.append("on_batch_end")
        self.clock.now += S_REDUCE
        return "reduced"

    def update_train_step_metrics(self) -> str:
        self.calls.append("update_train_step_metrics")
        self.clock.now += S_FROM
        return "copied"


def make_trainer(clock: Clock | None = None, connector: Any = "stand-in") -> Any:
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    if clock is not None:
        trainer.profiler = Recording(clock)
        trainer._logger_connector = Connector(clock) if connector == "stand-in" else connector
    return trainer


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
        self.append(TrainwatchCallback("lightning-unit", trial, pull_port=self.port, **settings))
        return self[-1]


@pytest.fixture
def made(held_port: int) -> Iterator[Made]:
    """Callbacks a test made: whatever trial one leaves open is closed after the test."""
    callbacks = Made(held_port)
    yield callbacks
    for callback in callbacks:
        if callback.trial is not None:
            callback.trial.close()


@pytest.fixture
def callback(made: Made, request: pytest.FixtureRequest) -> TrainwatchCallback:
    return made.new(request.node.name[:60])


def action(trainer: Any, clock: Clock, name: str, seconds: float) -> None:
    trainer.profiler.start(name)
    clock.now += seconds
    trainer.profiler.stop(name)


def step(trainer: Any, callback: TrainwatchCallback, clock: Clock, rows: int) -> None:
    """One training step in Lightning's order: the fetch, the batch to the device, the
    batch-start hook, the training batch, the step's scheduler, the logger connector's two."""
    action(trainer, clock, FETCH, S_FETCH)
    action(trainer, clock, TO_DEVICE, S_TO_DEVICE)
    callback.on_train_batch_start(trainer, None, (torch.zeros(rows, 3), torch.zeros(rows)), 0)
    action(trainer, clock, TRAIN, S_TRAIN)
    action(trainer, clock, LR, S_LR)
    assert trainer._logger_connector.on_batch_end() == "reduced"
    assert trainer._logger_connector.update_train_step_metrics() == "copied"
    clock.now += S_GAP


def timed(trial: Trial, phase: str) -> tuple[int, float]:
    if phase not in trial._state.phases:  # never named: made at a phase's first use
        return 0, 0.0
    counts, total = trial._state.phases[phase].snapshot()
    return sum(counts), total


def stepped(trial: Trial) -> tuple[int, float, int]:
    counts, total = trial._state.step.snapshot()
    return sum(counts), total


# One step's parts as the callback sees them: the timed actions exclude the trainer's own
# profiler (started before, stopped after the callback's timer); the step includes it.
PARTS = S_FETCH + S_TO_DEVICE + S_TRAIN + S_LR + S_REDUCE + S_FROM + S_GAP
# From the fetch's start (after the inner profiler's start) to the step's end: the fetch's
# inner stop and the three timed actions' inner start and stop.
LAST_STEP = PARTS + 7 * INNER
STEP = LAST_STEP + INNER  # ended by the next fetch's start, after its inner start


# A training step, timed --------------------------------------------------------------------

def test_each_step_times_its_phases_its_fetch_and_its_samples(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner = trainer.profiler
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None and trial.enabled
    assert isinstance(trainer.profiler, _TimingProfiler) and trainer.profiler.inner is inner
    step(trainer, callback, clock, rows=5)
    # The first step is not over until the next fetch starts: nothing recorded but its phases.
    assert stepped(trial) == (0, 0.0)
    assert timed(trial, names.DATALOADER_NEXT) == (1, S_FETCH)
    step(trainer, callback, clock, rows=3)
    callback.on_train_epoch_end(trainer, None)
    assert stepped(trial) == (2, STEP + LAST_STEP)
    assert trial._state.progress.samples == 5 + 3
    assert timed(trial, names.DATALOADER_NEXT) == (2, 2 * S_FETCH)
    assert {phase: timed(trial, phase) for phase in TIMED} == {
        names.TO_DEVICE: (2, 2 * S_TO_DEVICE), names.TRAIN_BATCH: (2, 2 * S_TRAIN),
        names.STEP_LR_SCHEDULERS: (2, 2 * S_LR), names.REDUCE_METRICS: (2, 2 * S_REDUCE),
        names.FROM_DEVICE: (2, 2 * S_FROM)}
    # The trainer's own profiler heard every action, in order, each started and stopped.
    assert inner.heard == [(edge, name) for name in (FETCH, TO_DEVICE, TRAIN, LR) * 2
                           for edge in ("start", "stop")]


def test_the_step_starts_at_its_fetch_and_the_last_one_ends_with_the_epoch(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    step(trainer, callback, clock, rows=4)
    clock.now += 2.0  # the epoch's end comes later: the step runs until it
    callback.on_train_epoch_end(trainer, None)
    assert stepped(trial) == (1, LAST_STEP + 2.0)
    callback.on_train_epoch_end(trainer, None)  # no step open: nothing more
    assert stepped(trial) == (1, LAST_STEP + 2.0)


def test_a_fetch_that_ends_the_data_is_no_step_and_its_wait_is_no_steps(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    step(trainer, callback, clock, rows=4)
    action(trainer, clock, FETCH, 0.75)  # StopIteration: ends the step, trains nothing
    clock.now += 8.0
    callback.on_train_epoch_end(trainer, None)
    assert stepped(trial) == (1, STEP)
    # The next epoch's first step starts at its own fetch and waited only for that fetch.
    clock.now += 16.0
    step(trainer, callback, clock, rows=2)
    callback.on_train_epoch_end(trainer, None)
    assert stepped(trial) == (2, STEP + LAST_STEP)
    assert timed(trial, names.DATALOADER_NEXT) == (2, 2 * S_FETCH)
    assert trial._state.progress.samples == 6


def test_several_fetches_of_one_step_all_count_and_it_starts_at_the_first(
        clock: Clock, made: Made) -> None:
    callback = made.new("fetches", samples=7)
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    action(trainer, clock, FETCH, 0.5)  # Lightning's fetch ahead of the epoch
    clock.now += 4.0
    action(trainer, clock, FETCH, S_FETCH)
    callback.on_train_batch_start(trainer, None, torch.zeros(2, 3), 0)
    action(trainer, clock, TRAIN, S_TRAIN)
    callback.on_train_epoch_end(trainer, None)
    # Its fetches' 0.75 s, and the step from the first fetch's start; samples= counts 7.
    assert timed(trial, names.DATALOADER_NEXT) == (1, 0.5 + S_FETCH)
    assert stepped(trial) == (1, 0.5 + 4.0 + S_FETCH + S_TRAIN + 5 * INNER)
    assert trial._state.progress.samples == 7


def test_a_fetch_stopped_twice_counts_its_wait_once(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    action(trainer, clock, FETCH, S_FETCH)
    clock.now += 1.0
    trainer.profiler.stop(FETCH)  # a stop without its start
    callback.on_train_batch_start(trainer, None, torch.zeros(2, 3), 0)
    callback.on_train_epoch_end(trainer, None)
    assert timed(trial, names.DATALOADER_NEXT) == (1, S_FETCH)


# What is not a training step's ---------------------------------------------------------------

def test_actions_outside_a_training_step_are_heard_but_not_timed(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner = trainer.profiler
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    connector = trainer._logger_connector
    # The sanity check's validation before the first fetch: its batches go to the device.
    action(trainer, clock, TO_DEVICE, 1.0)
    action(trainer, clock, LR, 1.0)
    assert connector.on_batch_end() == "reduced"  # runs, untimed
    step(trainer, callback, clock, rows=4)
    # After the step's last timed part (the metrics copied): validation inside the epoch.
    action(trainer, clock, TO_DEVICE, 1.0)
    action(trainer, clock, TRAIN, 1.0)
    assert connector.update_train_step_metrics() == "copied"
    # A validation run mid-step: from its start on, nothing is the step's phase.
    action(trainer, clock, FETCH, S_FETCH)
    callback.on_train_batch_start(trainer, None, torch.zeros(4, 3), 0)
    callback.on_validation_start(trainer, None)
    action(trainer, clock, TO_DEVICE, 1.0)
    action(trainer, clock, LR, 1.0)
    assert connector.on_batch_end() == "reduced"
    callback.on_train_epoch_end(trainer, None)
    # After the epoch: not a step's either.
    action(trainer, clock, TO_DEVICE, 1.0)
    action(trainer, clock, TRAIN, 1.0)
    assert {phase: timed(trial, phase) for phase in TIMED} == {
        names.TO_DEVICE: (1, S_TO_DEVICE), names.TRAIN_BATCH: (1, S_TRAIN),
        names.STEP_LR_SCHEDULERS: (1, S_LR), names.REDUCE_METRICS: (1, S_REDUCE),
        names.FROM_DEVICE: (1, S_FROM)}
    assert connector.calls == ["on_batch_end", "on_batch_end", "update_train_step_metrics",
                               "update_train_step_metrics", "on_batch_end"]
    assert [name for edge, name in inner.heard if edge == "start"] == [
        TO_DEVICE, LR, FETCH, TO_DEVICE, TRAIN, LR, TO_DEVICE, TRAIN, FETCH, TO_DEVICE, LR,
        TO_DEVICE, TRAIN]


# Lightning's other actions, some of them a timed action's near neighbours by name or by sort
# order: heard, and never a phase.
OTHERS = ("[Strategy]SingleDeviceStrategy.training_step",
          "[LightningModule]Classifier.training_step",
          "[LightningModule]Classifier.transfer_batch_to_device",
          "[Callback]ModelCheckpoint.on_train_batch_end",
          "[LightningModule]Classifier.batch_to_device",
          "[Strategy]SingleDeviceStrategy.lr_scheduler_step",
          "[_EvaluationLoop].val_next", "run_training_epoch", "run_training_batcher",
          "run_training_batc", "training_step_and_backward", "optimizer_step")


def test_other_actions_in_a_step_are_forwarded_and_never_timed(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner = trainer.profiler
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    action(trainer, clock, FETCH, S_FETCH)
    callback.on_train_batch_start(trainer, None, torch.zeros(4, 3), 0)
    for name in OTHERS:
        action(trainer, clock, name, 1.0)
    assert {phase: timed(trial, phase) for phase in TIMED} == dict.fromkeys(TIMED, (0, 0.0))
    assert set(trial._state.phases) == {names.DATALOADER_NEXT, names.REDUCE_METRICS,
                                        names.FROM_DEVICE}
    assert [name for edge, name in inner.heard if edge == "stop"] == [FETCH, *OTHERS]
    # Still in the step: the actions it times are timed.
    action(trainer, clock, TRAIN, S_TRAIN)
    assert timed(trial, names.TRAIN_BATCH) == (1, S_TRAIN)


def anew(name: str) -> str:
    """The same name in a string object of its own (not the interned constant)."""
    return "".join(list(name))


def test_actions_are_told_apart_by_their_names_value() -> None:
    trial = Trial(experiment="lightning-unit", trial="classify", pull_port=0)
    timer = lightning._StepTimer(trial, None)
    built = {anew("run_training_batch"): names.TRAIN_BATCH,
             anew("[Strategy]X.batch_to_device"): names.TO_DEVICE,
             anew("[LightningModule]M.lr_scheduler_step"): names.STEP_LR_SCHEDULERS}
    for action_name, phase in built.items():
        kind = timer._classify(action_name)
        assert kind is trial.phase(phase), action_name
    assert timer._classify(anew(FETCH)) is lightning._FETCH
    for other in OTHERS:
        assert timer._classify(other) is None, other


# The logger connector's methods ----------------------------------------------------------------

def test_the_connectors_first_method_leaves_the_step_open_and_its_last_closes_it(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    timer = callback._timer
    assert trial is not None and timer is not None
    connector = trainer._logger_connector
    action(trainer, clock, FETCH, S_FETCH)
    assert timer.in_step
    connector.on_batch_end()
    assert timer.in_step
    connector.on_batch_end()  # twice (logging's second pass): each timed
    assert timed(trial, names.REDUCE_METRICS) == (2, 2 * S_REDUCE)
    connector.update_train_step_metrics()
    assert not timer.in_step
    connector.update_train_step_metrics()
    assert timed(trial, names.FROM_DEVICE) == (1, S_FROM)


class Failing:
    def on_batch_end(self) -> None:
        raise RuntimeError("reduce failed")

    def update_train_step_metrics(self) -> None:
        raise RuntimeError("copy failed")


def test_a_connector_method_that_raises_is_timed_and_still_ends_the_step(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock, connector=Failing())
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial, timer = callback.trial, callback._timer
    assert trial is not None and timer is not None
    action(trainer, clock, FETCH, S_FETCH)
    with pytest.raises(RuntimeError, match="reduce failed"):
        trainer._logger_connector.on_batch_end()
    assert timer.in_step
    with pytest.raises(RuntimeError, match="copy failed"):
        trainer._logger_connector.update_train_step_metrics()
    assert not timer.in_step
    assert timed(trial, names.REDUCE_METRICS)[0] == timed(trial, names.FROM_DEVICE)[0] == 1


class OnlyCopy:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def update_train_step_metrics(self) -> str:
        self.clock.now += S_FROM
        return "copied"


class OnlyReduce:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_batch_end(self) -> str:
        self.clock.now += S_REDUCE
        return "reduced"


def test_a_connector_method_lightning_lacks_is_said_and_the_other_is_timed(
        clock: Clock, made: Made, caplog: pytest.LogCaptureFixture) -> None:
    callback = made.new("no-reduce")
    trainer = make_trainer(clock, connector=OnlyCopy(clock))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        callback.setup(trainer, None, TrainerFn.FITTING)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        ("trainwatch: this Lightning has no logger connector on_batch_end; phase "
         "reduce_metrics is not timed")]
    trial, timer = callback.trial, callback._timer
    assert trial is not None and timer is not None
    action(trainer, clock, FETCH, S_FETCH)
    assert trainer._logger_connector.update_train_step_metrics() == "copied"
    assert not timer.in_step  # still the step's last part
    assert timed(trial, names.FROM_DEVICE) == (1, S_FROM)
    assert names.REDUCE_METRICS not in trial._state.phases
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert "update_train_step_metrics" not in vars(trainer._logger_connector)

    callback = made.new("no-copy")
    trainer = make_trainer(clock, connector=OnlyReduce(clock))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        callback.setup(trainer, None, TrainerFn.FITTING)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        ("trainwatch: this Lightning has no logger connector update_train_step_metrics; "
         "phase from_device is not timed")]
    trial, timer = callback.trial, callback._timer
    assert trial is not None and timer is not None
    action(trainer, clock, FETCH, S_FETCH)
    assert trainer._logger_connector.on_batch_end() == "reduced"
    assert timer.in_step  # not the last part: the step goes on
    assert timed(trial, names.REDUCE_METRICS) == (1, S_REDUCE)
    assert names.FROM_DEVICE not in trial._state.phases


def test_a_trainer_without_a_logger_connector_times_the_rest(
        clock: Clock, callback: TrainwatchCallback, caplog: pytest.LogCaptureFixture) -> None:
    trainer = make_trainer(clock)
    del trainer._logger_connector
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        callback.setup(trainer, None, TrainerFn.FITTING)
    assert [r.getMessage().split()[7] for r in caplog.records if r.name == LOGGER] == [
        "on_batch_end;", "update_train_step_metrics;"]
    trial = callback.trial
    assert trial is not None
    action(trainer, clock, FETCH, S_FETCH)
    action(trainer, clock, TRAIN, S_TRAIN)
    assert timed(trial, names.TRAIN_BATCH) == (1, S_TRAIN)
    callback.teardown(trainer, None, TrainerFn.FITTING)


# Set up for fit only, once; torn down by fit only ------------------------------------------------

def test_only_fit_sets_up_and_only_once(clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner, connector = trainer.profiler, trainer._logger_connector
    for stage in (TrainerFn.VALIDATING, TrainerFn.TESTING, TrainerFn.PREDICTING):
        callback.setup(trainer, None, stage)
        assert callback.trial is None and trainer.profiler is inner
        assert vars(connector).keys() == {"clock", "calls"}
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial, wrapped = callback.trial, trainer.profiler
    assert trial is not None and trial.config.rank == 0 and trial.config.world_size == 1
    assert trial._state.started_at is not None  # no limits to measure: started at once
    callback.setup(trainer, None, TrainerFn.FITTING)  # again (a second fit's setup): as it was
    assert callback.trial is trial and trainer.profiler is wrapped and wrapped.inner is inner
    step(trainer, callback, clock, rows=4)
    callback.on_train_epoch_end(trainer, None)
    assert stepped(trial)[0] == 1
    assert timed(trial, names.REDUCE_METRICS) == (1, S_REDUCE)  # wrapped once, timed once


def test_teardown_of_fit_restores_the_trainer_and_closes_the_trial_clean(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner, connector = trainer.profiler, trainer._logger_connector
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    step(trainer, callback, clock, rows=4)
    for stage in (TrainerFn.VALIDATING, TrainerFn.TESTING, TrainerFn.PREDICTING):
        callback.teardown(trainer, None, stage)  # a validate() within: the fit goes on
        assert callback.trial is trial and isinstance(trainer.profiler, _TimingProfiler)
    assert stepped(trial)[0] == 0 and trial._state.exit_reason is None
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert callback.trial is None and trainer.profiler is inner
    assert vars(connector).keys() == {"clock", "calls"}  # its own methods again
    assert trial._state.exit_reason == names.EXIT_CLEAN
    assert stepped(trial) == (1, LAST_STEP)  # the open step, counted at the close
    # Nothing is timed any more, and a second teardown does nothing.
    connector.on_batch_end()
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert timed(trial, names.REDUCE_METRICS)[0] == 1


def test_an_exception_closes_the_trial_failed_with_the_step_it_left(
        clock: Clock, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    inner = trainer.profiler
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    step(trainer, callback, clock, rows=4)
    action(trainer, clock, FETCH, S_FETCH)
    callback.on_train_batch_start(trainer, None, torch.zeros(3, 3), 1)
    clock.now += 0.5
    callback.on_exception(trainer, None, RuntimeError("loss diverged"))
    assert trial._state.exit_reason == names.EXIT_FAILED
    assert stepped(trial) == (2, STEP + S_FETCH + INNER + 0.5)
    assert trial._state.progress.samples == 7
    assert trainer.profiler is inner and callback.trial is None and callback._timer is None
    callback.teardown(trainer, None, TrainerFn.FITTING)  # Lightning's teardown after it
    assert trial._state.exit_reason == names.EXIT_FAILED


def test_the_trials_own_close_counts_the_open_step(clock: Clock,
                                                   callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    step(trainer, callback, clock, rows=4)
    trial.close(clean=False, reason=names.EXIT_TERMINATED)  # SIGTERM's hook
    assert stepped(trial) == (1, LAST_STEP)


def test_the_profiler_forwards_what_is_not_a_step_to_the_trainers_own(clock: Clock) -> None:
    trial = Trial(experiment="lightning-unit", trial="forward", pull_port=0)
    inner = Recording(clock)
    profiler = _TimingProfiler(inner, lightning._StepTimer(trial, None))
    assert profiler.summary() == "the inner summary"
    profiler.describe()
    profiler.setup("fit", local_rank=3)
    profiler.teardown("fit")
    assert inner.heard == [("describe", None), ("setup", (("fit",), {"local_rank": 3})),
                           ("teardown", (("fit",), {}))]


# Unconfigured, and measure_limits= --------------------------------------------------------------

class Loader:
    """A training dataloader that counts the batches taken from it."""

    def __init__(self) -> None:
        self.taken = 0

    def __iter__(self) -> Iterator[Any]:
        while True:
            self.taken += 1
            yield torch.zeros(4, 3)


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> Loader:
    """The trainer's training dataloader (a property Lightning sets up inside fit)."""
    made = Loader()
    monkeypatch.setattr(pl.Trainer, "train_dataloader", property(lambda self: made))
    return made


def test_unconfigured_the_trainer_is_left_alone_and_the_hooks_do_nothing(
        clock: Clock, monkeypatch: pytest.MonkeyPatch, loader: Loader) -> None:
    for variable in (names.ENV_PUSHGATEWAY, names.ENV_PULL_PORT):
        monkeypatch.delenv(variable, raising=False)
    callback = TrainwatchCallback(measure_limits=0.01)
    trainer = make_trainer(clock)
    inner, connector = trainer.profiler, trainer._logger_connector
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None and not trial.enabled
    assert trial._state.started_at is not None  # started (it says so) though limits were asked
    assert trainer.profiler is inner and vars(connector).keys() == {"clock", "calls"}
    callback.on_train_start(trainer, None)
    assert loader.taken == 0 and callback.limits is None
    callback.on_train_batch_start(trainer, None, torch.zeros(4, 3), 0)
    callback.on_validation_start(trainer, None)
    callback.on_train_epoch_end(trainer, None)
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert callback.trial is None and trial._state.exit_reason == names.EXIT_CLEAN
    assert trial._state.step.snapshot()[1] == 0.0 and trial._state.progress.samples == 0


def test_hooks_before_setup_do_nothing(clock: Clock, loader: Loader,
                                       made: Made) -> None:
    callback = made.new("early", measure_limits=0.01)
    trainer = make_trainer(clock)
    callback.on_train_start(trainer, None)
    callback.on_train_batch_start(trainer, None, torch.zeros(4, 3), 0)
    callback.on_validation_start(trainer, None)
    callback.on_train_epoch_end(trainer, None)
    callback.on_exception(trainer, None, RuntimeError("early"))
    assert loader.taken == 0 and callback.trial is None and callback.limits is None


def test_without_measure_limits_the_loader_is_not_touched(
        clock: Clock, loader: Loader, callback: TrainwatchCallback) -> None:
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    callback.on_train_start(trainer, None)
    assert loader.taken == 0
    trial = callback.trial
    assert trial is not None
    for rows in (4, 4, 4):
        step(trainer, callback, clock, rows)
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert callback.limits is None
    assert names.LOADER_LIMIT not in trial._state.limits
    assert names.STEP_LIMIT not in trial._state.limits


def test_measure_limits_measures_the_loader_before_the_trial_starts_then_the_real_steps(
        clock: Clock, loader: Loader, made: Made) -> None:
    callback = made.new("limits", measure_limits=0.01, samples=6)
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None and trial._state.started_at is None  # not yet: the loader first
    callback.on_train_start(trainer, None)
    assert loader.taken > 0 and trial._state.started_at is not None
    loader_rate = trial._state.limits[names.LOADER_LIMIT]
    step(trainer, callback, clock, rows=4)  # the warm-up: not counted
    step(trainer, callback, clock, rows=4)
    assert callback.limits is None
    step(trainer, callback, clock, rows=4)  # ends the second: 0.01 s reached
    # Six samples (samples=6) over the second step less its fetch.
    assert callback.limits == (loader_rate, 6 / (STEP - S_FETCH))
    assert trial._state.limits[names.STEP_LIMIT] == 6 / (STEP - S_FETCH)


def test_a_fit_shorter_than_measure_limits_publishes_its_steps_at_teardown(
        clock: Clock, loader: Loader, made: Made) -> None:
    callback = made.new("short", measure_limits=1000.0, samples=6)
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    # The loader's measurement is over the real clock; the test's stands still meanwhile.
    callback.trial.measure_loader_limit = lambda *args: 12.5  # type: ignore[method-assign]
    callback.on_train_start(trainer, None)
    for rows in (4, 4, 4):
        step(trainer, callback, clock, rows)
    assert callback.limits is None
    callback.teardown(trainer, None, TrainerFn.FITTING)
    # The second and the third (ended by the teardown) steps, less their fetches.
    assert callback.limits == (12.5, 12 / (STEP - S_FETCH + LAST_STEP - S_FETCH))


def test_an_exception_publishes_the_step_limit_so_far(
        clock: Clock, loader: Loader, made: Made) -> None:
    callback = made.new("crash-limits", measure_limits=1000.0, samples=6)
    trainer = make_trainer(clock)
    callback.setup(trainer, None, TrainerFn.FITTING)
    assert callback.trial is not None
    callback.trial.measure_loader_limit = lambda *args: 12.5  # type: ignore[method-assign]
    callback.on_train_start(trainer, None)
    for rows in (4, 4):
        step(trainer, callback, clock, rows)
    callback.on_exception(trainer, None, RuntimeError("diverged"))
    assert callback.limits == (12.5, 6 / (LAST_STEP - S_FETCH))


def test_the_trainers_ranks_and_precision_are_the_trials(
        clock: Clock, made: Made) -> None:
    callback = made.new("flops", flops_per_sample=2.5e6)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         precision="bf16-mixed")
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    assert (trial.config.rank, trial.config.world_size, trial.config.local_rank) == (0, 1, 0)
    assert trial._state.model_flops == ("bf16", 2.5e6)
    callback.teardown(trainer, None, TrainerFn.FITTING)
    assert isinstance(trainer.profiler, PassThroughProfiler)


def test_on_a_second_node_the_rank_is_the_global_one_and_the_local_rank_the_nodes(
        clock: Clock, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes of one GPU each: node 1's process is rank 1 of 2 and local rank 0. A trial
    keyed by its local rank would push under rank 0, node 0's key, and replace its group."""
    monkeypatch.setenv("NODE_RANK", "1")
    callback = made.new("nodes")
    trainer = pl.Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    callback.setup(trainer, None, TrainerFn.FITTING)
    trial = callback.trial
    assert trial is not None
    assert (trial.config.rank, trial.config.world_size, trial.config.local_rank) == (1, 2, 0)
    assert trial.config.grouping_key["rank"] == "1"
    callback.teardown(trainer, None, TrainerFn.FITTING)


def test_without_lightning_the_import_says_which_extra_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # not installed
    monkeypatch.delitem(sys.modules, "trial_instrumentation.lightning")
    with pytest.raises(ImportError) as refused:
        importlib.import_module("trial_instrumentation.lightning")
    assert str(refused.value) == ("trial_instrumentation.lightning needs Lightning: "
                                  "pip install 'trainwatch[lightning]'")
    assert isinstance(refused.value.__cause__, ImportError)


def test_the_settings_after_the_gateway_are_keywords_only(held_port: int) -> None:
    with pytest.raises(TypeError):
        TrainwatchCallback("lightning-unit", "positional", None, 4)  # type: ignore[misc]
    callback = TrainwatchCallback(experiment="lightning-unit", trial="keywords",
                                  pushgateway=None, samples=4, pull_port=held_port)
    assert callback._args == {"experiment": "lightning-unit", "trial": "keywords",
                              "pushgateway": None, "pull_port": held_port}
    assert callback._samples == 4
