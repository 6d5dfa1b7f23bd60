"""A young or a stale trial's numbers from its raw pushed counters, not the recorded rates.

The recording rules average over the rate window. A trial younger than the window has fewer
samples than the window holds, so each rate reads low until the window fills (a trial at 5.7
steps/s read 0.22); a trial that stopped pushing has flat counters, so every rate is 0 and every
share 0/0. Both are answered from the counters themselves: they start at zero with the trial,
so their latest values are sums over its whole life, and steps/s comes from the samples that
exist, first to last.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from trainwatch.contract.promql import BY_TRIAL, TRIAL_LABELS, RankKey, by, rank_key
from trainwatch.contract.records import QUANTILES
from trainwatch.promapi import COUNT, PrometheusAPI
from trial_instrumentation import names

Selector = Callable[..., str]
STEPS_TOTAL = f"{names.STEPS}_total"
SAMPLES_TOTAL = f"{names.SAMPLES}_total"
STEP_SUM = f"{names.STEP_SECONDS}_sum"  # over PHASE_SUM: the final shares
PHASE_SUM = f"{names.PHASE_SECONDS}_sum"


@dataclass
class Lifetime:
    """One rank's numbers over its whole life (up to its last push)."""

    shares: dict[str, float] = field(default_factory=dict)  # phase -> share of step time
    step_seconds: dict[str, float] = field(default_factory=dict)  # quantile -> seconds
    steps: int | None = None
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    data_seconds: float | None = None  # first to last sample the rates rest on


def young_ranks(api: PrometheusAPI, select: Selector, window: str,
                **sel: str | None) -> set[RankKey]:
    """Ranks that have a steps counter now but no sample older than ``window``: they started
    less than one rate window ago."""
    steps = select(STEPS_TOTAL, **sel)
    now = {rank_key(labels) for labels, _ in api.query(f"count {BY_TRIAL} ({steps})")}
    older = {rank_key(labels) for labels, _ in api.query(
        f"count {BY_TRIAL} (count_over_time({steps}[{window}] offset {window}))")}
    return now - older


def _per_second(samples: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """(increase per second, seconds spanned) from the first to the last sample of the current
    run: a counter that went down was reset by a restart under the same key, and the samples
    before it belong to the run before.

    >>> _per_second([(0, 100), (10, 120), (20, 5), (30, 25)])  # a restart at t=20
    (2.0, 10)
    """
    resets = [i for i in range(1, len(samples)) if samples[i][1] < samples[i - 1][1]]
    samples = samples[resets[-1]:] if resets else samples
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None, None
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    return (v1 - v0) / (t1 - t0), t1 - t0


def final_shares(api: PrometheusAPI, select: Selector,
                 **sel: str | None) -> dict[RankKey, dict[str, float]]:
    """Each matching rank's phase shares of its step time over its whole life: its phase sums
    over its step sum (two queries); a rank with no finished step has none."""
    return shares_of(api.query(select(STEP_SUM, **sel)), api.query(select(PHASE_SUM, **sel)))


def shares_of(step_sums: list[tuple[dict[str, str], float]],
              phase_sums: list[tuple[dict[str, str], float]]) -> dict[RankKey, dict[str, float]]:
    """:func:`final_shares` from the two answers: the STEP_SUM and PHASE_SUM series."""
    found: dict[RankKey, dict[str, float]] = {}
    totals = {rank_key(labels): v for labels, v in step_sums}
    for labels, phase_sum in phase_sums:
        total = totals.get(rank_key(labels))
        if total:  # no finished step yet: no share to speak of
            found.setdefault(rank_key(labels), {})[labels.get("phase", "")] = phase_sum / total
    return found


def lifetimes(api: PrometheusAPI, select: Selector, window: str,
              **sel: str | None) -> dict[RankKey, Lifetime]:
    """Every matching rank's :class:`Lifetime`; rates over its samples of the last ``window``."""
    found: dict[RankKey, Lifetime] = {}

    def rank(labels: dict[str, str]) -> Lifetime:
        return found.setdefault(rank_key(labels), Lifetime())

    for key, shares in final_shares(api, select, **sel).items():
        found.setdefault(key, Lifetime()).shares = shares
    for q in QUANTILES:
        expr = (f"histogram_quantile({q}, sum {by(*TRIAL_LABELS, 'le')} "
                f"({select(f'{names.STEP_SECONDS}_bucket', **sel)}))")
        for labels, seconds in api.query(expr):
            if not math.isnan(seconds):  # NaN: no observation yet
                rank(labels).step_seconds[q] = seconds
    for labels, series in api.samples(f"{select(STEPS_TOTAL, **sel)}[{window}]", COUNT):
        life = rank(labels)
        life.steps = int(series[-1][1])
        life.steps_per_second, life.data_seconds = _per_second(series)
    for labels, series in api.samples(f"{select(SAMPLES_TOTAL, **sel)}[{window}]", COUNT):
        rank(labels).samples_per_second = _per_second(series)[0]
    return found
