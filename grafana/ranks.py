"""Across ranks: the Trial profile's ranks row (own step time as min / median / max, the spread
against TrainwatchRankStraggler's threshold, the slowest rank named) and the Fleet's straggler
table. A 64-rank trial reads as three lines, not 64 overlapping ones."""

from __future__ import annotations

from grafana.layout import Layout
from grafana.panels import Column, Panel, Query, table, timeseries
from grafana.promql import Promql
from prometheus.rulegen.alerts import straggling_ranks
from trainwatch.contract.alerts import RANK_STRAGGLER, SCALING_INEFFICIENT
from trainwatch.contract.promql import by, number, select

PER_TRIAL = by("experiment", "trial")
TRIAL = "{{experiment}}/{{trial}}"
STRAGGLERS_TABLE = "Straggling ranks"
OWN_STEP = ("Own step time: a rank's step time minus the phases in which it waits for the "
            "other ranks (thresholds.yaml selectors.rank_wait_phases)")


def add_ranks_row(layout: Layout, q: Promql, *trial_matchers: str) -> None:
    """The Trial profile's row for the trials ``trial_matchers`` pick (every rank of each)."""
    n, s = q.names, q.settings
    own = select(n.rank_step_mean, *trial_matchers)
    threshold = s.threshold(RANK_STRAGGLER)
    layout.row("Ranks")
    layout.add(timeseries("Step time across ranks", "s", [
        Query(f"min {PER_TRIAL} ({own})", f"{TRIAL} fastest rank"),
        Query(f"quantile {PER_TRIAL} (0.5, {own})", f"{TRIAL} median rank"),
        Query(f"max {PER_TRIAL} ({own})", f"{TRIAL} slowest rank"),
    ], description=f"{OWN_STEP}, over {s.rate_window}: the fastest, the median and the "
                   "slowest rank."), 10, 8)
    layout.add(timeseries("Slowest rank over median", "none", [
        Query(select(n.rank_spread, *trial_matchers), TRIAL),
    ], description=f"The slowest rank's own step time over the median rank's (1 = even); "
                   f"{RANK_STRAGGLER} fires above {number(threshold)} (thresholds.yaml).",
        threshold=(threshold, "red")), 7, 8)
    layout.add(_slowest(q, own), 7, 8)


def _slowest(q: Promql, own: str) -> Panel:
    ratio = (f"{own} / on (experiment, trial) group_left quantile {PER_TRIAL} (0.5, {own})")
    return table("Slowest rank", [Query(q.with_nodename(f"topk {PER_TRIAL} (1, {ratio})"))],
                 description="Per trial, the rank with the longest own step time, its node and "
                             "its own step time over the median rank's.",
                 columns=[Column("× median", "none",
                                 steps=((q.settings.threshold(RANK_STRAGGLER), "red"),))])


def stragglers_table(q: Promql, *trial_matchers: str) -> Panel:
    """The Fleet's list: TrainwatchRankStraggler's condition, without its `for` window."""
    s = q.settings
    return table(STRAGGLERS_TABLE, [Query(straggling_ranks(s, *trial_matchers))],
                 description=f"Ranks of live trials whose own step time is over "
                             f"{number(s.threshold(RANK_STRAGGLER))} times their trial's median "
                             f"rank's over {s.rate_window} ({RANK_STRAGGLER}, which also waits "
                             "its `for`).",
                 columns=[Column("× median", "none")])


def scaling_panel(q: Promql, *trial_matchers: str) -> Panel:
    """Scaling efficiency of the multi-rank trials that measured their single-rank limit."""
    n, s = q.names, q.settings
    threshold = s.threshold(SCALING_INEFFICIENT)
    return timeseries("Scaling efficiency", "percentunit", [
        Query(select(n.scaling_efficiency, *trial_matchers), TRIAL),
    ], description=f"Samples/s over (ranks × the single-rank step limit the trial measured, "
                   f"Trial.measure_step_limit), over {s.rate_window}; {SCALING_INEFFICIENT} fires "
                   f"below {number(threshold)} for multi-rank trials. It reads low while a "
                   "trial is younger than the window.", threshold=(threshold, "red"),
                      bad_below=True)
