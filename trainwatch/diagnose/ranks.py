"""Across the ranks of a trial: each rank's own step time against the median rank's, and the
straggler (TrainwatchRankStraggler's measure, read from the same recorded series)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from trainwatch.contract import causes, remedies
from trainwatch.contract.alerts import RANK_STRAGGLER, SCALING_INEFFICIENT
from trainwatch.contract.promql import matchers as trial_matchers
from trainwatch.contract.promql import rank_key, select
from trainwatch.diagnose import exchange
from trainwatch.diagnose.deployed import Deployment
from trainwatch.promapi import PrometheusAPI
from trial_instrumentation import names

_PER_TRIAL = "by (experiment, trial)"


@dataclass(frozen=True)
class RankSpread:
    """One rank's own step time (step time minus its wait for the other ranks) and its ratio
    to the median rank's; ``stragglers`` are the trial's ranks over the deployed threshold, as
    (rank, node, ratio), slowest first."""

    own_step_seconds: float
    vs_median: float
    threshold: float | None
    stragglers: tuple[tuple[str, str | None, float], ...] = ()
    remedy: str | None = None


@dataclass(frozen=True)
class TrialScaling:
    """A multi-rank trial's scaling efficiency (samples/s over ranks x its measured
    single-rank step limit) and, when under the deployed threshold, what holds it back:
    ``cause`` is "straggler", "loader", "network" or "exchange" (trainwatch.diagnose.exchange),
    ``why`` says it in words, ``evidence`` gives the figures."""

    efficiency: float
    threshold: float | None
    cause: str | None = None  # exchange.STRAGGLER, LOADER, NETWORK or EXCHANGE
    why: str | None = None
    remedy: str | None = None
    evidence: str | None = None  # the figures that decided ``cause``


def trial_scalings(api: PrometheusAPI, deployment: Deployment, experiment: str,
                   trial: str | None, spreads: dict[tuple[str, str, str], RankSpread],
                   nodes: Mapping[tuple[str, str, str], str | None] | None = None
                   ) -> dict[tuple[str, str], TrialScaling]:
    """(experiment, trial) -> its scaling, for multi-rank trials that measured their limit;
    ``nodes`` maps each rank to its node (for the network figures of a slow exchange)."""
    n, matchers = deployment.names, trial_matchers(experiment=experiment, trial=trial)
    ranks = {rank_key(labels)[:2]: value for labels, value in api.query(
        f"count {_PER_TRIAL} ({names.TRIAL_INFO}{{{matchers}}})")}
    loader = {rank_key(labels)[:2]: value for labels, value in api.query(
        f'quantile {_PER_TRIAL} (0.5, {n.phase_share}{{{matchers}, '
        f'phase="{names.DATALOADER_NEXT}"}})')}
    rule = deployment.alerts.get(SCALING_INEFFICIENT)
    threshold = rule.threshold if rule is not None else None
    stragglers = {key[:2]: s.stragglers for key, s in spreads.items() if s.stragglers}
    on_nodes = exchange.trial_nodes(nodes or {})
    thresholds = causes.deployed(causes.EXCHANGE, deployment.alerts)
    result = {}
    for labels, value in api.query(f"{n.scaling_efficiency}{{{matchers}}}"):
        key = rank_key(labels)[:2]
        if math.isnan(value) or ranks.get(key, 0) < 2:
            continue
        scaling = TrialScaling(value, threshold)
        if threshold is not None and value < threshold:
            slow = stragglers.get(key, ())
            excess = (exchange.phase_excess(api, n.window, (*key, slow[0][0])) if slow
                      else None)
            nics = [] if slow else exchange.nic_uses(api, n.window, on_nodes.get(key, set()))
            found = exchange.decide(slow, excess, loader.get(key), nics, thresholds,
                                    rule.remedy if rule is not None else remedies.SCALING)
            scaling = TrialScaling(value, threshold, found.cause, found.why, found.remedy,
                                   found.evidence)
        result[key] = scaling
    return result


def rank_spreads(api: PrometheusAPI, deployment: Deployment, experiment: str,
                 trial: str | None, nodes: dict[tuple[str, str, str], str | None]
                 ) -> dict[tuple[str, str, str], RankSpread]:
    """(experiment, trial, rank) -> its spread, for the trials of ``experiment`` (``trial``)
    that have more than one rank; ``nodes`` maps each rank to its node."""
    own = select(deployment.names.rank_step_mean, experiment=experiment, trial=trial)
    ratio = (f"{own} / on (experiment, trial) group_left quantile {_PER_TRIAL} (0.5, {own})"
             f" and on (experiment, trial) count {_PER_TRIAL} ({own}) > 1")
    owns = {rank_key(labels): value for labels, value in api.query(own)}
    rule = deployment.alerts.get(RANK_STRAGGLER)
    threshold = rule.threshold if rule is not None else None
    ratios = {rank_key(labels): value for labels, value in api.query(ratio) if not math.isnan(value)}
    slow: dict[tuple[str, str], list[tuple[str, str | None, float]]] = defaultdict(list)
    if threshold is not None:
        for key, value in ratios.items():
            if value > threshold:
                slow[key[:2]].append((key[2], nodes.get(key), value))
    return {key: RankSpread(owns.get(key, float("nan")), value, threshold,
                            tuple(sorted(slow[key[:2]], key=lambda s: -s[2])),
                            rule.remedy if rule is not None else None)
            for key, value in ratios.items()}
