"""Why the loader is slow: the sub-verdict of a data-loader-bound rank, one of five causes, each
with the figures that decided it and only its own remedy.

The figures, each over the rate window: the trial's worker processes and their CPU seconds and
reads (pushed by ``trial_instrumentation.loader_processes``), and its node's CPU, disks and
NICs (the exporter, joined on ``nodename``). The thresholds are the deployed
``TrainwatchDataloaderBound`` alert's ``cause_*`` annotations (thresholds.yaml) and
``TrainwatchCPUSaturated``'s threshold.

    workers compute (CPU-busy)  node has idle cores      -> too few workers
                                node saturated           -> decode-bound
    workers wait                a local disk busy        -> storage-bound
                                rchar >> read_bytes and
                                a NIC near its speed     -> remote storage
                                none of these            -> latency-bound

decided by the one table the recorded cause is rendered from (contract.causes.LOADER); this
module gathers the figures and says them with the cause.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainwatch.contract import causes as table
from trainwatch.contract import figures as shared
from trainwatch.contract import remedies
from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND
from trainwatch.contract.checks import LOADER_CAUSE_THRESHOLDS, LOADER_CAUSES
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.promql import BY_TRIAL, matchers
from trainwatch.contract.promql import select as selector
from trainwatch.diagnose.deployed import AlertRule
from trainwatch.diagnose.runs import Run
from trainwatch.diagnose.verdict import Verdict
from trainwatch.promapi import Labels
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

# One host_info series per node: a global view of a sharded Prometheus holds a node's series
# once per shard that scraped it (its `prometheus_shard` label), and a join on `instance`
# against several would fail (many-to-many) or count the node twice.
HOSTS = f"max by (instance, nodename) ({HOST_INFO})"
TOO_FEW_WORKERS, DECODE_BOUND, STORAGE_BOUND, REMOTE_STORAGE, LATENCY_BOUND = LOADER_CAUSES
DATALOADER = "dataloader"  # the verdict this explains (contract.checks.CHECKS' kind)
Key = tuple[str, str, str]


@dataclass(frozen=True)
class LoaderEvidence:
    """A rank's loader figures over the rate window; None where no series answered."""

    workers: float | None = None  # most worker processes seen
    workers_cpu: float | None = None  # CPU seconds per second of all workers together
    main_cpu: float | None = None  # of the trial process itself
    node_cpu: float | None = None  # the node's busy CPU ratio
    cpu_count: float | None = None
    disk_busy: float | None = None  # the node's busiest disk: busy fraction
    read_bytes: float | None = None  # bytes/s the trial's block-device reads
    rchar: float | None = None  # bytes/s the trial's reads of any kind
    network_busy: float | None = None  # the node's busiest NIC: received bytes/s over speed
    workers_wait: float | None = None  # seconds per second the workers waited for a CPU

    # CPU one worker wanted, in seconds per second: what it ran plus what it waited for on a
    # run queue (a worker that computes on a saturated node runs little, waits much), over the
    # seconds the workers lived; with no workers, the trial process loads and its CPU is the
    # figure. The one expression the recorded figure is too (contract.figures.loader_worker_cpu).
    per_worker_cpu: float | None = None


@dataclass(frozen=True)
class LoaderCause:
    kind: str
    title: str
    evidence: str  # the figures that decided it
    remedy: str


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0%}"


