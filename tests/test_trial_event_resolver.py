"""The cuda_events resolver with stand-in events: its bookkeeping needs no GPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from itertools import pairwise

import pytest

from benchmarks.cpu import spin
from benchmarks.stack import wait_until
from trial_instrumentation.names import DEFAULT_BUCKETS
from trial_instrumentation.timing import Histogram

pytest.importorskip("torch")
from trial_instrumentation import torch_timing  # after the skip: needs torch
from trial_instrumentation.torch_timing import (  # after the skip: needs torch
    SHARE_GAP,
    EventPhase,
    EventResolver,
)


class FakeEvent:
    """A recorded CUDA event: done or not, ``ms`` after its pair's start, or broken."""

    def __init__(self, ms: float = 0.0, done: bool = True,
                 error: Exception | None = None) -> None:
        self.ms, self.done, self.error = ms, done, error

    def query(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.done

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.ms - self.ms


@pytest.fixture
def resolver() -> Iterator[EventResolver]:
    """The resolver on a thread of its own (the benchmark's comparison; errors alike)."""
    r = EventResolver(poll_seconds=0.001, inline=False)
    yield r
    r.stop()


def test_pairs_become_observations_in_seconds(resolver: EventResolver) -> None:
    histogram = Histogram(DEFAULT_BUCKETS)
    for ms in (2.0, 40.0):
        resolver.submit(FakeEvent(), FakeEvent(ms), histogram)  # type: ignore[arg-type]
    wait_until(lambda: sum(histogram.counts) == 2, timeout=5, what="both pairs resolved")
    assert histogram.sum == pytest.approx(0.042)
    assert resolver.drain(timeout=1)


def test_a_cuda_error_stops_timing_without_raising_or_hanging_exit(
        resolver: EventResolver, caplog: pytest.LogCaptureFixture) -> None:
    histogram = Histogram(DEFAULT_BUCKETS)
    broken = FakeEvent(error=RuntimeError("CUDA error: an illegal memory access"))
    resolver.submit(FakeEvent(), broken, histogram)  # type: ignore[arg-type]
    resolver.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation.torch_timing"):
        wait_until(lambda: caplog.records, timeout=5, what="the resolver's error log")
    assert "no longer timed" in caplog.text and "illegal memory access" in caplog.text
    started = time.monotonic()
    assert resolver.drain(timeout=5)  # nothing left to wait for: exit is not held up
    assert time.monotonic() - started < 1
    resolver.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert resolver.drain(timeout=0.01) and sum(histogram.counts) == 0
    assert len(caplog.records) == 1


class RecordingEvent:
    """A stand-in CUDA event that a GPU completes at once: ``record()`` stamps the host clock,
    and appends the stamp to ``stamps``, the resolver's log of every record() call."""

    def __init__(self, stamps: list[float]) -> None:
        self.ms = -1.0
        self._stamps = stamps

    def record(self) -> None:
        self.ms = time.perf_counter() * 1000
        self._stamps.append(self.ms)

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: RecordingEvent) -> float:
        return end.ms - self.ms


class StandInResolver(EventResolver):
    """The real resolver with stand-in events, counting the ones it had to create."""

    def __init__(self) -> None:
        self.created: list[RecordingEvent] = []
        self.stamps: list[float] = []  # every record(), in order
        super().__init__(poll_seconds=0.001, record=lambda event: event.record())

    def event(self) -> RecordingEvent:  # type: ignore[override]
        try:
            return self._free.pop()  # type: ignore[return-value]
        except IndexError:
            self.created.append(RecordingEvent(self.stamps))
            return self.created[-1]


@pytest.fixture
def stand_in() -> Iterator[StandInResolver]:
    r = StandInResolver()
    yield r
    r.stop()


def records(resolver: StandInResolver, work: Callable[[], None]) -> list[float]:
    """The stamps of the events ``work`` recorded, in order. Counted as record() calls, not as
    stamped event objects: the resolver may free a resolved pair's event during ``work`` (a
    slow step on a loaded machine) and the next phase reuse it, stamping one object twice."""
    before = len(resolver.stamps)
    work()
    return resolver.stamps[before:]


