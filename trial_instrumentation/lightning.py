"""PyTorch Lightning: the six standard timings from one callback, no change to the model.

    from trial_instrumentation.lightning import TrainwatchCallback
    trainer = Trainer(callbacks=[TrainwatchCallback(experiment="resnet", trial="t1")])

Lightning announces what it does to its ``Profiler`` (``start(action)`` / ``stop(action)``);
the callback puts a thin profiler in front of the trainer's own (which still sees every
action) and maps the training loop's actions to the standard phases:

==========================  ===========================================================
phase                       Lightning
==========================  ===========================================================
``dataloader_next``         ``[_TrainingEpochLoop].train_dataloader_next``
``to_device``               ``[Strategy]<strategy>.batch_to_device``
``train_batch``             ``run_training_batch`` (forward, zero_grad, backward, optimizer)
``step_lr_schedulers``      ``[LightningModule]<model>.lr_scheduler_step`` (step-interval
                            schedulers: one observation per scheduler stepped)
``reduce_metrics``          the logger connector's ``on_batch_end``: computes the step's
                            logged values (``self.log``)
``from_device``             the logger connector's ``update_train_step_metrics``: turns the
                            logged tensors into numbers for the loggers (a device-to-host copy)
==========================  ===========================================================

The last two are Lightning internals no profiler sees; when a Lightning version lacks them,
those two phases are not timed (logged once) and the others are unaffected. Only actions of
a training step are timed: validation's ``batch_to_device`` is not ``to_device``. A step runs
from one training batch's fetch to the next one's (validation run inside the epoch is part of
the step that triggered it, as in ``Trial.loader``); the last step of an epoch ends at the
epoch's end. Rank, world size and local rank come from the trainer, so each DDP rank pushes
its own group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.profilers import Profiler
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("trial_instrumentation.lightning needs Lightning: "
                      "pip install 'trainwatch[lightning]'") from exc

from trial_instrumentation import flops, names
from trial_instrumentation.framework import (
    Samples,
    StepClock,
    callback_settings,
    limit_seconds,
    start_measuring,
    with_precision,
)
from trial_instrumentation.trial import Trial

log = logging.getLogger(__name__)
_FETCH = "fetch"  # the classification of the training loop's fetch action
# The logger connector's per-step methods, in call order, and the phase each one is.
_CONNECTOR_PHASES = (("on_batch_end", names.REDUCE_METRICS),
                     ("update_train_step_metrics", names.FROM_DEVICE))


class _StepTimer(StepClock):
    """The per-step state machine fed by profiler actions and callback hooks."""

    def __init__(self, trial: Trial, samples: Samples) -> None:
        super().__init__(trial, samples)
        self.in_step = False  # between a training fetch and the step's metrics: time phases
        self._kinds: dict[str, Any] = {}  # action -> None, _FETCH or its Phase (cached)
        self._open: dict[str, Any] = {}  # actions whose phase is running
        self._fetch_start: float | None = None

    def _classify(self, action: str) -> Any:
        if action.endswith("].train_dataloader_next"):
            return _FETCH
        if action.startswith("[Strategy]") and action.endswith(".batch_to_device"):
            return self.trial.phase(names.TO_DEVICE)
        if action == "run_training_batch":
            return self.trial.phase(names.TRAIN_BATCH)
        if action.startswith("[LightningModule]") and action.endswith(".lr_scheduler_step"):
            return self.trial.phase(names.STEP_LR_SCHEDULERS)
        return None

    def start(self, action: str) -> None:
        try:
            kind = self._kinds[action]
        except KeyError:
            kind = self._kinds[action] = self._classify(action)
        if kind is None:
            return
        if kind is _FETCH:
            now = perf_counter()
            self.end_step(now)
            self.fetch_begins(now)
            self._fetch_start = now
            self.in_step = True
        elif self.in_step:
            kind.__enter__()
            self._open[action] = kind

    def stop(self, action: str) -> None:
        if self._kinds.get(action) is _FETCH:
            if self._fetch_start is not None:
                self._fetched += perf_counter() - self._fetch_start
                self._fetch_start = None
            return
        phase = self._open.pop(action, None)
        if phase is not None:
            phase.__exit__(None, None, None)

    def batch_started(self, batch: Any) -> None:
        """The fetched batch is trained on: the step is real (a fetch that ends the data or
        that Lightning makes ahead of an epoch is not a step of its own)."""
        self.begin_step(perf_counter(), self.count(batch))

    def end_epoch(self) -> None:
        self.end_step()
        self.in_step = False
        self._first_fetch, self._fetched, self._fetch_start = None, 0.0, None

    def timed_call(self, method: Callable[[], Any], phase: str, last: bool) -> Callable[[], Any]:
        """``method`` (a logger connector step method) timed as ``phase`` in a training step;
        ``last``: the step's last timed part."""
        timer = self.trial.phase(phase)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.in_step:
                return method(*args, **kwargs)
            try:
                with timer:
                    return method(*args, **kwargs)
            finally:
                self.in_step = not last
        return timed


