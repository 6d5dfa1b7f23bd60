"""PyTorch integration: CUDA timing modes. Imported only when torch is used (GPU identity:
:mod:`trial_instrumentation.torch_devices`).

* ``cuda_sync``: ``torch.cuda.synchronize()`` when a phase opens and before it closes, like
  Determined's ``sync_timings``: the phase gets the GPU time of its own kernels, and the
  training pipeline stalls at every phase boundary.
* ``cuda_events``: a CUDA event is recorded on the current stream when the phase opens and
  when it closes; a resolver thread waits for them with ``event.query()`` and observes
  ``start.elapsed_time(end)``. The training thread never synchronizes; the phase measures
  the GPU-side span between the two points of the stream.

Kept cheap enough to leave on (docs/instrumentation.md has the trade-offs):

* Adjacent phases share a boundary: a phase that opens within ``SHARE_GAP`` seconds (host
  time) of the previous phase's close starts at that close's event instead of recording its
  own. Five back-to-back phases record six events, not ten. GPU work launched in that gap is
  counted in the phase that opens.
* An event is recorded on the current stream through a stream object made once per stream
  (:func:`recorder`), not through ``Event.record()``, whose ``torch.cuda.current_stream()``
  builds a new ``Stream`` on every call (CUDA's lazy init check, the device index, the
  constructor: several microseconds of Python, six times a step).
* Finished pairs are resolved on the training thread, every ``INLINE_BATCH`` pairs or
  ``POLL_SECONDS`` (the phase's close already read the clock), and at each push or scrape
  (``TrialState.resolve_pending``), not by a thread of their own: a resolver thread's
  ``query()`` and ``elapsed_time()`` calls take the GIL back from a training thread that
  hands it over at every kernel launch. On an H200, a launch-bound step (1.4 ms) ran +15.7%
  (another run +9.7%) slower with a resolver thread waking every 50 ms, +3.7% resolved
  inline (``benchmarks/cuda_events.py``).

Event lifetimes are decided on the training thread alone and reach the resolver in order
through the one FIFO: a resolved pair frees its start (a shared start's first pair was
resolved before it); an end is freed as the start of the pair that shared it, or by a
release entry when the next phase did not share it. No lock, no race on a reused event.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any

import torch

from trial_instrumentation.timing import Histogram, Phase

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger(__name__)
MAX_PENDING = 10_000  # unresolved phases; beyond it, phases go untimed rather than grow memory
POLL_SECONDS = 0.05  # the longest a finished pair waits for a later close to resolve it
INLINE_BATCH = 64  # pairs submitted between two inline resolutions
SHARE_GAP = 20e-6  # host seconds between a close and the next open that still share an event


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def recorder() -> Callable[[Any], None]:
    """``record(event)``: record ``event`` on the calling thread's current stream, as
    ``event.record()`` does, at the cost of two C calls and a comparison while the current
    stream stays the same. Its ``Stream`` is made by ``torch.cuda.current_stream()`` (which
    also initializes CUDA, on the device the script chose, at the first phase) and made again
    when the current device or stream changes (``torch.cuda.stream(s)``, ``set_device``).
    Without the private calls it needs (another torch), ``event.record()`` itself."""
    current = getattr(torch._C, "_cuda_getCurrentStream", None)
    device = getattr(torch._C, "_cuda_getDevice", None)
    base = getattr(torch._C, "_CudaEventBase", None)
    if current is None or device is None or base is None:
        return lambda event: event.record()
    record_on = base.record
    cached: tuple[Any, Any] = (None, None)  # (the stream's key, the Stream); one assignment

    def record(event: Any) -> None:
        nonlocal cached
        stream = cached[1]
        if stream is None or current(device()) != cached[0]:
            stream = torch.cuda.current_stream()  # CUDA initialized from here on
            cached = (current(device()), stream)
        record_on(event, stream)
    return record


class SyncPhase(Phase):
    """A phase that synchronizes the device at both ends (``cuda_sync`` mode)."""

    __slots__ = ()

    def __enter__(self) -> Self:
        torch.cuda.synchronize()
        super().__enter__()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        torch.cuda.synchronize()
        super().__exit__(exc_type, exc, tb)


class EventResolver:
    """Turns recorded (start, end) event pairs into observations, without waiting for the GPU.

    ``pending`` holds ``(start, end, histogram)`` pairs and ``(event, None, None)`` release
    entries, in the order the training thread made them (see the module docstring)."""

    def __init__(self, poll_seconds: float = POLL_SECONDS,
                 record: Callable[[Any], None] | None = None, inline: bool = True) -> None:
        #: Records an event on the current stream (training thread): :func:`recorder`'s.
        self.record = recorder() if record is None else record
        #: Resolve on the training thread at a phase's close, every ``INLINE_BATCH`` pairs or
        #: ``poll_seconds`` (read at each submit); False: on a thread waking every
        #: ``poll_seconds`` (the benchmark's comparison).
        self.inline = inline
        self._resolve_at = INLINE_BATCH
        self._resolve_by = perf_counter() + poll_seconds  # host time of the next timed one
        self._pending: collections.deque[tuple[Any, Any, Histogram | None]] = collections.deque()
        self._free: collections.deque[torch.cuda.Event] = collections.deque()
        self._poll = poll_seconds
        self._dropped = False
        self._failed = False  # a CUDA error while resolving: stop timing, never raise
        #: The last phase's end event while no later phase has claimed it, and when (host
        #: time) it was recorded; written by the training thread only.
        self.last_end: Any = None
        self.last_end_at = 0.0
        self._stopped = threading.Event()
        self._resolving = threading.Lock()  # inline: the training thread and close()'s drain
        self._thread = threading.Thread(target=self._run, name="trainwatch-cuda-events",
                                        daemon=True)
        if not inline:
            self._thread.start()

    def event(self) -> torch.cuda.Event:
        try:
            return self._free.pop()  # deque pop/append are atomic: no lock on the hot path
        except IndexError:
            return torch.cuda.Event(enable_timing=True)

    def start_event(self) -> Any:
        """The event a phase opening now starts at: the previous close's, when it is recent
        enough to share, else a new one recorded now (training thread)."""
        shared, self.last_end = self.last_end, None
        if shared is not None:
            if perf_counter() - self.last_end_at <= SHARE_GAP:
                return shared
            self.release(shared)
        start = self.event()
        self.record(start)
        return start

    def end_event(self) -> Any:
        """A new event recorded now, for a phase that closes (training thread)."""
        end = self.event()
        self.record(end)
        if self.last_end is not None:  # a nested phase's close that nobody claimed
            self.release(self.last_end)
        self.last_end, self.last_end_at = end, perf_counter()
        return end

    def release(self, event: Any) -> None:
        """``event`` will start no pair: free it once the pairs before it are resolved."""
        if not self._failed:
            self._pending.append((event, None, None))

    def submit(self, start: Any, end: Any, histogram: Histogram) -> None:
        if self._failed:
            return
        if len(self._pending) >= MAX_PENDING:
            if not self._dropped:
                self._dropped = True
                log.warning("trainwatch: %d CUDA timings unresolved; dropping new ones",
                            MAX_PENDING)
            return
        pending = self._pending
        pending.append((start, end, histogram))
        # end_event() read the clock just before: last_end_at is now.
        if self.inline and (len(pending) >= self._resolve_at
                            or self.last_end_at >= self._resolve_by):
            self.resolve_safely()
            self._resolve_at = len(pending) + INLINE_BATCH
            self._resolve_by = self.last_end_at + self._poll

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted pair is resolved (at exit); False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            if self.inline:
                self.resolve_safely()
            time.sleep(min(self._poll, 0.005))
        return not self._pending

    def stop(self) -> None:
        self._stopped.set()

    def resolve(self) -> None:
        """Observe every finished pair, oldest first (streams complete in order, so the first
        unfinished one ends the batch); free the events no later pair uses."""
        pending, free = self._pending, self._free
        while pending:
            start, end, histogram = pending[0]
            if histogram is None:  # a release entry
                pending.popleft()
                free.append(start)
                continue
            if not end.query():
                return
            pending.popleft()
            histogram.observe(start.elapsed_time(end) / 1000.0)  # ms -> s
            free.append(start)  # the end lives on: shared as a start, or released

    def resolve_safely(self) -> bool:
        """``resolve()``; a CUDA error stops timing (logged once) and never raises: False."""
        try:
            with self._resolving:
                self.resolve()
            return True
        except Exception:  # a CUDA error is sticky: every later query would fail the same way
            self._failed = True
            self._pending.clear()
            log.exception("trainwatch: resolving CUDA event timings failed; cuda_events phases "
                          "are no longer timed (training goes on)")
            return False

    def _run(self) -> None:
        while not self._stopped.is_set() and self.resolve_safely():
            self._stopped.wait(self._poll)  # stop() ends the wait at once

class EventPhase(Phase):
    """A phase timed by CUDA events on the current stream (``cuda_events`` mode)."""

    __slots__ = ("_resolver", "_starts")

    def __init__(self, name: str, histogram: Histogram, resolver: EventResolver) -> None:
        super().__init__(name, histogram)
        self._resolver = resolver
        self._starts: list[Any] = []  # a stack: the phase may be re-entered

    def __enter__(self) -> Self:
        self._starts.append(self._resolver.start_event())
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        resolver = self._resolver
        resolver.submit(self._starts.pop(), resolver.end_event(), self.histogram)
