"""A pipeline's two ceilings, measured with mock components (the seed lecture's method).

Mock the step to get the loader's limit: iterate the loader and discard every batch. Mock
the loader to get the step's limit: one batch, already on the device, trained on again and
again. Each runs for a bounded time and returns samples per second. The loader must deliver
more samples per second than the step consumes, or the accelerator waits for data.

>>> loader_limit([[0.0] * 8] * 50, seconds=0.05) > 0
True
>>> step_limit(lambda batch: sum(batch), [1.0] * 8, seconds=0.01) > 0
True
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any, TypeVar

from trial_instrumentation.loader import batch_size_of

T = TypeVar("T")
Samples = int | Callable[[Any], int] | None


def _counter(samples: Samples) -> Callable[[Any], int]:
    if isinstance(samples, int):
        return lambda batch: samples
    return samples or batch_size_of


def _check(seconds: float) -> None:
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")


def _synchronize() -> None:
    """Wait for queued GPU work, so the clock covers it (nothing to do without CUDA)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def loader_limit(loader: Iterable[T], seconds: float = 10.0, samples: Samples = None) -> float:
    """Samples per second ``loader`` delivers on its own, every batch discarded.

    The first batch is not counted (worker start-up is not the pipeline's rate); the loader
    is iterated again when it runs out, until ``seconds`` have passed. ``samples``: the batch
    size or a function of the batch (default: inferred, as in ``Trial.loader``).
    """
    _check(seconds)
    count, total, start, batches = _counter(samples), 0, None, 0
    now: float  # set with the first batch, before anything reads it
    while True:
        fetched = False
        for batch in loader:
            fetched = True
            batches += 1
            now = perf_counter()
            if start is None:  # the first batch: the clock starts once it is here
                start = now
                continue
            total += count(batch)
            if now - start >= seconds:
                return total / (now - start)
        if not fetched:
            if start is None:
                raise ValueError("the loader yielded no batch: nothing to measure")
            # An iterator (a generator), used up: it cannot be iterated again.
            raise ValueError(f"the loader ran out after {batches} batches in {now - start:g}s "
                             f"of the {seconds:g}s asked and yielded none when iterated again: "
                             "pass a loader that can be iterated again (a DataLoader, a list), "
                             "not an iterator, or fewer seconds")


def step_limit(step: Callable[[T], Any], batch: T, seconds: float = 10.0,
               samples: Samples = None, warmup: int = 1) -> float:
    """Samples per second ``step`` consumes when data costs nothing: ``step(batch)`` run
    again and again on one batch (put it on the device first) for ``seconds``, after
    ``warmup`` untimed runs. Queued CUDA work is waited for at both ends."""
    _check(seconds)
    for _ in range(warmup):
        step(batch)
    _synchronize()
    steps, start = 0, perf_counter()
    while True:
        step(batch)
        steps += 1
        if perf_counter() - start >= seconds:
            break
    _synchronize()
    return steps * _counter(samples)(batch) / (perf_counter() - start)
