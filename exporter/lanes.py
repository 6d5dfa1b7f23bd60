"""Reads that may hang, run on one worker thread per device ("lane"), waited for with a deadline.

A GPU driver in a bad state can block an NVML call for minutes. Each GPU's reads therefore run
on that GPU's own lane: the scrape submits them all (so GPUs, and PCIe directions, are read
concurrently; NVML calls release the GIL) and waits until its deadline. A read still running
at the deadline is abandoned: the scrape goes on without it. Once an abandoned read has run
for ``STUCK_SECONDS`` (a hung driver, not a slow read) the lane refuses new reads until it
returns, so a hung driver holds one thread per lane, never a growing pile of threads or
queued work. A client that gives up early (a tiny scrape timeout) therefore abandons only its
own wait: a read that merely outlived it does not make the lane refuse everyone else.

>>> pool = LanePool("doc")
>>> job = pool.lane("gpu0").submit(lambda: 42)
>>> import time
>>> job.wait(time.monotonic() + 1)
42
"""

from __future__ import annotations

import _thread
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

# A lane's thread ends after this long without work (a registry that is dropped, a GPU that
# is gone) and starts again with the next read.
IDLE_SECONDS = 60.0
# An abandoned read still running after this long is a hung driver: NVML answers in
# milliseconds, and sampling PCIe takes 20 ms.
STUCK_SECONDS = 1.0


class ReadTimeout(Exception):
    """A read missed the scrape's deadline, or its lane is still stuck in an earlier read."""


class Done:
    """A job's done flag, set once by its lane: one lock, held until then. A
    ``threading.Event`` costs a Condition and, per wait, a waiter lock of its own; this is
    the part of a lane's hand-off that is ours, once per GPU and scrape. A wait longer than
    the platform allows (a scrape-timeout header of 1e300) waits as long as it does."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        self._lock.release()

    def is_set(self) -> bool:
        return not self._lock.locked()

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False if ``timeout`` seconds (None: no limit) passed first."""
        limit = -1 if timeout is None else min(max(timeout, 0.0), threading.TIMEOUT_MAX)
        if not self._lock.acquire(True, limit):
            return False
        self._lock.release()  # set stays set, for every other wait
        return True


class Job:
    """One read submitted to a lane; ``wait`` returns its result or raises its error."""

    __slots__ = ("_lane", "abandoned", "done", "error", "fn", "result")

    def __init__(self, lane: Lane, fn: Callable[[], Any]) -> None:
        self._lane = lane
        self.fn = fn
        self.done = Done()
        self.result: Any = None
        self.error: BaseException | None = None
        self.abandoned = False

    def wait(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> Any:
        """The read's result; ``ReadTimeout`` if it is not done by ``deadline``."""
        if not self.done.wait(max(0.0, deadline - clock())):
            self._lane.abandon(self)
            raise ReadTimeout(f"{self._lane.name}: no answer by the scrape's deadline")
        if self.error is not None:
            raise self.error
        return self.result

    def abandon(self) -> None:
        """Nobody waits for this read any more (``Lane.abandon``)."""
        self._lane.abandon(self)


class Lane:
    """One daemon thread running one lane's reads in order, started on first use."""

    def __init__(self, name: str, stuck_seconds: float = STUCK_SECONDS) -> None:
        self.name = name
        self.stuck_seconds = stuck_seconds
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running: Job | None = None
        self._started = 0.0  # when the running read started

    def submit(self, fn: Callable[[], Any]) -> Job:
        """Queue ``fn``; ``ReadTimeout`` at once while an abandoned read still runs here."""
        with self._lock:
            if self._stuck():
                # The same words every scrape, so the log says it once, not once a scrape.
                raise ReadTimeout(f"{self.name}: still stuck in a read that missed an earlier "
                                  "deadline; not asked again until it returns")
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"trainwatch-{self.name}",
                                                daemon=True)
                self._thread.start()
            job = Job(self, fn)
            self._queue.put(job)
            return job

    def abandon(self, job: Job) -> None:
        """The waiter gave up on ``job``: skip it if it has not started; if it is still running
        ``stuck_seconds`` after it started (the driver hangs), refuse new reads until it
        returns."""
        with self._lock:
            job.abandoned = True

    @property
    def stuck(self) -> bool:
        with self._lock:
            return self._stuck()

    def _stuck(self) -> bool:
        running = self._running
        return running is not None and running.abandoned and \
            time.monotonic() - self._started >= self.stuck_seconds

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # submit() queues under this lock: nothing slips in between
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            with self._lock:
                if job.abandoned:
                    job.done.set()
                    continue
                self._running, self._started = job, time.monotonic()
            try:
                job.result = job.fn()
            except BaseException as err:  # noqa: BLE001 -- handed to the waiter, who decides
                job.error = err
            with self._lock:
                self._running = None
            job.done.set()


class LanePool:
    """The lanes of one collector, by name (``gpu0``, ``gpu0-pcie-rx``), made on first use."""

    def __init__(self, prefix: str, stuck_seconds: float = STUCK_SECONDS) -> None:
        self._prefix, self._stuck_seconds = prefix, stuck_seconds
        self._lanes: dict[str, Lane] = {}
        self._lock = threading.Lock()

    def lane(self, name: str) -> Lane:
        with self._lock:
            found = self._lanes.get(name)
            if found is None:
                found = Lane(f"{self._prefix}-{name}", self._stuck_seconds)
                self._lanes[name] = found
            return found

    def stuck(self) -> list[str]:
        """Names of the lanes with a read stuck past an earlier deadline."""
        with self._lock:
            return [name for name, lane in self._lanes.items() if lane.stuck]
