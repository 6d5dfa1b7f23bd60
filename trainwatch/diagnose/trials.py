"""`trainwatch trials`: one row per live trial rank, like the Fleet dashboard's table."""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.diagnose.deployed import TRIAL_STALE, Deployment
from trainwatch.diagnose.lifetime import lifetimes, young_ranks
from trainwatch.diagnose.report import (
    BY_TRIAL,
    by_rank,
    ended_ranks,
    first_value,
    push_age,
    selector,
)
from trainwatch.promapi import PrometheusAPI
from trial_instrumentation import names


@dataclass
class TrialRow:
    experiment: str
    trial: str
    rank: str
    nodename: str | None
    steps_per_second: float | None
    dataloader_share: float | None
    gpu_utilization: float | None
    push_age_seconds: float | None
    live: bool


def list_trials(api: PrometheusAPI, deployment: Deployment,
                experiment: str | None = None) -> list[TrialRow]:
    """Every trial rank with trainwatch_trial_info (of ``experiment`` if given), live ones first;
    live means it pushed within the deployed TrainwatchTrialStale threshold and its last push
    was not a final one (trainwatch_trial_exit), as the alerts count it."""
    n, sel = deployment.names, {"experiment": experiment}
    info = by_rank(api, selector(names.TRIAL_INFO, **sel))
    steps = by_rank(api, selector(n.steps_rate, **sel))
    loader = by_rank(api, selector(n.phase_share, phase=names.DATALOADER_NEXT, **sel))
    gpu = by_rank(api, f"avg {BY_TRIAL} ({selector(n.trial_gpu_utilization, **sel)})")
    age = by_rank(api, push_age(**sel))
    ended = ended_ranks(api, **sel)
    stale_after = deployment.threshold(TRIAL_STALE)
    # A trial younger than the rate window: its own samples, not a rate that reads low.
    young = young_ranks(api, selector, n.window, **sel)
    lives = lifetimes(api, selector, n.window, **sel) if young else {}
    rows = []
    for key, [(labels, _), *_] in info.items():
        pushed = first_value(age[key])
        rate, share = first_value(steps[key]), first_value(loader[key])
        if key in young and key in lives:
            rate = lives[key].steps_per_second
            share = lives[key].shares.get(names.DATALOADER_NEXT)
        live = pushed is not None and pushed < stale_after and key not in ended
        rows.append(TrialRow(*key, labels.get("nodename"), rate if live else None, share,
                             first_value(gpu[key]), pushed, live=live))
    return sorted(rows, key=lambda r: (not r.live, r.experiment, r.trial, r.rank))
