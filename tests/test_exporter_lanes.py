"""Lanes: a read past its deadline is abandoned, its lane refuses work until it returns, and an
idle lane's thread ends."""

from __future__ import annotations

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
