"""The figures layer of `trainwatch diagnose`: one trial's figures from Prometheus, one report
per rank (identity, throughput, phases, GPUs, node CPU, alerts, the loader's evidence), and
what the decision reads besides them. No verdict is decided here: the decision layer
(trainwatch.diagnose.decision) reads these and decides, with trainwatch.diagnose.verdict."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwatch.contract import remedies
from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.promql import BY_TRIAL, TRIAL_LABELS, rank_key, rank_order, rank_sort_key
from trainwatch.contract.promql import select as selector
from trainwatch.contract.records import QUANTILES
from trainwatch.diagnose import loader_cause, rulesource, traces
from trainwatch.diagnose import mfu as mfus
from trainwatch.diagnose import verdict as verdicts
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.lifetime import Lifetime, lifetimes, young_ranks
from trainwatch.diagnose.ranks import RankSpread, TrialScaling, rank_spreads, trial_scalings
from trainwatch.diagnose.runs import Run
from trainwatch.diagnose.verdict import Verdict
from trainwatch.promapi import ANY, TIME, Kind, Labels, PrometheusAPI
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration


class UnknownTrial(LookupError):
    """No trial matches; the message lists the trials that do exist."""


def push_age(**labels: str | None) -> str:
    """Seconds since each matching rank last pushed (the Pushgateway's push_time_seconds)."""
    return f"time() - max {BY_TRIAL} ({selector('push_time_seconds', **labels)})"


def ended_ranks(api: PrometheusAPI, **labels: str | None) -> dict[tuple[str, str, str], str]:
    """The ranks whose final push said why they ended (``trainwatch_trial_exit``), however
    recent that push, each with its reason: not live, as the alerts count them."""
    return {rank_key(found): found.get("reason", "") for found, _ in
            api.query(selector(names.EXIT, **labels))}


@dataclass
class Gpu:
    uuid: str
    instance: str | None
    gpu: str | None
    utilization: float | None = None
    memory_used: float | None = None
    sm_active: float | None = None  # GPM (Hopper and newer) only
    tensor_active: float | None = None


# An ended run's alerts: those that fired during its life (trainwatch.diagnose.history).
FIRED = "fired during its run"


@dataclass
class AlertState:
    name: str
    state: str
    value: str


@dataclass
class RankReport:
    """Everything `trainwatch diagnose` says about one rank of a trial."""

    experiment: str
    trial: str
    rank: str
    nodename: str | None
    pid: str | None
    world_size: str | None
    window: str
    step_seconds: dict[str, float] = field(default_factory=dict)  # quantile -> seconds
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)  # largest share first
    gpus: list[Gpu] = field(default_factory=list)
    node_cpu: float | None = None
    push_age_seconds: float | None = None
    alerts: list[AlertState] = field(default_factory=list)
    verdict: Verdict | None = None
    # Set when the numbers above are over the rank's whole run instead of the rate window (it
    # is younger than the window, or stopped pushing): the seconds of samples they rest on.
    lifetime_seconds: float | None = None
    # The measured ceilings in samples/s (trial_instrumentation.limits), when the trial
    # measured them, and what they say.
    loader_limit: float | None = None
    step_limit: float | None = None
    limits_advice: str | None = None
    # Against the trial's other ranks (multi-rank trials only): own step time, its ratio to
    # the median rank's and the trial's stragglers.
    ranks: RankSpread | None = None
    # A multi-rank trial that measured its single-rank step limit: its scaling efficiency and
    # what holds it back (the same for every rank of the trial).
    scaling: TrialScaling | None = None
    # The run the report is about (trainwatch.diagnose.runs): its process, start, last push
    # and how it ended; None when read without the run history.
    run: Run | None = None
    # The rank's latest on-demand profiler trace (trainwatch profile), summarised.
    trace: traces.TraceSummary | None = None
    # A data-loader-bound rank: which of the loader's causes, with its figures (loader_cause).
    loader_cause: loader_cause.LoaderCause | None = None
    # Model FLOPs utilization (the MFU recording rule), or which of its parts is missing.
    mfu: mfus.Mfu | None = None
    # The window the recorded series and the dashboards average over, where ``window`` differs
    # (diagnose --window); None: the same.
    dashboard_window: str | None = None
    # The step histogram's finite upper bounds (its ``le``), seconds: the bucket a quantile
    # was interpolated inside; empty where not read.
    step_bounds: tuple[float, ...] = ()