def decide(e: LoaderEvidence, causes: Mapping[str, float],
           cpu_saturated: float) -> LoaderCause | None:
    """The cause (contract.causes.LOADER), or None where the trial pushed no loader figures (an
    older library, no /proc) or the thresholds are not deployed.

    >>> t = {"worker_busy": 0.5, "disk_busy": 0.6, "network_busy": 0.6, "rchar_over_read": 4}
    >>> one = LoaderEvidence(1, 0.97, 0.3, 0.5, 2, per_worker_cpu=0.97)
    >>> decide(one, t, 0.9).remedy.split(" (")[0]
    'Raise DataLoader num_workers from 1 to ~2'
    >>> decide(LoaderEvidence(2, 0.02, 0.1, 0.2, 2, 0.01, 0, 1e4, per_worker_cpu=0.01), t,
    ...        0.9).kind
    'latency_bound'
    """
    per_worker = e.per_worker_cpu
    if per_worker is None or e.workers is None or set(LOADER_CAUSE_THRESHOLDS) - set(causes):
        return None
    values = figures(e)
    kind = table.decide(table.LOADER, values, {
        **{t.name: causes.get(t.key) for t in table.LOADER.thresholds if t.key is not None},
        table.CPU_SATURATED_AT.name: cpu_saturated})
    if kind is None:  # a worker CPU that compares with nothing (NaN): the rule records none
        return None
    workers = int(e.workers)
    wanted = ""
    ran, waited = e.workers_cpu or 0.0, e.workers_wait
    if waited is not None and workers and ran + waited > 0:  # the figure split as its parts
        run, wait = per_worker * ran / (ran + waited), per_worker * waited / (ran + waited)
        wanted = f" ({run:.2f} run, {wait:.2f} waited for a CPU)"  # no "-0.00" of a float
    who = (f"{workers} worker{'s' if workers != 1 else ''}" if workers
           else "the trial process (no DataLoader workers)")
    busy = (f"{who} wanting {per_worker:.2f} CPU-seconds/s{' each' if workers > 1 else ''}"
            f"{wanted}, threshold {causes['worker_busy']:g}")
    cores = "?" if e.cpu_count is None else f"{e.cpu_count:g}"
    node = f"node CPU {_pct(e.node_cpu)} busy of {cores} cores"
    if kind == TOO_FEW_WORKERS:
        idle = table.evaluate(table.IDLE_CORES, values) or 0.0
        spare = math.floor(idle)
        remedy = remedies.LOADER_TOO_FEW_WORKERS.format(
            workers=workers, suggested=workers + spare, idle=spare)
        return LoaderCause(TOO_FEW_WORKERS, "too few workers",
                           f"{busy}; {node}, {idle:.1f} idle", remedy)
    if kind == DECODE_BOUND:
        return LoaderCause(DECODE_BOUND, "decoding on saturated CPUs",
                           f"{busy}; {node} (saturated at {cpu_saturated:.0%})",
                           remedies.LOADER_DECODE_BOUND)
    waiting = f"mostly waiting: {busy}"
    disk = f"busiest local disk {_pct(e.disk_busy)} busy (threshold {causes['disk_busy']:.0%})"
    reads = f"the trial reads {_rate(e.rchar)}, {_rate(e.read_bytes)} of it from block devices"
    if kind == STORAGE_BOUND:  # busy with the trial's reads
        return LoaderCause(STORAGE_BOUND, "local storage", f"{waiting}; {disk}; {reads}",
                           remedies.LOADER_STORAGE_BOUND)
    nic = (f"busiest NIC receiving at {_pct(e.network_busy)} of its link speed "
           f"(threshold {causes['network_busy']:.0%})")
    if kind == REMOTE_STORAGE:
        return LoaderCause(REMOTE_STORAGE, "remote storage", f"{waiting}; {disk}; {reads}; {nic}",
                           remedies.LOADER_REMOTE_STORAGE)
    return LoaderCause(LATENCY_BOUND, latency_title(workers),
                       f"{waiting}; {node}; {disk}; {nic}", remedies.LOADER_LATENCY_BOUND)


def figures(e: LoaderEvidence) -> dict[str, float | None]:
    """The evidence as the decision's figures (contract.causes.LOADER), by name."""
    return {table.WORKER_CPU.name: e.per_worker_cpu, table.NODE_CPU.name: e.node_cpu,
            table.CPU_COUNT.name: e.cpu_count, table.DISK_BUSY.name: e.disk_busy,
            table.READ_BYTES.name: e.read_bytes, table.RCHAR.name: e.rchar,
            table.NODE_NIC_BUSY.name: e.network_busy}


def latency_title(workers: int) -> str:
    """The latency cause's title: what waits, and on what it does not (the figures beside it
    may show a saturated node: the loader is not what wants those CPUs).

    >>> latency_title(0), latency_title(2)
    ('latency (the loader waits, not for a CPU, a busy disk or a busy NIC)', 'latency (the workers wait, not for a CPU, a busy disk or a busy NIC)')
    """
    who = "the workers wait" if workers else "the loader waits"
    return f"latency ({who}, not for a CPU, a busy disk or a busy NIC)"


