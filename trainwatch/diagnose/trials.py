"""`trainwatch trials`: one row per run of a trial rank, running or ended, like the Fleet
dashboard's table for the running ones; the history back ``--since``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.promql import BY_TRIAL, rank_order
from trainwatch.diagnose import batched, loader_cause
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import (
    by_rank,
    first_value,
    selector,
)
from trainwatch.diagnose.lifetime import PHASE_SUM, STEP_SUM, lifetimes, shares_of, young_ranks
from trainwatch.diagnose.runs import RUNNING, RankKey, Run, find_runs
from trainwatch.diagnose.verdict import Measurements, decide
from trainwatch.promapi import ANY, COUNT, PrometheusAPI, largest
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

# How far back `trainwatch trials` looks without --since.
DEFAULT_SINCE = 3600.0


@dataclass
class TrialRow:
    """One run of one trial rank. ``state`` is one of trainwatch.diagnose.runs.STATES, the
    words `diagnose` uses; ``cause`` the verdict's kind (dataloader, gpu_bound, ...)."""

    experiment: str
    trial: str
    rank: str
    nodename: str | None
    steps_per_second: float | None  # running: over the rate window; else over its life
    dataloader_share: float | None
    gpu_busy: float | None  # the GPU-busy rule: SM activity where GPM reports it, else NVML
    push_age_seconds: float | None
    live: bool
    state: str = RUNNING
    pid: str | None = None
    started: float | None = None  # Unix time: its start (or first sample)
    ended: float | None = None  # its last push (or last sample); None while running
    steps: int | None = None
    cause: str | None = None
    mfu: float | None = None  # the MFU rule; None where unknown or the rank is younger than it
    # Its throughput against its baseline (trainwatch.diagnose.baseline): -0.23 is 23% slower
    vs_baseline: float | None = None
    vs_baseline_text: str = "no baseline"  # "−23%", "+4%", "no baseline"
    baseline: str | None = None  # the baseline's line, as diagnose prints it


def list_trials(api: PrometheusAPI, deployment: Deployment, experiment: str | None = None,
                since: float = DEFAULT_SINCE, now: float | None = None) -> list[TrialRow]:
    """Every run of a trial rank with samples in the last ``since`` seconds (of ``experiment``
    if given), running ones first, a rank's runs oldest first. Running means it pushed within the
    deployed TrainwatchTrialStale threshold and its last push was not a final one
    (trainwatch_trial_exit), as the alerts count it."""
    now = time.time() if now is None else now
    stale_after = deployment.threshold(TRIAL_STALE)
    runs = find_runs(api, since, experiment, now=now)
    window = parse_duration(deployment.names.window)
    # A run younger than the rate window under a key that ran before: its own samples only.
    restarted = {r.key for r in runs if r.current and now - r.start < window}
    current = _current(api, deployment, experiment, restarted)
    states = [run.state(stale_after, now) for run in runs]

    def ended(run: Run, state: str) -> bool:
        """Read over its life: not running, or no row of the scraped rates for it."""
        return state != RUNNING or not run.current or run.key not in current

    over = [run for run, state in zip(runs, states) if ended(run, state)]
    hosts = node_instances(api.pinned(now), since) if over else {}
    lives = dict(zip(map(id, over), _over_lives(api, deployment, over, hosts)))
    rows = []
    for run, state in zip(runs, states):
        row = lives[id(run)] if id(run) in lives else current[run.key]
        row.state, row.live, row.pid, row.nodename = state, state == RUNNING, run.pid, run.nodename
        row.started, row.ended = run.start, None if row.live else run.end
        row.push_age_seconds = now - run.end
        rows.append(row)
    return sorted(rows, key=lambda r: (not r.live, r.experiment, r.trial, rank_order(r.rank),
                                       r.started or 0))


def _cause(deployment: Deployment, shares: dict[str, float], gpu: float | None,
           mfu: float | None = None, node_cpu: float | None = None) -> str | None:
    """diagnose's finding, decided on the same figures: shares, node CPU, GPU busy, MFU."""
    if not shares:
        return None
    return decide(Measurements(shares, node_cpu, gpu_busy_recorded=gpu, mfu=mfu),
                  deployment.alerts).kind


def _current(api: PrometheusAPI, deployment: Deployment, experiment: str | None,
             restarted: set[RankKey]) -> dict[RankKey, TrialRow]:
    """The rows of the ranks whose group is scraped now, from the recorded rates."""
    n, sel = deployment.names, {"experiment": experiment}
    info = by_rank(api, selector(names.TRIAL_INFO, **sel))
    steps = by_rank(api, selector(n.steps_rate, **sel))
    counted = by_rank(api, selector(f"{names.STEPS}_total", **sel))  # STEPS: so far
    shares = by_rank(api, selector(n.phase_share, **sel))
    gpu = by_rank(api, f"avg {BY_TRIAL} ({selector(n.trial_gpu_busy, **sel)})")
    mfu = by_rank(api, f"max {BY_TRIAL} ({selector(n.mfu, **sel)})")
    cpu = by_rank(api, loader_cause.node_cpu(n.cpu_utilization, **sel))
    # A trial younger than the rate window: its own samples, not a rate that reads low.
    young = young_ranks(api, selector, n.window, **sel) | restarted
    lives = lifetimes(api, selector, n.window, **sel) if young else {}
    rows = {}
    for key, [(labels, _), *_] in info.items():
        rate = first_value(steps[key])
        phases = {lbl.get("phase", ""): v for lbl, v in shares[key]}
        # A young rank's MFU is a rate over a window its life does not fill: it reads low.
        utilization = None if key in young else first_value(mfu[key])
        if key in young and key in lives:
            rate, phases = lives[key].steps_per_second, lives[key].shares
        util = first_value(gpu[key])
        rows[key] = TrialRow(*key, labels.get("nodename"), rate,
                             phases.get(names.DATALOADER_NEXT), util, None, live=True,
                             cause=_cause(deployment, phases, util, utilization,
                                          first_value(cpu[key])),
                             mfu=utilization)
        so_far = first_value(counted[key])
        rows[key].steps = None if so_far is None else int(so_far)
    return rows


