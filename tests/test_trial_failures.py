"""A Pushgateway that is down, black-holed, or answers 500 or 400 never hurts training:
steps keep their time, failures are counted and logged once, memory stays flat, and the
exit is bounded."""

from __future__ import annotations

import functools
import logging
import time
import tracemalloc
from collections.abc import Iterator

import pytest

import trial_instrumentation as ti
from tests.stack import wait_until
from tests.trial_support import BlackHole, StatusServer, closed_port_url, cpu_loop

FAILURES = "trainwatch_trial_push_failures_total"
READ_TIMEOUT = 0.5
EXIT_TIMEOUT = 1.0


def make_trial(url: str | None, interval: float = 0.05) -> ti.Trial:
    return ti.Trial(experiment="fail", trial="t", pushgateway=url, push_interval=interval,
                    connect_timeout=READ_TIMEOUT, read_timeout=READ_TIMEOUT,
                    exit_timeout=EXIT_TIMEOUT)


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
    totals: dict[str | None, list[float]] = {None: [], url: []}
    slowest_step, failed = 0.0, 0.0
    for _ in range(2):  # interleaved, so load from other tests hits both alike
        for gateway in (None, url):
            trial = make_trial(gateway)
            started = time.perf_counter()
            with trial:
                steps = cpu_loop(trial, 300)
                totals[gateway].append(time.perf_counter() - started)
                if gateway is not None:
                    slowest_step = max(slowest_step, *steps)
                    wait_until(functools.partial(failures, trial), timeout=5,
                               what="a failed push")
                closing = time.perf_counter()
            # Exit (final push + delete) is bounded even when the gateway never answers.
            assert time.perf_counter() - closing < EXIT_TIMEOUT + 0.5
            failed += failures(trial) if gateway is not None else 0
    baseline, bad = min(totals[None]), min(totals[url])
    assert bad <= baseline * 1.5 + 0.05, f"loop took {bad:.3f}s vs {baseline:.3f}s without gateway"
    # A push on the training thread would block one step for a whole read timeout.
    assert slowest_step < READ_TIMEOUT / 2
    if server is not None:  # the server's answers are what failed, each push counted once
        assert failed == server.requests.count("PUT") > 0


def test_memory_stays_flat_over_many_failed_pushes() -> None:
    server = StatusServer(400)  # not retried, so failures come fast
    trial = make_trial(server.url, interval=0.002)
    tracemalloc.start()
    try:
        with trial:
            wait_until(lambda: failures(trial) >= 50, timeout=20, what="50 failures")
            before = tracemalloc.get_traced_memory()[0]
            wait_until(lambda: failures(trial) >= 350, timeout=60, what="350 failures")
            grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        server.close()
    assert grown < 64 * 1024, f"{grown} bytes more after 300 failed pushes"


def test_one_log_line_per_outage_and_one_on_recovery(caplog: pytest.LogCaptureFixture) -> None:
    server = StatusServer(500)
    trial = make_trial(server.url, interval=0.02)
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation"), trial:
        wait_until(lambda: failures(trial) >= 5, timeout=20, what="5 failures")
        server.status = 200
        wait_until(lambda: "reachable again" in caplog.text, timeout=20, what="recovery line")
        failed_before = failures(trial)
    server.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("push to" in m and "failed" in m for m in messages) == 1, messages
    assert sum("reachable again" in m for m in messages) == 1, messages
    assert failures(trial) == failed_before  # the final push and delete succeeded
    assert server.requests[-2:] == ["PUT", "DELETE"]
