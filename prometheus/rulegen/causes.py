"""The causes behind two bottlenecks, recorded so the alerts can name them: why a data-loader-
bound rank's loader is slow (trainwatch/diagnose/loader_cause.py) and what holds a slow
multi-rank trial back (trainwatch/diagnose/exchange.py). Each is rendered from the table that
`trainwatch diagnose` evaluates (trainwatch/contract/causes.py), with the same thresholds
(thresholds.yaml ``causes``, TrainwatchCPUSaturated's, TrainwatchRankStraggler's,
TrainwatchDataloaderBound's, TrainwatchScalingInefficient's); each
record is one series per rank (or trial) with the ``cause`` label, value 1, and exists only
while the bottleneck it explains holds (the loader's share over its threshold, the scaling
efficiency under its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus.rulegen.settings import Settings, SettingsError
from trainwatch.contract import causes as table
from trainwatch.contract import figures
from trainwatch.contract.alerts import DATALOADER_BOUND, SCALING_INEFFICIENT
from trainwatch.contract.causes import (
    Cause,
    Constant,
    Decision,
    Derived,
    Figure,
    Predicate,
    disjoint,
)
from trainwatch.contract.figures import indent
from trainwatch.contract.promql import TRIAL_LABELS, by, number, on, select
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

_PER_TRIAL = tuple(label for label in TRIAL_LABELS if label != "rank")


def over_window(s: Settings, rate: str) -> str:
    """figures.over_window over the run_age record: the loader's figures are recorded in the
    trial group, after it (loader_figure_rules)."""
    return figures.over_window(rate, parse_duration(s.rate_window), RecordNames(s.rate_window).run_age)


def _labelled(expr: str, cause: str, labels: tuple[str, ...]) -> str:
    return (f'count {by(*labels, "cause")} (label_replace(\n{indent(expr)},\n'
            f'  "cause", "{cause}", "", ""))')


def _on_node(s: Settings, per_instance: str, ranks: str) -> str:
    """The figure of the node of each rank ``ranks`` selects: ``per_instance`` (by instance)
    joined through host_info."""
    trial, exporter = s.selector("trial"), s.selector("exporter")
    return (f"max {by(*TRIAL_LABELS)} (\n  ({select(names.TRIAL_INFO, trial)}\n"
            f"   and {on(*TRIAL_LABELS)} {ranks})\n"
            f"  * {on('nodename')} group_left ()\n  max {by('nodename')} (\n"
            f"    ({per_instance})\n    * {on('instance')} group_left (nodename)\n"
            f"    {select('trainwatch_host_info', exporter)}\n  )\n)")


def loader_worker_cpu(s: Settings) -> str:
    """Per rank: the CPU one DataLoader worker wants (figures.loader_worker_cpu, which
    `trainwatch diagnose` reads too), a young rank's CPU rates over its own age."""
    return figures.loader_worker_cpu(s.selector("trial"), s.rate_window,
                                     lambda rate: over_window(s, rate))


def render(decision: Decision, figures: Mapping[str, str], thresholds: Mapping[str, float],
           labels: tuple[str, ...], judged: str | None = None) -> str:
    """``decision`` (contract.causes) as one expression, a series per cause held, with its
    ``cause`` label: each cause its predicates ANDed, ``unless`` every earlier cause that a
    rank could also hold (contract.causes.disjoint; less the predicates the two share).
    ``figures``: each figure's PromQL by name,
    one series per ``labels`` (a rank, a trial), present only for those judged; ``judged``
    the ones a cause without predicates holds for."""
    on_key = on(*labels)

    def figure(f: Figure | Derived | float) -> str:
        if isinstance(f, (int, float)):
            return number(f)
        if isinstance(f, Figure):
            return figures[f.name]
        right = figure(f.right)
        if f.absent_is_zero:  # x / absent = x / 0
            right = f"{right} or {on_key} {figure(f.left)} * 0"
        matched = "" if isinstance(f.left, (int, float)) or isinstance(f.right, (int, float)) \
            else f" {on_key}"  # a number matches every series
        return f"({figure(f.left)} {f.op}{matched} ({right}))"

    def level(p: Predicate) -> str:
        if isinstance(p.level, Constant):
            return number(p.level.value)
        return number(thresholds[p.level.name])

    def holds(when: tuple[Predicate, ...]) -> str:
        if not when:
            assert judged is not None, "a cause without predicates and nothing judged"
            return judged
        return f"\nand {on_key}\n".join(f"{figure(p.figure)} {p.op} {level(p)}"
                                         for p in when)

    def rest(earlier: Cause, cause: Cause) -> tuple[Predicate, ...]:
        """What ``earlier`` asks beyond what ``cause`` already does."""
        more = tuple(p for p in earlier.when if p not in cause.when)
        assert more, f"{cause.name} can never hold: {earlier.name} holds wherever it does"
        return more

    found = []
    for i, cause in enumerate(decision.causes):
        earlier = "".join(f"\nunless {on_key} (\n{indent(holds(rest(c, cause)))}\n)"
                          for c in decision.causes[:i] if not disjoint(c, cause))
        found.append(_labelled(f"{holds(cause.when)}{earlier}", cause.name, labels))
    return "\nor\n".join(found)


