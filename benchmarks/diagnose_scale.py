"""`trainwatch diagnose` and `trainwatch trials` against a Prometheus holding a fleet's history:
how long each takes, end to end, as the user runs it (issue 35, "Fast at scale").

    .venv/bin/python -m benchmarks.diagnose_scale [--scale 1] [--runs 3] [--interval 30]
        [--sparse 600] [--phase-buckets none|default] [--cli-timeout SECONDS]
        [--profile over|all|none] [--cprofile] [--hold SECONDS] [--seed 0]

What Prometheus holds (``--scale`` multiplies every count; 1 is the issue's fleet):

- ``scale-1k``: 1,000 ranks running for 2 h, 8 trials of 125 ranks (world_size 125);
- ``scale-3k``: 3,000 ranks running for 90 min, 375 trials of 8 ranks; 10 of the trials failed
  an hour ago and were restarted under the same keys (two runs of each of their ranks);
- history: the rest of 10,000 runs, trials of 8 ranks in 40 experiments, started over the last
  7 days, each 3 min to 8 h long (log-uniform): 60% ended clean (the exit marker), 15% failed,
  10% terminated, 15% stopped without a word; 30% of the ones that did not end clean were
  restarted under the same key 1-10 min later. An ended run's group stays scraped for 1-10 min
  after its final push (until `trainwatch gc` retires it), a silent one for an hour.
- the nodes: 8 ranks (GPUs) a node, as many nodes as the running ranks fill; the history ran on
  the same nodes.

How it gets there. The series are the ones the library pushes (the real ``TrialCollector`` and
``LoaderProcessCollector`` rendered once, with one GPU and the model's FLOPs, phase buckets
``none`` by default: the fleet-scale setting) plus the Pushgateway's ``push_time_seconds`` and
``push_failure_time_seconds``, and per node the real ``trainwatch-exporter``'s page (8 fake
GPUs, benchmarks/fake_nvml.py). Their values follow each run's model (steps/s, batch, the
phases' shares: healthy, data-loader-bound or host-to-device-bound, DataLoader workers), so the
rules and `diagnose` read consistent figures.

- **Backfilled** (``promtool tsdb create-blocks-from openmetrics``): the pushed series of every
  run, and the recorded series the rules would have written over each run's life (the trial,
  quantile, GPU-per-trial and cause records per rank and trial, the node CPU record per node),
  computed from the same model, with ``trainwatch_host_info`` per node. Sampling: the identity
  series ``find_runs`` reads (``trainwatch_trial_info``, ``_start_time_seconds``,
  ``push_time_seconds``) every ``--interval`` over each run's whole life; the other pushed and
  the recorded series every ``--sparse`` seconds (600 by default: far fewer samples for old
  runs), plus the first and final samples of each run and every ``--interval`` over the last 6
  minutes (the rate window and a minute); the node series every 240 s.
- **Live**: from the last backfilled sample on, Prometheus scrapes the running ranks' groups
  from one Pushgateway-like page (``honor_labels``, job ``trainwatch_trial``) and every node's
  exporter page (job ``trainwatch-exporter``), every ``--interval`` (30 s), and evaluates the
  committed rules (prometheus/rules/*.yml) on them: the running ranks' recorded series of now
  are the rules' own. The backfill is written in two parts (the history, then the last minutes
  up to just before Prometheus starts), so the gap before the first scrape is short.

The cases, each run ``--runs`` times (one run only where the first took over 60 s) through
``.venv/bin/trainwatch ... --prometheus URL`` in a subprocess, output discarded, timed from the
start of the process to its exit; the table gives the median against the 5 s target. A case
over the target (``--profile all``: every case) is run once more with every Prometheus API call
timed (``PrometheusAPI.get`` wrapped in that process): the API time under each trainwatch
function, and by function and query shape; ``--cprofile`` adds a run under cProfile (where
trainwatch's own Python time goes). ``--hold`` keeps Prometheus and the live pages up at the
end, its URL printed, to run the CLI by hand.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Self

REPO = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 5.0
HOUR, DAY = 3600.0, 86400.0
RECENT = 360.0  # the last minutes sampled every --interval: the 5m rate window and a minute
NODE_SPARSE = 240.0  # node series: within the 5m lookback of any instant
ORIGIN = 8 * 86400.0  # the exporter's counters count from this long before the anchor
GPUS_PER_NODE = 8
REPEAT_UNDER = 60.0  # a case whose first run takes longer is run once
EXP_1K, EXP_3K = "scale-1k", "scale-3k"
JOB_TRIAL, JOB_EXPORTER = "trainwatch_trial", "trainwatch-exporter"
PEAK_FLOPS = 989.4e12  # the fake H100's dense bf16 peak (benchmarks/fake_nvml.py)
PHASES = ("dataloader_next", "to_device", "train_batch", "step_lr_schedulers", "from_device",
          "reduce_metrics")
# Each kind of run's share of step time per phase (in PHASES' order).
SHARES = {"healthy": (0.05, 0.04, 0.80, 0.02, 0.03, 0.06),
          "dataloader": (0.45, 0.04, 0.42, 0.01, 0.03, 0.05),
          "h2d": (0.04, 0.25, 0.50, 0.01, 0.15, 0.05)}
UUID = "GPU-{node:08d}-0000-0000-0000-{gpu:012d}"


# --- the fleet -------------------------------------------------------------------------------

@dataclass
class Run:
    """One trial process under one grouping key, as the benchmark makes it."""

    experiment: str
    trial: str
    rank: int
    world_size: int
    pid: int
    node: int
    start: float  # trainwatch_trial_start_time_seconds
    end: float | None  # its final push; None: running
    reason: str | None  # the final push's exit marker; None with ``end``: stopped silently
    retired: float | None  # its group's last scrape (gc, or the next run's push); None: running
    kind: str
    steps_per_second: float
    batch: int
    workers: int
    first: float = 0.0  # its first scrape (a multiple of the interval)
    last: float | None = None  # its last scrape; None: running

    @property
    def key(self) -> tuple[str, str, str]:
        return self.experiment, self.trial, str(self.rank)

    @property
    def gpu(self) -> int:
        return self.rank % GPUS_PER_NODE

    @property
    def step_mean(self) -> float:
        return 0.98 / self.steps_per_second  # 2% of the wall time between steps

    def alive(self, t: float) -> float:
        """Seconds of its life up to ``t``: what its counters (born at zero) have counted."""
        end = t if self.end is None else min(t, self.end)
        return max(0.0, end - self.start)


def grid_up(t: float, step: float) -> float:
    return math.ceil(t / step) * step


def grid_down(t: float, step: float) -> float:
    return math.floor(t / step) * step


@dataclass
class Fleet:
    runs: list[Run]
    nodes: int
    anchor: float  # the population's "now": every ended run was retired 15 min before it
    trials_1k: list[str]
    trial_3k: str

    def running(self) -> list[Run]:
        return [r for r in self.runs if r.end is None]


def _profile(rng: random.Random) -> tuple[str, float, int, int]:
    """A trial's kind, steps/s, batch and DataLoader workers."""
    kind = rng.choices(("healthy", "dataloader", "h2d"), (0.7, 0.2, 0.1))[0]
    workers = 2 if kind == "dataloader" else 4
    return kind, rng.uniform(2.0, 12.0), rng.choice((32, 64, 128, 256)), workers


