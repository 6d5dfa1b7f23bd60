"""Hugging Face ``Trainer``: the standard timings from one ``TrainerCallback``.

    from trial_instrumentation.transformers import TrainwatchCallback
    trainer = Trainer(model, args, train_dataset=data,
                      callbacks=[TrainwatchCallback(experiment="bert", trial="t1")])

A step is one optimizer step (``state.global_step``), with all its gradient-accumulation
micro-batches. The ``Trainer`` announces a step's parts to callbacks; the data-loading time,
which no callback hook sees, is taken by timing ``next()`` on the training dataloader the
``Trainer`` hands its callbacks (its class is swapped for a timed subclass during ``train()``):

==========================  ===========================================================
phase                       ``Trainer``
==========================  ===========================================================
``dataloader_next``         ``next()`` on the training dataloader for the step's batches;
                            Accelerate moves each batch to the device there, so
                            ``to_device`` is part of it
``train_batch``             ``on_step_begin`` to ``on_optimizer_step``: forward, backward,
                            gradient clipping, the optimizer step
``step_lr_schedulers``      ``on_optimizer_step`` to ``on_step_end``: the scheduler step and
                            ``zero_grad``
``reduce_metrics``          ``on_step_end`` to ``on_log``, on steps that log: the gather of
                            the loss across ranks and its ``.item()`` (so ``from_device``)
==========================  ===========================================================

A step runs from its first fetch to the next step's first fetch (evaluation and checkpoints
belong to the step that triggered them); the last step of an epoch ends with the epoch.
Rank, world size and local rank come from ``TrainingArguments``. ``TrainerCallback`` has no
hook for an exception: a ``train()`` that raises is closed as failed by the trial's own hook for
uncaught exceptions (or, failing that, at interpreter exit), and its final push counts the
step the exception left; the group stays, as a crash's should.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Iterator
from time import perf_counter
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("trial_instrumentation.transformers needs transformers: "
                      "pip install 'trainwatch[transformers]'") from exc

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


class _StepTimer(StepClock):
    """Per-step state fed by the timed dataloader and the callback hooks."""

    def __init__(self, trial: Trial, samples: Samples) -> None:
        super().__init__(trial, samples)
        self.train_batch = trial.phase(names.TRAIN_BATCH)
        self.step_lr = trial.phase(names.STEP_LR_SCHEDULERS)
        self._open: Any = None  # the running callback-timed phase
        self._fetched_samples = 0  # samples fetched, not yet given to a step
        self._after_step: float | None = None  # on_step_end of the step, until it logs

    def fetching(self) -> float:
        now = perf_counter()
        if self._step_start is not None:
            self.end_step(now)  # the next step's first fetch ends the previous step
        self.fetch_begins(now)
        return now

    def fetched(self, started: float, batch: Any) -> None:
        self._fetched += perf_counter() - started
        self._fetched_samples += self.count(batch)

    def step_begins(self) -> None:
        now = perf_counter()
        self.end_step(now)
        self.begin_step(now, self._fetched_samples)
        self._fetched_samples = 0
        self._switch(self.train_batch)

    def _switch(self, phase: Any) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
        self._open = phase
        if phase is not None:
            phase.__enter__()

    def optimizer_stepped(self) -> None:
        if self._open is self.train_batch:
            self._switch(self.step_lr)

    def step_ends(self) -> None:
        self._switch(None)
        self._after_step = perf_counter()

    def logged(self) -> None:
        if self._after_step is not None:
            self.steps.observe(names.REDUCE_METRICS, perf_counter() - self._after_step)
            self._after_step = None

    def end_step(self, now: float | None = None) -> None:
        self._switch(None)
        self._after_step = None
        super().end_step(now)

    def end_epoch(self) -> None:
        """The epoch's last step ends; a fetch that found the data's end (an iterable dataset
        shorter than the Trainer's count of steps) begins no step: the next epoch's first step
        starts at its own first fetch, not before what comes between the epochs."""
        self.end_step()
        self._first_fetch = None


# The type of an object, settable even where the class shadows ``__class__`` with a read-only
# property (Accelerate's DataLoaderShard reports the wrapped loader's class through one).
_TYPE_SLOT = object.__dict__["__class__"]


def _timed_class(cls: type, timer: _StepTimer) -> type:
    """A subclass of the dataloader's class whose iterator times every ``next()``."""

    def __iter__(self: Any) -> Iterator[Any]:
        batches = cls.__iter__(self)  # type: ignore[attr-defined]
        while True:
            started = timer.fetching()
            try:
                batch = next(batches)
            except StopIteration:
                return
            timer.fetched(started, batch)
            yield batch

    return type(cls.__name__, (cls,), {"__iter__": __iter__, "_trainwatch_original": cls})


class TrainwatchCallback(TrainerCallback):  # type: ignore[misc]
    """Times every optimizer step of ``Trainer.train()`` and pushes it like :class:`Trial`.

    Arguments are :class:`~trial_instrumentation.Trial`'s (left out: ``TRAINWATCH_*``), less
    the ranks, which come from ``TrainingArguments``; ``samples`` is the batch size or a
    function of a batch (default: inferred). ``measure_limits``: seconds to measure the
    loader's and the step's limits for, each, when training starts
    (:func:`framework.start_measuring`: the training dataloader alone before the trial's clock
    (its life) starts, then the step over the Trainer's own steps less their fetches); the
    rates land in ``limits``. Bad settings raise ``ValueError`` here.
    """

    def __init__(self, experiment: str | None = None, trial: str | None = None,
                 pushgateway: str | None = None, *, samples: Samples = None,
                 measure_limits: float | None = None, **trial_args: Any) -> None:
        self._args = callback_settings(experiment, trial, pushgateway, trial_args,
                                       "TrainingArguments")
        self._samples = samples
        self._limit_seconds = limit_seconds(measure_limits)
        #: (loader, step) samples/s, once ``measure_limits`` measured them.
        self.limits: tuple[float, float] | None = None
        self.trial: Trial | None = None  # the running train()'s trial
        self._timer: _StepTimer | None = None
        self._loader: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(clean=False)  # a previous train() that raised
        settings = with_precision(self._args, flops.transformers_precision(args))
        self.trial = trial = Trial(**settings, rank=args.process_index,
                                   world_size=args.world_size,
                                   local_rank=args.local_process_index
                                   if args.world_size > 1 else None)
        loader = kwargs.get("train_dataloader")
        timer = _StepTimer(trial, self._samples) if trial.enabled else None
        if timer is not None and loader is not None and self._limit_seconds is not None:
            # Before the trial's clock starts and the loader is timed: no part of its life.
            # The loader Accelerate wraps is iterated apart from the Trainer's own iteration.
            start_measuring(trial, timer, self._limit_seconds, self._samples,
                            getattr(loader, "base_dataloader", loader),
                            lambda limits: setattr(self, "limits", limits))
        trial.start()
        # No exception hook in TrainerCallback: the trial's own (an uncaught exception's, or
        # SIGTERM's) or the interpreter's exit closes it, and its final push counts the open
        # step.
        atexit.register(self._finish, clean=False)
        if timer is None:
            return
        self._timer = timer
        trial.before_close(timer.end_step)
        trial.before_close(timer.finish_measuring)  # after the open step is counted
        if loader is None:
            log.warning("trainwatch: the Trainer gave no train_dataloader; dataloader_next and "
                        "samples are not measured")
            return
        try:
            _TYPE_SLOT.__set__(loader, _timed_class(type(loader), timer))
        except TypeError:  # a loader whose layout forbids it: time the rest all the same
            log.warning("trainwatch: cannot time %s; dataloader_next and samples are not "
                        "measured", type(loader).__name__, exc_info=True)
            return
        self._loader = loader

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._timer is not None:
            self._timer.step_begins()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._timer is not None:
            self._timer.optimizer_stepped()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._timer is not None:
            self._timer.step_ends()

    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._timer is not None:
            self._timer.logged()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._timer is not None:
            self._timer.end_epoch()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(clean=True)

    def _finish(self, clean: bool) -> None:
        atexit.unregister(self._finish)
        self._timer = None  # the trial's before-close hook ends its open step
        if self._loader is not None:
            _TYPE_SLOT.__set__(self._loader, self._loader._trainwatch_original)
            self._loader = None
        if self.trial is not None:
            self.trial.close(clean=clean)
            self.trial = None