def node_instances(api: PrometheusAPI, since: float) -> dict[str, list[str]]:
    """Each node's exporter instances over the last ``since`` seconds (host_info)."""
    found: dict[str, list[str]] = {}
    for labels, _ in api.query(f"max by (instance, nodename) (max_over_time("
                               f"{HOST_INFO}[{max(1, math.ceil(since))}s]))"):
        found.setdefault(labels.get("nodename", ""), []).append(labels.get("instance", ""))
    return found


# What an ended run's row is read from, each at its last sample (where its counters hold the
# run's final values) and over its life, every ended run's in a few batched queries per figure
# (trainwatch.diagnose.batched): each read a template by rank whose MATCHERS its ranks'
# matchers replace, one item for the ranks that share it and an instant (a trial's ranks end in
# one scrape, and their lives round to the same range).
LIFE_READS = ("step_sums", "phase_sums", "steps", "gpu", "node_cpu", "mfu")
MATCHERS = "\x00matchers\x00"  # no PromQL string holds it: escape() writes \u0000
_KINDS = {"steps": COUNT}


def _life_reads(deployment: Deployment, run: Run, instances: list[str] | None = None
                ) -> dict[str, str]:
    """An ended or stopped run's reads (LIFE_READS; no MFU for a life shorter than the rate
    window, where it reads low). ``instances``: its node's exporters, when known; its node's
    CPU is then read from its one exporter's series alone (the same join, over one node's
    series instead of every node's), for its trial's ranks (the join keeps them apart)."""
    n = deployment.names
    cpu = selector(n.cpu_utilization, instance=instances[0]) if instances and len(
        instances) == 1 else n.cpu_utilization
    # Over its life, start to final push (not the minutes its group stayed after it).
    reads = {"step_sums": selector(STEP_SUM, MATCHERS),
             "phase_sums": selector(PHASE_SUM, MATCHERS),
             "steps": f"max {BY_TRIAL} ({selector(f'{names.STEPS}_total', MATCHERS)})",
             "gpu": (f"max {BY_TRIAL} (avg_over_time({selector(n.trial_gpu_busy, MATCHERS)}"
                     f"{run.life_range}))"),
             "node_cpu": loader_cause.node_cpu(f"avg_over_time({cpu}{run.life_range})",
                                               experiment=run.experiment, trial=run.trial)}
    filled = run.filled_life_range(n.window)
    if filled:  # MFU over its life, once the life fills a rate window
        reads["mfu"] = f"max {BY_TRIAL} (avg_over_time({selector(n.mfu, MATCHERS)}{filled}))"
    return reads


def _over_lives(api: PrometheusAPI, deployment: Deployment, runs: list[Run],
                hosts: dict[str, list[str]]) -> list[TrialRow]:
    """The ended or stopped runs' rows, each read at its last sample: a few batched queries
    per figure for all of them (``hosts``: each node's exporters, node_instances)."""
    reads = [_life_reads(deployment, run, hosts.get(run.nodename)) for run in runs]
    answers: list[dict[str, batched.Vector]] = [{} for _ in runs]
    for name in LIFE_READS:
        wanted = [i for i, read in enumerate(reads) if name in read]
        found = batched.in_groups(
            api, [(runs[i].key, (reads[i][name], runs[i].last)) for i in wanted],
            lambda matched, group: (group[0].replace(MATCHERS, matched), group[1]),
            _KINDS.get(name, ANY))
        for i, vector in zip(wanted, found):
            answers[i][name] = vector
    return [_life_row(deployment, run, answer) for run, answer in zip(runs, answers)]


def _life_row(deployment: Deployment, run: Run, answer: dict[str, batched.Vector]) -> TrialRow:
    """An ended or stopped run's row from its reads' answers (LIFE_READS)."""
    shares = shares_of(answer["step_sums"], answer["phase_sums"]).get(run.key, {})
    steps, gpu, node_cpu = (largest(answer[name]) for name in ("steps", "gpu", "node_cpu"))
    mfu = largest(answer["mfu"]) if "mfu" in answer else None
    rate = steps / run.seconds if steps is not None and run.seconds > 0 else None
    return TrialRow(*run.key, run.nodename, rate, shares.get(names.DATALOADER_NEXT), gpu, None,
                    live=False, steps=None if steps is None else int(steps),
                    cause=_cause(deployment, shares, gpu, mfu, node_cpu), mfu=mfu)