def make_fleet(scale: float, interval: float, anchor: float, seed: int) -> Fleet:
    """Every run of the benchmark's Prometheus (see the module's docstring)."""
    rng = random.Random(seed)
    pids = itertools.count(10_000)
    runs: list[Run] = []
    slot = itertools.count()  # the running ranks fill the nodes in order

    def running(experiment: str, trial: str, ranks: int, start: float,
                profile: tuple[str, float, int, int]) -> None:
        kind, sps, batch, workers = profile
        for rank in range(ranks):
            # One rank per trial runs 15% slower (the straggler the spread rule reads).
            slow = 0.85 if rank == ranks - 1 and ranks > 1 else 1.0
            runs.append(Run(experiment, trial, rank, ranks, next(pids),
                            next(slot) // GPUS_PER_NODE, start + rng.uniform(0, 20), None,
                            None, None, kind, sps * slow, batch, workers))

    per_trial_1k = max(1, round(1000 * scale / 8))
    trials_1k = [f"t{i}" for i in range(8)]
    for trial in trials_1k:
        running(EXP_1K, trial, per_trial_1k, anchor - 2 * HOUR, _profile(rng))
    trials_3k = max(1, round(3000 * scale / 8))
    restarted = max(1, round(10 * scale))
    for i in range(trials_3k):
        trial, profile = f"t{i:04d}", _profile(rng)
        if i < restarted:  # failed an hour ago, restarted under the same keys
            failed_at = anchor - HOUR
            for rank in range(8):
                runs.append(Run(EXP_3K, trial, rank, 8, next(pids), rng.randrange(1 << 30),
                                anchor - 90 * 60 + rng.uniform(0, 20), failed_at, "failed",
                                anchor - 58 * 60 - interval, *profile))
            running(EXP_3K, trial, 8, anchor - 58 * 60, profile)
        else:
            running(EXP_3K, trial, 8, anchor - 90 * 60, profile)
    nodes = max(1, math.ceil(next(slot) / GPUS_PER_NODE))
    for run in runs:  # the failed first runs ran where their restarts run
        if run.end is not None:
            run.node = next(r.node for r in runs if r.key == run.key and r.end is None)

    total = max(len(runs), round(10_000 * scale))
    experiments = max(2, round(40 * scale))
    for index in itertools.count():
        if len(runs) >= total:
            break
        experiment, trial = f"sweep-{rng.randrange(experiments):02d}", f"h{index:05d}"
        ranks, node, profile = min(8, total - len(runs)), rng.randrange(nodes), _profile(rng)
        seconds = math.exp(rng.uniform(math.log(180), math.log(8 * HOUR)))
        start = rng.uniform(anchor - 7 * DAY + 600, anchor - 30 * 60 - seconds)
        while True:  # a run of every rank, and the restarts of a trial that did not end clean
            reason = rng.choices(("clean", "failed", "terminated", None), (60, 15, 10, 15))[0]
            end = start + seconds
            linger = rng.uniform(60, 600) if reason is not None else HOUR
            retired = min(end + linger, anchor - 15 * 60)
            again = reason != "clean" and rng.random() < 0.3 and len(runs) + 2 * ranks <= total
            restart = end + rng.uniform(60, 600)
            seconds = math.exp(rng.uniform(math.log(180), math.log(4 * HOUR)))
            if again and restart + seconds + 20 * 60 < anchor:
                retired = min(retired, restart - interval)
            else:
                again = False
            for rank in range(ranks):
                runs.append(Run(experiment, trial, rank, ranks, next(pids), node,
                                start + rng.uniform(0, 5), end + rng.uniform(0, 5), reason,
                                retired, *profile))
            if not again:
                break
            start = restart
    for run in runs:
        run.first = grid_up(run.start + 5, interval)
        run.last = None if run.retired is None else max(run.first,
                                                         grid_down(run.retired, interval))
    return Fleet(runs, nodes, anchor, trials_1k, "t0000")


# --- the series ------------------------------------------------------------------------------

def labels_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def rank_template(phase_buckets: str) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every series a rank pushes, from the library's own collectors: the
    grouping key's labels and the info's values as tokens, one GPU, the model's FLOPs."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from trial_instrumentation import names
    from trial_instrumentation.collector import TrialCollector, TrialState
    from trial_instrumentation.loader_processes import LoaderProcessCollector, process_tree

    key = {"experiment": "@E@", "trial": "@T@", "rank": "@R@"}
    state = TrialState(names.DEFAULT_BUCKETS, {"nodename": "@N@", "pid": "@P@",
                                               "world_size": "@W@"},
                       phase_buckets=() if phase_buckets == "none" else None,
                       started_at=time.time(), gpu_uuids=lambda: ["@U@"],
                       model_flops=("bf16", 1.0))
    for phase in PHASES:
        state.phase_histogram(phase).observe(0.01)
    state.step.observe(0.06)
    registry = CollectorRegistry()
    registry.register(TrialCollector(state, key))
    registry.register(LoaderProcessCollector(process_tree, key))
    found = []
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            found.append((sample.name, {k: v for k, v in sample.labels.items()
                                        if k not in key}))
    return found


