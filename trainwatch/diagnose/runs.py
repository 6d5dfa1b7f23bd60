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
and last bucket that had any; then the raw samples of those two
buckets give the exact times (one query per bucket, for all runs with an edge in it). The start
time, push time and exit marker of each run's last samples are asked for every run in a few
batched queries (trainwatch.diagnose.batched), whatever the range and however many runs.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from trainwatch.cliutil import LATEST_TIME
from trainwatch.contract.promql import RankKey, rank_key, select
from trainwatch.diagnose import batched
from trainwatch.promapi import ANY, TIME, Labels, PrometheusAPI, PrometheusError
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

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
    def identity(self) -> tuple[RankKey, str, float]:
        """Which run this is, whatever it has said since: its key, process and start (its last
        sample and push move while it runs, between two reads of one instant too)."""
        return self.key, self.pid, self.start

    @property
    def end(self) -> float:
        """When it last said anything: its last push, else (pulled) its last sample."""
        return self.pushed if self.pushed is not None else self.last

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def life_range(self) -> str:
        """A range (and offset) that covers its life, start to final push, for a query read at
        its last sample: the one window rule for a run that ended, however long its group
        stayed scraped after it.

        >>> Run("e", "t", "0", "1", "n", "1", first=100, last=275, started=99, pushed=159).life_range
        '[60s] offset 116s'
        """
        return life_range(self.seconds, self.last - self.end)

    def filled_life_range(self, window: str) -> str | None:
        """The part of its life a rate over ``window`` reads whole: from one window after its
        start to its final push (a rate record before then reads low), for a query read at its
        last sample; None for a life no longer than the window. How `diagnose` and `trials`
        read an ended run's MFU.

        >>> run = Run("e", "t", "0", "1", "n", "1", first=100, last=400, started=99, pushed=359)
        >>> run.filled_life_range("1m"), run.filled_life_range("260s")
        ('[200s] offset 41s', None)
        """
        seconds = parse_duration(window)
        return (life_range(self.seconds - seconds, self.last - self.end)
                if self.seconds > seconds else None)

    def state(self, stale_after: float, now: float | None = None) -> str:
        """running, ended clean, failed, terminated or stale (stopped without a word, or its
        pushes older than ``stale_after``, the deployed TrainwatchTrialStale threshold)."""
        if self.exit_reason is not None:
            return _BY_REASON.get(self.exit_reason, f"ended ({self.exit_reason})")
        now = time.time() if now is None else now
        return RUNNING if self.current and now - self.end <= stale_after else STALE

    def reference(self) -> str:
        return f"{self.experiment}/{self.trial} rank {self.rank}"


def life_range(seconds: float, after: float) -> str:
    """A range of ``seconds`` (at least 1) ending ``after`` seconds before the query's instant.

    >>> life_range(0.2, 0.4), life_range(59.5, 3)
    ('[1s]', '[60s] offset 3s')
    """
    offset = round(after)
    return f"[{max(1, math.ceil(seconds))}s]" + (f" offset {offset}s" if offset >= 1 else "")


def retention(api: PrometheusAPI) -> float:
    """How far back Prometheus keeps samples (``--storage.tsdb.retention.time``)."""
    try:
        info = api.get("status/runtimeinfo")
        said = info.get("storageRetention") if isinstance(info, dict) else None
        text = said if isinstance(said, str) else ""
    except PrometheusError:
        return DEFAULT_RETENTION
    try:  # "15d", or "15d or 10GiB" when a size bounds it too
        seconds = parse_duration(text.split()[0])
    except (IndexError, ValueError):
        return DEFAULT_RETENTION
    return seconds if 0 < seconds <= LATEST_TIME else DEFAULT_RETENTION  # not NaN, inf


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
    asked = [(ahead, f"{fn}_over_time({buckets}[{int(since) + step}s:{step}s])", TIME)
             for fn in ("min", "max")] + [(at_now, info, ANY)]
    with ThreadPoolExecutor(len(asked)) as pool:  # three independent queries, asked at once
        *bounds, now_scraped = pool.map(lambda q: q[0].query(q[1], q[2]), asked)
    for fn, found in zip(("min", "max"), bounds):
        for labels, value in found:
            key = _series_key(labels)
            coarse[key][fn] = value
            labels_of[key] = labels
    current = {_series_key(labels) for labels, _ in now_scraped}
    keys = [key for key, bounds in coarse.items() if "min" in bounds and "max" in bounds]
    edges = _edges(api, sel, [(labels_of[key], coarse[key]["min"], coarse[key]["max"])
                              for key in keys], step)
    finals = _finals(api, [(labels_of[key], *edge, coarse[key]["max"] - step)
                           for key, edge in zip(keys, edges)])
    runs = [_at_last(labels_of[key], *edge, final, key in current)
            for key, edge, final in zip(keys, edges, finals)]
    return sorted(runs, key=lambda r: (r.key, r.first))


