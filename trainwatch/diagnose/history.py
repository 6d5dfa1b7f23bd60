"""`diagnose` for any trial Prometheus remembers: found among its runs (trainwatch.diagnose.runs)
without the user giving a time, each rank read where its run's numbers are.

A running rank is read now, as before. A rank whose run ended (or stopped) is read at its last
sample, where its counters hold the run's final values, and judged over its whole life: the
phases' shares from the final sums, steps/s and samples/s as the final counts over the time
from its start to its last push. A rank that restarted under the same key is judged on its own
run alone. ``at`` reads every rank as it was at that instant.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import time
from collections import defaultdict

from trainwatch.cliutil import ago
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.promql import rank_order, select
from trainwatch.diagnose import loader_cause
from trainwatch.diagnose.decision import gather, threads_noted
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import (
    FIRED,
    AlertState,
    RankReport,
    UnknownTrial,
    alerts_about,
    by_rank,
)
from trainwatch.diagnose.runs import (
    RankKey,
    Run,
    find_runs,
    latest_per_rank,
    retention,
)
from trainwatch.diagnose.verdict import OFF_THE_AIR, Measurements, decide, profile_line
from trainwatch.promapi import COUNT, PrometheusAPI
from trial_instrumentation import names

# How a run that ended says how: (reason in the title, how in words).
HOW = {names.EXIT_CLEAN: "clean", names.EXIT_FAILED: "failed: an exception or a non-zero exit",
       names.EXIT_TERMINATED: "terminated: SIGTERM"}


def gather_runs(api: PrometheusAPI, deployment: Deployment, experiment: str,
                trial: str | None = None, rank: str | None = None, *,
                since: float | None = None, at: float | None = None,
                window: float | None = None, now: float | None = None) -> list[RankReport]:
    """One report per rank of the latest run of each (or the run on at ``at``) within ``since``
    seconds (default: Prometheus's retention). ``window`` (seconds) replaces the deployed rate
    window for the ranks judged over a window (running, or read ``at`` an instant of their
    run); an ended run read at its end is judged over its life."""
    now = time.time() if now is None else now
    if window is not None:
        deployment = deployment.over(f"{max(1, round(window))}s")
    since = retention(api) if since is None else since
    if at is not None:
        if at > now:
            raise ValueError(f"--at is {ago(at - now)} in the future")
        if at < now - since:
            raise ValueError(f"--at is {ago(now - at)} ago, outside the {ago(since)} looked at "
                             "(Prometheus's retention, or --since)")
    runs = find_runs(api, since, experiment, trial, rank, now=now)
    chosen = latest_per_rank(runs, at)
    if not chosen:
        raise UnknownTrial(unknown_message(api, since, experiment, trial, rank, now))
    instants: dict[float | None, list[Run]] = defaultdict(list)
    for run in chosen:
        # At ``at``, a run that had ended by then is read at its last sample, as it ended.
        instants[min(at, run.last) if at is not None else (None if run.current else run.last)
                 ].append(run)
    reports = []
    for instant, group in instants.items():
        by_key = {run.key: run for run in group}
        pinned = api if instant is None else api.pinned(instant)
        starts = {k: r.start for k, r in by_key.items()}
        for report in gather(pinned, deployment, experiment, trial, rank, only=by_key,
                             starts=starts):
            run = by_key[(report.experiment, report.trial, report.rank)]
            reports.append(_over_life(pinned, deployment, report, run, now)
                           if _ended(report) else
                           dataclasses.replace(report, run=run))
    return sorted(reports, key=lambda r: (r.experiment, r.trial, rank_order(r.rank)))


def _ended(report: RankReport) -> bool:
    return report.verdict is not None and report.verdict.kind in OFF_THE_AIR


def _over_life(api: PrometheusAPI, deployment: Deployment, report: RankReport, run: Run,
               now: float) -> RankReport:
    """An ended or stopped run's report: ages from now, rates over its whole life. A run that
    ended cleanly or was terminated gets its life's profile as the verdict's finding: what to
    change, with that check's alert and runbook (a failed or killed one keeps what it needs
    first: its log)."""
    sel = dict(zip(names.GROUPING_LABELS, run.key))
    totals = {name: api.value(select(f"{name}_total", **sel), COUNT)
              for name in (names.STEPS, names.SAMPLES)}
    life = run.seconds
    steps, samples = totals[names.STEPS], totals[names.SAMPLES]
    per_second = (lambda total: total / life if total is not None and life > 0 else None)
    # Still scraped: the age Prometheus measured when it judged the rank stale, else from now.
    age = (report.push_age_seconds if run.current and report.push_age_seconds is not None
           else now - run.end)
    report = dataclasses.replace(report, run=run, push_age_seconds=age,
                                 steps_per_second=per_second(steps),
                                 samples_per_second=per_second(samples), lifetime_seconds=life,
                                 alerts=_fired_in_life(api, run, report))
    verdict = report.verdict
    assert verdict is not None
    count = int(steps) if steps is not None else verdict.steps
    said = verdict.last_profile
    # An ended group is gc's to retire (or already gone): no clean-up line to give.
    cleanup = verdict.cleanup if run.exit_reason is None and run.current else None
    # A stopped run's figure is its silence against the stale threshold; an ended one crossed
    # none (its life's profile below brings its own figure).
    verdict = dataclasses.replace(verdict, steps=count, cleanup=cleanup,
                                  measured=age if run.exit_reason is None else None)
    cause = None
    if report.phases:
        # The same decision as a running rank's, on the same kinds of figure over its life:
        # its shares, its node's CPU (a CPU-bound run on a saturated host stays one), its GPUs'
        # busy and its MFU, as `trials` reads them (a GPU-bound run stays GPU-bound). A failed
        # or killed run keeps its verdict (its log first) with that finding and title.
        node_cpu, evidence = _loader_over_life(api, deployment, run)
        gpu, mfu = life_gpu(api, deployment, run)
        m = Measurements(dict(report.phases), node_cpu, gpu_busy_recorded=gpu, mfu=mfu)
        threads = api.pinned(run.last).value(select(names.COMPUTE_THREADS, **sel))
        profile = threads_noted(decide(m, deployment.alerts), m, threads, evidence,
                                deployment.alerts)
        # A data-loader-bound life gets its loader's cause, over that life, as a running one.
        profile, cause = loader_cause.explain(profile, evidence, deployment.alerts)
        if run.exit_reason in (names.EXIT_CLEAN, names.EXIT_TERMINATED):
            verdict = dataclasses.replace(verdict, bottleneck=profile.bottleneck,
                                          alert=profile.alert, remedy=profile.remedy,
                                          runbook_url=profile.runbook_url,
                                          metric=profile.metric, measured=profile.measured,
                                          threshold=profile.threshold,
                                          comparison=profile.comparison, notes=profile.notes)
        verdict = dataclasses.replace(verdict, life_kind=profile.kind)
        # The title names the finding it carries, not the shares-only profile taken when the
        # rank was found off the air (that read "No GPU metrics" for a CPU-bound life).
        said = profile_line(profile)
    said = f"over its life, {said}" if said else "no timings"
    if run.exit_reason is not None:
        how = HOW.get(run.exit_reason, f"reason={run.exit_reason}")
        title = f"Ended {ago(age)} ago ({how}, {_count(count)} in {ago(life)}): {said}"
    else:
        title = (f"Stopped pushing {ago(age)} ago without a word (crashed or killed; "
                 f"{_count(count)} in {ago(life)}): {said}")
    verdict = dataclasses.replace(verdict, title=title)
    return dataclasses.replace(report, verdict=verdict, loader_cause=cause)


def life_gpu(api: PrometheusAPI, deployment: Deployment, run: Run
             ) -> tuple[float | None, float | None]:
    """The run's GPU busy (the GPU-busy rule) averaged over its life, and its MFU over its life
    once that life fills a rate window (before, the rate reads low); None where unknown. Read
    at its last sample (its life_range counts back from there): the figures `trials` reads
    for an ended run."""
    api = api.pinned(run.last)
    n, sel = deployment.names, dict(zip(names.GROUPING_LABELS, run.key))
    gpu = api.value(f"avg_over_time({select(n.trial_gpu_busy, **sel)}{run.life_range})")
    filled = run.filled_life_range(n.window)
    mfu = api.value(f"avg_over_time({select(n.mfu, **sel)}{filled})") if filled else None
    return gpu, mfu


def _loader_over_life(api: PrometheusAPI, deployment: Deployment, run: Run
                      ) -> tuple[float | None, loader_cause.LoaderEvidence | None]:
    """Its node's CPU busy and the loader's figures (loader_cause.gather) over ``run``'s life,
    from its start to its final push (Run.life_range): read at its last sample (where its
    counters hold their final values, however long its group stayed), per second of that
    life, not over the minutes its group waited for gc after it."""
    api = api.pinned(run.last)
    window = f"{max(1, math.ceil(run.last - run.start))}s"  # every sample of the run
    sel = dict(zip(names.GROUPING_LABELS, run.key))
    node_cpu = api.value(loader_cause.node_cpu(
        f"avg_over_time({deployment.names.cpu_utilization}{run.life_range})", **sel))
    found = loader_cause.gather(lambda expr: by_rank(api, expr), window, {run.key: node_cpu},
                                run, **sel)
    return node_cpu, found.get(run.key)


def _fired_in_life(api: PrometheusAPI, run: Run, report: RankReport) -> list[AlertState]:
    """The alerts about the run's rank, its GPUs or its node that fired while it ran (from its
    start to its final push), not the ones of now: an ended run's node may have moved on."""
    pinned = api.pinned(run.last)
    firing = {"alertstate": "firing"}
    instance = next((labels.get("instance") for labels, _ in pinned.query(select(
        HOST_INFO, nodename=report.nodename))), None) if report.nodename else None
    wanted = [select("ALERTS", **firing, **dict(zip(names.GROUPING_LABELS, run.key)))]
    wanted += [select("ALERTS", **firing, uuid=gpu.uuid) for gpu in report.gpus]
    wanted += [select("ALERTS", **firing, instance=instance)] if instance else []
    seen = {tuple(sorted(labels.items())): labels for expr in wanted
            for labels, _ in pinned.query(f"max_over_time({expr}{run.life_range})")}
    fired = [{"labels": {k: v for k, v in labels.items() if k not in ("__name__", "alertstate")},
              "state": FIRED, "value": ""} for labels in seen.values()]
    return alerts_about(fired, run.key, {g.uuid for g in report.gpus}, instance)