def test_adjacent_phases_share_their_boundary_events(stand_in: StandInResolver,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Back to back means within SHARE_GAP (20 us) of host time, which a loaded machine's
    # scheduler can outlast between two `with` blocks (7 events, seen in a loaded fresh-clone
    # run): here any gap under a second is adjacent, so the sharing itself is what is tested.
    monkeypatch.setattr(torch_timing, "SHARE_GAP", 1.0)
    histograms = [Histogram(DEFAULT_BUCKETS) for _ in range(5)]
    phases = [EventPhase(f"p{i}", h, stand_in) for i, h in enumerate(histograms)]

    def step() -> None:
        for phase in phases:
            with phase:
                spin(0.0002)

    stamps = records(stand_in, step)
    assert len(stamps) == 6  # one start, five ends: not ten events
    assert stand_in.drain(timeout=5)
    spans = [h.sum for h in histograms]
    assert all(s >= 0.0002 for s in spans), spans
    # Shared boundaries: each phase runs from the event before it to its own end event, so the
    # phases tile the span between the first and the last event. Read from the stamps, not
    # against a time bound that a loaded machine's scheduler can outlast.
    assert spans == pytest.approx([(b - a) / 1000 for a, b in pairwise(stamps)], abs=1e-9)


def test_a_gap_between_phases_gets_its_own_events_and_is_in_neither(
        stand_in: StandInResolver) -> None:
    a, b = Histogram(DEFAULT_BUCKETS), Histogram(DEFAULT_BUCKETS)

    def step() -> None:
        with EventPhase("a", a, stand_in):
            spin(0.0002)
        spin(SHARE_GAP * 50)  # host work between the phases: not shared
        # As when a push's collection resolves a's pair before b opens: b reuses its freed
        # start event, which must still count as an event of its own.
        assert stand_in.resolve_safely() and sum(a.counts) == 1
        with EventPhase("b", b, stand_in):
            spin(0.0002)

    stamps = records(stand_in, step)
    assert len(stamps) == 4
    assert stand_in.drain(timeout=5)
    a_start, a_end, b_start, b_end = stamps
    assert (b_start - a_end) / 1000 >= SHARE_GAP * 50  # the gap lies between the events
    # Each phase spans its own two events, not the gap: read from the stamps, not against a
    # time bound, since a loaded machine can preempt the 0.2 ms spin itself (2.4 ms, seen in a
    # loaded fresh-clone run).
    assert a.sum == pytest.approx((a_end - a_start) / 1000, abs=1e-9)
    assert b.sum == pytest.approx((b_end - b_start) / 1000, abs=1e-9)


def test_every_event_returns_to_the_pool(stand_in: StandInResolver) -> None:
    histogram = Histogram(DEFAULT_BUCKETS)
    outer, inner = EventPhase("outer", histogram, stand_in), EventPhase("in", histogram, stand_in)
    for _ in range(50):  # nested, re-entered, adjacent and separated phases
        with outer:
            with inner, inner:
                pass
            with inner:
                pass
        time.sleep(0.002)  # the next close is past poll_seconds: it resolves and frees events
    assert stand_in.drain(timeout=5)
    assert sum(histogram.counts) == 50 * 4
    # Reused, not leaked: a step records 7 events, yet a few steps' worth served all 50 (the
    # resolver may lag on a loaded machine), and all but the last close (kept for a phase
    # that may share it) are back in the pool.
    assert len(stand_in.created) <= 7 * 10
    assert len(stand_in._free) == len(stand_in.created) - 1


class StreamCalls:
    """torch's private CUDA calls the recorder uses, over a current (device, stream) the test
    sets; counts the Streams made."""

    def __init__(self) -> None:
        self.device, self.stream_id, self.made = 0, 7, 0
        self.recorded: list[tuple[object, object]] = []

    def get_device(self) -> int:
        return self.device

    def get_stream(self, device: int) -> tuple[int, int, int]:
        assert device == self.device
        return (self.stream_id, device, 1)

    def current_stream(self) -> tuple[str, int, int]:
        self.made += 1
        return ("stream", self.device, self.stream_id)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> StreamCalls:
    """torch's private CUDA calls and ``current_stream`` replaced by a StreamCalls."""
    import torch
    calls = StreamCalls()

    class Base:
        @staticmethod
        def record(event: object, stream: object) -> None:
            calls.recorded.append((event, stream))

    monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", calls.get_stream, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", calls.get_device, raising=False)
    monkeypatch.setattr(torch._C, "_CudaEventBase", Base)
    monkeypatch.setattr(torch.cuda, "current_stream", calls.current_stream)
    return calls