Value = Callable[[float], float]


def _counter(run: Run, per_second: float) -> Value:
    return lambda t: per_second * run.alive(t)


def _gauge(value: float) -> Value:
    return lambda t: value


def push_time(run: Run) -> Value:
    """When the run last pushed (every 10 s from its start; its final push at its end)."""
    def value(t: float) -> float:
        if run.end is not None and t >= run.end:
            return run.end
        return run.start + 10 * math.floor(max(0.0, t - run.start) / 10)
    return value


def raw_value(run: Run, name: str, labels: dict[str, str]) -> Value:
    """The value model of one pushed series of ``run``."""
    sps, mean = run.steps_per_second, run.step_mean
    shares = dict(zip(PHASES, SHARES[run.kind]))
    share = shares.get(labels.get("phase", ""), 0.0)
    if name == "trainwatch_trial_phase_seconds_sum":
        return _counter(run, sps * mean * share)
    if name == "trainwatch_trial_phase_seconds_count":
        return _counter(run, sps)
    if name == "trainwatch_trial_phase_seconds_bucket":
        return _counter(run, sps if float(labels["le"]) >= mean * share else 0.0)
    if name == "trainwatch_trial_step_seconds_bucket":
        le = float(labels["le"])
        return _counter(run, sps * (0.0 if le < 0.8 * mean else 0.5 if le < 1.25 * mean
                                    else 1.0))
    if name == "trainwatch_trial_step_seconds_sum":
        return _counter(run, sps * mean)
    if name in ("trainwatch_trial_step_seconds_count", "trainwatch_trial_steps_total"):
        return _counter(run, sps)
    if name == "trainwatch_trial_samples_total":
        return _counter(run, sps * run.batch)
    if name == "trainwatch_trial_start_time_seconds":
        return _gauge(run.start)
    if name == "trainwatch_trial_model_flops_per_sample":
        return _gauge(mfu(run) * PEAK_FLOPS / (sps * run.batch))
    if name == "trainwatch_trial_loader_cpu_seconds_total":
        main = 0.3 if run.workers == 0 else 0.1
        return _counter(run, main if labels.get("process") == "main"
                        else run.workers * worker_cpu(run))
    if name == "trainwatch_trial_loader_workers":
        return _gauge(run.workers)
    if name == "trainwatch_trial_loader_cpu_wait_seconds_total":
        return _counter(run, 0.02 * run.workers)
    if name == "trainwatch_trial_loader_read_bytes_total":
        return _counter(run, 2e6)
    if name == "trainwatch_trial_loader_rchar_bytes_total":
        return _counter(run, 8e7)
    if name in ("trainwatch_trial_info", "trainwatch_trial_gpu_info"):
        return _gauge(1.0)
    return _gauge(0.0)  # push failures


def mfu(run: Run) -> float:
    return {"healthy": 0.45, "dataloader": 0.2, "h2d": 0.3}[run.kind]


def worker_cpu(run: Run) -> float:
    return 0.95 if run.kind == "dataloader" else 0.3


def instance(node: int) -> str:
    return f"node-{node:04d}:10910"


def nodename(node: int) -> str:
    return f"node-{node:04d}"