def _count(steps: int | None) -> str:
    return "? steps" if steps is None else f"{steps:,} step" + ("" if steps == 1 else "s")


def unknown_message(api: PrometheusAPI, since: float, experiment: str, trial: str | None,
                    rank: str | None, now: float) -> str:
    """What exists instead, with the closest name first."""
    wanted = f"{experiment}/{trial}" if trial else experiment
    wanted += f" rank {rank}" if rank is not None else ""
    known = find_runs(api, since, now=now)
    where = f"in Prometheus over the last {ago(since)}"
    if not known:
        return f"no trial {wanted} {where}; none has pushed metrics"
    same = [r for r in known if r.experiment == experiment]
    if trial is None or not same:
        names_ = sorted({r.experiment for r in known})
        close = difflib.get_close_matches(experiment, names_, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"no experiment {experiment!r} {where}{hint}; experiments: {', '.join(names_)}"
    ranks: dict[str, set[str]] = defaultdict(set)
    for r in same:
        ranks[r.trial].add(r.rank)
    if trial in ranks:  # the trial exists: the rank typed is what is wrong
        have = sorted(ranks[trial], key=rank_order)
        return (f"no rank {rank} of {experiment}/{trial} {where}; its ranks: "
                f"{', '.join(have)} (e.g. --rank {have[0]})")
    close = difflib.get_close_matches(trial, sorted(ranks), n=1, cutoff=0.5)
    hint = f" (did you mean {experiment}/{close[0]}?)" if close else ""
    listed = ", ".join(f"{t} (rank {', '.join(sorted(rs, key=rank_order))})"
                       for t, rs in sorted(ranks.items()))
    return f"no trial {wanted} {where}{hint}; trials of experiment {experiment}: {listed}"


def run_of(api: PrometheusAPI, since: float, key: RankKey, now: float | None = None
           ) -> Run | None:
    """The latest run of one rank within ``since`` seconds."""
    runs = latest_per_rank(find_runs(api, since, *key, now=now))
    return runs[0] if runs else None
