"""Across the ranks of a trial: each rank's own step time against the median rank's, and the
straggler (TrainwatchRankStraggler's measure, read from the same recorded series)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from trainwatch.diagnose.deployed import RANK_STRAGGLER, Deployment
from trainwatch.promapi import PrometheusAPI

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


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def rank_spreads(api: PrometheusAPI, deployment: Deployment, experiment: str,
                 trial: str | None, nodes: dict[tuple[str, str, str], str | None]
                 ) -> dict[tuple[str, str, str], RankSpread]:
    """(experiment, trial, rank) -> its spread, for the trials of ``experiment`` (``trial``)
    that have more than one rank; ``nodes`` maps each rank to its node."""
    matchers = f'experiment="{_quoted(experiment)}"'
    if trial is not None:
        matchers += f', trial="{_quoted(trial)}"'
    own = f"{deployment.names.rank_step_mean}{{{matchers}}}"
    ratio = (f"{own} / on (experiment, trial) group_left quantile {_PER_TRIAL} (0.5, {own})"
             f" and on (experiment, trial) count {_PER_TRIAL} ({own}) > 1")
    owns = {_key(labels): value for labels, value in api.query(own)}
    rule = deployment.alerts.get(RANK_STRAGGLER)
    threshold = rule.threshold if rule is not None else None
    ratios = {_key(labels): value for labels, value in api.query(ratio) if not math.isnan(value)}
    slow: dict[tuple[str, str], list[tuple[str, str | None, float]]] = defaultdict(list)
    if threshold is not None:
        for key, value in ratios.items():
            if value > threshold:
                slow[key[:2]].append((key[2], nodes.get(key), value))
    return {key: RankSpread(owns.get(key, float("nan")), value, threshold,
                            tuple(sorted(slow[key[:2]], key=lambda s: -s[2])),
                            rule.remedy if rule is not None else None)
            for key, value in ratios.items()}


def _key(labels: dict[str, str]) -> tuple[str, str, str]:
    return labels.get("experiment", ""), labels.get("trial", ""), labels.get("rank", "")