def recorded(run: Run, phase_buckets: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every per-rank record the committed rules write for ``run``
    (prometheus/rules/recording.yml), at the model's figures."""
    key = dict(zip(("experiment", "trial", "rank"), run.key))
    sps, mean = run.steps_per_second, run.step_mean
    gpu = {**key, "uuid": UUID.format(node=run.node, gpu=run.gpu),
           "instance": instance(run.node), "gpu": str(run.gpu)}
    busy = 0.9 if run.kind == "healthy" else 0.45
    out: list[tuple[str, dict[str, str], float]] = []
    for phase, share in zip(PHASES, SHARES[run.kind]):
        labels = {**key, "phase": phase}
        out.append(("trial_phase:trainwatch_trial_phase_seconds_sum:rate5m", labels,
                    sps * mean * share))
        out.append(("trial_phase:trainwatch_trial_phase_seconds:share_rate5m", labels, share))
        for q, f in (("0.5", 1.0), ("0.95", 1.3)):
            out.append(("trial_phase:trainwatch_trial_phase_seconds:quantile_rate5m",
                        {**labels, "quantile": q},
                        math.nan if phase_buckets == "none" else mean * share * f))
    for q, f in (("0.5", 1.0), ("0.95", 1.3)):
        out.append(("trial:trainwatch_trial_step_seconds:quantile_rate5m",
                    {**key, "quantile": q}, mean * f))
    out += [("trial:trainwatch_trial_step_seconds_sum:rate5m", key, sps * mean),
            ("trial:trainwatch_trial_step_seconds_count:rate5m", key, sps),
            ("trial:trainwatch_trial_steps:rate5m", key, sps),
            ("trial:trainwatch_trial_samples:rate5m", key, sps * run.batch),
            ("trial:trainwatch_trial_step_seconds:own_mean_rate5m", key, mean),
            ("trial_gpu:trainwatch_gpu_busy:ratio", {**gpu, "source": "sm_active"}, busy),
            ("trial_gpu:trainwatch_gpu_utilization:ratio", gpu, min(1.0, busy + 0.08)),
            ("trial_gpu:trainwatch_gpu_sm_active:ratio", gpu, busy),
            ("trial_gpu:trainwatch_gpu_tensor_active:ratio", gpu, busy * 0.6),
            ("trial_gpu:trainwatch_gpu_memory_used:ratio", gpu, 0.7),
            ("trial:trainwatch_gpu_peak_flops:sum", {**key, "precision": "bf16"}, PEAK_FLOPS),
            ("trial:trainwatch_trial_mfu:ratio_rate5m", {**key, "precision": "bf16"}, mfu(run)),
            ("trial:trainwatch_trial_loader_worker_cpu:rate5m", key,
             worker_cpu(run) + 0.02),
            ("trial:trainwatch_trial_loader_read_bytes:rate5m", key, 2e6),
            ("trial:trainwatch_trial_loader_rchar_bytes:rate5m", key, 8e7)]
    if run.kind == "dataloader":
        out.append(("trial:trainwatch_trial_loader_cause:info_rate5m",
                    {**key, "cause": "too_few_workers"}, 1.0))
    return out


def trial_recorded(run: Run) -> list[tuple[str, dict[str, str], float]]:
    """The per-trial records (no rank label) of a multi-rank trial, written with rank 0."""
    key = {"experiment": run.experiment, "trial": run.trial}
    return [("trial_ranks:trainwatch_trial_step_seconds:spread_rate5m", key, 1 / 0.85),
            ("trial_ranks:trainwatch_trial_mfu:ratio_rate5m", key, mfu(run))]


def node_cpu(node: int) -> float:
    return 0.2 + (node * 0.37) % 0.5


@dataclass
class Window:
    """The part of time one backfill file holds: samples in (lo, hi]; every ``interval`` from
    ``dense_from`` on, every ``sparse`` before (the identity series always every interval)."""

    lo: float
    hi: float
    dense_from: float
    interval: float
    sparse: float

    def grid(self, start: float, stop: float, step: float) -> Iterator[float]:
        """Multiples of ``step`` in [start, stop] within (lo, hi]."""
        t = grid_up(max(start, self.lo + 1e-3), step)
        stop = min(stop, self.hi)
        while t <= stop:
            yield t
            t += step

    def sampled(self, start: float, stop: float, step: float,
                extra: Iterable[float] = ()) -> list[float]:
        """Every ``step`` before dense_from, every interval after, and ``extra``: in [start,
        stop] and (lo, hi]."""
        times = set(self.grid(start, min(stop, self.dense_from), step))
        if self.dense_from <= stop:
            times.update(self.grid(max(start, self.dense_from), stop, self.interval))
        times.update(t for t in extra if start <= t <= stop and self.lo < t <= self.hi)
        return sorted(times)


@dataclass
class Written:
    """What one backfill file holds."""

    samples: int = 0
    series: Counter[str] = field(default_factory=Counter)  # scope -> series


def scope(run: Run) -> str:
    return run.experiment if run.experiment in (EXP_1K, EXP_3K) else "history"


def _fmt(value: float) -> str:
    return "NaN" if math.isnan(value) else f"{value:.10g}"


def write_backfill(out: IO[str], fleet: Fleet, template: list[tuple[str, dict[str, str]]],
                   exporter: list[tuple[str, str, float, bool]], window: Window,
                   phase_buckets: str) -> Written:
    """The OpenMetrics text of every series' samples in ``window``, each series' samples
    together and in order (what promtool wants), a key's runs one after the other."""
    written = Written()
    by_key: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for run in fleet.runs:
        by_key[run.key].append(run)
    for runs in by_key.values():
        runs.sort(key=lambda r: r.start)
        series: dict[str, list[str]] = defaultdict(list)
        for run in runs:
            _run_samples(series, run, template, window, phase_buckets)
        for text, samples in series.items():
            out.write("".join(f"{text} {sample}\n" for sample in samples))
            written.samples += len(samples)
        written.series[scope(runs[0])] += len(series)
    for node in range(fleet.nodes):  # the node's identity and its CPU record
        times = window.sampled(fleet.anchor - 7 * DAY - HOUR, window.hi, NODE_SPARSE)
        info = (f'trainwatch_host_info{{job="{JOB_EXPORTER}",instance="{instance(node)}",'
                f'nodename="{nodename(node)}"}}')
        cpu = (f'instance:trainwatch_cpu_utilization:ratio_rate5m{{instance='
               f'"{instance(node)}"}}')
        out.write("".join(f"{info} 1 {t:.0f}\n" for t in times))
        out.write("".join(f"{cpu} {node_cpu(node):.4f} {t:.0f}\n" for t in times))
        written.samples += 2 * len(times)
        written.series["nodes"] += 2 if times else 0
        # Its exporter's counters over the last minutes, so their rates span a whole window
        # from the first scrape on (the gauges are read at now only: the live page has them).
        dense = (list(window.grid(window.dense_from, window.hi, window.interval))
                 if window.dense_from <= window.hi else [])
        if not dense:
            continue
        target = f'job="{JOB_EXPORTER}",instance="{instance(node)}"'
        for name, labels, value, rate, counter in node_samples(exporter, node):
            if counter:
                text = f"{name}{{{labels + ',' if labels else ''}{target}}}"
                origin = fleet.anchor - ORIGIN
                out.write("".join(f"{text} {_fmt(value + rate * (t - origin))} {t:.0f}\n"
                                  for t in dense))
                written.samples += len(dense)
                written.series["nodes"] += 1
    out.write("# EOF\n")
    return written


def series_labels(run: Run, name: str, labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with what the run's identity series carry besides: its process on its node,
    or its GPU."""
    if name == "trainwatch_trial_info":
        labels.update(nodename=nodename(run.node), pid=str(run.pid),
                      world_size=str(run.world_size))
    elif name == "trainwatch_trial_gpu_info":
        labels["uuid"] = UUID.format(node=run.node, gpu=run.gpu)
    return labels


def _run_samples(series: dict[str, list[str]], run: Run,
                 template: list[tuple[str, dict[str, str]]], window: Window,
                 phase_buckets: str) -> None:
    last = window.hi if run.last is None else run.last
    ended = None if run.end is None else grid_up(run.end, window.interval)  # its final push,
    edges = [run.first, *(t for t in (run.last, ended) if t is not None)]  # as first scraped
    identity = list(window.grid(run.first, last, window.interval))
    raw = window.sampled(run.first, last, window.sparse, edges)
    if not identity and not raw:
        return
    key = dict(zip(("experiment", "trial", "rank"), run.key))
    job = {"job": JOB_TRIAL}
    for name, extra in template:
        labels = series_labels(run, name, {**key, **extra, **job})
        value = raw_value(run, name, extra)
        times = identity if name in ("trainwatch_trial_info",
                                     "trainwatch_trial_start_time_seconds") else raw
        series[f"{name}{{{labels_text(labels)}}}"].extend(
            f"{_fmt(value(t))} {t:.0f}" for t in times)
    group = labels_text({**key, **job})
    pushed = push_time(run)
    series[f"push_time_seconds{{{group}}}"].extend(f"{pushed(t):.3f} {t:.0f}" for t in identity)
    series[f"push_failure_time_seconds{{{group}}}"].extend(f"0 {t:.0f}" for t in raw)
    if ended is not None and run.reason is not None:  # the final push's marker, until retired
        marker = [t for t in raw if t >= ended]
        if marker:
            series[f'trainwatch_trial_exit{{{group},reason="{run.reason}"}}'].extend(
                f"1 {t:.0f}" for t in marker)
    # The records, while the run pushes (from its first rate window; an ended run's stop at
    # its final push: after it the rates are flat and the shares 0/0).
    stop = last if run.end is None else min(last, run.end)
    times = window.sampled(run.first + 60, stop, window.sparse)
    if not times:
        return
    records = recorded(run, phase_buckets)
    if run.rank == 0 and run.world_size > 1:
        records += trial_recorded(run)
    for name, labels, figure in records:
        text = _fmt(figure)
        series[f"{name}{{{labels_text(labels)}}}"].extend(f"{text} {t:.0f}" for t in times)


def promtool_blocks(source: Path, data: Path) -> None:
    from benchmarks.stack import require_binary

    # One block per 8 days (the default 2 h blocks would parse the file once per block).
    proc = subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from",
                           "openmetrics", "--max-block-duration=192h", str(source), str(data)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed on {source}:\n{proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")


# --- the live pages --------------------------------------------------------------------------

def exporter_template(workdir: Path) -> list[tuple[str, str, float, bool]]:
    """(name, labels text, value, is_counter) of every sample the real trainwatch-exporter
    serves over 8 fake GPUs; GPU uuids and the nodename left as tokens."""
    from prometheus_client.parser import text_string_to_metric_families

    from benchmarks.stack import http_get, start_trainwatch_exporter

    with start_trainwatch_exporter(workdir, fake_gpus=GPUS_PER_NODE) as exporter:
        status, body = http_get(exporter.url + "/metrics", timeout=30)
    if status != 200:
        raise RuntimeError(f"the exporter answered {status}")
    found = []
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = dict(sample.labels)
            if "uuid" in labels:
                labels["uuid"] = "@U" + labels["uuid"][-1] + "@"
            if "nodename" in labels:
                labels["nodename"] = "@N@"
            found.append((sample.name, labels_text(labels), float(sample.value),
                          family.type == "counter"))
    return found


def node_samples(exporter: list[tuple[str, str, float, bool]], node: int
                 ) -> list[tuple[str, str, float, float, bool]]:
    """(name, labels text, value at ORIGIN, rate per second, is_counter) of node ``node``'s
    exporter page: its nodename and GPU uuids in place, 96 cores."""
    found = []
    for name, tokens, value, counter in exporter:
        labels = tokens.replace("@N@", nodename(node))
        for gpu in range(GPUS_PER_NODE):
            labels = labels.replace(f"@U{gpu}@", UUID.format(node=node, gpu=gpu))
        if name == "trainwatch_cpu_count":
            value = 96.0
        found.append((name, labels, value, node_rate(name, labels, node) if counter else 0.0,
                      counter))
    return found


def node_rate(name: str, labels: str, node: int) -> float:
    """Per second, of the exporter's counters; 0 for the ones the readers do not rate."""
    busy = node_cpu(node)
    if name == "trainwatch_cpu_seconds_total":
        per_mode = {"user": 0.9 * busy, "system": 0.1 * busy, "idle": 1 - busy}
        mode = re.search(r'mode="([^"]+)"', labels)
        return 96 * per_mode.get(mode.group(1) if mode else "", 0.0)
    return {"trainwatch_network_receive_bytes_total": 2e8,
            "trainwatch_network_transmit_bytes_total": 1e8,
            "trainwatch_disk_read_bytes_total": 5e7, "trainwatch_disk_reads_completed_total": 400,
            "trainwatch_disk_io_time_seconds_total": 0.1,
            "trainwatch_gpu_energy_joules_total": 700.0}.get(name, 0.0)


class Pages:
    """The running ranks' Pushgateway groups on one page, and each node's exporter page, their
    counters moving with the runs' models."""

    def __init__(self, fleet: Fleet, template: list[tuple[str, dict[str, str]]],
                 exporter: list[tuple[str, str, float, bool]]) -> None:
        self.trial_lines: list[tuple[str, Value]] = []
        for run in fleet.running():
            key = dict(zip(("experiment", "trial", "rank"), run.key))
            live = {"job": JOB_TRIAL, "instance": ""}  # as the Pushgateway serves a group
            for name, extra in template:
                labels = series_labels(run, name, {**key, **extra, **live})
                self.trial_lines.append((f"{name}{{{labels_text(labels)}}} ",
                                         raw_value(run, name, extra)))
            group = labels_text({**key, **live})
            self.trial_lines.append((f"push_time_seconds{{{group}}} ", push_time(run)))
            self.trial_lines.append((f"push_failure_time_seconds{{{group}}} ", _gauge(0.0)))
        self.origin = fleet.anchor - ORIGIN
        self.node_static: list[bytes] = []
        self.node_counters: list[list[tuple[str, float, float]]] = []
        for node in range(fleet.nodes):
            static, counters = [], []
            for name, found, value, rate, _ in node_samples(exporter, node):
                text = f"{name}{{{found}}} " if found else f"{name} "
                if rate:
                    counters.append((text, value, rate))
                else:
                    static.append(f"{text}{_fmt(value)}\n")
            self.node_static.append("".join(static).encode())
            self.node_counters.append(counters)

    def trials(self) -> bytes:
        now = time.time()
        return "".join(f"{text}{_fmt(value(now))}\n" for text, value in self.trial_lines).encode()

    def node(self, node: int) -> bytes | None:
        if not 0 <= node < len(self.node_static):
            return None
        dt = time.time() - self.origin
        moving = "".join(f"{text}{_fmt(value + rate * dt)}\n"
                         for text, value, rate in self.node_counters[node])
        return self.node_static[node] + moving.encode()


class PageServer:
    """``/pushgateway/metrics`` and ``/node/<i>/metrics`` on one loopback port, in a thread."""

    def __init__(self, pages: Pages) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                body: bytes | None = None
                if path == "/pushgateway/metrics":
                    body = pages.trials()
                    outer.trial_scrapes += 1
                elif (found := re.fullmatch(r"/node/([0-9]{1,6})/metrics", path)):
                    body = pages.node(int(found.group(1)))
                self.send_response(200 if body is not None else 404)
                body = body if body is not None else b"not found\n"
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.trial_scrapes = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- Prometheus ------------------------------------------------------------------------------

def prometheus_config(port: int, nodes: int, interval: float) -> dict[str, Any]:
    every = f"{interval:g}s"
    return {"global": {"scrape_interval": every, "evaluation_interval": every},
            "rule_files": [str(REPO / "prometheus" / "rules" / "*.yml")],
            "scrape_configs": [
                {"job_name": "pushgateway", "honor_labels": True, "scrape_timeout": every,
                 "metrics_path": "/pushgateway/metrics",
                 "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                {"job_name": JOB_EXPORTER, "scrape_timeout": every,
                 "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                     "labels": {"__metrics_path__": f"/node/{node}/metrics",
                                                "instance": instance(node)}}
                                    for node in range(nodes)]}]}