class _TimingProfiler(Profiler):
    """Sits in front of the trainer's profiler: feeds :class:`_StepTimer`, forwards all."""

    def __init__(self, inner: Profiler, timer: _StepTimer) -> None:
        super().__init__()
        self.inner = inner
        self._timer = timer

    def start(self, action_name: str) -> None:
        self.inner.start(action_name)
        self._timer.start(action_name)  # last: closest to the work it times

    def stop(self, action_name: str) -> None:
        self._timer.stop(action_name)
        self.inner.stop(action_name)

    def summary(self) -> str:
        return self.inner.summary()

    def describe(self) -> None:
        self.inner.describe()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.inner.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self.inner.teardown(*args, **kwargs)


class TrainwatchCallback(Callback):
    """Times every training step of ``Trainer.fit`` and pushes it like :class:`Trial` does.

    Arguments are :class:`~trial_instrumentation.Trial`'s (left out: ``TRAINWATCH_*``), less
    the ranks, which come from the trainer; ``samples`` is the batch size or a function of the
    batch (default: inferred). ``measure_limits``: seconds to measure the loader's and the
    step's limits for, each: the trainer's training dataloader alone when training starts,
    before the trial's clock (its life) starts; then the step over the fit's own steps from
    the second on, their time less their fetches (``train_batch`` as Lightning runs it, its
    hooks and logging included), published once that many seconds are counted or at the
    fit's end; the rates land in ``limits``. Bad settings raise ``ValueError`` here.
    """

    def __init__(self, experiment: str | None = None, trial: str | None = None,
                 pushgateway: str | None = None, *, samples: Samples = None,
                 measure_limits: float | None = None, **trial_args: Any) -> None:
        self._args = callback_settings(experiment, trial, pushgateway, trial_args, "the Trainer")
        self._samples = samples
        self._limit_seconds = limit_seconds(measure_limits)
        #: (loader, step) samples/s, once ``measure_limits`` measured them.
        self.limits: tuple[float, float] | None = None
        self.trial: Trial | None = None  # the running fit's trial (set up on each rank)
        self._timer: _StepTimer | None = None
        self._restore: list[Callable[[], None]] = []

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self.trial is not None:
            return
        settings = with_precision(self._args, flops.lightning_precision(trainer.precision))
        self.trial = Trial(**settings, rank=trainer.global_rank,
                           world_size=trainer.world_size, local_rank=trainer.local_rank)
        if self._limit_seconds is None or not self.trial.enabled:
            self.trial.start()  # else once the loader's limit is measured (on_train_start)
        if not self.trial.enabled:
            return  # unconfigured: nothing installed, training runs untouched
        self._timer = timer = _StepTimer(self.trial, self._samples)
        self.trial.before_close(timer.end_step)  # SIGTERM's close counts the open step too
        inner = trainer.profiler
        trainer.profiler = _TimingProfiler(inner, timer)
        self._restore.append(lambda: setattr(trainer, "profiler", inner))
        connector = getattr(trainer, "_logger_connector", None)
        for attr, phase in _CONNECTOR_PHASES:
            method = getattr(connector, attr, None)
            if method is None:
                log.warning("trainwatch: this Lightning has no logger connector %s; phase %s "
                            "is not timed", attr, phase)
                continue
            setattr(connector, attr, timer.timed_call(method, phase, last=attr == _CONNECTOR_PHASES[-1][0]))
            self._restore.append(lambda attr=attr: delattr(connector, attr))  # type: ignore[misc]

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.trial is None or self._timer is None or self._limit_seconds is None:
            return
        # Before the trial's clock starts: the loader's seconds are no part of its life.
        start_measuring(self.trial, self._timer, self._limit_seconds, self._samples,
                        trainer.train_dataloader, lambda limits: setattr(self, "limits", limits))
        self.trial.start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self._timer is not None:
            self._timer.batch_started(batch)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._timer is not None:
            self._timer.in_step = False

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._timer is not None:
            self._timer.end_epoch()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._finish(clean=True)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(clean=False)

    def _finish(self, clean: bool) -> None:
        if self._timer is not None:
            self._timer.end_epoch()  # a step left by an exception is counted, as in loader()
            self._timer.finish_measuring()
        for restore in reversed(self._restore):
            restore()
        self._restore.clear()
        self._timer = None
        if self.trial is not None:
            self.trial.close(clean=clean)
            self.trial = None