def by_rank(api: PrometheusAPI, expr: str, kind: Kind = ANY
            ) -> dict[tuple[str, str, str], list[tuple[Labels, float]]]:
    grouped: dict[tuple[str, str, str], list[tuple[Labels, float]]] = defaultdict(list)
    for labels, value in api.query(expr, kind):
        if math.isnan(value):  # a ratio over a window without steps: no measurement
            continue
        grouped[rank_key(labels)].append((labels, value))
    return grouped


def first_value(rows: list[tuple[Labels, float]]) -> float | None:
    return rows[0][1] if rows else None


def scraped_trials(api: PrometheusAPI, experiment: str | None = None) -> list[Labels]:
    """trainwatch_trial_info of every trial rank Prometheus scrapes now, running or ended (of
    ``experiment`` if given): not only the live ones (rulegen's live_trials())."""
    rows = api.query(selector(names.TRIAL_INFO, experiment=experiment))
    return sorted((labels for labels, _ in rows), key=rank_sort_key)


def gather_figures(api: PrometheusAPI, deployment: Deployment, experiment: str,
                   trial: str | None = None, rank: str | None = None, *,
                   only: Collection[tuple[str, str, str]] | None = None,
                   starts: Mapping[tuple[str, str, str], float] | None = None
                   ) -> list[tuple[RankReport, RankFacts]]:
    """The figures of each rank of ``experiment``/``trial`` (every trial of the experiment when
    ``trial`` is None, every rank when ``rank`` is None; only the ranks ``only`` names, if
    given), and what the decision reads besides them; no verdict (trainwatch.diagnose.decision
    decides). A rank whose run started (``starts``) less than a rate window ago is read from
    its own samples, never from a rate that spans the run before it under the same key."""
    infos = scraped_trials(api, experiment)
    chosen = [i for i in infos
              if trial in (None, i.get("trial")) and rank in (None, i.get("rank"))
              and (only is None or rank_key(i) in only)]
    if not chosen:
        raise UnknownTrial(_unknown_message(api, infos, experiment, trial, rank))
    n, sel = deployment.names, {"experiment": experiment, "trial": trial}

    def recorded(record: str) -> dict[tuple[str, str, str], list[tuple[Labels, float]]]:
        """The recorded series; for a chosen rank they do not cover (rules deployed or
        re-rendered after its samples), the deployed rule's own expression, inline."""
        found = by_rank(api, selector(record, **sel))
        missing = {rank_key(i) for i in chosen} - {k for k, rows in found.items() if rows}
        for query, labels in deployment.queries.get(record, ()) if missing else ():
            for key, rows in by_rank(api, query).items():
                if key in missing:
                    found[key] += [({**row, **labels}, value) for row, value in rows]
        return found

    phases = recorded(n.phase_share)
    steps = recorded(n.step_quantile)
    steps_rate = recorded(n.steps_rate)
    buckets = by_rank(api, f"group by ({', '.join((*TRIAL_LABELS, 'le'))}) "
                           f"({selector(names.STEP_SECONDS + '_bucket', **sel)})")
    samples_rate = recorded(n.samples_rate)
    gpu_info = by_rank(api, selector(names.GPU_INFO, **sel))
    gpu_util = recorded(n.trial_gpu_utilization)
    gpu_mem = recorded(n.trial_gpu_memory_used)
    gpu_sm = recorded(n.trial_gpu_sm_active)
    gpu_tensor = recorded(n.trial_gpu_tensor_active)
    loader_limits = by_rank(api, selector(names.LOADER_LIMIT, **sel))
    step_limits = by_rank(api, selector(names.STEP_LIMIT, **sel))
    compute_threads = by_rank(api, selector(names.COMPUTE_THREADS, **sel))

    # The dashboard's and the alerts' measure: each averaged over the rate window.
    def window_avg(record: str) -> dict[tuple[str, str, str], list[tuple[Labels, float]]]:
        return by_rank(api, f"avg {BY_TRIAL} (avg_over_time({selector(record, **sel)}"
                            f"[{n.window}]))")

    gpu_avg, sm_avg, tensor_avg = (window_avg(n.trial_gpu_utilization),
                                   window_avg(n.trial_gpu_sm_active),
                                   window_avg(n.trial_gpu_tensor_active))
    busy_avg = by_rank(api, f"avg by ({', '.join((*TRIAL_LABELS, 'source'))}) (avg_over_time("
                            f"{selector(n.trial_gpu_busy, **sel)}[{n.window}]))")
    cpu = by_rank(api, loader_cause.node_cpu(n.cpu_utilization, **sel))
    age = by_rank(api, push_age(**sel))
    profiles = traces.gather(lambda expr: by_rank(api, expr),
                             lambda expr: by_rank(api, expr, TIME), **sel)
    utilizations = mfus.gather(lambda expr: by_rank(api, expr), n, **sel)
    loader_evidence = loader_cause.gather(lambda expr: by_rank(api, expr), n.window,
                                          {key: first_value(rows) for key, rows in cpu.items()},
                                          **sel)
    stale_after = deployment.threshold(TRIAL_STALE)
    ended = ended_ranks(api, **sel)
    stale = {key for key, rows in age.items() if rows[0][1] > stale_after} | set(ended)
    now = time.time() if api.at is None else api.at
    restarted = {key for key, start in (starts or {}).items()
                 if now - start < parse_duration(n.window)}
    young = (young_ranks(api, selector, n.window, **sel) | restarted) - stale
    lives = lifetimes(api, selector, n.window, **sel) if young or stale else {}
    loader_evidence.update(_young_loader_evidence(api, young, starts or {}, lives, now, cpu, sel))
    alert_index = AlertIndex(rulesource.alerts(api, deployment))
    instances = {labels.get("nodename"): labels.get("instance")
                 for labels, _ in api.query(HOST_INFO)}
    nodes = {rank_key(i): i.get("nodename") for i in infos}
    spreads = rank_spreads(api, deployment, experiment, trial, nodes)
    scalings = trial_scalings(api, deployment, experiment, trial, spreads, nodes)
    gathered = []
    for info in chosen:
        key = rank_key(info)
        r = RankReport(experiment, info.get("trial", ""), info.get("rank", ""),
                       info.get("nodename"), info.get("pid"), info.get("world_size"), n.window)
        if deployment.dashboard_window != n.window:
            r.dashboard_window = deployment.dashboard_window
        r.step_seconds = {q: v for labels, v in steps[key] for q in QUANTILES
                          if labels.get("quantile") == q}
        r.step_bounds = tuple(sorted(float(labels["le"]) for labels, _ in buckets[key]
                                     if labels.get("le", "+Inf") != "+Inf"))
        r.steps_per_second = first_value(steps_rate[key])
        r.samples_per_second = first_value(samples_rate[key])
        shares = {labels.get("phase", ""): v for labels, v in phases[key]}
        r.phases = sorted(shares.items(), key=lambda item: -item[1])
        r.gpus = _gpus(gpu_info[key], {"utilization": gpu_util[key], "memory_used": gpu_mem[key],
                                       "sm_active": gpu_sm[key],
                                       "tensor_active": gpu_tensor[key]})
        r.node_cpu, r.push_age_seconds = first_value(cpu[key]), first_value(age[key])
        r.loader_limit, r.step_limit = first_value(loader_limits[key]), first_value(step_limits[key])
        r.limits_advice = verdicts.limits_advice(r.loader_limit, r.step_limit)
        r.ranks, r.scaling = spreads.get(key), scalings.get(key[:2])
        r.trace = profiles.get(key)
        r.mfu = utilizations.get(key)
        r.alerts = alert_index.about(key, {g.uuid for g in r.gpus}, instances.get(r.nodename))
        facts = RankFacts(shares, (first_value(gpu_avg[key]), first_value(sm_avg[key]),
                                   first_value(tensor_avg[key]), *_busy(busy_avg[key])),
                          loader_evidence=loader_evidence.get(key),
                          compute_threads=first_value(compute_threads[key]))
        if key in stale:
            facts.over = STALE_RANK
            facts.life_steps = _from_lifetime(r, lives.get(key, Lifetime())).steps
            r.steps_per_second = r.samples_per_second = None  # it is not running
            facts.cleanup = remedies.DELETE_GROUP.format(
                pushgateway=_pushgateway(api), experiment=key[0], trial=key[1], rank=key[2])
            facts.exit_reason = ended.get(key)
        elif key in young and key in lives:  # not in lives: no raw samples here (a global
            # view holds the recorded rates only), which are all there is to go by
            facts.over = YOUNG_RANK
            facts.life_steps = _from_lifetime(r, lives.get(key, Lifetime())).steps
        gathered.append((r, facts))
    return gathered