def _edges(api: PrometheusAPI, sel: dict[str, str | None],
           buckets: list[tuple[Labels, float, float]], step: int) -> list[tuple[float, float]]:
    """Each run's exact first and last sample time, from the raw samples of its first and last
    bucket (ending at the times given with its labels): one query per bucket for the runs with
    an edge in it (a fleet's runs mostly start, and all running ones end, in the same bucket),
    each asking for those runs' series alone (their pids), a few buckets at once."""
    wanted: dict[float, dict[tuple[str, ...], list[tuple[int, int]]]] = defaultdict(
        lambda: defaultdict(list))
    for i, (labels, first, last) in enumerate(buckets):
        wanted[first][_series_key(labels)].append((i, 0))
        wanted[last][_series_key(labels)].append((i, 1))
    found = [[first, last] for _, first, last in buckets]

    def read(at: float) -> None:
        keys = wanted[at]
        pids = sorted({key[len(names.GROUPING_LABELS)] for key in keys})
        info = select(names.TRIAL_INFO, batched.any_of("pid", pids), **sel)
        for labels, samples in api.pinned(at).samples(f"{info}[{step}s]"):
            for i, edge in keys.get(_series_key(labels), []) if samples else []:
                found[i][edge] = (min, max)[edge](t for t, _ in samples)

    with ThreadPoolExecutor(batched.READERS) as pool:
        list(pool.map(read, wanted))
    return [(first, last) for first, last in found]


# What a run's last samples say: its start time, last push and exit marker (each series' value
# and labels).
FINAL = (names.START_TIME, "push_time_seconds", names.EXIT)
_KIND = {names.EXIT: ANY}


def _finals(api: PrometheusAPI, runs: list[tuple[Labels, float, float, float]]
            ) -> list[dict[str, list[tuple[Labels, float]]]]:
    """Each run's series of FINAL, their last values between the later of its first sample and
    the start of its last bucket (given with its labels, its first and last sample) and its
    last sample: samples of its own only, so a run that exited and was restarted within one
    bucket leaves its exit to itself (an instant query skips it as stale; raw samples do not).
    A run's own samples are scraped with its info series (one Pushgateway group, or one
    target), so its last ones are in its last bucket. A few batched queries per metric."""
    found: list[dict[str, list[tuple[Labels, float]]]] = [{} for _ in runs]
    ranks = []
    for labels, first, last, bucket_start in runs:
        since = max(first, bucket_start)
        # One millisecond more: the range holds a sample at ``since`` in a Prometheus whose
        # ranges are open at the start (3.x) as in one whose ranges are closed (2.x). The runs
        # with one last sample and one range (a trial's ranks) are one item.
        ranks.append((rank_key(labels), (round((last - since) * 1000) + 1, last)))
    for metric in FINAL:
        def item(matched: str, group: tuple[int, float], metric: str = metric) -> batched.Item:
            span, at = group
            return f"last_over_time({select(metric, matched)}[{span}ms])", at

        for run, vector in zip(found, batched.in_groups(api, ranks, item,
                                                        _KIND.get(metric, TIME))):
            run[metric] = vector
    return found


def _at_last(labels: Labels, first: float, last: float,
             finals: dict[str, list[tuple[Labels, float]]], current: bool) -> Run:
    """The run, with what its last samples say: its start, last push and exit reason."""
    key = rank_key(labels)

    def largest(metric: str) -> float | None:
        values = [v for _, v in finals[metric] if not math.isnan(v)]
        return max(values) if values else None

    reasons = sorted(lbl.get("reason", "") for lbl, _ in finals[names.EXIT])
    return Run(*key, labels.get("pid", ""), labels.get("nodename", ""),
               labels.get("world_size", ""), first, last, started=largest(names.START_TIME),
               pushed=largest("push_time_seconds"),
               exit_reason=reasons[0] if reasons else None, current=current)


def latest_per_rank(runs: Iterable[Run], at: float | None = None) -> list[Run]:
    """Each rank's last run, or (``at``) the run that was on at that instant (else the last one
    that started before it)."""
    chosen: dict[RankKey, Run] = {}
    for run in sorted(runs, key=lambda r: r.first):
        if at is None or run.first <= at:
            chosen[run.key] = run
    return [chosen[k] for k in sorted(chosen)]
