"""The runs Prometheus remembers: every trial process, running or ended, within a time range.

A run is one ``trainwatch_trial_info`` series: one process (``pid`` on ``nodename``) under one
grouping key. A restart under the same key is a new run, so no figure of one run is computed
from another's samples. A run's series is scraped from its first push until its Pushgateway
group is retired (`trainwatch gc`) or replaced by the next run's pushes; read at its last
sample (``last``), its counters hold the run's final values, and ``push_time_seconds`` says
when it last pushed. Its state is one of :data:`STATES`, the words `diagnose` and `trials`
both use.

The first and last samples are found in two steps. A subquery over the whole range counts each
series' samples in consecutive buckets (``count_over_time`` over one bucket, evaluated once per
bucket, so no sample falls between two evaluations, however short the run) and keeps the first
and last bucket that had any; then the raw samples of those two buckets give the exact times:
two small queries per run, whatever the range.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trainwatch.contract.promql import select
from trainwatch.promapi import Labels, PrometheusAPI, PrometheusError
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

RankKey = tuple[str, str, str]
RUNNING, ENDED_CLEAN, FAILED, TERMINATED, STALE = (
    "running", "ended clean", "failed", "terminated", "stale")
STATES = (RUNNING, ENDED_CLEAN, FAILED, TERMINATED, STALE)
_BY_REASON = {names.EXIT_CLEAN: ENDED_CLEAN, names.EXIT_FAILED: FAILED,
              names.EXIT_TERMINATED: TERMINATED}
# The subquery's points over the range: its resolution is the range over this (at least 1 s).
RESOLUTION_POINTS = 2000
# Retention assumed when Prometheus does not say (its own default).
DEFAULT_RETENTION = 15 * 86400.0


@dataclass(frozen=True)
class Run:
    """One trial process under one grouping key, as Prometheus saw it."""

    experiment: str
    trial: str
    rank: str
    pid: str
    nodename: str
    world_size: str
    first: float  # its first sample (Unix time)
    last: float  # its last sample: where its final values are read
    started: float | None = None  # trainwatch_trial_start_time_seconds, when pushed
    pushed: float | None = None  # its last push (push_time_seconds); None when pulled
    exit_reason: str | None = None  # its final push's trainwatch_trial_exit reason
    current: bool = False  # its series is still scraped (live, or not yet retired)

    @property
    def key(self) -> RankKey:
        return self.experiment, self.trial, self.rank

    @property
    def start(self) -> float:
        return self.started if self.started is not None else self.first

    @property
    def end(self) -> float:
        """When it last said anything: its last push, else (pulled) its last sample."""
        return self.pushed if self.pushed is not None else self.last

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def state(self, stale_after: float, now: float | None = None) -> str:
        """running, ended clean, failed, terminated or stale (stopped without a word, or its
        pushes older than ``stale_after``, the deployed TrainwatchTrialStale threshold)."""
        if self.exit_reason is not None:
            return _BY_REASON.get(self.exit_reason, f"ended ({self.exit_reason})")
        now = time.time() if now is None else now
        return RUNNING if self.current and now - self.end <= stale_after else STALE

    def reference(self) -> str:
        return f"{self.experiment}/{self.trial} rank {self.rank}"


def retention(api: PrometheusAPI) -> float:
    """How far back Prometheus keeps samples (``--storage.tsdb.retention.time``)."""
    try:
        info = api.get("status/runtimeinfo")
        text = str(info.get("storageRetention", "")) if isinstance(info, dict) else ""
    except PrometheusError:
        return DEFAULT_RETENTION
    try:  # "15d", or "15d or 10GiB" when a size bounds it too
        return parse_duration(text.split()[0])
    except (IndexError, ValueError):
        return DEFAULT_RETENTION


def _series_key(labels: Labels) -> tuple[str, ...]:
    return tuple(labels.get(k, "") for k in (*names.GROUPING_LABELS, "pid", "nodename"))


def resolution(since: float) -> int:
    """The subquery's step over a range of ``since`` seconds: whole seconds, at most
    RESOLUTION_POINTS buckets (a wider range costs more buckets, never more points)."""
    return max(1, math.ceil(since / RESOLUTION_POINTS))


def find_runs(api: PrometheusAPI, since: float, experiment: str | None = None,
              trial: str | None = None, rank: str | None = None,
              now: float | None = None) -> list[Run]:
    """Every run with samples in the last ``since`` seconds, oldest first per rank."""
    now = time.time() if now is None else now
    since = max(1.0, since)
    step = resolution(since)
    sel = {"experiment": experiment, "trial": trial, "rank": rank}
    info = select(names.TRIAL_INFO, **sel)
    at_now = api.pinned(now)
    coarse: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    labels_of: dict[tuple[str, ...], Labels] = {}
    buckets = f"timestamp(count_over_time({info}[{step}s]))"  # the end of each bucket with samples
    # Evaluated one bucket past now: the subquery's buckets are aligned to multiples of the
    # step, and the last one must reach now.
    ahead = api.pinned(now + step)
    for fn in ("min", "max"):
        expr = f"{fn}_over_time({buckets}[{int(since) + step}s:{step}s])"
        for labels, value in ahead.query(expr):
            key = _series_key(labels)
            coarse[key][fn] = value
            labels_of[key] = labels
    current = {_series_key(labels) for labels, _ in at_now.query(info)}
    runs = []
    for key, bounds in coarse.items():
        if "min" not in bounds or "max" not in bounds:
            continue
        labels = labels_of[key]
        one = {**{k: labels.get(k) for k in names.GROUPING_LABELS}, "pid": labels.get("pid"),
               "nodename": labels.get("nodename")}
        exact = select(names.TRIAL_INFO, **one)
        first = _edge(api, exact, bounds["min"], step, min)
        last = _edge(api, exact, bounds["max"], step, max)
        runs.append(_at_last(api, labels, first, last, key in current))
    return sorted(runs, key=lambda r: (r.key, r.first))


def _edge(api: PrometheusAPI, series: str, at: float, step: int,
          pick: Callable[[list[float]], float]) -> float:
    """The exact first (``min``) or last (``max``) sample time in the bucket ending at ``at``."""
    times = [t for _, samples in api.pinned(at).samples(f"{series}[{step}s]")
             for t, _ in samples]
    return pick(times) if times else at


def _at_last(api: PrometheusAPI, labels: Labels, first: float, last: float,
             current: bool) -> Run:
    """The run, with what its last sample says: its start, last push and exit reason."""
    pinned = api.pinned(last)
    sel: dict[str, str | None] = {k: labels.get(k, "") for k in names.GROUPING_LABELS}
    started = pinned.value(select(names.START_TIME, **sel))
    pushed = pinned.value(select("push_time_seconds", **sel))
    reasons = [lbl.get("reason", "") for lbl, _ in pinned.query(select(names.EXIT, **sel))]
    return Run(labels.get("experiment", ""), labels.get("trial", ""), labels.get("rank", ""),
               labels.get("pid", ""), labels.get("nodename", ""), labels.get("world_size", ""),
               first, last, started=started, pushed=pushed,
               exit_reason=reasons[0] if reasons else None, current=current)


def latest_per_rank(runs: Iterable[Run], at: float | None = None) -> list[Run]:
    """Each rank's last run, or (``at``) the run that was on at that instant (else the last one
    that started before it)."""
    chosen: dict[RankKey, Run] = {}
    for run in sorted(runs, key=lambda r: r.first):
        if at is None or run.first <= at:
            chosen[run.key] = run
    return [chosen[k] for k in sorted(chosen)]
