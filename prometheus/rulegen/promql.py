"""PromQL the recording rules and the alerts share; the selector helpers and label sets come from
the contract (trainwatch.contract.promql), which the dashboards and the CLI use too."""

from __future__ import annotations

from trainwatch.contract.promql import TRIAL_LABELS, by, number, on, select
from trial_instrumentation import names


def live_trials(trial_selector: str, stale_after_seconds: float) -> str:
    """One series per (experiment, trial, rank) that pushed within ``stale_after_seconds``, or,
    in pull mode (TRAINWATCH_PULL_PORT, no Pushgateway), was scraped within it.

    A trial never deletes its own group: its final push carries ``trainwatch_trial_exit``
    (clean, failed or terminated), and it has ended however fresh that push; a crashed or
    killed one left its group behind with an old ``push_time_seconds``; a group that
    `trainwatch gc` retired has no series. None of them is live. A pulled trial has no
    ``push_time_seconds``: its freshness is the timestamp of its last scraped sample, and its
    series go stale when its pod (target) goes away.
    """
    info = select("trainwatch_trial_info", trial_selector)
    exited = select(names.EXIT, trial_selector)
    return (f"((max {by(*TRIAL_LABELS)} (time() - {select('push_time_seconds', trial_selector)})"
            f" or max {by(*TRIAL_LABELS)} (time() - timestamp({info})))"
            f" < {number(stale_after_seconds)} unless {on(*TRIAL_LABELS)} {exited})")
