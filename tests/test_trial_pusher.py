"""The pusher thread against loopback gateways: when it pushes, what it retries and how long it
waits, what it deletes, how it logs, and that its exit is bounded (fast: seconds in all).

The slower end-to-end checks (step time, memory, a real Pushgateway) are in
test_trial_failures.py and test_trial_live.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from benchmarks.http_load import BlackHole
from benchmarks.stack import wait_until
from tests.trial_support import StatusServer, closed_port_url, run_script
from trial_instrumentation import names
from trial_instrumentation import pusher as pusher_module
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.config import resolve
from trial_instrumentation.pusher import MAX_FIRST_BACKOFF_SECONDS, RETRIES, Pusher

GROUP = "/metrics/job/trainwatch_trial/experiment/e/rank/0/trial/t"  # keys sorted


def make(url: str, interval: float, read_timeout: float = 5.0,
         **auth: str) -> tuple[Pusher, TrialState]:
    config = resolve(pushgateway=url, experiment="e", trial="t",
                     push_interval=max(interval, names.MIN_PUSH_INTERVAL),
                     read_timeout=read_timeout, env={}, **auth)  # type: ignore[arg-type]
    # The pusher at intervals below the floor a Trial accepts: seconds in all, not minutes.
    config = dataclasses.replace(config, push_interval=interval)
    registry = CollectorRegistry()
    Gauge("answer", "a metric to push", registry=registry).set(42)
    state = TrialState(config.buckets, {})
    return Pusher(config, registry, state), state


def writes(server: StatusServer) -> list[str]:
    """Every request the pusher made, in order: its PUTs (and a DELETE, which it never sends)."""
    return list(server.requests)


def put_times(server: StatusServer) -> list[float]:
    return [t for t, r in zip(server.times, server.requests) if r == "PUT"]


@pytest.fixture
def server() -> Iterator[StatusServer]:
    gateway = StatusServer(200)
    yield gateway
    gateway.close()


def test_pushes_at_once_then_every_interval_and_never_deletes_the_group(
        server: StatusServer) -> None:
    pusher, state = make(server.url, interval=0.05, username="u", password="pw")
    pusher.start()
    wait_until(lambda: len(writes(server)) >= 3, timeout=10, what="three pushes")
    assert pusher.stop(timeout=5) is True
    sent = writes(server)
    assert set(sent) == {"PUT"}  # the final push included; the group is left for gc
    assert {path for path, r in zip(server.paths, server.requests) if r != "GET"} == {GROUP}
    assert b"answer 42.0" in next(b for b, r in zip(server.bodies, server.requests) if r == "PUT")
    assert all(a and a.startswith("Basic ") for a in server.authorization)
    times = put_times(server)
    gaps = [b - a for a, b in itertools.pairwise(times[:-1])]  # not the final push's gap
    assert min(gaps) >= 0.04, gaps  # the interval between pushes, not a busy loop
    assert state.push_failures == 0


def test_every_push_carries_the_push_interval_that_gc_keeps_the_group_for(
        server: StatusServer) -> None:
    """trainwatch gc keeps a group for two of its trial's push intervals: the pusher publishes
    its own (a Trial's collector alone does not know it; pulled, the gauge is absent)."""
    config = dataclasses.replace(resolve(pushgateway=server.url, experiment="e", trial="t",
                                         env={}), push_interval=1234.5)
    state = TrialState(config.buckets, {})
    registry = CollectorRegistry()
    registry.register(TrialCollector(state))
    before = registry.get_sample_value(names.PUSH_INTERVAL)
    pusher = Pusher(config, registry, state)
    pusher.start()
    assert pusher.stop(timeout=5) is True
    assert before is None
    bodies = [b.decode() for b, r in zip(server.bodies, server.requests) if r == "PUT"]
    assert len(bodies) == 2  # the first push and the final one
    assert all(f"\n{names.PUSH_INTERVAL} 1234.5\n" in body for body in bodies), bodies


def test_the_first_push_does_not_wait_for_an_interval(server: StatusServer) -> None:
    pusher, _ = make(server.url, interval=3600)
    pusher.start()
    wait_until(lambda: writes(server) == ["PUT"], timeout=5, what="the first push")
    assert pusher.stop(timeout=5) is True
    assert writes(server) == ["PUT", "PUT"]  # and the final push; never a delete


def test_a_failing_gateway_is_retried_with_doubling_backoff_each_attempt_counted() -> None:
    gateway = StatusServer(503)
    pusher, state = make(gateway.url, interval=0.4)  # first backoff: a quarter, 0.1 s
    pusher.start()
    wait_until(lambda: len(writes(gateway)) >= 1 + RETRIES, timeout=10, what="the retries")
    pusher.stop(timeout=10)
    gateway.close()
    first, second, third = put_times(gateway)[:3]
    assert second - first >= 0.09 and third - second >= 0.19, gateway.times
    assert state.push_failures == gateway.requests.count("PUT")


def test_the_first_backoff_is_capped_for_long_intervals() -> None:
    gateway = StatusServer(500)
    pusher, _ = make(gateway.url, interval=60)  # a quarter would be 15 s
    pusher.start()
    wait_until(lambda: len(writes(gateway)) >= 2, timeout=MAX_FIRST_BACKOFF_SECONDS + 5,
               what="the first retry")
    pusher.stop(timeout=0.1)
    gateway.close()
    times = put_times(gateway)
    assert times[1] - times[0] >= MAX_FIRST_BACKOFF_SECONDS * 0.9


def test_a_rejected_push_is_not_retried() -> None:
    gateway = StatusServer(400)
    pusher, state = make(gateway.url, interval=3600)
    pusher.start()
    wait_until(lambda: state.push_failures == 1, timeout=5, what="the first push")
    assert pusher.stop(timeout=10) is True
    gateway.close()
    assert writes(gateway) == ["PUT", "PUT"] and state.push_failures == 2


def test_exit_is_bounded_when_the_gateway_never_answers(caplog: pytest.LogCaptureFixture) -> None:
    hole = BlackHole()
    pusher, _ = make(hole.url, interval=3600, read_timeout=30)
    pusher.start()
    start = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
            assert pusher.stop(timeout=0.3) is False
    finally:
        hole.close()
    assert time.monotonic() - start < 5
    # No push failed (the first one never finished), so the summary has no error to quote.
    summary = next(r.getMessage() for r in caplog.records if "no push to" in r.getMessage())
    assert "(0 failed; last error: none finished in time)" in summary, summary


def test_a_push_waits_its_read_timeout_for_an_answer_not_its_connect_timeout() -> None:
    # Loopback connects at once; the answer never comes. The push fails after the read
    # timeout (0.25 s), not the connect timeout (4 s), which bounds the connection alone.
    hole = BlackHole()
    config = resolve(pushgateway=hole.url, experiment="e", trial="t", push_interval=3600,
                     connect_timeout=4, read_timeout=0.25, env={})
    state = TrialState(config.buckets, {})
    pusher = Pusher(config, CollectorRegistry(), state)
    start = time.monotonic()
    pusher.start()
    try:
        wait_until(lambda: state.push_failures >= 1, timeout=3, what="the first push's failure")
        took = time.monotonic() - start
    finally:
        pusher.stop(timeout=0.1)
        hole.close()
    assert config.read_timeout <= took < 2.0, took


def test_a_hung_gateway_never_keeps_the_training_process_from_exiting() -> None:
    # The pusher's thread must not hold the interpreter open: after a bounded stop() gave up
    # on a gateway that never answers, the process still ends at once.
    script = (
        "from prometheus_client import CollectorRegistry\n"
        "from benchmarks.http_load import BlackHole\n"
        "from trial_instrumentation.collector import TrialState\n"
        "from trial_instrumentation.config import resolve\n"
        "from trial_instrumentation.pusher import Pusher\n"
        "hole = BlackHole()\n"
        "config = resolve(pushgateway=hole.url, experiment='e', trial='t', push_interval=3600,\n"
        "                 read_timeout=60, env={})\n"
        "pusher = Pusher(config, CollectorRegistry(), TrialState(config.buckets, {}))\n"
        "pusher.start()\n"
        "assert pusher.stop(timeout=0.2) is False\n")
    done, took = run_script(script)
    assert done.returncode == 0, done.stderr
    assert took < 15  # the read timeout (60 s) was not waited out


def test_one_warning_per_outage_and_one_when_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    gateway = StatusServer(500)
    pusher, state = make(gateway.url, interval=0.02)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        pusher.start()
        wait_until(lambda: state.push_failures >= 4, timeout=10, what="4 failures")
        gateway.status = 200
        wait_until(lambda: "reachable again" in caplog.text, timeout=10, what="recovery")
        gateway.status = 500
        wait_until(lambda: caplog.text.count(f"{gateway.url} failed") >= 2, timeout=10,
                   what="a second outage")
        pusher.stop(timeout=0.1)
    gateway.close()
    # Only this pusher's lines: an earlier test's abandoned pusher may still be logging.
    messages = [r.getMessage() for r in caplog.records if gateway.url in r.getMessage()]
    failed = [m for m in messages if "failed" in m]
    assert len(failed) == 2 and sum("reachable again" in m for m in messages) == 1, messages
    assert f"push to {gateway.url} failed: PushError: Pushgateway answered 500" in failed[0]
    assert f"Pushgateway {gateway.url} reachable again after " in caplog.text


# The first backoff is a quarter of the interval, capped at one second (literal here: the
# cap is the behaviour under test, not whatever the module's constant says).
@pytest.mark.parametrize(("interval", "first"), [(3600, 1.0), (0.4, 0.1)])
def test_the_final_pushs_backoff_doubles_and_stops_after_the_last_retry(
        monkeypatch: pytest.MonkeyPatch, interval: float, first: float) -> None:
    slept: list[float] = []
    puts_then: list[int] = []  # PUTs the gateway had seen at each wait

    def fake_sleep(seconds: float) -> bool:
        slept.append(seconds)
        puts_then.append(len(put_times(gateway)))
        return False

    monkeypatch.setattr(pusher_module, "_sleep", fake_sleep)
    gateway = StatusServer(503)
    pusher, _ = make(gateway.url, interval=interval)
    pusher.start()
    wait_until(lambda: len(writes(gateway)) >= 1, timeout=5, what="the first push")
    assert pusher.stop(timeout=10) is True
    gateway.close()
    # The final push: three attempts (two retries), a wait before each retry, none after the
    # last (literal: how often a push is tried is the behaviour, not the module's constant).
    assert slept == [pytest.approx(first), pytest.approx(first * 2)]
    assert len(put_times(gateway)) == puts_then[0] + 2  # after its first attempt


def test_a_gateway_that_is_down_is_retried_like_one_that_answers_5xx(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A refused connection (no PushError: no status at all) is an outage, worth retrying;
    only a 4xx answer is not (test_a_rejected_push_is_not_retried)."""
    slept: list[float] = []

    def fake_sleep(seconds: float) -> bool:
        slept.append(seconds)
        return False

    monkeypatch.setattr(pusher_module, "_sleep", fake_sleep)
    url = closed_port_url()
    pusher, state = make(url, interval=3600)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        pusher.start()
        wait_until(lambda: state.push_failures >= 1, timeout=5, what="the first push")
        assert pusher.stop(timeout=10) is True
    # The final push: three attempts, a wait before each retry (literal, as above).
    assert slept == [pytest.approx(1.0), pytest.approx(2.0)]
    assert state.push_failures >= 1 + 3  # the first push's attempt(s), the final push's three
    summary = next(r.getMessage() for r in caplog.records if f"no push to {url}" in r.getMessage())
    assert "last error: ConnectionRefusedError" in summary and "PushError" not in summary


class FailsOnce(Collector):
    """A collector of the user's (``trial.registry`` pushes whatever is registered there) whose
    first collection raises something no socket would: not an OSError."""

    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> Iterator[Metric]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the user's collector broke once")
        return iter(())


def test_any_exception_in_a_push_is_a_failed_push_and_the_pusher_goes_on(
        server: StatusServer, caplog: pytest.LogCaptureFixture) -> None:
    config = dataclasses.replace(resolve(pushgateway=server.url, experiment="e", trial="t",
                                         env={}), push_interval=3600)
    registry = CollectorRegistry()
    Gauge("answer", "a metric to push", registry=registry).set(42)
    flaky = FailsOnce()
    registry.register(flaky)
    state = TrialState(config.buckets, {})
    pusher = Pusher(config, registry, state)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        pusher.start()
        wait_until(lambda: flaky.calls >= 1, timeout=5, what="the first collection")
        assert pusher.stop(timeout=5) is True
    assert state.push_failures == 1  # counted, as any failed push
    assert f"push to {server.url} failed: RuntimeError: the user's collector broke" in caplog.text
    puts = [b for b, r in zip(server.bodies, server.requests) if r == "PUT"]
    assert puts and all(b"answer 42.0" in body for body in puts)  # the final push, at least


def test_a_run_without_one_successful_push_says_so_at_exit(
        caplog: pytest.LogCaptureFixture, server: StatusServer) -> None:
    gateway = StatusServer(500)
    failing, _ = make(gateway.url, interval=3600)
    working, _ = make(server.url, interval=3600)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        for pusher in (failing, working):
            pusher.start()
        wait_until(lambda: writes(gateway) and writes(server), timeout=5, what="first pushes")
        for pusher in (failing, working):
            pusher.stop(timeout=0.1)
    gateway.close()
    summaries = [r.getMessage() for r in caplog.records if "no push to" in r.getMessage()]
    assert len(summaries) == 1 and gateway.url in summaries[0], summaries
    assert "none of this trial's timings reached the Pushgateway" in summaries[0]
    assert "failed; last error: PushError: Pushgateway answered 500" in summaries[0]


def test_the_recovery_line_says_how_long_the_outage_lasted(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [10.0]
    monkeypatch.setattr(pusher_module, "time", SimpleNamespace(monotonic=lambda: now[0],
                                                               sleep=time.sleep))
    gateway = StatusServer(500)
    pusher, state = make(gateway.url, interval=0.02)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"):
        pusher.start()
        wait_until(lambda: state.push_failures >= 1, timeout=5, what="a failure")
        now[0] = 25.0
        gateway.status = 200
        wait_until(lambda: "reachable again" in caplog.text, timeout=10, what="recovery")
        pusher.stop(timeout=1)
    gateway.close()
    assert f"Pushgateway {gateway.url} reachable again after 15.0s" in caplog.text


def test_each_wait_between_pushes_is_jittered(server: StatusServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The largest draw: every wait is the interval plus 10%. Without jitter two processes
    # started together push in lockstep, and scrapes see one writer (issue 25, item 8).
    # A wide jitter, so that the waits stand well clear of the interval on a loaded machine.
    monkeypatch.setattr(pusher_module.random, "random", lambda: 1.0)
    monkeypatch.setattr(pusher_module, "JITTER", 0.5)
    pusher, _ = make(server.url, interval=0.2)
    pusher.start()
    wait_until(lambda: len(put_times(server)) >= 4, timeout=10, what="four pushes")
    pusher.stop(timeout=5)
    gaps = [b - a for a, b in itertools.pairwise(put_times(server)[:4])]
    assert min(gaps) >= 0.27, gaps  # 0.3 s waits; 0.2 s without the jitter
    monkeypatch.setattr(pusher_module, "JITTER", 0.1)
    draws = iter((0.0, 0.25, 1.0))
    assert [pusher_module.jittered(10.0, lambda: next(draws)) for _ in range(3)] == \
        pytest.approx([9.0, 9.5, 11.0])
