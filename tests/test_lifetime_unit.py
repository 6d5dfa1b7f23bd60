"""trainwatch/diagnose/lifetime.py without a stack: a young or stale rank's numbers from its
raw counters, read through a canned API that answers each exact query."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trainwatch.contract.promql import select
from trainwatch.diagnose.lifetime import (
    Lifetime,
    _per_second,
    final_shares,
    lifetimes,
    shares_of,
    young_ranks,
)
from trainwatch.promapi import COUNT

A, B, C, D = (("e", "t", r) for r in "0123")
Series = list[tuple[dict[str, str], float]]


def labels(key: tuple[str, str, str], **more: str) -> dict[str, str]:
    return {"experiment": key[0], "trial": key[1], "rank": key[2], **more}


class Canned:
    """An API that answers each exact query it was given an answer for, else nothing."""

    def __init__(self, answers: dict[str, Any] | None = None,
                 ranges: dict[str, Any] | None = None) -> None:
        self.answers, self.ranges = answers or {}, ranges or {}
        self.asked: list[str] = []

    def query(self, expr: str, kind: str = "any") -> Series:
        self.asked.append(expr)
        return self.answers.get(expr, [])

    def samples(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], Any]]:
        assert kind == COUNT
        self.asked.append(expr)
        return self.ranges.get(expr, [])


STEPS = 'trainwatch_trial_steps_total{experiment="e"}'
BY = "by (experiment, trial, rank)"


def test_young_ranks_have_steps_now_and_none_a_window_ago() -> None:
    api = Canned({
        f"count {BY} ({STEPS})": [(labels(k), 1.0) for k in (A, B, C)],
        f"count {BY} (count_over_time({STEPS}[90s] offset 90s))": [(labels(k), 3.0)
                                                                   for k in (B, D)],
    })
    assert young_ranks(api, select, "90s", experiment="e") == {A, C}  # type: ignore[arg-type]
    assert len(api.asked) == 2


@pytest.mark.parametrize(("samples", "expected"), [
    ([(0, 0), (10, 50)], (5.0, 10)),
    ([(100.0, 7.0), (100.5, 9.0)], (4.0, 0.5)),
    ([(0, 5), (10, 5), (20, 7)], (0.1, 20)),  # a flat counter is no reset
    ([(0, 900), (10, 950), (20, 10), (30, 40)], (3.0, 10)),
    ([(0, 9), (10, 2), (20, 8), (30, 1), (40, 5), (60, 13)], (0.4, 30)),  # the last reset
    ([(0, 900), (10, 5)], (None, None)),  # one sample of the new run
    ([(5, 1)], (None, None)),
    ([], (None, None)),
    ([(7, 1), (7, 3)], (None, None)),  # no time between them
    ([(7, 1), (7, 3), (17, 6)], (0.5, 10)),  # first to last, whatever lies between
    ([(9, 1), (7, 3)], (None, None)),
])
def test_per_second_is_over_the_current_runs_samples(
        samples: list[tuple[float, float]], expected: tuple[float | None, float | None]) -> None:
    found = _per_second(samples)
    assert found == pytest.approx(expected) if expected[0] is not None else found == expected


def test_shares_are_each_phase_over_the_step_sum_of_its_own_rank() -> None:
    steps = [(labels(A), 8.0), (labels(B), 0.0), (labels(D), 2.5)]
    phases = [(labels(A, phase="train_batch"), 6.0), (labels(A, phase="dataloader_next"), 1.0),
              (labels(B, phase="train_batch"), 0.0), (labels(C, phase="train_batch"), 4.0),
              (labels(D), 0.5)]
    assert shares_of(steps, phases) == {A: {"train_batch": 0.75, "dataloader_next": 0.125},
                                        D: {"": 0.2}}
    api = Canned({'trainwatch_trial_step_seconds_sum{trial="t"}': steps,
                  'trainwatch_trial_phase_seconds_sum{trial="t"}': phases})
    assert final_shares(api, select, trial="t") == shares_of(steps, phases)  # type: ignore[arg-type]


def quantile(q: str) -> str:
    return (f"histogram_quantile({q}, sum by (experiment, trial, rank, le) "
            '(trainwatch_trial_step_seconds_bucket{experiment="e"}))')


def test_lifetimes_gathers_shares_step_quantiles_steps_and_rates_per_rank() -> None:
    api = Canned(
        {'trainwatch_trial_step_seconds_sum{experiment="e"}': [(labels(A), 4.0)],
         'trainwatch_trial_phase_seconds_sum{experiment="e"}': [
             (labels(A, phase="train_batch"), 3.0)],
         quantile("0.5"): [(labels(A), 0.125), (labels(B), math.nan)],
         quantile("0.95"): [(labels(A), 0.375), (labels(C), 0.25)]},
        {f"{STEPS}[2m]": [(labels(A), [(10.0, 3.0), (20.0, 23.0), (30.0, 41.0)]),
                          (labels(D), [(5.0, 7.0)])],
         'trainwatch_trial_samples_total{experiment="e"}[2m]': [
             (labels(A), [(10.0, 96.0), (30.0, 1312.0)]), (labels(C), [(1.0, 1.0)])]})
    found = lifetimes(api, select, "2m", experiment="e")  # type: ignore[arg-type]
    assert found == {
        A: Lifetime({"train_batch": 0.75}, {"0.5": 0.125, "0.95": 0.375}, 41, 1.9, 60.8, 20.0),
        C: Lifetime(step_seconds={"0.95": 0.25}),
        D: Lifetime(steps=7),
    }
    assert B not in found  # its quantile is NaN: no observation yet, nothing of it
    assert isinstance(found[A].steps, int)


def test_a_rank_with_shares_only_has_a_lifetime_of_them() -> None:
    api = Canned({'trainwatch_trial_step_seconds_sum': [(labels(B), 2.0)],
                  'trainwatch_trial_phase_seconds_sum': [(labels(B, phase="x"), 0.5)]})
    assert lifetimes(api, select, "5m") == {B: Lifetime({"x": 0.25})}  # type: ignore[arg-type]
    assert Lifetime().shares == {} and Lifetime().shares is not Lifetime().shares