def api_get(url: str, path: str, **params: str) -> Any:
    from trainwatch.promapi import PrometheusAPI

    return PrometheusAPI(url, timeout=120).get(path, **params)


def wait_live(url: str, targets: int, interval: float, timeout: float) -> float:
    """Wait until every target is up and every rule group (the once-a-minute quantiles aside:
    their records are backfilled up to the start) evaluated after a second scrape; the time of
    the first scrape."""
    from benchmarks.stack import wait_until

    def all_up() -> float | None:
        found = api_get(url, "query", query="count(up == 1)")["result"]
        return time.time() if found and int(float(found[0]["value"][1])) == targets else None

    up = wait_until(all_up, timeout=timeout, what="every target up", interval=1.0)

    def evaluated() -> bool:
        groups = api_get(url, "rules")["groups"]
        return bool(groups) and all(
            _unix(g.get("lastEvaluation", "")) > up + interval for g in groups
            if g.get("interval", 0) <= interval)

    wait_until(evaluated, timeout=timeout, what="an evaluation of every rule group after "
               "the second scrape", interval=1.0)
    return up


def _unix(stamp: str) -> float:
    """An RFC 3339 time from the rules API as Unix seconds (0 when absent)."""
    from datetime import datetime

    if not stamp or stamp.startswith("0001"):
        return 0.0
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp.replace("Z", "+00:00"))
    return datetime.fromisoformat(stamp).timestamp()


