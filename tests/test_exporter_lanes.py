"""Lanes: a read past its deadline is abandoned, its lane refuses work until it returns, and an
idle lane's thread ends."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from exporter import lanes
from exporter.lanes import LanePool, ReadTimeout


def soon(seconds: float) -> float:
    return time.monotonic() + seconds


def test_results_and_errors_reach_the_waiter() -> None:
    lane = LanePool("t").lane("a")
    assert lane.submit(lambda: "ok").wait(soon(1)) == "ok"
    with pytest.raises(ZeroDivisionError):
        lane.submit(lambda: 1 / 0).wait(soon(1))


def test_a_stuck_read_is_left_behind_and_not_started_again() -> None:
    pool, gate, started = LanePool("t", stuck_seconds=0), threading.Event(), []
    lane = pool.lane("gpu0")

    def hang() -> str:
        started.append(1)
        gate.wait(30)
        return "late"

    with pytest.raises(ReadTimeout):
        lane.submit(hang).wait(soon(0.05))
    assert pool.stuck() == ["gpu0"]
    for _ in range(10):
        with pytest.raises(ReadTimeout, match="still stuck"):
            lane.submit(hang)
    assert len(started) == 1
    other = pool.lane("gpu1")  # another GPU is unaffected
    assert other.submit(lambda: 1).wait(soon(1)) == 1
    gate.set()  # the driver answers at last: the lane works again
    deadline = soon(5)
    while pool.stuck() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert lane.submit(lambda: "again").wait(soon(1)) == "again"


def test_a_read_abandoned_early_does_not_make_the_lane_refuse_others() -> None:
    """A client with a tiny deadline gives up on a read that is slow, not hung: the next
    scrape's read queues behind it and is served (issue 25)."""
    pool = LanePool("t")
    lane = pool.lane("gpu0")
    with pytest.raises(ReadTimeout):
        lane.submit(lambda: time.sleep(0.2)).wait(soon(0.001))
    assert pool.stuck() == []
    assert lane.submit(lambda: "served").wait(soon(5)) == "served"


def test_a_read_queued_behind_one_that_missed_its_deadline_is_skipped() -> None:
    lane, gate, ran = LanePool("t").lane("a"), threading.Event(), []
    slow = lane.submit(lambda: gate.wait(30))
    queued = lane.submit(lambda: ran.append(1))
    with pytest.raises(ReadTimeout):
        queued.wait(soon(0.02))  # gave up while still queued: never run
    gate.set()
    slow.wait(soon(5))
    queued.done.wait(5)
    assert ran == []


