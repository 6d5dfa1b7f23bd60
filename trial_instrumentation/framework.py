"""What the Lightning and the Hugging Face callbacks share: their settings, checked once before
training, and the clock of a training step seen through a framework's hooks.

A step runs from its first fetch (several for gradient accumulation) to the start of the next
step's; what it waited for its batches goes to ``dataloader_next``, its samples are counted from
its batches. Each callback feeds the clock from its own framework's events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
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
        self._step_samples = samples
        self._first_fetch, self._fetched = None, 0.0

    def end_step(self, now: float | None = None) -> None:
        if self._step_start is not None:
            self.steps.stepped((now or perf_counter()) - self._step_start, self._step_samples)
            self._step_start = None