# --- the cases -------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    argv: list[str]
    series: int  # backfilled series of the runs it reads
    runs: int
    seconds: list[float] = field(default_factory=list)
    failure: str | None = None
    profile: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def trainwatch_cli() -> list[str]:
    """The installed console script, as the user runs it; else the module."""
    script = Path(sys.executable).parent / "trainwatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "trainwatch.cli"]


def time_case(case: Case, url: str, runs: int, timeout: float) -> None:
    for attempt in range(runs):
        start = time.perf_counter()
        try:
            done = subprocess.run([*trainwatch_cli(), *case.argv, "--prometheus", url],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=timeout, cwd=REPO, check=False)
        except subprocess.TimeoutExpired:
            case.failure = f"over {timeout:g} s (stopped)"
            return
        took = time.perf_counter() - start
        if done.returncode not in (0, 1):  # 1: a finding; 2: it could not
            case.failure = (f"exit {done.returncode} after {took:.1f} s: "
                            f"{done.stderr.decode(errors='replace').strip()[-300:]}")
            return
        case.seconds.append(took)
        print(f"    {case.name}: run {attempt + 1}: {took:.2f} s", flush=True)
        if took > REPEAT_UNDER:
            return


PROFILED = r"""
import cProfile, json, pstats, sys, time
from trainwatch.promapi import PrometheusAPI
from trainwatch.cli import main
out, python, argv, calls, real = sys.argv[1], sys.argv[2] == "1", sys.argv[3:], [], PrometheusAPI.get
def get(self, path, **params):
    start = time.perf_counter()
    try:
        return real(self, path, **params)
    finally:
        took, frame, chain = time.perf_counter() - start, sys._getframe(1), []
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("trainwatch.") and module != "trainwatch.promapi":
                chain.append(module.rsplit(".", 1)[-1] + "." + frame.f_code.co_name)
            frame = frame.f_back
        calls.append((took, path, params.get("query", ""), chain))
PrometheusAPI.get = get
profile = cProfile.Profile() if python else None
start = time.perf_counter()
try:
    if profile is not None:
        profile.enable()
    code = main(argv)
finally:
    wall = time.perf_counter() - start
    top = []
    if profile is not None:
        profile.disable()
        stats = pstats.Stats(profile).stats
        for (path, line, name), (_, calls_, tottime, cumtime, _) in sorted(
                stats.items(), key=lambda s: -s[1][2])[:10]:
            where = path.split("/site-packages/")[-1].split("/work/main/")[-1]
            top.append((tottime, cumtime, calls_, f"{where}:{line}({name})"))
    with open(out, "w") as sink:
        json.dump({"wall": wall, "calls": calls, "python": top}, sink)
sys.exit(code)
"""
# The functions every call goes through: not worth a line of their own.
ROOTS = {"cli.main", "cli._main", "cli.run"}


