"""The CLI's reads of Prometheus against servers that never end or drip: each is refused by
size or by its one deadline (issue 25: ``diagnose`` reached 19.7 GB against an endless body,
and ran past 90 s with ``--timeout 5`` against a drip)."""

from __future__ import annotations

import math
import time

import pytest

from benchmarks.hostile_servers import hostile_server
from trainwatch import httpget
from trainwatch.cliutil import MAX_TIMEOUT
from trainwatch.promapi import PrometheusAPI, PrometheusError


def test_an_endless_answer_is_refused_at_the_size_limit_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpget, "MAX_RESPONSE_BYTES", 4 * 2**20)
    with hostile_server("endless", cap=64 * 2**20) as url:
        start = time.monotonic()
        with pytest.raises(PrometheusError, match="more than 4,194,304 bytes.*MAX_RESPONSE_BYTES"):
            PrometheusAPI(url, timeout=30).query("up")
    assert time.monotonic() - start < 5


def test_a_dripping_answer_is_cut_off_at_the_timeout_for_the_whole_request() -> None:
    with hostile_server("drip", every=0.1, seconds=20) as url:
        start = time.monotonic()
        with pytest.raises(PrometheusError, match=r"within 1 s \(--timeout"):
            PrometheusAPI(url, timeout=1.0).query("up")
        took = time.monotonic() - start
    assert 0.9 < took < 2.5, took


def test_a_timeout_that_is_not_a_positive_number_is_refused() -> None:
    for bad in (0.0, -1.0, float("nan"), math.nextafter(MAX_TIMEOUT, math.inf)):
        with pytest.raises(ValueError, match="--timeout must be a number of seconds > 0"):
            PrometheusAPI("http://127.0.0.1:9", timeout=bad)
    # Both ends of the range are taken: the smallest positive float and the largest allowed.
    for good in (math.ulp(0.0), MAX_TIMEOUT):
        assert PrometheusAPI("http://127.0.0.1:9", timeout=good).timeout == good
