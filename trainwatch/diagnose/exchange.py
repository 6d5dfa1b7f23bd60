"""Why a multi-rank trial's exchange is slow: a straggler, the loader, or the network.

A multi-rank trial under ``TrainwatchScalingInefficient``'s threshold spends the time outside
its single-rank step's own work (1 - its scaling efficiency: waiting for the other ranks, the
all-reduce, the loader) in one of these, tried in this order:

    a straggler (TrainwatchRankStraggler's measure)  -> named with its node and the phase its
                                                        extra time goes to; fix that rank
    the median rank's dataloader share over
    TrainwatchDataloaderBound's threshold            -> the loader
    a NIC of one of the trial's nodes sending or
    receiving at ``network_busy`` of its link speed  -> network-bound exchange
    none of these (or no link speed to compare with) -> the exchange, not shown bound by the
                                                        network's bandwidth

``network_busy`` is thresholds.yaml ``alerts.TrainwatchScalingInefficient.causes``, deployed as
that alert's ``cause_network_busy`` annotation; the NIC figures are the exporter's
``trainwatch_network_{receive,transmit}_bytes_total`` rates over ``trainwatch_network_speed_bytes``
(absent where the kernel reports no speed: loopback, many virtual NICs), joined to the trial's
ranks on ``nodename``.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from trainwatch.contract import causes as table
from trainwatch.contract import remedies
from trainwatch.contract.checks import EXCHANGE_CAUSES
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.promql import BY_TRIAL, by, on
from trainwatch.contract.promql import select as selector
from trainwatch.promapi import PrometheusAPI
from trial_instrumentation import names

STRAGGLER, LOADER, NETWORK, EXCHANGE = EXCHANGE_CAUSES
DIRECTIONS = (("receive", "trainwatch_network_receive_bytes_total"),
              ("transmit", "trainwatch_network_transmit_bytes_total"))
Straggler = tuple[str, str | None, float]  # (rank, node, own step time over the median rank's)


@dataclass(frozen=True)
class NicUse:
    """One direction of one NIC of a node over the rate window."""

    nodename: str
    device: str
    direction: str  # "receive" | "transmit"
    bytes_per_second: float
    speed: float | None  # link speed, bytes/s; None where the kernel reports none

    @property
    def busy(self) -> float | None:
        return None if not self.speed else self.bytes_per_second / self.speed

    def said(self) -> str:
        rate = f"{self.bytes_per_second / 1e6:.1f} MB/s"
        where = f"node {self.nodename} {self.device} {self.direction}s {rate}"
        busy = self.busy
        if busy is None or self.speed is None:
            return f"{where}, link speed unknown"
        return f"{where}, {busy:.0%} of its {self.speed / 1e6:,.0f} MB/s link"


@dataclass(frozen=True)
class PhaseExcess:
    """Where a straggler's extra time goes: its seconds per step in one phase against the
    median of the trial's other ranks."""

    phase: str
    seconds: float
    median: float


@dataclass(frozen=True)
class Exchange:
    """What holds a slow multi-rank trial back: ``cause`` (STRAGGLER, LOADER, NETWORK or
    EXCHANGE), ``why`` in words, ``evidence`` the figures that decided it, and its remedy
    (None for a straggler: its rank's report gives TrainwatchRankStraggler's)."""

    cause: str
    why: str
    evidence: str
    remedy: str | None


