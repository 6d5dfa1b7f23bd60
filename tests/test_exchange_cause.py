"""Why a multi-rank trial's exchange is slow: a straggler (named, with the phase its extra time
goes to), the loader, the network (a NIC of the trial's nodes near its link speed), or neither;
an unknown link speed never claims the network. Decided over figures, then end to end over
recorded series backfilled into a real Prometheus (this machine has no multi-node trial and no
NIC that reports a speed)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from benchmarks.stack import Prometheus, promtool, start_prometheus
from tests.test_diagnose import loaded_rules
from trainwatch.contract import remedies
from trainwatch.contract.alerts import SCALING_INEFFICIENT
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.exchange import (
    EXCHANGE,
    LOADER,
    NETWORK,
    STRAGGLER,
    NicUse,
    PhaseExcess,
    decide,
    nic_uses,
)
from trainwatch.diagnose.ranks import rank_spreads, trial_scalings
from trainwatch.promapi import PrometheusAPI

GBE10 = 1.25e9  # a 10 GbE link, bytes/s
BUSY_LINK = NicUse("node-a", "eth0", "transmit", 1.1e9, GBE10)  # 88%
IDLE_LINK = NicUse("node-a", "eth0", "receive", 0.1e9, GBE10)  # 8%
NO_SPEED = NicUse("node-a", "lo", "receive", 3e9, None)  # loopback: no speed
SLOW_RANK = ("1", "node-b", 1.8)


def at(dataloader_bound: float, network_busy: float | None) -> dict[str, float | None]:
    """The exchange decision's thresholds by name (contract.causes.EXCHANGE)."""
    return {"straggler": 1.25, "dataloader_bound": dataloader_bound,
            "network_busy": network_busy}


def test_a_straggler_is_named_with_its_node_and_where_its_extra_time_goes() -> None:
    excess = PhaseExcess("dataloader_next", 0.150, 0.040)
    found = decide([SLOW_RANK], excess, 0.1, [BUSY_LINK], at(0.3, 0.6), "general")
    assert found.cause == STRAGGLER and found.remedy is None  # the rank's report gives it
    assert "rank 1 on node node-b takes 1.80x" in found.why
    assert found.evidence == ("rank 1: its extra time is in dataloader_next: 150 ms a step "
                              "against the other ranks' median 40 ms")


def test_a_link_near_its_speed_is_the_network_with_only_its_own_remedy() -> None:
    found = decide([], None, 0.1, [IDLE_LINK, BUSY_LINK], at(0.3, 0.6), remedies.SCALING)
    assert found.cause == NETWORK and found.remedy == remedies.EXCHANGE_NETWORK_BOUND
    assert found.evidence == ("node node-a eth0 transmits 1100.0 MB/s, 88% of its 1,250 MB/s "
                              "link (threshold 60%)")
    for fix in ("gradient accumulation", "bucket_cap_mb", "PowerSGD", "larger batch per GPU",
                "NCCL_SOCKET_IFNAME"):
        assert fix in found.remedy  # type: ignore[operator]
    # Just under the threshold: not the network.
    under = NicUse("node-a", "eth0", "transmit", 0.59 * GBE10, GBE10)
    assert decide([], None, 0.1, [under], at(0.3, 0.6), "general").cause == EXCHANGE
    on_it = NicUse("node-a", "eth0", "transmit", 0.6 * GBE10, GBE10)
    assert decide([], None, 0.1, [on_it], at(0.3, 0.6), "general").cause == NETWORK


def test_the_busiest_link_is_the_one_nearest_its_speed_not_the_one_moving_most_bytes() -> None:
    """A 100 GbE link moving 2 GB/s (16%) beside a 1 GbE one at 96% of its speed: the slow link
    is full; the fast one at 3 GB/s (24%) beside the 1 GbE at 40% is the busier of the two."""
    fast = 12.5e9  # 100 GbE, bytes/s
    slow_link = 0.125e9  # 1 GbE
    found = decide([], None, 0.1, [NicUse("node-a", "ib0", "transmit", 2e9, fast),
                                   NicUse("node-b", "eth1", "receive", 0.12e9, slow_link)],
                   at(0.3, 0.6), "general")
    assert found.cause == NETWORK
    assert found.evidence.startswith("node node-b eth1 receives 120.0 MB/s, 96% of its 125 MB/s")
    found = decide([], None, 0.1, [NicUse("node-a", "ib0", "transmit", 3e9, fast),
                                   NicUse("node-b", "eth1", "receive", 0.05e9, slow_link)],
                   at(0.3, 0.6), "general")
    assert found.cause == EXCHANGE
    assert "busiest link: node node-b eth1 receives 50.0 MB/s, 40% of its" in found.evidence
    assert "ib0" not in found.evidence