# What a rank's figures are over: the rate window, its life so far (younger than the window),
# or its life up to its last push (ended, or stopped pushing).
WINDOW_RANK, YOUNG_RANK, STALE_RANK = "window", "young", "stale"


@dataclass
class RankFacts:
    """What the decision reads about a rank besides its report's own figures."""

    shares: dict[str, float]  # phase -> share, as recorded over the window
    # GPU utilization, SM activity and tensor activity averaged over the window, the GPU-busy
    # rule's value and its source (verdict.Measurements' order).
    gpu: tuple[float | None, float | None, float | None, float | None, str | None]
    over: str = WINDOW_RANK
    life_steps: int | None = None  # young or stale: the steps its figures rest on
    cleanup: str | None = None  # stale: the command that deletes its group
    exit_reason: str | None = None  # stale: what its final push said, if anything
    loader_evidence: loader_cause.LoaderEvidence | None = None
    compute_threads: float | None = None  # trainwatch_trial_compute_threads, if pushed


def _young_loader_evidence(api: PrometheusAPI, young: Collection[tuple[str, str, str]],
                           starts: Mapping[tuple[str, str, str], float],
                           lives: Mapping[tuple[str, str, str], Lifetime], now: float,
                           cpu: Mapping[tuple[str, str, str], list[tuple[Labels, float]]],
                           sel: Mapping[str, str | None]
                           ) -> dict[tuple[str, str, str], loader_cause.LoaderEvidence]:
    """A young rank's loader figures over its own life so far, not divided over a rate window
    it has not filled (one worker's 0.65 CPU-seconds/s read 0.27 at 75 s of a 5m window).
    Ranks of one age (to the second) share their queries: a trial's ranks start together."""
    by_age: dict[int, set[tuple[str, str, str]]] = defaultdict(set)
    for key in young:
        age = now - starts[key] if key in starts else lives.get(key, Lifetime()).data_seconds
        if age is not None and age > 0:
            by_age[max(1, math.ceil(age))].add(key)
    found: dict[tuple[str, str, str], loader_cause.LoaderEvidence] = {}
    for age, keys in by_age.items():
        evidence = loader_cause.gather(lambda expr: by_rank(api, expr), f"{age}s",
                                       {key: first_value(rows) for key, rows in cpu.items()},
                                       **sel)
        found.update({key: e for key, e in evidence.items() if key in keys})
    return found


