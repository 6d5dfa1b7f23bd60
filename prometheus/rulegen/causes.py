"""The causes behind two bottlenecks, recorded so the alerts can name them: why a data-loader-
bound rank's loader is slow (trainwatch/diagnose/loader_cause.py) and what holds a slow
multi-rank trial back (trainwatch/diagnose/exchange.py). The same decisions as `trainwatch
diagnose`, from the same thresholds (thresholds.yaml ``causes``, TrainwatchCPUSaturated's,
TrainwatchRankStraggler's, TrainwatchDataloaderBound's, TrainwatchScalingInefficient's); each
record is one series per rank (or trial) with the ``cause`` label, value 1, and exists only
while the bottleneck it explains holds (the loader's share over its threshold, the scaling
efficiency under its own).
"""

from __future__ import annotations

from typing import Any

from prometheus.rulegen.settings import Settings
from trainwatch.contract import figures
from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    RANK_STRAGGLER,
    SCALING_INEFFICIENT,
)
from trainwatch.contract.checks import EXCHANGE_CAUSES, LOADER_CAUSES
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
    return (f'count {by(*labels, "cause")} (label_replace(\n{_indent(expr)},\n'
            f'  "cause", "{cause}", "", ""))')


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


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
    """Per rank: the CPU one DataLoader worker wants, s/s (what the workers ran plus what they
    waited for on a run queue, over their count); with no workers, the trial process's own CPU
    (loader_cause.LoaderEvidence.per_worker_cpu)."""
    trial, w = s.selector("trial"), s.rate_window

    def rate(metric: str, *matchers: str) -> str:
        return f"sum {by(*TRIAL_LABELS)} (rate({select(metric, trial, *matchers)}[{w}]))"

    cpu = f"{names.LOADER_CPU_SECONDS}_total"
    workers = (f"max {by(*TRIAL_LABELS)} "
               f"(max_over_time({select(names.LOADER_WORKERS, trial)}[{w}]))")
    # The workers' CPU and run-queue wait summed in one pass (the two series differ in their
    # labels, so `or` keeps both; a trial without the wait counter sums its CPU alone).
    workers_cpu = select(cpu, trial, f'process="{names.PROCESS_WORKERS}"')
    waited = select(f"{names.LOADER_CPU_WAIT_SECONDS}_total", trial)
    wanted = (f"sum {by(*TRIAL_LABELS)} (\n  rate({workers_cpu}[{w}])\n"
              f"  or rate({waited}[{w}])\n)")
    main_cpu = rate(cpu, f'process="{names.PROCESS_MAIN}"')
    return over_window(s, f"{wanted}\n/ ({workers} > 0)\nor\n"
                          f"{main_cpu}\nand {on(*TRIAL_LABELS)} ({workers} == 0)")