def test_an_idle_lane_ends_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "IDLE_SECONDS", 0.01)
    lane = LanePool("t").lane("idle")
    assert lane.submit(threading.current_thread).wait(soon(1)).name == "trainwatch-t-idle"
    deadline = soon(5)
    while any(t.name == "trainwatch-t-idle" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert lane.submit(lambda: "restarted").wait(soon(1)) == "restarted"


def test_a_deadline_further_than_a_lock_can_wait_still_waits_for_the_read() -> None:
    """A scrape-timeout header of 1e300 makes a deadline no lock can wait for; the read is
    waited for, not a 500 (``threading.Event.wait`` raised OverflowError)."""
    lane, gate = LanePool("t").lane("a"), threading.Event()
    job = lane.submit(lambda: gate.wait(0.05) or "late")
    assert job.wait(time.monotonic() + 1e300) == "late"


def test_a_done_flag_is_unset_until_set_and_then_stays_set_for_every_wait() -> None:
    done = lanes.Done()
    assert not done.is_set()
    started = time.monotonic()
    assert done.wait(0) is False and done.wait(-3.5) is False  # a past deadline: no wait
    assert time.monotonic() - started < 0.5
    done.set()
    assert done.is_set()
    assert done.wait(0) is True and done.wait(None) is True and done.wait(0.01) is True
    assert done.is_set()


def test_an_unset_flag_waits_about_its_timeout() -> None:
    done = lanes.Done()
    started = time.monotonic()
    assert done.wait(0.03) is False
    assert 0.02 <= time.monotonic() - started < 0.5


def test_a_deadline_already_past_times_out_at_once_naming_the_lane() -> None:
    lane, gate = LanePool("pool").lane("gpu3"), threading.Event()
    job = lane.submit(lambda: gate.wait(30))
    started = time.monotonic()
    with pytest.raises(ReadTimeout, match=r"^pool-gpu3: no answer by the scrape's deadline$"):
        job.wait(100.0, clock=lambda: 107.25)
    assert time.monotonic() - started < 0.5
    assert job.abandoned
    gate.set()


def test_the_wait_is_measured_on_the_clock_it_is_given() -> None:
    lane = LanePool("t").lane("a")
    job = lane.submit(lambda: time.sleep(0.05) or "answered")
    # The deadline is 2 s after this clock's now: long enough for the read, whatever the
    # monotonic clock reads.
    assert job.wait(1002.0, clock=lambda: 1000.0) == "answered"
    assert not job.abandoned


def test_abandon_marks_the_job_and_a_queued_one_is_then_skipped() -> None:
    lane, gate, ran = LanePool("t").lane("a"), threading.Event(), []
    slow = lane.submit(lambda: gate.wait(30))
    queued = lane.submit(lambda: ran.append(1))
    assert not queued.abandoned
    queued.abandon()
    assert queued.abandoned and not slow.abandoned
    gate.set()
    assert slow.wait(soon(5)) is True
    assert queued.done.wait(5)
    assert ran == [] and queued.result is None and queued.error is None
    assert lane.submit(lambda: "next").wait(soon(2)) == "next"  # the lane goes on after a skip


def test_a_running_read_nobody_gave_up_on_is_never_stuck() -> None:
    pool, gate, running = LanePool("t", stuck_seconds=0), threading.Event(), threading.Event()
    lane = pool.lane("gpu0")
    job = lane.submit(lambda: running.set() or gate.wait(30))
    assert running.wait(5)
    time.sleep(0.01)
    assert pool.stuck() == [] and not lane.stuck
    gate.set()
    assert job.wait(soon(5)) is True


def test_an_abandoned_read_is_stuck_only_once_it_ran_stuck_seconds() -> None:
    pool, gate, running = LanePool("t", stuck_seconds=0.3), threading.Event(), threading.Event()
    lane = pool.lane("gpu0")
    job = lane.submit(lambda: running.set() or gate.wait(30))
    assert running.wait(5)
    with pytest.raises(ReadTimeout):
        job.wait(soon(0.01))
    assert pool.stuck() == [] and not lane.stuck  # abandoned, but not yet running 0.3 s
    assert lane.submit(lambda: "queued").abandoned is False  # still accepted
    deadline = soon(5)
    while not lane.stuck:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert pool.stuck() == ["gpu0"]
    gate.set()


def test_a_finished_read_leaves_the_lane_not_running() -> None:
    pool = LanePool("t", stuck_seconds=0)
    lane = pool.lane("a")
    job = lane.submit(lambda: 7)
    assert job.wait(soon(1)) == 7
    job.abandon()  # given up on after it finished: it no longer runs, so nothing is stuck
    assert not lane.stuck and pool.stuck() == []


def test_a_failed_read_also_leaves_the_lane_not_running() -> None:
    pool = LanePool("t", stuck_seconds=0)
    lane = pool.lane("a")
    job = lane.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        job.wait(soon(1))
    job.abandon()
    assert not lane.stuck
    assert lane.submit(lambda: "next").wait(soon(1)) == "next"


def test_a_pool_makes_each_lane_once_with_its_prefix_and_stuck_seconds() -> None:
    pool = LanePool("gpu", stuck_seconds=2.5)
    first = pool.lane("0")
    assert pool.lane("0") is first and pool.lane("1") is not first
    assert first.name == "gpu-0" and first.stuck_seconds == 2.5
    assert lanes.Lane("x").stuck_seconds == lanes.STUCK_SECONDS == 1.0
    assert LanePool("y").lane("z").stuck_seconds == 1.0


def test_reads_on_one_lane_run_in_order_on_one_thread() -> None:
    lane, seen = LanePool("t").lane("order"), []
    jobs = [lane.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
            for i in range(5)]
    for job in jobs:
        job.wait(soon(5))
    assert seen == [(i, "trainwatch-t-order") for i in range(5)]


def test_a_lane_thread_is_a_daemon() -> None:
    lane = LanePool("t").lane("d")
    assert lane.submit(lambda: threading.current_thread().daemon).wait(soon(1)) is True


def test_an_idle_lane_with_queued_work_keeps_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The idle check sees a read queued in between: it runs it instead of ending."""
    monkeypatch.setattr(lanes, "IDLE_SECONDS", 0.01)
    lane = LanePool("t").lane("busy")
    results = [lane.submit(lambda i=i: i * 3).wait(soon(2)) for i in range(4)]
    time.sleep(0.03)
    results.append(lane.submit(lambda: 12).wait(soon(2)))
    assert results == [0, 3, 6, 9, 12]


def test_a_wait_without_a_timeout_waits_until_set() -> None:
    done = lanes.Done()
    threading.Timer(0.03, done.set).start()
    started = time.monotonic()
    assert done.wait(None) is True
    assert time.monotonic() - started >= 0.02


class RecordingLock:
    """A lock that records how it was asked to wait, and says it was acquired."""

    def __init__(self) -> None:
        self.asked: list[tuple[bool, float]] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.asked.append((blocking, timeout))
        return True

    def release(self) -> None:
        pass


def test_a_wait_asks_the_lock_for_no_limit_or_a_bounded_non_negative_one() -> None:
    done = lanes.Done()
    recorder = RecordingLock()
    done._lock = recorder  # type: ignore[assignment]
    for timeout in (None, 2.5, -7.0, 1e300):
        assert done.wait(timeout) is True
    assert recorder.asked == [(True, -1), (True, 2.5), (True, 0.0),
                              (True, threading.TIMEOUT_MAX)]


class LateQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """A queue whose first wait times out just as a read is queued: the idle check then finds
    it waiting."""

    def __init__(self) -> None:
        self.timed_out = False

    def get(self, block: bool = True, timeout: float | None = None) -> object:
        if not self.timed_out:
            self.timed_out = True
            raise queue.Empty
        return super().get(block, timeout)


def test_a_read_queued_as_the_idle_wait_ends_is_still_run() -> None:
    lane = LanePool("t").lane("late")
    lane._queue = LateQueue()
    assert lane.submit(lambda: "run").wait(soon(2)) == "run"
    assert lane._queue.timed_out


class Clock:
    """lanes' ``time`` module, read at the test's hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_stuck_is_counted_from_the_reads_start_on_the_lanes_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(100.0)
    monkeypatch.setattr(lanes, "time", clock)
    lane, gate, running = lanes.Lane("c", stuck_seconds=100.0), threading.Event(), threading.Event()
    job = lane.submit(lambda: running.set() or gate.wait(30))
    assert running.wait(5)
    job.abandon()
    clock.now = 199.5
    assert not lane.stuck
    clock.now = 200.0  # exactly stuck_seconds after the start
    assert lane.stuck
    clock.now = 250.0
    assert lane.stuck
    gate.set()