def decide(stragglers: Sequence[Straggler], excess: PhaseExcess | None,
           loader_share: float | None, nics: Sequence[NicUse],
           thresholds: Mapping[str, float | None], general: str) -> Exchange:
    """The cause, decided by the one table the recorded cause is rendered from
    (contract.causes.EXCHANGE): ``stragglers`` are the trial's ranks with their own step time
    over the median rank's, slowest first (only the slowest is compared: those over
    TrainwatchRankStraggler's threshold suffice), ``nics`` its nodes' NICs, ``thresholds``
    the table's by name (contract.causes.deployed; None: rules older than it, a cause it
    decides never holds), ``general`` the remedy when nothing narrower is shown
    (TrainwatchScalingInefficient's).

    >>> nic = NicUse("node-a", "eth0", "transmit", 1.2e9, 1.25e9)
    >>> at = {"straggler": 1.25, "dataloader_bound": 0.3, "network_busy": 0.6}
    >>> decide([], None, 0.1, [nic], at, "r").cause
    'network'
    >>> decide([], None, 0.1, [NicUse("node-a", "lo", "receive", 5e9, None)], at, "r").cause
    'exchange'
    """
    measured = [n for n in nics if n.busy is not None]
    busiest = max(measured, key=lambda n: n.busy or 0.0, default=None)
    cause = table.decide(table.EXCHANGE, {
        table.STRAGGLER_RATIO.name: stragglers[0][2] if stragglers else None,
        table.LOADER_SHARE.name: loader_share,
        table.TRIAL_NIC_BUSY.name: busiest.busy if busiest is not None else None}, thresholds)
    loader_threshold = thresholds.get(table.LOADER_BOUND_AT.name)
    network_busy = thresholds.get(table.EXCHANGE_NIC_AT.name)
    if cause == STRAGGLER:
        rank, node, ratio = stragglers[0]
        where = (f"its extra time is in {excess.phase}: {excess.seconds * 1000:.0f} ms a step "
                 f"against the other ranks' median {excess.median * 1000:.0f} ms"
                 if excess is not None else "no timed phase of it is slower than the others'")
        return Exchange(STRAGGLER,
                        f"a straggler: rank {rank} on node {node or '?'} takes {ratio:.2f}x "
                        "the median rank's own step time and every rank waits for it",
                        f"rank {rank}: {where}", None)
    if cause == LOADER and loader_share is not None and loader_threshold is not None:
        return Exchange(LOADER, f"the loader: the median rank waits {loader_share:.0%} of its "
                        "step in dataloader_next",
                        f"dataloader_next share {loader_share:.0%} (threshold "
                        f"{loader_threshold:.0%})", remedies.DATALOADER)
    if cause == NETWORK and busiest is not None and network_busy is not None:
        return Exchange(NETWORK, "the network: the exchange between ranks runs at the speed of "
                        "the trial's nodes' links",
                        f"{busiest.said()} (threshold {network_busy:.0%})",
                        remedies.EXCHANGE_NETWORK_BOUND)
    if busiest is not None:
        links = f"busiest link: {busiest.said()}"
        if network_busy is not None:
            links += f" (under the {network_busy:.0%} threshold)"
    else:
        fastest = max(nics, key=lambda n: n.bytes_per_second, default=None)
        links = ("no link speed known for the trial's nodes' NICs "
                 "(trainwatch_network_speed_bytes absent)"
                 + (f"; busiest: {fastest.said()}" if fastest is not None else ""))
    return Exchange(EXCHANGE, "the exchange between ranks: no straggler, no slow loader and no "
                    "link shown near its speed, so the time goes to the all-reduce (inside "
                    "train_batch when it overlaps backward) and waiting for ranks",
                    links, general)


def nic_uses(api: PrometheusAPI, window: str, nodes: Collection[str]) -> list[NicUse]:
    """Every NIC of ``nodes`` that moved bytes over ``window``, in both directions."""
    if not nodes:
        return []
    node_of = {labels.get("instance"): labels.get("nodename")
               for labels, _ in api.query(HOST_INFO)}
    speeds = {(labels.get("instance"), labels.get("device")): value for labels, value in
              api.query(f"max {by('instance', 'device')} (trainwatch_network_speed_bytes)")}
    found = []
    for direction, counter in DIRECTIONS:
        for labels, value in api.query(f"sum {by('instance', 'device')} "
                                       f"(rate({counter}[{window}])) > 0"):
            node = node_of.get(labels.get("instance"))
            if node is not None and node in nodes:
                key = (labels.get("instance"), labels.get("device"))
                found.append(NicUse(node, labels.get("device", "?"), direction, value,
                                    speeds.get(key) or None))
    return found


def phase_excess(api: PrometheusAPI, window: str, rank: tuple[str, str, str]
                 ) -> PhaseExcess | None:
    """The phase in which ``rank`` (experiment, trial, rank) spends the most time per step over
    the median of its trial's other ranks; None where it is slower in none."""
    sel = {"experiment": rank[0], "trial": rank[1]}
    per_step = (f"sum {by(*names.GROUPING_LABELS, 'phase')} "
                f"(rate({selector(f'{names.PHASE_SECONDS}_sum', **sel)}[{window}]))\n"
                f"/ {on(*names.GROUPING_LABELS)} group_left\n"
                f"sum {BY_TRIAL} (rate({selector(f'{names.STEP_SECONDS}_count', **sel)}"
                f"[{window}]))")
    mine: dict[str, float] = {}
    others: dict[str, list[float]] = defaultdict(list)
    for labels, value in api.query(per_step):
        if math.isnan(value):  # no step over the window
            continue
        phase = labels.get("phase", "")
        if labels.get("rank") == rank[2]:
            mine[phase] = value
        else:
            others[phase].append(value)
    excesses = [PhaseExcess(phase, seconds, statistics.median(others.get(phase) or [0.0]))
                for phase, seconds in mine.items()]
    slower = [e for e in excesses if e.seconds > e.median]
    return max(slower, key=lambda e: e.seconds - e.median, default=None)


def trial_nodes(nodes: Mapping[tuple[str, str, str], str | None]
                ) -> dict[tuple[str, str], set[str]]:
    """(experiment, trial) -> the nodes its ranks run on."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for key, node in nodes.items():
        if node:
            found[key[:2]].add(node)
    return found
