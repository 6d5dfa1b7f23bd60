"""A Pushgateway that is down, black-holed, or answers 500 or 400 never hurts training:
steps keep their time, failures are counted and logged once, memory stays flat, and the
exit is bounded."""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import trial_instrumentation as ti
from benchmarks.http_load import BlackHole
from benchmarks.stack import wait_until
from tests.trial_support import StatusServer, closed_port_url, cpu_loop
from trial_instrumentation import names
from trial_instrumentation.transport import PushError

FAILURES = "trainwatch_trial_push_failures_total"
READ_TIMEOUT = 1.0  # far above any scheduler stall, so a step blocked by a push stands out
EXIT_TIMEOUT = 1.0
ROUNDS, ROUND_STEPS = 8, 60  # of a 1 ms step, with and without a failing gateway
FAILED_PUSHES = 150  # over which memory must stay flat


def make_trial(url: str | None, interval: float = 0.05,
               timeout: float = READ_TIMEOUT) -> ti.Trial:
    trial = ti.Trial(experiment="fail", trial="t", pushgateway=url,
                     push_interval=max(interval, names.MIN_PUSH_INTERVAL),
                     connect_timeout=timeout, read_timeout=timeout, exit_timeout=EXIT_TIMEOUT)
    # Pushes more often than a Trial accepts, to load the pusher: set before start().
    trial.config = dataclasses.replace(trial.config, push_interval=interval)
    return trial


def failures(trial: ti.Trial) -> float:
    return trial.registry.get_sample_value(FAILURES) or 0.0


@pytest.fixture(params=["down", "black-hole", "500", "400"])
def bad_gateway(request: pytest.FixtureRequest) -> Iterator[tuple[str, StatusServer | None]]:
    if request.param == "down":
        yield closed_port_url(), None
    elif request.param == "black-hole":
        hole = BlackHole()
        yield hole.url, None
        hole.close()
    else:
        server = StatusServer(int(request.param))
        yield server.url, server
        server.close()


def test_bad_gateway_leaves_step_time_alone(bad_gateway: tuple[str, StatusServer | None]) -> None:
    url, server = bad_gateway
    unconfigured = make_trial(None)  # the same loop with nothing timed and no pusher
    ratios, slowest = [], 0.0
    with make_trial(url) as trial:
        # Short interleaved rounds: load from other tests hits both sides alike, and the
        # median ratio ignores a round that a stall hit on one side only.
        for _ in range(ROUNDS):
            baseline = sum(cpu_loop(unconfigured, ROUND_STEPS))
            steps = cpu_loop(trial, ROUND_STEPS)
            ratios.append(sum(steps) / baseline)
            slowest = max(slowest, *steps)
        wait_until(functools.partial(failures, trial), timeout=5, what="a failed push")
        closing = time.perf_counter()
    # Exit (the final push) is bounded even when the gateway never answers.
    assert time.perf_counter() - closing < EXIT_TIMEOUT + 0.5
    # A pusher hogging the GIL (retrying without a pause) would slow every round.
    assert statistics.median(ratios) < 1.5, [f"{r:.2f}" for r in ratios]
    # A push on the training thread blocks its step for at least a whole read timeout when
    # the gateway never answers (the black hole); 60% of it leaves room for any stall.
    assert slowest < READ_TIMEOUT * 0.6, f"slowest step {slowest:.3f} s"
    if server is not None:  # the server's answers are what failed, each push counted once
        assert failures(trial) == server.requests.count("PUT") > 0


@pytest.mark.parametrize(("status", "puts"), [(400, 2), (500, 4)])
def test_a_rejected_push_is_not_retried_a_failing_gateway_is(status: int, puts: int) -> None:
    # A long interval: the trial pushes once at start and once at exit, nothing in between.
    # A 4xx (bad metric, auth, grouping key) fails the same way on every retry: one PUT per
    # push. A 5xx is retried (1 + RETRIES attempts); the exit cuts short the first push's
    # backoff but not the final push's, so at least 1 + 3 PUTs.
    server = StatusServer(status)
    trial = ti.Trial(experiment="fail", trial="t", pushgateway=server.url, push_interval=3600,
                     exit_timeout=30)
    with trial:
        wait_until(lambda: failures(trial) >= 1, timeout=10, what="the first push")
        closing = time.monotonic()
    server.close()
    sent = server.requests.count("PUT")
    assert (sent == puts if status < 500 else sent >= puts), server.requests
    # The final push alone: one PUT for a 4xx, exactly 1 + RETRIES for a 5xx, never more.
    assert len([t for t in server.times if t > closing]) == (1 if status < 500 else 3), (
        server.times, closing)
    assert "DELETE" not in server.requests  # a trial never deletes its group
    assert failures(trial) == sent