def _rate(value: float | None) -> str:
    return "unknown" if value is None else f"{value / 1e6:.1f} MB/s"


def node_figure(per_node: str, **sel: str | None) -> str:
    """Each rank's node's figure: ``per_node`` (by instance, one series per instance) joined
    through host_info on the rank's nodename. Every side is one series per instance or node
    before it is joined, so a global view holding a node's series once per shard joins them
    as one (HOSTS)."""
    return (f"max {BY_TRIAL} ({selector(names.TRIAL_INFO, **sel)} * on(nodename) "
            f"group_left() max by (nodename) (({per_node}) * on(instance) "
            f"group_left(nodename) {HOSTS}))")


def node_cpu(cpu: str, **sel: str | None) -> str:
    """Each rank's node's CPU busy from ``cpu`` (the recorded CPU utilization, or an
    expression over it), one series per instance however many shards wrote it."""
    return node_figure(f"max by (instance) ({cpu})", **sel)


def gather(query: Callable[[str], Mapping[Key, list[tuple[Labels, float]]]], window: str,
           node_cpu: Mapping[Key, float | None], life: Run | None = None, /,
           **sel: str | None) -> dict[Key, LoaderEvidence]:
    """Every rank's evidence: a few queries (``query`` answers one by rank) for all ranks.

    Over the rate ``window`` ending now; with ``life``, over a run's own life instead (one
    window rule: from its start to its final push, never past it, however long its group
    stayed after): its counters' rates over ``window`` (which holds all its samples) made per
    second of that life by ``contract.figures.over_life``, the one scaling every figure here
    takes (the worker figure's too), and its node's figures over that life alone.
    """
    span = (shared.over_life(parse_duration(window), life.seconds) if life is not None
            else (lambda rate: rate))
    node_range = life.life_range if life is not None else f"[{window}]"

    def rate(metric: str, **labels: str) -> str:
        return span(f"sum {BY_TRIAL} (rate({selector(metric, **sel, **labels)}[{window}]))")

    def on_node(per_node: str) -> str:
        return node_figure(per_node, **sel)

    cpu = f"{names.LOADER_CPU_SECONDS}_total"
    queries = {
        "workers": f"max {BY_TRIAL} (max_over_time("
                   f"{selector(names.LOADER_WORKERS, **sel)}[{window}]))",
        "workers_cpu": rate(cpu, process=names.PROCESS_WORKERS),
        "workers_wait": rate(f"{names.LOADER_CPU_WAIT_SECONDS}_total"),
        "main_cpu": rate(cpu, process=names.PROCESS_MAIN),
        "read_bytes": rate(f"{names.LOADER_READ_BYTES}_total"),
        "rchar": rate(f"{names.LOADER_RCHAR_BYTES}_total"),
        # The node's figures as the cause rule reads them, over this window or life.
        "cpu_count": on_node(shared.node_cpu_count("")),
        "disk_busy": on_node(shared.node_disk_busy("", node_range)),
        "network_busy": on_node(shared.node_nic_busy(shared.device_rate(
            "trainwatch_network_receive_bytes_total", "", node_range), "")),
        # The figure the decision reads, as the recording rule records it.
        "per_worker_cpu": shared.loader_worker_cpu(matchers(**sel), window, span),
    }
    found = {name: query(expr) for name, expr in queries.items()}
    keys = {key for rows in found.values() for key, got in rows.items() if got}
    return {key: LoaderEvidence(node_cpu=node_cpu.get(key), **{
        name: rows[key][0][1] if rows.get(key) else None for name, rows in found.items()})
        for key in keys}


def explain(verdict: Verdict, evidence: LoaderEvidence | None,
            alerts: Mapping[str, AlertRule]) -> tuple[Verdict, LoaderCause | None]:
    """A data-loader verdict with its cause's remedy in place of the list of every loader fix,
    and the cause; any other verdict (or no evidence, or rules without the cause thresholds)
    unchanged, with None."""
    loader, cpu = alerts.get(DATALOADER_BOUND), alerts.get(CPU_SATURATED)
    if verdict.kind != DATALOADER or evidence is None or loader is None or cpu is None:
        return verdict, None
    cause = decide(evidence, loader.causes, cpu.threshold)
    if cause is None:
        return verdict, None
    return dataclasses.replace(verdict, remedy=cause.remedy), cause