def loader_cause(s: Settings, n: RecordNames) -> str:
    """Per data-loader-bound rank: too few workers, decode-bound, storage-bound, remote storage
    or latency-bound (loader_cause.decide's order and thresholds)."""
    exporter, w = s.selector("exporter"), s.rate_window
    t = s.alert(DATALOADER_BOUND).causes
    on_rank = on(*TRIAL_LABELS)
    # Only the data-loader-bound ranks are judged, and each figure is read for them alone
    # (most ranks of a fleet are not: the node joins then cost next to nothing).
    bound = (f"{select(n.phase_share, s.selector('dataloader_phase'))} > "
             f"{number(s.threshold(DATALOADER_BOUND))}")
    node_cpu = _on_node(s, n.cpu_utilization, bound)
    cores = _on_node(s, f"max {by('instance')} ({select('trainwatch_cpu_count', exporter)})",
                     bound)
    disk = _on_node(s, f"max {by('instance')} (rate("
                       f"{select('trainwatch_disk_io_time_seconds_total', exporter)}[{w}]))",
                    bound)
    nic = _on_node(s, f"max {by('instance')} (\n  {n.device_rate('network_receive_bytes')}\n"
                      f"  / {on('instance', 'device')} max {by('instance', 'device')} "
                      f"({select('trainwatch_network_speed_bytes', exporter)})\n)", bound)
    read_bytes, rchar = n.loader_read_bytes, n.loader_rchar_bytes
    worker = f"({n.loader_worker_cpu} and {on_rank} {bound})"
    busy = f"{worker} >= {number(t['worker_busy'])}"
    waiting = f"{worker} < {number(t['worker_busy'])}"
    # The node has a whole idle core and is not saturated: more workers would run.
    spare = (f"(1 - {node_cpu})\n* {cores}\n>= 1\n"
             f"and {on_rank}\n{node_cpu}\n< {number(s.threshold(CPU_SATURATED))}")
    # A local disk busy while the trial reads from block devices.
    local = (f"{disk}\n>= {number(t['disk_busy'])}\n"
             f"and {on_rank}\n{read_bytes} > 0")
    # Reads from elsewhere (rchar over read_bytes at the ratio, x/0 = +Inf, or no read_bytes)
    # with a NIC receiving near its speed.
    remote = (f"{rchar} > 0\nand {on_rank} (\n  {rchar} / {read_bytes} >= "
              f"{number(t['rchar_over_read'])}\n  or {rchar} unless {on_rank} {read_bytes}\n)\n"
              f"and {on_rank}\n{nic}\n>= {number(t['network_busy'])}")
    causes = dict(zip(LOADER_CAUSES, (
        f"{busy}\nand {on_rank} (\n{_indent(spare)}\n)",
        f"{busy}\nunless {on_rank} (\n{_indent(spare)}\n)",
        f"{waiting}\nand {on_rank} (\n{_indent(local)}\n)",
        (f"{waiting}\nand {on_rank} (\n{_indent(remote)}\n)\n"
         f"unless {on_rank} (\n{_indent(local)}\n)"),
        (f"{waiting}\nunless {on_rank} (\n{_indent(local)}\n)\n"
         f"unless {on_rank} (\n{_indent(remote)}\n)"))))
    return "\nor\n".join(_labelled(expr, cause, TRIAL_LABELS) for cause, expr in causes.items())


def exchange_cause(s: Settings, n: RecordNames) -> str:
    """Per multi-rank trial under TrainwatchScalingInefficient's threshold: a straggler, the
    loader, the network or the exchange (exchange.decide's order and thresholds)."""
    trial, exporter = s.selector("trial"), s.selector("exporter")
    per_trial, on_trial = _PER_TRIAL, on(*_PER_TRIAL)
    # Each figure is read for the trials under the threshold alone (cheap: one record).
    under = f"{n.scaling_efficiency} < {number(s.threshold(SCALING_INEFFICIENT))}"
    straggler = (f"count {by(*per_trial)} (\n  ({n.rank_step_mean} and {on_trial} {under})\n"
                 f"  / {on_trial} group_left\n"
                 f"  quantile {by(*per_trial)} (0.5, {n.rank_step_mean})\n"
                 f"  > {number(s.threshold(RANK_STRAGGLER))}\n)")
    loader = (f"quantile {by(*per_trial)} (0.5, "
              f"{select(n.phase_share, s.selector('dataloader_phase'))} and {on_trial} {under})\n"
              f"> {number(s.threshold(DATALOADER_BOUND))}")
    speed = (f"max {by('instance', 'device')} "
             f"({select('trainwatch_network_speed_bytes', exporter)})")
    link = " or ".join(
        f'label_replace({n.device_rate(stem)} / {on("instance", "device")} {speed}, '
        f'"direction", "{direction}", "", "")'
        for direction, stem in (("receive", "network_receive_bytes"),
                                ("transmit", "network_transmit_bytes")))
    network = (f"max {by(*per_trial)} (\n  ({select(names.TRIAL_INFO, trial)} and {on_trial} "
               f"{under})\n  * {on('nodename')} group_left ()\n  max {by('nodename')} (\n"
               f"    max {by('instance')} ({link})\n"
               f"    * {on('instance')} group_left (nodename)\n"
               f"    {select('trainwatch_host_info', exporter)}\n  )\n)\n"
               f">= {number(s.alert(SCALING_INEFFICIENT).causes['network_busy'])}")
    slow = (f"{under}\nand {on_trial}\ncount {by(*per_trial)} "
            f"({select(names.TRIAL_INFO, trial)}) > 1")
    conditions = [straggler, loader, network]
    causes = []
    for i, (cause, condition) in enumerate(zip(EXCHANGE_CAUSES, [*conditions, under])):
        earlier = "".join(f"\nunless {on_trial} (\n{_indent(c)}\n)" for c in conditions[:i])
        causes.append(_labelled(f"{condition}{earlier}", cause, per_trial))
    labelled = "\nor\n".join(causes)
    return f"(\n{_indent(labelled)}\n)\nand {on_trial}\n{slow}"


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