def _busy(rows: list[tuple[Labels, float]]) -> tuple[float | None, str | None]:
    """The GPU-busy rule averaged over a rank's GPUs, and its source (joined with "+" where the
    rank's GPUs differ)."""
    if not rows:
        return None, None
    sources = "+".join(sorted({labels.get("source", "?") for labels, _ in rows}))
    return sum(value for _, value in rows) / len(rows), sources


def _from_lifetime(r: RankReport, life: Lifetime) -> Lifetime:
    """Put a young or stale rank's whole-run numbers into its report."""
    r.phases = sorted(life.shares.items(), key=lambda item: -item[1])
    r.step_seconds = dict(life.step_seconds)
    r.steps_per_second, r.samples_per_second = life.steps_per_second, life.samples_per_second
    r.lifetime_seconds = life.data_seconds
    return life


def _pushgateway(api: PrometheusAPI) -> str:
    """The Pushgateway's URL when Prometheus scrapes exactly one, else a placeholder."""
    instances = {labels.get("instance") for labels, _ in api.query("pushgateway_build_info")}
    return f"http://{instances.pop()}" if len(instances) == 1 else "http://PUSHGATEWAY"


def _gpus(info: list[tuple[Labels, float]],
          by_attr: dict[str, list[tuple[Labels, float]]]) -> list[Gpu]:
    """The rank's GPUs by uuid; a series without one (a server's broken answer) names none."""
    gpus = {labels["uuid"]: Gpu(labels["uuid"], None, None) for labels, _ in info
            if "uuid" in labels}
    for attr, rows in by_attr.items():
        for labels, value in rows:
            if "uuid" not in labels:
                continue
            gpu = gpus.setdefault(labels["uuid"], Gpu(labels["uuid"], None, None))
            gpu.instance, gpu.gpu = labels.get("instance"), labels.get("gpu")
            setattr(gpu, attr, value)
    return sorted(gpus.values(), key=lambda g: g.uuid)


