"""The step clock of an unmodified script, fed by the DataLoader's ``next()`` and torch's global
optimizer step hooks (trial_instrumentation/auto/).

A step runs from its first fetch to the next step's first fetch, as with ``Trial.loader``; it
is one **optimizer step** with every batch fetched for it (gradient accumulation: several
fetches, one step). ``dataloader_next`` is the time in those fetches, ``train_batch`` the rest
of the step up to the end of its optimizer step. A second optimizer stepped in the same step
(a GAN's) is the same step; the same optimizer stepped again with no fetch between ends one step
and begins the next where it ended (a loop that feeds tensors without a DataLoader; its first
step begins when the trial does).

Until a first optimizer step is seen the fetches are kept; after ``UNDECIDED_FETCHES`` of them
without one (a custom loop without an optimizer, an evaluation script), or at close, each
fetched batch is counted as one step, and that is said once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

from trial_instrumentation.loader import batch_size_of
from trial_instrumentation.steps import StepRecorder

log = logging.getLogger(__name__)
UNDECIDED_FETCHES = 64  # fetches without an optimizer step before steps are counted per batch


def samples_of(batch: Any) -> int:
    """``batch_size_of(batch)``, the common ``(inputs, targets)`` tuple of tensors first."""
    if type(batch) is tuple or type(batch) is list:
        shape = getattr(batch[0], "shape", None) if batch else None
        if shape:
            return int(shape[0])
    return batch_size_of(batch)


class AutoSteps:
    """One writer: the training thread (the DataLoader's and the optimizer's caller)."""

    def __init__(self, recorder: StepRecorder, fetch: Callable[[float], None],
                 train_batch: Callable[[float], None]) -> None:
        self._rec = recorder  # steps and samples (the first step notes the GPUs, a profile...)
        self._fetch = fetch  # observes dataloader_next's seconds
        self._train_batch = train_batch  # observes train_batch's seconds
        self._last_end = perf_counter()  # the end of the last step counted (or the start)
        self.per_batch = False  # decided: no optimizer, one step per fetched batch
        self.optimizer_seen = False
        self._undecided: list[tuple[float, float, int]] | None = []  # (start, fetch s, samples)
        self._start: float | None = None  # the open step's first fetch (or optimizer pre-hook)
        self._fetched = 0.0
        self._samples = 0
        self._trained: float | None = None  # the end of the open step's (last) optimizer step
        self._stepped: set[int] = set()  # the optimizers stepped in the open step

    def fetched(self, started: float, ended: float, batch: Any) -> None:
        """A batch came out of a DataLoader's iterator."""
        if self._trained is not None or (self.per_batch and self._start is not None):
            self._record(started)
        if self._start is None:
            self._start = started
        samples = samples_of(batch)
        self._fetched += ended - started
        self._samples += samples
        if self._undecided is not None:
            self._undecided.append((started, ended - started, samples))
            if len(self._undecided) > UNDECIDED_FETCHES:
                self._count_per_batch(f"no optimizer step in the first {UNDECIDED_FETCHES} "
                                      "batches")

    def exhausted(self, ended: float) -> None:
        """The iterator ran out: the open step (trained, or a batch's) ends here."""
        if self._trained is not None or (self.per_batch and self._start is not None):
            self._record(ended)

    def optimizer_stepped(self, optimizer: object) -> None:
        """torch's global post-step hook: an optimizer finished its step."""
        now = perf_counter()
        if id(optimizer) in self._stepped:  # stepped again with no fetch between: a new step
            end = self._trained
            self._record(end)  # type: ignore[arg-type]
            self._start = end
        elif self._start is None:  # no fetch in this step: it began where the last one ended
            self._start = self._last_end
        self._trained = now
        self._stepped.add(id(optimizer))
        if self._undecided is not None:
            self._undecided = None  # the fetches so far are this first step's
            self.optimizer_seen = True

    def close(self) -> None:
        """At the trial's close: the open step counts if it trained (or, per batch, fetched)."""
        if self._undecided:
            self._count_per_batch("no optimizer step before the end")
        if self._trained is not None:
            self._record(self._trained)
        elif self.per_batch and self._start is not None:
            self._record(perf_counter())

    def _record(self, end: float) -> None:
        start = self._start if self._start is not None else end
        self._fetch(self._fetched)
        if self._trained is not None:
            self._train_batch(max(0.0, self._trained - start - self._fetched))
        self._rec.stepped(end - start, self._samples)
        self._last_end = end
        self._start, self._fetched, self._samples, self._trained = None, 0.0, 0, None
        self._stepped.clear()

    def _count_per_batch(self, why: str) -> None:
        undecided, self._undecided = self._undecided or [], None
        self.per_batch = True
        log.warning("trainwatch: %s: counting one step per fetched batch (train_batch is not "
                    "timed)", why)
        self._start, self._fetched, self._samples = None, 0.0, 0
        for (start, seconds, samples), after in zip(undecided,
                                                    [*(u[0] for u in undecided[1:]), None],
                                                    strict=True):
            if after is None:  # the last one stays open, as the loader's last batch does
                self._start, self._fetched, self._samples = start, seconds, samples
                break
            self._fetch(seconds)
            self._rec.stepped(after - start, samples)
