"""Wrap a DataLoader (any iterable): time ``dataloader_next``, the whole step, count steps.

A step runs from the moment the loop asks for a batch to the moment it asks for the next
one, so ``dataloader_next`` is part of it and the dataloader's share of step time is
``phase_seconds_sum{phase="dataloader_next"} / step_seconds_sum``. A step is counted when it
ends: when the next batch is requested, when the data runs out, or when the loop is left by
``break`` or an exception (the generator is closed then).
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from time import perf_counter
from typing import Any, Generic, TypeVar

from trial_instrumentation.profiling import NEVER, StepBoundary
from trial_instrumentation.timing import Histogram

T = TypeVar("T")
log = logging.getLogger(__name__)


class Progress:
    """Samples in finished steps (a plain int: one writer, the training thread). Steps are
    not counted here: every finished step is one observation of the step histogram, whose
    count is ``trainwatch_trial_steps_total``."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples = 0


def batch_size_of(batch: Any) -> int:
    """Samples in a collated batch: the first dimension of its first tensor, or the length of
    its first field. Plain nested lists are ambiguous: pass ``samples=`` to ``Trial.loader``.

    >>> batch_size_of(([[1, 2], [3, 4], [5, 6]], [0, 1, 0]))   # (inputs, targets)
    3
    """
    shape = getattr(batch, "shape", None)
    if shape:  # a tensor or array with at least one dimension
        return int(shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        if hasattr(first, "shape") or isinstance(first, (list, tuple, Mapping)):
            return _field_size(first)  # fields: (inputs, targets), a dict per field, ...
        return len(batch)  # a list of scalar samples
    if isinstance(batch, Mapping) and batch:  # after list/tuple: an ABC check is slower
        return _field_size(next(iter(batch.values())))
    return 1


def _field_size(field: Any) -> int:
    """Samples in one field of a batch (a tensor, a list of samples, nested fields)."""
    if isinstance(field, (list, tuple)) and field and not hasattr(field[0], "shape"):
        return len(field)
    return batch_size_of(field)


class TimedLoader(Generic[T]):
    """Iterates ``iterable``; see the module docstring for what is timed and counted.

    >>> from trial_instrumentation.names import DEFAULT_BUCKETS
    >>> fetch, step, progress = Histogram(DEFAULT_BUCKETS), Histogram(DEFAULT_BUCKETS), Progress()
    >>> for batch in TimedLoader([[1, 2], [3, 4]], fetch, step, progress):
    ...     pass
    >>> sum(step.counts), progress.samples, sum(fetch.counts)
    (2, 4, 2)
    """

    def __init__(self, iterable: Iterable[T], fetch: Histogram, step: Histogram,
                 progress: Progress, samples: int | Callable[[T], int] | None = None,
                 on_start: Callable[[], None] | None = None,
                 boundary: StepBoundary = NEVER) -> None:
        self._iterable = iterable
        self._fetch = fetch
        self._step = step
        self._progress = progress
        self._samples = samples
        self._on_start = on_start
        self._boundary = boundary  # a profile request, acted on between steps

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def _count(self, batch: T) -> int:
        try:
            return int((self._samples or batch_size_of)(batch))  # type: ignore[operator]
        except Exception:  # a user's samples function must not stop training
            log.exception("trainwatch: counting samples failed; counting 0 for this batch")
            return 0

    def __iter__(self) -> Iterator[T]:
        if self._on_start is not None:
            self._on_start()
        # Locals, inlined Histogram.observe and a plain for loop: this
        # runs once per step, after the step's own work has pushed it out of the CPU caches.
        # Each histogram tries its previous bucket before bisecting, as Phase does.
        fetch, step, progress, count = self._fetch, self._step, self._progress, self._count
        boundary = self._boundary
        fetch_counts, fetch_bounds, fetch_edges = fetch.counts, fetch.bounds, fetch.edges
        step_counts, step_bounds, step_edges = step.counts, step.bounds, step.edges
        fetch_bucket = step_bucket = 0
        fixed = self._samples if isinstance(self._samples, int) else None
        requested = perf_counter()
        for batch in self._iterable:
            seconds = perf_counter() - requested
            if not fetch_edges[fetch_bucket] < seconds <= fetch_edges[fetch_bucket + 1]:
                fetch_bucket = bisect_left(fetch_bounds, seconds)
            fetch_counts[fetch_bucket] += 1
            fetch.sum += seconds
            batch_samples = fixed if fixed is not None else count(batch)
            try:
                yield batch
            except GeneratorExit:  # left by break or an exception: close the open step
                step.observe(perf_counter() - requested)
                progress.samples += batch_samples
                if boundary.armed:
                    boundary.step_ended()
                raise
            ended = perf_counter()
            seconds = ended - requested
            if not step_edges[step_bucket] < seconds <= step_edges[step_bucket + 1]:
                step_bucket = bisect_left(step_bounds, seconds)
            step_counts[step_bucket] += 1
            step.sum += seconds
            progress.samples += batch_samples
            requested = ended
            if boundary.armed:  # a profiler capture: its start, steps and write are not timed
                boundary.step_ended()
                requested = perf_counter()
