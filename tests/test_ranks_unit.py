"""trainwatch/diagnose/ranks.py without a stack: each rank's spread against the median rank and
a multi-rank trial's scaling, from a canned API that answers each exact query."""

from __future__ import annotations

from typing import Any

import pytest

from tests.frozen import assert_frozen
from trainwatch.contract import remedies
from trainwatch.contract.alerts import DATALOADER_BOUND, RANK_STRAGGLER, SCALING_INEFFICIENT
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import exchange
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.exchange import NicUse, PhaseExcess
from trainwatch.diagnose.ranks import RankSpread, TrialScaling, rank_spreads, trial_scalings

N = RecordNames("5m")
NAN = float("nan")
Series = list[tuple[dict[str, str], float]]


def labels(experiment: str, trial: str, rank: str | None = None) -> dict[str, str]:
    found = {"experiment": experiment, "trial": trial}
    return found | ({"rank": rank} if rank is not None else {})


class Canned:
    """An API that answers each exact query it was given an answer for, else nothing."""

    def __init__(self, answers: dict[str, Series]) -> None:
        self.answers, self.asked = answers, []

    def query(self, expr: str, kind: str = "any") -> Series:
        self.asked.append(expr)
        return self.answers.get(expr, [])


STRAGGLER_RULE = AlertRule(RANK_STRAGGLER, 1.25, "fix the straggler")
SCALING_RULE = AlertRule(SCALING_INEFFICIENT, 0.7, "scale better", causes={"network_busy": 0.6})
LOADER_RULE = AlertRule(DATALOADER_BOUND, 0.3, "feed it")
ALL = Deployment(N, {r.name: r for r in (STRAGGLER_RULE, SCALING_RULE, LOADER_RULE)})
NONE = Deployment(N, {})

OWN = 'trial:trainwatch_trial_step_seconds:own_mean_rate5m{experiment="x"}'
RATIO = (f"{OWN} / on (experiment, trial) group_left quantile by (experiment, trial) (0.5, "
         f"{OWN}) and on (experiment, trial) count by (experiment, trial) ({OWN}) > 1")


def spreads_api() -> Canned:
    return Canned({
        OWN: [(labels("x", "t", "0"), 0.2), (labels("x", "t", "1"), 0.36),
              (labels("x", "t", "2"), 0.3), (labels("x", "u", "0"), 0.11)],
        RATIO: [(labels("x", "t", "0"), 0.8), (labels("x", "t", "2"), 1.3),
                (labels("x", "t", "1"), 1.44), (labels("x", "t", "3"), 1.25),
                (labels("x", "t", "4"), NAN), (labels("x", "u", "0"), 1.0),
                (labels("x", "u", "1"), 1.0)],
    })


def test_stragglers_are_the_ranks_over_the_threshold_slowest_first_in_each_trial() -> None:
    nodes: dict[tuple[str, str, str], str | None] = {("x", "t", "1"): "node-b"}
    found = rank_spreads(spreads_api(), ALL, "x", None, nodes)  # type: ignore[arg-type]
    slow = (("1", "node-b", 1.44), ("2", None, 1.3))  # 1.25, exactly at it, is not over
    assert set(found) == {("x", "t", r) for r in "0123"} | {("x", "u", "0"), ("x", "u", "1")}
    assert found[("x", "t", "0")] == RankSpread(0.2, 0.8, 1.25, slow, "fix the straggler")
    assert found[("x", "t", "1")] == RankSpread(0.36, 1.44, 1.25, slow, "fix the straggler")
    assert found[("x", "u", "0")] == RankSpread(0.11, 1.0, 1.25, (), "fix the straggler")
    rank3 = found[("x", "t", "3")]  # a ratio without its own step time: NaN
    assert rank3.own_step_seconds != rank3.own_step_seconds and rank3.vs_median == 1.25
    assert_frozen(found[("x", "u", "0")])


def test_without_the_straggler_alert_no_rank_is_a_straggler() -> None:
    found = rank_spreads(spreads_api(), NONE, "x", None, {})  # type: ignore[arg-type]
    assert found[("x", "t", "1")] == RankSpread(0.36, 1.44, None, (), None)
    assert all(s.threshold is None and not s.stragglers for s in found.values())


def test_the_spread_is_asked_of_the_trial_it_names() -> None:
    api = Canned({})
    assert rank_spreads(api, ALL, "x", "t", {}) == {}  # type: ignore[arg-type]
    assert api.asked[0] == ('trial:trainwatch_trial_step_seconds:own_mean_rate5m'
                            '{experiment="x", trial="t"}')


RANKS = 'count by (experiment, trial) (trainwatch_trial_info{experiment="x"})'
LOADER = ('quantile by (experiment, trial) (0.5, trial_phase:trainwatch_trial_phase_seconds:'
          'share_rate5m{experiment="x", phase="dataloader_next"})')
EFFICIENCY = 'trial_ranks:trainwatch_trial_scaling_efficiency:ratio_rate5m{experiment="x"}'