def shape(query: str) -> str:
    """A query with its label values and numbers taken out: one shape per kind of call."""
    query = re.sub(r'"[^"]*"', '"…"', query)
    return re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?s?\b", "N", query)


def profile_case(case: Case, url: str, timeout: float, workdir: Path,
                 python: bool = False) -> None:
    """One more run with every API call timed: the API time by the trainwatch function that
    asked (each function counts the calls made under it), and by the function and the query's
    shape, costliest first; ``python``: a second one under cProfile, its costliest functions
    (own time)."""
    lines = []
    for under_cprofile in (False, True) if python else (False,):
        doc = _profiled(case, url, timeout, workdir, under_cprofile)
        if isinstance(doc, str):
            lines.append(doc)
            continue
        if under_cprofile:
            lines.append(f"  under cProfile ({doc['wall']:.1f} s; it slows Python code down): "
                         "own time of the costliest functions")
            lines += [f"    {own:7.2f} s own, {cum:7.2f} s with callees, {n:9,} calls  {where}"
                      for own, cum, n, where in doc["python"]]
            continue
        calls = doc["calls"]
        total = sum(c[0] for c in calls)
        lines.append(f"profiled run {doc['took']:.1f} s (in the process {doc['wall']:.1f} s): "
                     f"{len(calls):,} API calls, {total:.1f} s waiting on Prometheus (HTTP and "
                     f"JSON), {doc['wall'] - total:.1f} s in trainwatch's own code")
        asked: dict[str, list[float]] = defaultdict(list)
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for seconds, path, query, chain in calls:
            for function in dict.fromkeys(chain):
                asked[function].append(seconds)
            where = " < ".join(chain[:2]) or "?"
            groups[(where, f"{path}: {shape(query)}" if query else path)].append(seconds)
        lines.append("  API time under each function (inclusive): " + ", ".join(
            f"{function} {sum(times):.1f} s ({len(times):,} calls)"
            for function, times in sorted(asked.items(), key=lambda a: -sum(a[1]))
            if function not in ROOTS)[:900])
        for (where, what), times in sorted(groups.items(), key=lambda g: -sum(g[1]))[:8]:
            lines.append(f"  {sum(times):7.1f} s {len(times):6,} calls (slowest "
                         f"{max(times):.2f} s)  {where}: {what[:150]}")
    case.profile = "\n".join(lines)


def _profiled(case: Case, url: str, timeout: float, workdir: Path,
              python: bool) -> dict[str, Any] | str:
    """The profiled run's record, or what went wrong."""
    out = workdir / "profile.json"
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", PROFILED, str(out), "1" if python else "0",
                               *case.argv, "--prometheus", url], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=timeout, cwd=REPO, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        return f"profiled run stopped after {timeout:g} s"
    if not out.exists():
        return (f"profiled run wrote nothing (exit {done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-300:]}")
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["took"] = time.perf_counter() - start
    return doc


# --- main ------------------------------------------------------------------------------------