def test_the_recorder_records_on_the_current_stream_making_a_stream_only_when_it_changes(
        calls: StreamCalls) -> None:
    record = torch_timing.recorder()
    assert calls.made == 0  # nothing touches CUDA before the first phase records
    for event in "ab":
        record(event)
    assert calls.made == 1 and calls.recorded == [("a", ("stream", 0, 7)), ("b", ("stream", 0, 7))]
    calls.stream_id = 9  # `with torch.cuda.stream(side):`
    record("c")
    calls.device = 1  # torch.cuda.set_device(1): same stream id, another device
    record("d")
    record("e")
    assert calls.made == 3
    assert calls.recorded[2:] == [("c", ("stream", 0, 9)), ("d", ("stream", 1, 9)),
                                  ("e", ("stream", 1, 9))]


def test_without_torchs_private_calls_the_recorder_is_the_events_own_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    monkeypatch.delattr(torch._C, "_cuda_getCurrentStream", raising=False)
    stamps: list[float] = []
    event = RecordingEvent(stamps)
    torch_timing.recorder()(event)
    assert stamps == [event.ms] and event.ms > 0


def test_inline_resolution_observes_every_batch_and_at_drain_with_no_thread() -> None:
    r = EventResolver(inline=True)
    assert not r._thread.is_alive()
    histogram, batch = Histogram(DEFAULT_BUCKETS), torch_timing.INLINE_BATCH
    for _ in range(batch - 1):
        r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 0  # not yet a batch: nothing resolved on the hot path
    r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == batch
    r.submit(FakeEvent(), FakeEvent(2.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == batch
    assert r.drain(timeout=1)
    assert sum(histogram.counts) == batch + 1
    assert histogram.sum == pytest.approx(batch * 0.001 + 0.002)


def test_inline_resolution_waits_behind_an_unfinished_pair_and_a_cuda_error_never_raises(
        caplog: pytest.LogCaptureFixture) -> None:
    r = EventResolver(inline=True)
    histogram, batch = Histogram(DEFAULT_BUCKETS), torch_timing.INLINE_BATCH
    running = FakeEvent(5.0, done=False)
    r.submit(FakeEvent(), running, histogram)  # type: ignore[arg-type]
    for _ in range(batch - 1):
        r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 0  # streams complete in order: nothing after it yet
    assert not r.drain(timeout=0.02)
    running.done = True
    assert r.drain(timeout=1) and sum(histogram.counts) == batch
    broken = FakeEvent(error=RuntimeError("CUDA error: an illegal memory access"))
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation.torch_timing"):
        r.submit(FakeEvent(), broken, histogram)  # type: ignore[arg-type]
        for _ in range(2 * batch):  # the batch that meets the error, and after it
            r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == batch and len(caplog.records) == 1
    assert "no longer timed" in caplog.text and r.drain(timeout=0.01)


def test_inline_resolution_also_follows_the_clock_so_a_slow_loop_is_not_held_back() -> None:
    r = EventResolver(poll_seconds=0.05)  # inline, as a Trial makes it
    histogram = Histogram(DEFAULT_BUCKETS)
    r.submit(FakeEvent(), FakeEvent(3.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 0  # one pair, and no close 50 ms later yet
    r.last_end_at = time.perf_counter() + 0.06  # what end_event() notes at a close 60 ms on
    r.submit(FakeEvent(), FakeEvent(4.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 2 and histogram.sum == pytest.approx(0.007)
    r.submit(FakeEvent(), FakeEvent(5.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 2  # the next one is 50 ms after that close


def test_a_push_or_scrape_resolves_the_pairs_a_slow_loop_left() -> None:
    from prometheus_client import CollectorRegistry

    from trial_instrumentation.collector import TrialCollector, TrialState
    state = TrialState(DEFAULT_BUCKETS, {"nodename": "n", "pid": "1", "world_size": "1"})
    r = EventResolver(poll_seconds=3600.0)
    r.submit(FakeEvent(), FakeEvent(2.0), state.phase_histogram("train_batch"))  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(TrialCollector(state))
    count = ("trainwatch_trial_phase_seconds_count", {"phase": "train_batch"})
    assert registry.get_sample_value(*count) == 0  # no resolver attached: still pending
    state.resolve_pending = r.resolve_safely
    assert registry.get_sample_value(*count) == 1
    assert registry.get_sample_value("trainwatch_trial_phase_seconds_sum",
                                     {"phase": "train_batch"}) == pytest.approx(0.002)


class Clock:
    """torch_timing's host clock, set by the test."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_first_pair_waits_its_poll_interval_before_the_clock_resolves_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(torch_timing, "perf_counter", clock)
    r = EventResolver(poll_seconds=0.05)
    histogram = Histogram(DEFAULT_BUCKETS)
    r.last_end_at = clock.now + 0.049  # a close 49 ms after the resolver was made
    r.submit(FakeEvent(), FakeEvent(3.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 0
    r.last_end_at = clock.now + 0.05  # 50 ms: due
    r.submit(FakeEvent(), FakeEvent(4.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 2


def test_a_close_shares_its_event_with_an_open_within_the_share_gap_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(torch_timing, "perf_counter", clock)
    r = EventResolver(record=lambda event: None)
    made: list[object] = []
    monkeypatch.setattr(r, "event", lambda: made.append(object()) or made[-1])
    end = r.end_event()  # stamped at 1,000 s
    clock.now += 18e-6  # under the 20 us share gap (host time, not a ratio of SHARE_GAP)
    assert r.start_event() is end and r.last_end is None
    end = r.end_event()
    clock.now += 22e-6  # over it: its own event, the close released
    start = r.start_event()
    assert start is not end and r._pending[-1] == (end, None, None)
    end = r.end_event()
    clock.now += 5.0  # far apart (a ratio of the clocks would call this close)
    assert r.start_event() is not end


def test_the_recorder_makes_a_stream_again_for_any_other_stream_not_only_a_later_one(
        calls: StreamCalls) -> None:
    record = torch_timing.recorder()
    calls.stream_id = 9
    record("a")
    calls.stream_id = 3  # back to a lower-numbered stream
    record("b")
    assert calls.made == 2 and calls.recorded == [("a", ("stream", 0, 9)),
                                                  ("b", ("stream", 0, 3))]


@pytest.mark.parametrize("missing", ["_cuda_getCurrentStream", "_cuda_getDevice",
                                     "_CudaEventBase"])
def test_any_one_private_call_missing_falls_back_to_the_events_own_record(
        monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    import torch
    calls = StreamCalls()
    for name, value in (("_cuda_getCurrentStream", calls.get_stream),
                        ("_cuda_getDevice", calls.get_device), ("_CudaEventBase", object)):
        monkeypatch.setattr(torch._C, name, value, raising=False)
    monkeypatch.delattr(torch._C, missing)
    stamps: list[float] = []
    event = RecordingEvent(stamps)
    torch_timing.recorder()(event)
    assert stamps == [event.ms] and calls.made == 0


def test_past_the_bound_new_pairs_are_dropped_with_one_warning_even_after_releases(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(torch_timing, "MAX_PENDING", 4)
    r = EventResolver(poll_seconds=3600.0)
    histogram = Histogram(DEFAULT_BUCKETS)
    waiting = FakeEvent(1.0, done=False)  # holds everything behind it
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.torch_timing"):
        r.submit(FakeEvent(), waiting, histogram)  # type: ignore[arg-type]
        for _ in range(4):  # releases grow the queue past the bound (5 entries)
            r.release(FakeEvent())
        r.submit(FakeEvent(), FakeEvent(2.0), histogram)  # type: ignore[arg-type]
        r.submit(FakeEvent(), FakeEvent(2.0), histogram)  # type: ignore[arg-type]
    assert len(r._pending) == 5  # neither new pair was kept
    assert [rec.getMessage() for rec in caplog.records] == [
        "trainwatch: 4 CUDA timings unresolved; dropping new ones"]


def test_a_batch_resolves_when_releases_carry_the_queue_past_its_mark() -> None:
    r = EventResolver(poll_seconds=3600.0)
    histogram, batch = Histogram(DEFAULT_BUCKETS), torch_timing.INLINE_BATCH
    for _ in range(batch - 1):
        r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    r.release(FakeEvent())  # the queue reaches the mark without a submit
    assert sum(histogram.counts) == 0
    r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == batch  # past the mark, not at it: resolved


def test_a_resolver_keeps_the_recorder_it_is_given_and_its_thread_never_holds_up_exit() -> None:
    def mine(event: object) -> None:
        pass

    assert EventResolver(record=mine).record is mine
    assert callable(EventResolver().record)
    threaded = EventResolver(poll_seconds=3600.0, inline=False)
    try:
        assert threaded._thread.daemon and threaded._thread.is_alive()
    finally:
        threaded.stop()


def test_resolving_says_false_once_a_cuda_error_stopped_it(
        caplog: pytest.LogCaptureFixture) -> None:
    r = EventResolver(poll_seconds=3600.0)
    histogram = Histogram(DEFAULT_BUCKETS)
    assert r.resolve_safely() is True
    broken = FakeEvent(error=RuntimeError("CUDA error: unspecified launch failure"))
    r.submit(FakeEvent(), broken, histogram)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation.torch_timing"):
        assert r.resolve_safely() is False
    assert not r._pending


def test_the_next_batch_mark_is_a_batch_past_what_an_unfinished_pair_holds() -> None:
    r = EventResolver(poll_seconds=3600.0)
    histogram, batch = Histogram(DEFAULT_BUCKETS), torch_timing.INLINE_BATCH
    r.submit(FakeEvent(), FakeEvent(1.0, done=False), histogram)  # type: ignore[arg-type]
    for _ in range(batch - 1):
        r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert len(r._pending) == batch and r._resolve_at == 2 * batch  # 64 held, next at 128


def test_a_close_exactly_at_the_share_gap_still_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(1_000.0)
    monkeypatch.setattr(torch_timing, "perf_counter", clock)
    monkeypatch.setattr(torch_timing, "SHARE_GAP", 0.25)  # a gap a float holds exactly
    r = EventResolver(record=lambda event: None)
    monkeypatch.setattr(r, "event", object)
    end = r.end_event()
    clock.now += 0.25
    assert r.start_event() is end


def test_the_pair_that_fills_the_queue_to_its_bound_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_timing, "MAX_PENDING", 4)
    r = EventResolver(poll_seconds=3600.0)
    histogram = Histogram(DEFAULT_BUCKETS)
    r.submit(FakeEvent(), FakeEvent(1.0, done=False), histogram)  # type: ignore[arg-type]
    for _ in range(4):
        r.submit(FakeEvent(), FakeEvent(1.0), histogram)  # type: ignore[arg-type]
    assert len(r._pending) == 4  # the fifth pair met a full queue


def test_by_default_a_pair_waits_at_most_50_ms_for_the_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(torch_timing, "perf_counter", clock)
    r = EventResolver()
    histogram = Histogram(DEFAULT_BUCKETS)
    r.last_end_at = clock.now + 0.01  # a close 10 ms on: not yet
    r.submit(FakeEvent(), FakeEvent(3.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 0
    r.last_end_at = clock.now + 0.06  # 60 ms on: both resolved
    r.submit(FakeEvent(), FakeEvent(4.0), histogram)  # type: ignore[arg-type]
    assert sum(histogram.counts) == 2


def test_a_new_event_is_made_timing_only_when_the_pool_is_empty(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    made: list[dict[str, object]] = []

    class Event:
        def __init__(self, **kw: object) -> None:
            made.append(kw)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    r = EventResolver(record=lambda event: None)
    assert isinstance(r.event(), Event) and made == [{"enable_timing": True}]
    pooled = object()
    r._free.append(pooled)  # type: ignore[arg-type]
    assert r.event() is pooled and len(made) == 1