class AlertIndex:
    """Alerts (as /api/v1/alerts lists them) indexed by the rank, GPU and node they are about,
    so that finding one rank's is a few lookups, not a scan of every alert (an experiment of
    3,000 ranks against 2,000 alerts took 1.5 s scanning)."""

    def __init__(self, alerts: list[dict[str, Any]]) -> None:
        self.alerts = alerts
        self.by_rank: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        self.by_uuid: dict[str, list[int]] = defaultdict(list)
        self.by_instance: dict[str, list[int]] = defaultdict(list)
        for i, alert in enumerate(alerts):
            labels = alert.get("labels", {})
            self.by_rank[rank_key(labels)].append(i)
            if (uuid := labels.get("uuid")) is not None:
                self.by_uuid[uuid].append(i)
            # A node's own alert: not a trial's on it, nor a GPU's (found by its uuid when it
            # is one of the rank's; another trial's GPU on a shared node is not the rank's).
            if ((instance := labels.get("instance")) and "trial" not in labels
                    and "uuid" not in labels):
                self.by_instance[instance].append(i)

    def about(self, key: tuple[str, str, str], uuids: set[str],
              instance: str | None) -> list[AlertState]:
        """Alerts about this rank, its GPUs or its node (a node's own, not a trial's on it)."""
        found = set(self.by_rank.get(key, ()))
        for uuid in uuids:
            found.update(self.by_uuid.get(uuid, ()))
        if instance:
            found.update(self.by_instance.get(instance, ()))
        mine = []
        for i in sorted(found):
            alert = self.alerts[i]
            labels = alert.get("labels", {})
            mine.append(AlertState(labels.get("alertname", "?"), alert.get("state", "?"),
                                   str(alert.get("value", ""))))
        return sorted(mine, key=lambda a: (a.state != "firing", a.name))


def alerts_about(alerts: list[dict[str, Any]], key: tuple[str, str, str], uuids: set[str],
                 instance: str | None) -> list[AlertState]:
    """Alerts about this rank, its GPUs or its node."""
    return AlertIndex(alerts).about(key, uuids, instance)


def _unknown_message(api: PrometheusAPI, infos: list[Labels], experiment: str,
                     trial: str | None, rank: str | None) -> str:
    wanted = f"{experiment}/{trial}" + (f" rank {rank}" if rank is not None else "")
    if infos:
        ranks: dict[str, list[str]] = defaultdict(list)
        for i in infos:
            ranks[i.get("trial", "")].append(i.get("rank", ""))
        known = [f"{t} (rank {', '.join(sorted(r, key=rank_order))})"
                 for t, r in sorted(ranks.items())]
        return (f"no trial {wanted} in Prometheus; trials of experiment {experiment}: "
                + ", ".join(known))
    experiments = sorted({labels.get("experiment", "") for labels in scraped_trials(api)})
    listed = ", ".join(experiments) if experiments else "none (no trial has pushed metrics)"
    return f"no experiment {experiment!r} in Prometheus; experiments: {listed}"