def test_neither_a_straggler_nor_a_full_link_is_the_exchange_with_the_link_figures() -> None:
    found = decide([], None, 0.1, [IDLE_LINK], at(0.3, 0.6), "general")
    assert (found.cause, found.remedy) == (EXCHANGE, "general")
    assert "busiest link: node node-a eth0 receives 100.0 MB/s, 8% of its" in found.evidence
    assert "(under the 60% threshold)" in found.evidence


def test_an_unknown_link_speed_never_claims_the_network() -> None:
    found = decide([], None, 0.1, [NO_SPEED], at(0.3, 0.6), "general")
    assert found.cause == EXCHANGE and found.remedy == "general"
    assert found.evidence.startswith("no link speed known")
    assert "node node-a lo receives 3000.0 MB/s, link speed unknown" in found.evidence
    assert decide([], None, 0.1, [], at(0.3, 0.6), "general").cause == EXCHANGE
    # Rules that predate the threshold: never the network either.
    assert decide([], None, 0.1, [BUSY_LINK], at(0.3, None), "general").cause == EXCHANGE


def test_a_straggler_comes_first_then_the_loader_then_the_network() -> None:
    found = decide([SLOW_RANK], None, 0.5, [BUSY_LINK], at(0.3, 0.6), "general")
    assert found.cause == STRAGGLER
    found = decide([], None, 0.5, [BUSY_LINK], at(0.3, 0.6), "general")
    assert (found.cause, found.remedy) == (LOADER, remedies.DATALOADER)
    assert "dataloader_next share 50% (threshold 30%)" in found.evidence
    assert decide([], None, 0.3, [BUSY_LINK], at(0.3, 0.6), "general").cause == NETWORK


# --- end to end: recorded series in a real Prometheus, read by `diagnose`'s own queries ---

NODES = {"straggler": ("node-a", "node-b"), "network": ("node-c", "node-d"),
         "neither": ("node-e", "node-f"), "unknown": ("node-g", "node-h")}
STEP = 15  # seconds between samples
SPAN = 20 * 60  # seconds of samples, ending a minute ago


def _series(now: float) -> list[str]:
    """OpenMetrics lines: four 2-rank trials under the scaling threshold (efficiency 0.4), each
    on its own two nodes; one has a straggler, one a NIC at 88% of its speed, one a NIC at 8%,
    one NICs with no speed at 1.2 GB/s."""
    rules: dict[str, float] = {}  # metric{labels} -> value at time t (seconds since the first sample)
    for trial, nodes in NODES.items():
        t = f'experiment="x", trial="{trial}"'
        for rank, node in enumerate(nodes):
            r = f'{t}, rank="{rank}"'
            rules[f'trainwatch_trial_info{{{r}, nodename="{node}", pid="1{rank}"}}'] = 1.0
            slow = trial == "straggler" and rank == 1
            rules[f'trial:trainwatch_trial_step_seconds:own_mean_rate5m{{{r}}}'] = \
                0.36 if slow else 0.2
            rules[f'trial_phase:trainwatch_trial_phase_seconds:share_rate5m{{{r}, '
                  f'phase="dataloader_next"}}'] = 0.1
            # Phase seconds per step (2 steps/s): the straggler's loader takes 150 ms, others' 40.
            for phase, per_step in (("dataloader_next", 0.15 if slow else 0.04),
                                    ("train_batch", 0.16),
                                    ("wait_for_ranks", 0.0 if slow else 0.16)):
                rules[f'trainwatch_trial_phase_seconds_sum{{{r}, phase="{phase}"}}'] = \
                    -2 * per_step  # a rate (negative: per second, see below)
            rules[f'trainwatch_trial_step_seconds_count{{{r}}}'] = -2.0
            instance = f"{node}:9400"
            rules[f'trainwatch_host_info{{instance="{instance}", nodename="{node}"}}'] = 1.0
            rx = {"network": 1.1e9, "neither": 0.1e9, "unknown": 1.2e9}.get(trial, 0.05e9)
            rules[f'trainwatch_network_transmit_bytes_total{{instance="{instance}", '
                  f'device="eth0"}}'] = -rx
            rules[f'trainwatch_network_receive_bytes_total{{instance="{instance}", '
                  f'device="eth0"}}'] = -rx / 2
            if trial != "unknown":
                rules[f'trainwatch_network_speed_bytes{{instance="{instance}", '
                      f'device="eth0"}}'] = GBE10
        rules[f'trial_ranks:trainwatch_trial_scaling_efficiency:ratio_rate5m{{{t}}}'] = 0.4
    start = int(now) - SPAN - 60
    lines = []
    for series, value in rules.items():
        for i in range(SPAN // STEP + 1):
            # A negative value is a counter's rate per second: its value is rate x time.
            sample = -value * i * STEP if value < 0 else value
            lines.append(f"{series.replace(', ', ',')} {sample:.6g} {start + i * STEP}")
    return [*lines, "# EOF"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, float]]:
    workdir = tmp_path_factory.mktemp("exchange")
    now = time.time()
    source = workdir / "series.om"
    source.write_text("\n".join(_series(now)) + "\n")
    promtool("tsdb", "create-blocks-from", "openmetrics", source, workdir / "tsdb")
    with start_prometheus(workdir, {"global": {"scrape_interval": "1m"}}) as prom:
        yield prom, now - 60