def test_only_server_errors_are_worth_retrying() -> None:
    retryable = {status: PushError(status, "", b"").retryable
                 for status in (400, 401, 404, 413, 499, 500, 502, 503, 599)}
    assert retryable == {400: False, 401: False, 404: False, 413: False, 499: False,
                         500: True, 502: True, 503: True, 599: True}


def at_next_push(thread: threading.Thread) -> bool:
    """Whether ``thread`` waits at the start of a push, on the registry's lock: the innermost
    frame is CollectorRegistry.collect (anywhere else in it, it runs on into a collector)."""
    frame = sys._current_frames().get(thread.ident or -1)
    return (frame is not None and frame.f_code.co_name == "collect"
            and Path(frame.f_code.co_filename).name == "registry.py")


def held(trial: ti.Trial, package: list[tracemalloc.Filter]) -> tracemalloc.Snapshot:
    """What the package holds with the pusher stopped at one place, the start of its next push:
    a snapshot taken while a push is in flight holds that push's body, request and exception,
    and a loaded machine stretches a push out (+27, +53 and +29 kB read that way in loaded
    fresh-clone runs). The pusher's collection takes the registry's lock first: held here, it
    waits there (twice seen, to be sure it is not passing through), and what a failed push
    left, garbage included, is collected before the snapshot."""
    thread = trial._pusher._thread  # type: ignore[union-attr]
    seen: list[bool] = []

    def waiting() -> bool:
        seen.append(at_next_push(thread))
        return seen[-2:] == [True, True]

    with trial.registry._lock:
        wait_until(waiting, timeout=20, interval=0.01, what="the pusher at its next push")
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
    return snapshot.filter_traces(package)


def test_memory_stays_flat_over_many_failed_pushes(
        bad_gateway: tuple[str, StatusServer | None]) -> None:
    url, server = bad_gateway
    # A gateway that never answers costs a read timeout per attempt: keep it short here.
    timeout = READ_TIMEOUT if server is not None else 0.02
    trial = make_trial(url, interval=0.002, timeout=timeout)
    # Only what the trial allocates (its pusher thread's frames run through the package), not
    # the fake gateways' threads in this same process. 64 frames reach from deep in http.client
    # back to the pusher.
    package = [tracemalloc.Filter(True, str(Path(ti.__file__).parent / "*"), all_frames=True)]
    tracemalloc.start(64)
    try:
        with trial:
            # Deadlines, not delays: under tracemalloc's 64 frames on a loaded machine a failure
            # can take 0.2 s (150 of them outlasted 30 s beside a loaded fresh-clone run).
            wait_until(lambda: failures(trial) >= 20, timeout=120, what="20 failures")
            before = held(trial, package)
            counted = failures(trial)
            wait_until(lambda: failures(trial) >= counted + FAILED_PUSHES, timeout=300,
                       what=f"{FAILED_PUSHES} more failures")
            after = held(trial, package)
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    # 160 bytes kept per failed push would not fit.
    assert grown < 24 * 1024, f"{grown} bytes more after {FAILED_PUSHES} failed pushes"


def test_one_log_line_per_outage_and_one_on_recovery(caplog: pytest.LogCaptureFixture) -> None:
    server = StatusServer(200)  # up at first: the outage starts well after the trial
    trial = make_trial(server.url, interval=0.02)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"), trial:
        wait_until(lambda: server.requests.count("PUT") >= 30, timeout=20, what="30 pushes")
        server.status = 500
        outage = time.monotonic()
        wait_until(lambda: failures(trial) >= 5, timeout=20, what="5 failures")
        server.status = 200
        wait_until(lambda: "reachable again" in caplog.text, timeout=20, what="recovery line")
        seen = time.monotonic()
        failed_before = failures(trial)
    server.close()
    messages = [r.getMessage() for r in caplog.records]
    # Exactly these two lines (no "no push succeeded" summary: pushes did), the first naming
    # the gateway and the answer, the second the outage's length, not the trial's age.
    failed, recovered = messages
    assert failed.startswith(f"trainwatch: push to {server.url} failed: PushError: Pushgateway "
                             "answered 500 "), failed
    prefix = f"trainwatch: Pushgateway {server.url} reachable again after "
    assert recovered.startswith(prefix) and recovered.endswith("s"), recovered
    assert float(recovered[len(prefix):-1]) <= seen - outage + 0.05, (recovered, seen - outage)
    assert failures(trial) == failed_before  # the final push succeeded
    assert server.requests[-1] == "PUT" and "DELETE" not in server.requests
