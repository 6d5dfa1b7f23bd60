"""What the Lightning and the Hugging Face callbacks share: their settings, checked once before
training, and the clock of a training step seen through a framework's hooks.

A step runs from its first fetch (several for gradient accumulation) to the start of the next
step's; what it waited for its batches goes to ``dataloader_next``, its samples are counted from
its batches. Each callback feeds the clock from its own framework's events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any

from trial_instrumentation import config as configuration
from trial_instrumentation.loader import batch_size_of
from trial_instrumentation.trial import Trial

log = logging.getLogger(__name__)
Samples = int | Callable[[Any], int] | None
_RANKS = {"rank", "world_size", "local_rank"}


def callback_settings(experiment: str | None, trial: str | None, pushgateway: str | None,
                      trial_args: dict[str, Any], ranks_from: str) -> dict[str, Any]:
    """A callback's :class:`Trial` arguments less the ranks (the framework gives them), checked
    now, not when training starts; ``ranks_from`` names what gives them, for the error."""
    given = sorted(_RANKS & trial_args.keys())
    if given:
        raise ValueError(f"TrainwatchCallback takes {given} from {ranks_from}; leave them out")
    settings = dict(experiment=experiment, trial=trial, pushgateway=pushgateway, **trial_args)
    # FLOPs without a precision: the framework's own precision setting gives it at setup.
    configuration.resolve(**with_precision(settings, "fp32"), rank=0, world_size=1)
    return settings


def limit_seconds(value: float | None) -> float | None:
    """A callback's ``measure_limits=``, checked when the callback is made."""
    if value is not None and (isinstance(value, bool) or not float(value) > 0):
        raise ValueError(f"argument measure_limits=: invalid value {value!r} (seconds to "
                         "measure each limit for, > 0; None: not measured)")
    return None if value is None else float(value)


def measure_loader_limit(trial: Trial, seconds: float, samples: Samples,
                         loader: Iterable[Any]) -> float | None:
    """The loader's limit over the trainer's own training ``loader`` for ``seconds``, published
    (:meth:`Trial.measure_loader_limit`); a failure is logged and training goes on."""
    try:
        return trial.measure_loader_limit(loader, seconds, samples)
    except Exception:  # a measurement must not cost the training run
        log.exception("trainwatch: measuring the loader's limit failed; training goes on "
                      "without it")
        return None


def start_measuring(trial: Trial, clock: StepClock, seconds: float, samples: Samples,
                    loader: Iterable[Any], done: Callable[[tuple[float, float]], None]) -> None:
    """A callback's ``measure_limits=``: the loader's limit now, over the trainer's own training
    ``loader`` alone (call it before ``trial.start()``: its seconds are no part of the trial's
    life); the step's over the loop's own steps (:class:`StepConsumption` on ``clock``), so
    it is the real step, the framework's own work in it. ``done`` gets (loader, step) samples/s
    once both are measured; each is published in the trial's group as it is. With several
    ranks the loop's steps hold the gradient exchange, which the single-rank limit (what
    scaling efficiency compares with) must not: the loader's limit only, said in one line."""
    loader_rate = measure_loader_limit(trial, seconds, samples, loader)
    if trial.config.world_size > 1:
        log.info("trainwatch: the step's limit is not measured under %d ranks: their steps "
                 "include the gradient exchange; measure_limits= in a one-rank run of the same "
                 "script gives the single-rank limit", trial.config.world_size)
        return

    def measured(step: float) -> None:
        trial.set_step_limit(step)
        log.info("trainwatch: the loader delivers %s samples/s alone (for %gs); the step "
                 "consumes %.0f samples/s (the loop's own steps, their fetches left out)",
                 "?" if loader_rate is None else f"{loader_rate:.0f}", seconds, step)
        if loader_rate is not None:
            done((loader_rate, step))

    clock.consumption = StepConsumption(seconds, measured)


class StepConsumption:
    """The step limit measured over the real loop: samples over the steps' time less their
    fetches (what ``train_batch`` and the step's other phases take, the framework's own work
    included), from the second step on, until ``seconds`` of it are counted (or the fit
    ends); ``publish`` gets the samples/s once."""

    def __init__(self, seconds: float, publish: Callable[[float], None]) -> None:
        self.seconds, self.publish = seconds, publish
        self.skipped = False  # the first step warms up (lazy init, caches): not counted
        self.busy = 0.0
        self.samples = 0
        self.done = False

    def add(self, step_seconds: float, fetch_seconds: float, samples: int) -> None:
        if self.done:
            return
        if not self.skipped:
            self.skipped = True
            return
        self.busy += max(step_seconds - fetch_seconds, 0.0)
        self.samples += samples
        if self.busy >= self.seconds:
            self.finish()

    def finish(self) -> None:
        """Publish what was counted (at the fit's end: over fewer seconds than asked)."""
        if self.done or self.busy <= 0 or self.samples <= 0:
            return
        self.done = True
        try:
            self.publish(self.samples / self.busy)
        except Exception:  # a measurement must not cost the training run
            log.exception("trainwatch: publishing the step limit failed")


def with_precision(settings: dict[str, Any], framework_precision: str | None) -> dict[str, Any]:
    """``settings`` with the framework's precision where the user gave ``flops_per_sample`` and
    no ``precision``."""
    if settings.get("flops_per_sample") is None or settings.get("precision") is not None:
        return settings
    return {**settings, "precision": framework_precision}


class StepClock:
    """A training step's start, fetch time and samples, handed to the trial's step recorder."""

    def __init__(self, trial: Trial, samples: Samples) -> None:
        self.trial = trial
        self.steps = trial.step_recorder()
        self.samples = samples
        self._fetched = 0.0  # fetch time not yet given to a step
        self._first_fetch: float | None = None  # start of the earliest such fetch
        self._step_start: float | None = None  # the running step's start
        self._step_samples = 0
        self._step_fetched = 0.0  # the running step's fetch time
        #: Set by a callback's ``measure_limits=``: the step limit over the real loop.
        self.consumption: StepConsumption | None = None

    def count(self, batch: Any) -> int:
        """The samples in ``batch``; 0 (logged) when the user's function fails."""
        try:
            return (self.samples if isinstance(self.samples, int)
                    else int((self.samples or batch_size_of)(batch)))
        except Exception:  # a user's samples function must not stop training
            log.exception("trainwatch: counting samples failed; counting 0 for this batch")
            return 0

    def fetch_begins(self, now: float) -> None:
        if self._first_fetch is None:
            self._first_fetch = now

    def begin_step(self, now: float, samples: int) -> None:
        """A step begins: it started at its first fetch (``now`` without one)."""
        self.steps.fetched(self._fetched)
        self._step_start = self._first_fetch if self._first_fetch is not None else now
        self._step_samples, self._step_fetched = samples, self._fetched
        self._first_fetch, self._fetched = None, 0.0

    def end_step(self, now: float | None = None) -> None:
        if self._step_start is not None:
            took = (now or perf_counter()) - self._step_start
            self.steps.stepped(took, self._step_samples)
            self._step_start = None
            if self.consumption is not None:
                self.consumption.add(took, self._step_fetched, self._step_samples)

    def finish_measuring(self) -> None:
        """A loop shorter than ``measure_limits``: publish the step limit over its steps."""
        if self.consumption is not None:
            self.consumption.finish()
