"""exporter.deadline's arithmetic with a fake clock: the read budget at each of its edges and
the deadline a scrape sets and takes back (the hung-GPU tests are
tests/test_exporter_deadline.py)."""

from __future__ import annotations

import time

import pytest

from exporter import deadline


@pytest.mark.parametrize(("header", "budget"), [
    ("2", 1.6),  # a 20% margin
    ("4", 3.2),
    ("5", 4.0),  # 20% is the whole 1 s cap
    ("7", 6.0),  # the margin is at most 1 s
    ("30", 29.0),
    ("0.7", 0.56),
    ("0.6", 0.5),  # 0.48: never under half a second
    ("0.001", 0.5),
    ("1e300", 1e300 - 1),
    (None, 9.0),  # Prometheus's default of 10 s
    ("soon", 9.0),
    ("", 9.0),
    ("0", 9.0),
    ("-3", 9.0),
    ("inf", 9.0),
    ("-inf", 9.0),
    ("nan", 9.0),
])
def test_the_read_budget_is_the_timeout_less_a_margin(header: str | None, budget: float) -> None:
    assert deadline.read_budget(header) == pytest.approx(budget, rel=1e-12)


def test_the_constants_are_prometheus_s() -> None:
    assert deadline.SCRAPE_TIMEOUT_HEADER == "X-Prometheus-Scrape-Timeout-Seconds"
    assert (deadline.DEFAULT_SCRAPE_TIMEOUT_SECONDS, deadline.MARGIN_FRACTION,
            deadline.MAX_MARGIN_SECONDS, deadline.MIN_READ_SECONDS) == (10.0, 0.2, 1.0, 0.5)


def test_a_scrape_sets_its_deadline_and_takes_it_back() -> None:
    now = [100.0]

    def clock() -> float:
        return now[0]

    assert deadline.current_deadline(clock) == 109.0  # outside a scrape: now + the default
    with deadline.scrape_deadline("2", clock) as outer:
        assert outer == pytest.approx(101.6)
        now[0] = 150.0  # the deadline is fixed when the scrape starts
        assert deadline.current_deadline(clock) == pytest.approx(101.6)
        with deadline.scrape_deadline("30", clock) as inner:
            assert inner == 179.0 and deadline.current_deadline(clock) == 179.0
        assert deadline.current_deadline(clock) == pytest.approx(101.6)
    assert deadline.current_deadline(clock) == 159.0


def test_the_deadline_is_taken_back_when_the_scrape_fails() -> None:
    with pytest.raises(RuntimeError), deadline.scrape_deadline("2", lambda: 0.0):
        raise RuntimeError
    assert deadline.current_deadline(lambda: 0.0) == 9.0


def test_the_default_clock_is_monotonic() -> None:
    before = time.monotonic()
    with deadline.scrape_deadline("3") as at:
        after = time.monotonic()
        assert before + 2.4 <= at <= after + 2.4
        assert deadline.current_deadline() == at
    before = time.monotonic()
    assert before + 9.0 <= deadline.current_deadline() <= time.monotonic() + 9.0