def _scalings(recorded: tuple[Prometheus, float]) -> dict[str, tuple[str | None, str | None]]:
    prom, at = recorded
    api = PrometheusAPI(prom.url).pinned(at)
    deployment = Deployment.from_rules(loaded_rules())
    assert deployment.alerts[SCALING_INEFFICIENT].causes == {"network_busy": 0.6}
    nodes: dict[tuple[str, str, str], str | None] = {
        ("x", trial, str(rank)): node for trial, pair in NODES.items()
             for rank, node in enumerate(pair)}
    spreads = rank_spreads(api, deployment, "x", None, nodes)
    found = trial_scalings(api, deployment, "x", None, spreads, nodes)
    return {trial: (s.cause, s.evidence) for (_, trial), s in found.items()}


def test_diagnose_tells_straggler_network_and_neither_apart_over_recorded_series(
        recorded: tuple[Prometheus, float]) -> None:
    found = _scalings(recorded)
    assert {trial: cause for trial, (cause, _) in found.items()} == {
        "straggler": STRAGGLER, "network": NETWORK, "neither": EXCHANGE, "unknown": EXCHANGE}
    assert found["straggler"][1] == ("rank 1: its extra time is in dataloader_next: 150 ms a "
                                     "step against the other ranks' median 40 ms")
    assert found["network"][1] == ("node node-c eth0 transmits 1100.0 MB/s, 88% of its 1,250 "
                                   "MB/s link (threshold 60%)")
    assert "8% of its 1,250 MB/s link (under the 60% threshold)" in (found["neither"][1] or "")
    assert "link speed unknown" in (found["unknown"][1] or ""), found["unknown"]



def test_a_nodes_links_are_read_in_both_directions_each_named_for_its_own(
        recorded: tuple[Prometheus, float]) -> None:
    """Each NIC's receive and transmit rates, each under its own word (the fixture's receive
    rate is half its transmit one), and only for the nodes asked about."""
    prom, at = recorded
    api = PrometheusAPI(prom.url).pinned(at)
    found = sorted((u.nodename, u.device, u.direction, round(u.bytes_per_second / 1e6, 1),
                    u.speed) for u in nic_uses(api, "5m", {"node-c", "node-e"}))
    assert found == [("node-c", "eth0", "receive", 550.0, GBE10),
                     ("node-c", "eth0", "transmit", 1100.0, GBE10),
                     ("node-e", "eth0", "receive", 50.0, GBE10),
                     ("node-e", "eth0", "transmit", 100.0, GBE10)]
    assert nic_uses(api, "5m", set()) == []

# --- issue 36: what the mutation run of exchange.py showed untested ------------------------

def test_a_links_speed_is_rounded_to_the_nearest_mb_per_second_not_down() -> None:
    nic = NicUse("node-a", "ib0", "receive", 0.5e9, 1.9996e9)
    assert nic.said() == "node node-a ib0 receives 500.0 MB/s, 25% of its 2,000 MB/s link"
    with pytest.raises(AttributeError):  # frozen: hashable, one NIC's figures never edited
        nic.speed = 1.0  # type: ignore[misc]
    assert len({nic, NicUse("node-a", "ib0", "receive", 0.5e9, 1.9996e9)}) == 1


def test_a_link_of_speed_zero_is_a_link_of_unknown_speed() -> None:
    nic = NicUse("node-a", "eth1", "transmit", 2.3e6, 0.0)
    assert nic.busy is None
    assert nic.said() == "node node-a eth1 transmits 2.3 MB/s, link speed unknown"