def loader_cause(s: Settings, n: RecordNames) -> str:
    """Per data-loader-bound rank: too few workers, decode-bound, storage-bound, remote storage
    or latency-bound (contract.causes.LOADER)."""
    exporter, w = s.selector("exporter"), s.rate_window
    on_rank = on(*TRIAL_LABELS)
    # Only the data-loader-bound ranks are judged, and each figure is read for them alone
    # (most ranks of a fleet are not: the node joins then cost next to nothing).
    bound = (f"{select(n.phase_share, s.selector('dataloader_phase'))} > "
             f"{number(s.threshold(DATALOADER_BOUND))}")
    read = {
        table.WORKER_CPU.name: f"({n.loader_worker_cpu} and {on_rank} {bound})",
        table.NODE_CPU.name: _on_node(s, n.cpu_utilization, bound),
        table.CPU_COUNT.name: _on_node(s, figures.node_cpu_count(exporter), bound),
        table.DISK_BUSY.name: _on_node(s, figures.node_disk_busy(exporter, f"[{w}]"), bound),
        table.NODE_NIC_BUSY.name: _on_node(
            s, figures.node_nic_busy(n.device_rate("network_receive_bytes"), exporter), bound),
        table.READ_BYTES.name: n.loader_read_bytes,
        table.RCHAR.name: n.loader_rchar_bytes,
    }
    return render(table.LOADER, read, _thresholds(s, table.LOADER), TRIAL_LABELS)


def exchange_cause(s: Settings, n: RecordNames) -> str:
    """Per multi-rank trial under TrainwatchScalingInefficient's threshold: a straggler, the
    loader, the network or the exchange (contract.causes.EXCHANGE)."""
    trial, exporter = s.selector("trial"), s.selector("exporter")
    per_trial, on_trial = _PER_TRIAL, on(*_PER_TRIAL)
    # Each figure is read for the trials under the threshold alone (cheap: one record).
    under = f"{n.scaling_efficiency} < {number(s.threshold(SCALING_INEFFICIENT))}"
    speed = (f"max {by('instance', 'device')} "
             f"({select('trainwatch_network_speed_bytes', exporter)})")
    link = " or ".join(
        f'label_replace({n.device_rate(stem)} / {on("instance", "device")} {speed}, '
        f'"direction", "{direction}", "", "")'
        for direction, stem in (("receive", "network_receive_bytes"),
                                ("transmit", "network_transmit_bytes")))
    read = {
        table.STRAGGLER_RATIO.name: (
            f"max {by(*per_trial)} (\n  ({n.rank_step_mean} and {on_trial} {under})\n"
            f"  / {on_trial} group_left\n"
            f"  quantile {by(*per_trial)} (0.5, {n.rank_step_mean})\n)"),
        table.LOADER_SHARE.name: (
            f"quantile {by(*per_trial)} (0.5, "
            f"{select(n.phase_share, s.selector('dataloader_phase'))} and {on_trial} {under})"),
        table.TRIAL_NIC_BUSY.name: (
            f"max {by(*per_trial)} (\n  ({select(names.TRIAL_INFO, trial)} and {on_trial} "
            f"{under})\n  * {on('nodename')} group_left ()\n  max {by('nodename')} (\n"
            f"    max {by('instance')} ({link})\n"
            f"    * {on('instance')} group_left (nodename)\n"
            f"    {select('trainwatch_host_info', exporter)}\n  )\n)"),
    }
    slow = (f"{under}\nand {on_trial}\ncount {by(*per_trial)} "
            f"({select(names.TRIAL_INFO, trial)}) > 1")
    labelled = render(table.EXCHANGE, read, _thresholds(s, table.EXCHANGE), per_trial, under)
    return f"(\n{indent(labelled)}\n)\nand {on_trial}\n{slow}"


def _thresholds(s: Settings, decision: Decision) -> dict[str, float]:
    """The decision's thresholds as thresholds.yaml sets them (each required)."""
    found = table.deployed(decision, s.alerts)
    missing = [name for name, value in found.items() if value is None]
    if missing:
        raise SettingsError(f"{s.source}: thresholds {missing} of the causes are missing")
    return {name: value for name, value in found.items() if value is not None}


def loader_figure_rules(s: Settings) -> list[dict[str, Any]]:
    """The loader's per-rank figures, each raw series read once per evaluation: recorded in
    the trial group after its run_age record (a young rank's over its own age); the causes
    read these records."""
    n = RecordNames(s.rate_window)
    trial, w = s.selector("trial"), s.rate_window

    def rate(metric: str) -> str:
        return over_window(s, f"sum {by(*TRIAL_LABELS)} (rate({select(metric, trial)}[{w}]))")

    return [{"record": n.loader_worker_cpu, "expr": loader_worker_cpu(s)},
            {"record": n.loader_read_bytes, "expr": rate(f"{names.LOADER_READ_BYTES}_total")},
            {"record": n.loader_rchar_bytes, "expr": rate(f"{names.LOADER_RCHAR_BYTES}_total")}]


def cause_rules(s: Settings) -> list[dict[str, Any]]:
    n = RecordNames(s.rate_window)
    return [{"record": n.loader_cause, "expr": loader_cause(s, n)},
            {"record": n.exchange_cause, "expr": exchange_cause(s, n)}]
