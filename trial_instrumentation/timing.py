"""The hot path: lock-free histograms and the phase timer.

A phase is timed by a clock read on enter, a clock read on exit, a bucket index and an
increment in a plain list: no lock, no label lookup, no prometheus_client object and no
allocation per phase. The hot path runs after a step's own work has pushed it out of the CPU
caches, where every bytecode and call counts several times its tight-loop cost: the start
time lives in a slot (a list only on re-entry) and the bucket of the previous observation is
tried before a ``bisect``, since a phase tends to last about as long as it did last step. The pusher thread copies ``counts``
and reads ``sum`` at push time; the copy is one C call under the GIL, but an observation
can land between the copy and the read, so a push may show ``sum`` one observation ahead
of ``count``. The next push corrects it, and rates over minutes do not notice.

Each histogram has a single writer: the training thread (or, in ``cuda_events`` mode, the
thread holding the event resolver's lock: the training thread at a phase's close, or the one
collecting for a push or a scrape). Time a phase from one thread only.
"""

from __future__ import annotations

import functools
import itertools
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing import Self

F = TypeVar("F", bound=Callable[..., Any])


def validate_buckets(buckets: Iterable[float], what: str = "buckets") -> tuple[float, ...]:
    """Bucket upper bounds as a tuple; ``ValueError`` naming ``what`` unless finite, > 0, rising.

    >>> validate_buckets([0.1, 1])
    (0.1, 1.0)
    """
    try:
        bounds = tuple(float(b) for b in buckets)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a sequence of numbers, got {buckets!r}") from None
    if not bounds:
        raise ValueError(f"{what} must not be empty")
    if any(not math.isfinite(b) or b <= 0 for b in bounds):
        raise ValueError(f"{what} must be finite and > 0 (+Inf is implied), got {bounds!r}")
    if any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"{what} must be strictly increasing, got {bounds!r}")
    return bounds


class Histogram:
    """Bucket counts (not cumulative; the last one is +Inf) and a sum, for one series.

    >>> h = Histogram((0.5, 1.0))
    >>> h.observe(0.5); h.observe(2.0)
    >>> h.snapshot()
    ([1, 0, 1], 2.5)
    """

    __slots__ = ("bounds", "counts", "edges", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        #: Bucket ``k`` holds ``edges[k] < seconds <= edges[k + 1]``: the bounds between -Inf
        #: and +Inf, for writers that try a remembered bucket before bisecting.
        self.edges = (-math.inf, *bounds, math.inf)

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bucket (Prometheus `le`).
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> tuple[list[int], float]:
        """A copy of the counts and the sum, for the pusher thread (see the module note)."""
        return list(self.counts), self.sum


class Phase:
    """Times one named phase into its histogram; a ``with`` block or a decorator, re-entrant.

    Nested or recursive use of the same phase observes each level separately.

    >>> p = Phase("train_batch", Histogram((0.001, 1.0)))
    >>> with p:
    ...     pass
    >>> @p
    ... def step() -> int:
    ...     return 1
    >>> step(), sum(p.histogram.counts)
    (1, 2)
    """

    __slots__ = ("_bounds", "_counts", "_edges", "_last", "_outer", "_start", "histogram",
                 "name")

    def __init__(self, name: str, histogram: Histogram) -> None:
        self.name = name
        self.histogram = histogram
        self._start: float | None = None  # the innermost open level's start; None: not open
        self._outer: list[float] = []  # starts of the enclosing open levels (re-entry only)
        self._last = 0  # the bucket of the previous observation, tried first
        # Aliases so __exit__ skips one attribute hop per access.
        self._bounds = histogram.bounds
        self._counts = histogram.counts
        self._edges = histogram.edges

    def __enter__(self) -> Self:
        if self._start is not None:  # re-entered (recursion): keep the open level's start
            self._outer.append(self._start)
        self._start = perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        seconds = perf_counter() - self._start  # type: ignore[operator]
        self._start = self._outer.pop() if self._outer else None
        bucket = self._last
        if not self._edges[bucket] < seconds <= self._edges[bucket + 1]:
            # bisect_left: a value equal to a bound belongs to that bucket (Prometheus `le`).
            self._last = bucket = bisect_left(self._bounds, seconds)
        self._counts[bucket] += 1
        self.histogram.sum += seconds

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)
        return timed  # type: ignore[return-value]


class NoopPhase:
    """The unconfigured trial's phase: same API as :class:`Phase`, does nothing."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None

    def __call__(self, fn: F) -> F:
        return fn
