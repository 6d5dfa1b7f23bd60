"""PyTorch integration: CUDA timing modes. Imported only when torch is used (GPU identity:
:mod:`trial_instrumentation.torch_devices`).

* ``cuda_sync``: ``torch.cuda.synchronize()`` when a phase opens and before it closes, like
  Determined's ``sync_timings``: the phase gets the GPU time of its own kernels, and the
  training pipeline stalls at every phase boundary.
* ``cuda_events``: a CUDA event is recorded on the current stream when the phase opens and
  when it closes; a resolver thread waits for them with ``event.query()`` and observes
  ``start.elapsed_time(end)``. The training thread never synchronizes; the phase measures
  the GPU-side span between the two points of the stream.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING

import torch

from trial_instrumentation.timing import Histogram, Phase

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger(__name__)
MAX_PENDING = 10_000  # unresolved phases; beyond it, phases go untimed rather than grow memory


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


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
    """Turns recorded (start, end) event pairs into observations, off the training thread."""

    def __init__(self, poll_seconds: float = 0.002) -> None:
        self._pending: collections.deque[tuple[torch.cuda.Event, torch.cuda.Event, Histogram]] \
            = collections.deque()
        self._free: collections.deque[torch.cuda.Event] = collections.deque()
        self._poll = poll_seconds
        self._dropped = False
        self._failed = False  # a CUDA error while resolving: stop timing, never raise
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainwatch-cuda-events",
                                        daemon=True)
        self._thread.start()

    def event(self) -> torch.cuda.Event:
        try:
            return self._free.pop()  # deque pop/append are atomic: no lock on the hot path
        except IndexError:
            return torch.cuda.Event(enable_timing=True)

    def submit(self, start: torch.cuda.Event, end: torch.cuda.Event, histogram: Histogram) -> None:
        if self._failed:
            return
        if len(self._pending) >= MAX_PENDING:
            if not self._dropped:
                self._dropped = True
                log.warning("trainwatch: %d CUDA timings unresolved; dropping new ones",
                            MAX_PENDING)
            return
        self._pending.append((start, end, histogram))

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted pair is resolved (at exit); False after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            time.sleep(self._poll)
        return not self._pending

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                # Streams complete in order, so only the oldest pair needs asking.
                while self._pending and self._pending[0][1].query():
                    start, end, histogram = self._pending.popleft()
                    histogram.observe(start.elapsed_time(end) / 1000.0)  # ms -> s
                    self._free.extend((start, end))
                time.sleep(self._poll)
        except Exception:  # a CUDA error is sticky: every later query would fail the same way
            self._failed = True
            self._pending.clear()
            log.exception("trainwatch: resolving CUDA event timings failed; cuda_events phases "
                          "are no longer timed (training goes on)")


class EventPhase(Phase):
    """A phase timed by CUDA events on the current stream (``cuda_events`` mode)."""

    __slots__ = ("_events", "_resolver")

    def __init__(self, name: str, histogram: Histogram, resolver: EventResolver) -> None:
        super().__init__(name, histogram)
        self._resolver = resolver
        self._events: list[torch.cuda.Event] = []

    def __enter__(self) -> Self:
        start = self._resolver.event()
        start.record()
        self._events.append(start)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        end = self._resolver.event()
        end.record()
        self._resolver.submit(self._events.pop(), end, self.histogram)