def build(workdir: Path, fleet: Fleet, template: list[tuple[str, dict[str, str]]],
          exporter: list[tuple[str, str, float, bool]], window: Window, phase_buckets: str,
          name: str) -> Written:
    """One backfill file written, turned into blocks under workdir/tsdb, and removed."""
    source = workdir / f"{name}.om"
    started = time.perf_counter()
    with open(source, "w", buffering=1 << 20) as out:
        written = write_backfill(out, fleet, template, exporter, window, phase_buckets)
    size = source.stat().st_size
    generated = time.perf_counter() - started
    promtool_blocks(source, workdir / "tsdb")
    source.unlink()
    print(f"  {name}: {sum(written.series.values()):,} series, {written.samples:,} samples, "
          f"{size / 2**20:,.0f} MiB of OpenMetrics, written in {generated:.0f} s, blocks in "
          f"{time.perf_counter() - started - generated:.0f} s", flush=True)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies every run count (1: 1,000 + 3,000 ranks, 10,000 runs)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per case (median)")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="scrape and evaluation interval, and the identity series' cadence")
    parser.add_argument("--sparse", type=float, default=600.0,
                        help="cadence of the other series before the last 6 minutes")
    parser.add_argument("--phase-buckets", choices=("none", "default"), default="none")
    parser.add_argument("--cli-timeout", type=float,
                        help="the CLI's --timeout per API request (default: its own, 10 s)")
    parser.add_argument("--case-timeout", type=float, default=1800.0,
                        help="seconds one CLI run may take before it is stopped")
    parser.add_argument("--profile", choices=("over", "all", "none"), default="over",
                        help="which cases get a run with every API call timed (over: the ones "
                        "over the 5 s target)")
    parser.add_argument("--cprofile", action="store_true",
                        help="and a run under cProfile: where trainwatch's own time goes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hold", type=float, default=0.0,
                        help="keep Prometheus (and the live pages) up this long at the end")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop Prometheus on the way out
    if args.scale <= 0 or args.runs < 1 or args.interval < 1 or args.sparse < args.interval:
        parser.error("--scale > 0, --runs >= 1, --interval >= 1 and --sparse >= --interval")
    from benchmarks.http_load import proc_status
    from benchmarks.stack import Prometheus, free_port, require_binary

    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"diagnose_scale: scale {args.scale:g}, interval {args.interval:g} s, sparse "
          f"{args.sparse:g} s, phase buckets {args.phase_buckets}; load average {load}",
          flush=True)
    anchor = time.time()
    fleet = make_fleet(args.scale, args.interval, anchor, args.seed)
    template = rank_template(args.phase_buckets)
    counts = Counter(scope(r) for r in fleet.runs)
    print(f"  runs: {len(fleet.runs):,} ({counts[EXP_1K]:,} {EXP_1K}, {counts[EXP_3K]:,} "
          f"{EXP_3K}, {counts['history']:,} history; {len(fleet.running()):,} running), "
          f"{fleet.nodes:,} nodes, {len(template)} pushed series a rank", flush=True)
    with tempfile.TemporaryDirectory(prefix="diagnose_scale-") as tmp:
        workdir = Path(tmp)
        exporter = exporter_template(workdir)
        # The history: everything up to 6 minutes before now, the last minutes sampled sparse.
        history_end = anchor - RECENT
        written = build(workdir, fleet, template, exporter,
                        Window(-math.inf, history_end, math.inf, args.interval, args.sparse),
                        args.phase_buckets, "history")
        # The last minutes, up to now: the running ranks and the nodes, dense from 6 min ago.
        recent_end = grid_down(time.time(), args.interval)
        # Its series are the running ranks' and the nodes' again: only its samples count.
        written.samples += build(workdir, fleet, template, exporter,
                                 Window(history_end, recent_end, recent_end - RECENT,
                                        args.interval, args.sparse),
                                 args.phase_buckets, "recent").samples
        blocks = sum(f.stat().st_size for f in (workdir / "tsdb").rglob("*") if f.is_file())
        pages = Pages(fleet, template, exporter)
        with PageServer(pages) as server:
            config_path = workdir / "prometheus.yml"
            config_path.write_text(json.dumps(prometheus_config(server.port, fleet.nodes,
                                                                args.interval)))
            port = free_port()
            prom_argv = [require_binary("prometheus"), f"--config.file={config_path}",
                         f"--storage.tsdb.path={workdir / 'tsdb'}",
                         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
                         "--storage.tsdb.retention.time=15d"]
            with Prometheus("prometheus", prom_argv, port, workdir, ready_path="/-/ready",
                            timeout=600) as prom:
                up = wait_live(prom.url, fleet.nodes + 1, args.interval, timeout=600)
                load = "/".join(f"{x:.1f}" for x in os.getloadavg())
                print(f"  live: first scrape {up - recent_end:.0f} s after the last backfilled "
                      f"sample; measuring from {time.time() - up:.0f} s after it, load average "
                      f"{load}", flush=True)
                cases = make_cases(fleet, written, args.cli_timeout)
                for case in cases:
                    time_case(case, prom.url, args.runs, args.case_timeout)
                    over = case.median is not None and case.median > TARGET_SECONDS
                    if args.profile == "all" or (args.profile == "over" and over):
                        profile_case(case, prom.url, args.case_timeout, workdir, args.cprofile)
                head_series = int(api_get(prom.url, "status/tsdb")["headStats"]["numSeries"])
                rss = proc_status(prom.proc.pid, "VmRSS") / 2**20
                if args.hold:
                    print(f"  holding Prometheus at {prom.url} for {args.hold:g} s", flush=True)
                    time.sleep(args.hold)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    report(cases, written, blocks, head_series, rss, load)
    return 0


def make_cases(fleet: Fleet, written: Written, cli_timeout: float | None) -> list[Case]:
    timeout = ["--timeout", f"{cli_timeout:g}"] if cli_timeout else []
    per_key = {s: n for s, n in written.series.items()}
    ranks = Counter(r.experiment for r in fleet.runs)
    live = Counter(r.experiment for r in fleet.running())
    trial = fleet.trials_1k[0]
    trial_ranks = sum(1 for r in fleet.runs if r.experiment == EXP_1K and r.trial == trial)
    rank_series = per_key[EXP_1K] // max(1, ranks[EXP_1K])
    return [
        Case(f"diagnose {EXP_1K} {trial} rank 0", ["diagnose", "--experiment", EXP_1K,
                                                   "--trial", trial, "--rank", "0", *timeout],
             rank_series, 1),
        Case(f"diagnose {EXP_1K} {trial} (all {trial_ranks} ranks)",
             ["diagnose", "--experiment", EXP_1K, "--trial", trial, *timeout],
             rank_series * trial_ranks, trial_ranks),
        Case(f"diagnose {EXP_3K} (whole experiment: {live[EXP_3K]:,} ranks, "
             f"{ranks[EXP_3K]:,} runs)",
             ["diagnose", "--experiment", EXP_3K, *timeout], per_key[EXP_3K], ranks[EXP_3K]),
        Case(f"trials --since 7d ({len(fleet.runs):,} runs)",
             ["trials", "--since", "7d", *timeout],
             sum(n for s, n in per_key.items() if s != "nodes"), len(fleet.runs)),
    ]


def report(cases: list[Case], written: Written, blocks: int, head_series: int, rss: float,
           load: str) -> None:
    print()
    print("| case | series backfilled (the runs it reads) | median s (runs) | target | verdict |")
    print("|---|---:|---:|---:|---|")
    for case in cases:
        median = case.median
        shown = f"{median:.2f} ({len(case.seconds)})" if median is not None else case.failure
        verdict = ("-" if median is None else "within" if median <= TARGET_SECONDS else "over")
        print(f"| {case.name} | {case.series:,} | {shown} | {TARGET_SECONDS:g} s | {verdict} |")
    print()
    print(f"backfilled: {sum(written.series.values()):,} series ("
          + ", ".join(f"{k} {v:,}" for k, v in sorted(written.series.items()))
          + f"), {written.samples:,} samples, blocks {blocks / 2**20:,.0f} MiB; head series "
          f"at the end {head_series:,}; Prometheus RSS {rss:.2f} GiB; load average at the end "
          f"{load}")
    for case in cases:
        if case.profile:
            print(f"\n{case.name}:\n{case.profile}")
        if case.failure:
            print(f"\n{case.name}: {case.failure}")


if __name__ == "__main__":
    sys.exit(main())