class Exchange:
    """exchange's queries replaced: what each was asked, and canned answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.excess: list[tuple[Any, ...]] = []
        self.nics: list[tuple[Any, ...]] = []
        self.decided: list[tuple[Any, ...]] = []
        decide = exchange.decide

        def phase_excess(api: Any, window: str, rank: tuple[str, str, str]) -> PhaseExcess:
            self.excess.append((window, rank))
            return PhaseExcess("dataloader_next", 0.15, 0.04)

        def nic_uses(api: Any, window: str, nodes: set[str]) -> list[NicUse]:
            self.nics.append((window, nodes))
            return [NicUse(n, "eth0", "receive", 1.1e9, 1.25e9) for n in sorted(nodes)]

        def decided(*args: Any) -> exchange.Exchange:
            self.decided.append(args)
            return decide(*args)

        monkeypatch.setattr(exchange, "phase_excess", phase_excess)
        monkeypatch.setattr(exchange, "nic_uses", nic_uses)
        monkeypatch.setattr(exchange, "decide", decided)


def scaling_api() -> Canned:
    trials = ("slow", "net", "fine", "solo", "nan", "edge", "loader", "three")
    count = {"solo": 1.0, "three": 3.0}
    return Canned({
        RANKS: [(labels("x", t), count.get(t, 2.0)) for t in trials],
        LOADER: [(labels("x", "loader"), 0.55), (labels("x", "net"), 0.05)],
        EFFICIENCY: [(labels("x", "slow"), 0.41), (labels("x", "net"), 0.5),
                     (labels("x", "fine"), 0.93), (labels("x", "solo"), 0.2),
                     (labels("x", "nan"), NAN), (labels("x", "edge"), 0.7),
                     (labels("x", "loader"), 0.3), (labels("x", "lone"), 0.1),
                     (labels("x", "three"), 0.85)],
    })


def test_a_slow_trials_cause_is_decided_with_its_straggler_or_its_nodes_links(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ex = Exchange(monkeypatch)
    straggler = RankSpread(0.36, 1.44, 1.25, (("1", "node-b", 1.44), ("2", None, 1.3)))
    spreads = {("x", "slow", "0"): RankSpread(0.2, 0.8, 1.25, straggler.stragglers),
               ("x", "slow", "1"): straggler,
               ("x", "net", "0"): RankSpread(0.2, 1.0, 1.25)}
    nodes: dict[tuple[str, str, str], str | None] = {
        ("x", "net", "0"): "node-c", ("x", "net", "1"): "node-d", ("x", "slow", "1"): "node-b"}
    found = trial_scalings(scaling_api(), ALL, "x", None, spreads,  # type: ignore[arg-type]
                           nodes)
    # one rank ("solo"), none counted ("lone") and NaN: no scaling to speak of
    assert set(found) == {("x", t) for t in ("slow", "net", "fine", "edge", "loader", "three")}
    assert found[("x", "fine")] == TrialScaling(0.93, 0.7)
    assert found[("x", "three")] == TrialScaling(0.85, 0.7)
    assert found[("x", "edge")] == TrialScaling(0.7, 0.7)  # at the threshold: not under it
    slow = found[("x", "slow")]
    assert (slow.efficiency, slow.threshold, slow.cause, slow.remedy) == (
        0.41, 0.7, "straggler", None)
    assert slow.evidence == ("rank 1: its extra time is in dataloader_next: 150 ms a step "
                             "against the other ranks' median 40 ms")
    assert ex.excess == [("5m", ("x", "slow", "1"))]  # the slowest straggler only
    net = found[("x", "net")]
    assert (net.cause, net.remedy) == ("network", remedies.EXCHANGE_NETWORK_BOUND)
    assert ex.nics == [("5m", {"node-c", "node-d"}), ("5m", set())]  # net, then loader
    loader = found[("x", "loader")]
    assert (loader.cause, loader.remedy) == ("loader", remedies.DATALOADER)
    thresholds = {"straggler": 1.25, "dataloader_bound": 0.3, "network_busy": 0.6}
    assert [(a[2], a[4], a[5]) for a in ex.decided] == [
        (None, thresholds, "scale better"), (0.05, thresholds, "scale better"),
        (0.55, thresholds, "scale better")]
    assert ex.decided[0][:2] == (straggler.stragglers, PhaseExcess("dataloader_next", 0.15, 0.04))
    assert ex.decided[0][3] == [] and ex.decided[2][:2] == ((), None)


def test_without_the_scaling_alert_no_cause_is_sought(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = Exchange(monkeypatch)
    found = trial_scalings(scaling_api(), NONE, "x", None, {})  # type: ignore[arg-type]
    assert found[("x", "slow")] == TrialScaling(0.41, None)
    assert found[("x", "loader")] == TrialScaling(0.3, None)
    assert ex.decided == [] and ex.nics == [] and ex.excess == []
    assert_frozen(found[("x", "slow")])