def test_a_stragglers_phase_and_median_are_said_in_whole_milliseconds() -> None:
    found = decide([SLOW_RANK], PhaseExcess("train_batch", 1.2, 0.9), 0.1, [], at(0.3, 0.6), "g")
    assert found.evidence == ("rank 1: its extra time is in train_batch: 1200 ms a step against "
                              "the other ranks' median 900 ms")
    excess = PhaseExcess("train_batch", 1.2, 0.9)
    with pytest.raises(AttributeError):
        excess.median = 0.0  # type: ignore[misc]


class PerStep:
    """A Prometheus answering phase_excess's one query: seconds per step by rank and phase."""

    def __init__(self, rows: list[tuple[str, str, float]]) -> None:
        self.rows = rows

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        assert 'experiment="x"' in expr and 'trial="t"' in expr
        return [({"experiment": "x", "trial": "t", "rank": rank, "phase": phase}, value)
                for rank, phase, value in self.rows]


def _excess(rows: list[tuple[str, str, float]], rank: str = "1") -> PhaseExcess | None:
    from trainwatch.diagnose.exchange import phase_excess

    return phase_excess(PerStep(rows), "5m", ("x", "t", rank))  # type: ignore[arg-type]


def test_the_phase_a_straggler_loses_most_in_is_the_largest_difference_not_ratio() -> None:
    rows = [(rank, phase, value) for rank in ("0", "2", "3") for phase, value in
            (("train_batch", 0.25), ("to_device", 0.005))]
    rows += [("1", "train_batch", 0.30), ("1", "to_device", 0.02)]
    assert _excess(rows) == PhaseExcess("train_batch", 0.30, 0.25)
    # Nor the largest sum or product: 0.12 s against 0.02 loses more than 0.30 against 0.25.
    rows = [(rank, phase, value) for rank in ("0", "2") for phase, value in
            (("train_batch", 0.25), ("dataloader_next", 0.02))]
    rows += [("1", "train_batch", 0.30), ("1", "dataloader_next", 0.12)]
    assert _excess(rows) == PhaseExcess("dataloader_next", 0.12, 0.02)
    # The other ranks' median, whichever of them sorts above or below the straggler.
    rows = [("0", "train_batch", 0.2), ("2", "train_batch", 0.4), ("3", "train_batch", 0.5),
            ("1", "train_batch", 0.45)]
    assert _excess(rows) == PhaseExcess("train_batch", 0.45, 0.4)
    # A phase none of the others timed counts against nothing; a step-less NaN is no figure.
    rows = [("2", "checkpoint", float("nan")), ("0", "train_batch", 0.3),
            ("1", "train_batch", 0.2), ("1", "checkpoint", 0.5)]
    assert _excess(rows) == PhaseExcess("checkpoint", 0.5, 0.0)


def test_a_rank_is_found_by_its_value_whatever_string_object_holds_it() -> None:
    """Ranks past 9 as Prometheus's JSON hands them over: equal strings, other objects than
    the rank key's."""
    rows = [(str(rank), "train_batch", seconds) for rank, seconds in
            ((10, 0.2), (11, 0.5), (12, 0.25))]
    assert _excess(rows, rank="".join(["1", "1"])) == PhaseExcess(  # noqa: FLY002
        "train_batch", 0.5, 0.225)


def test_a_rank_slower_in_no_phase_has_no_excess() -> None:
    rows = [("0", "train_batch", 0.3), ("2", "train_batch", 0.3), ("1", "train_batch", 0.2),
            ("0", "to_device", 0.01), ("1", "to_device", 0.01)]
    assert _excess(rows) is None
    assert _excess([]) is None


def test_the_slowest_straggler_is_named_and_an_idle_link_is_never_the_busiest() -> None:
    # Only the slowest is compared: the next, under the threshold, changes nothing.
    found = decide([SLOW_RANK, ("2", "node-c", 1.1)], None, 0.1, [], at(0.3, 0.6), "g")
    assert found.cause == STRAGGLER
    assert "rank 1 on node node-b takes 1.80x" in found.why and "rank 2" not in found.why
    with pytest.raises(AttributeError):  # frozen: a decided cause is never edited
        found.remedy = "edited"  # type: ignore[misc]
    silent = NicUse("node-a", "eth1", "receive", 0.0, GBE10)
    found = decide([], None, 0.1, [silent, IDLE_LINK], at(0.3, 0.6), "g")
    assert found.evidence.startswith("busiest link: node node-a eth0 receives 100.0 MB/s")
