"""Everything one report shows, read from Prometheus: diagnose's reports (its own code path,
for a running trial or one that ended within Prometheus's retention), the panels' series, the
step-time histogram, the alerts of the window and, against a baseline, compare's comparison."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.figures import GPU_INFO, HOST_INFO
from trainwatch.contract.promql import select as selector
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.entry import (
    Comparison,
    Deployment,
    RankReport,
    Run,
    UnknownTrial,
    compare_refs,
    find_runs,
    gather_runs,
    parse_reference,
    retention,
    rulesource,
    unknown_message,
)
from trainwatch.diagnose.entry import baseline as own_baseline
from trainwatch.promapi import PrometheusAPI
from trainwatch.report import panels
from trainwatch.report.series import Panel, fetch
from trainwatch.report.window import Asked, Window, utc
from trial_instrumentation import names


class NoData(LookupError):
    """The trial exists, but the window holds none of its samples; the message says when it
    ran."""


@dataclass
class FiredAlert:
    name: str
    about: str  # the labels that say what it fired on
    first: float
    last: float
    runbook_url: str | None
    fired: bool = True  # False: pending only, it never fired in the window


@dataclass
class Document:
    """One report's content."""

    prometheus: str
    experiment: str
    trial: str | None
    rank: str | None
    window: Window
    evaluated_at: float | None  # None: now, as `diagnose` reads it
    reports: list[RankReport]
    now: float = field(default_factory=time.time)
    stale_after: float = math.inf  # TrainwatchTrialStale's threshold, for the runs' states
    span: tuple[float, float] | None = None  # the plots' time axis; None: the whole window
    rate_window: str = ""  # the window of the rates drawn (the recorded series')
    # Where the thresholds came from when not from the server's loaded rules (a global view:
    # trainwatch.diagnose.rulesource); None: its own.
    thresholds_from: str | None = None
    gpu_names: dict[str, str] = field(default_factory=dict)  # uuid -> product name
    histogram: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    sections: list[tuple[str, list[Panel], str | None]] = field(default_factory=list)
    alerts: list[FiredAlert] = field(default_factory=list)
    comparison: Comparison | None = None
    # Without --baseline: the trial against its own baseline (trainwatch.diagnose.baseline),
    # its sentence ("23% slower than the median of the last 5 runs of E (...)").
    baseline_line: str | None = None


def seen_at(api: PrometheusAPI, experiment: str, trial: str | None, rank: str | None,
            window: Window) -> list[float]:
    """The instants of the window's range queries at which the trial had series."""
    sel = selector(names.TRIAL_INFO, experiment=experiment, trial=trial, rank=rank)
    return sorted(t for _, points in api.query_range(f"max ({sel})", window.start, window.end,
                                                     window.step) for t, _ in points)


def _who(experiment: str, trial: str | None, rank: str | None) -> str:
    who = f"trial {experiment}/{trial}" if trial else f"experiment {experiment}"
    return who + (f" rank {rank}" if rank is not None else "")


def as_ended(api: PrometheusAPI, run: Run) -> Run:
    """A run that said it ended, with its last sample where it ended: the first scrape of its
    final push (its group may have stayed minutes after, until `trainwatch gc` retired it)."""
    if run.exit_reason is None:
        return run
    marker = selector(names.EXIT, **dict(zip(names.GROUPING_LABELS, run.key)))
    seconds = max(1, math.ceil(run.last - run.end) + 1)
    times = [t for _, samples in api.pinned(run.last).samples(f"{marker}[{seconds}s]")
             for t, _ in samples]
    return dataclasses.replace(run, last=min(times)) if times else run


def in_window(runs: list[Run], window: Window, experiment: str, trial: str | None,
              rank: str | None) -> list[Run]:
    """The runs with samples in the window; NoData, saying when the trial ran, if none."""
    inside = [r for r in runs if r.first <= window.end and r.last >= window.start]
    if not inside:
        raise NoData(f"no samples of {_who(experiment, trial, rank)} in the window "
                     f"{window.describe()}; it has samples from {utc(min(r.first for r in runs))}"
                     f" to {utc(max(r.last for r in runs))}: leave out --since/--start/--end "
                     "for its whole life, or choose a window that includes it")
    return inside


def recorded_window(api: PrometheusAPI, deployment: Deployment, sel: dict[str, str | None],
                    window: Window) -> RecordNames:
    """The names of the recorded series that hold most of the trial's samples in the window:
    the deployed rules', or those of the rules it was recorded under when they had another
    window; the deployed ones when it has none (its figures then come from the raw series)."""
    prefix = RecordNames("").phase_share
    # Candidates: the series API answers by storage chunk, not by sample, so each is counted.
    found = api.label_values("__name__", start=f"{window.start:.3f}", end=f"{window.end:.3f}",
                             **{"match[]": selector("", f'__name__=~"{prefix}.+"', **sel)})
    candidates = {RecordNames(name[len(prefix):]) for name in found}
    seconds = max(1, round(window.end - window.start))
    at = api.pinned(window.end)

    def samples(n: RecordNames) -> float:
        counted = at.query(f"sum (count_over_time({selector(n.phase_share, **sel)}[{seconds}s]))")
        return counted[0][1] if counted else 0.0

    deployed = deployment.names
    counts = {n: samples(n) for n in candidates | {deployed}}
    return max(counts, key=lambda n: (counts[n], n == deployed))


def collect(api: PrometheusAPI, experiment: str, trial: str | None, rank: str | None,
            asked: Asked, baseline: str | None = None, force: str | None = None) -> Document:
    """``force``: draw recorded figures only from the recorded series or only from the raw
    ones (series.RECORDED, series.RAW); by default from the recorded ones where they cover the
    window."""
    rules = api.rules()
    deployment = rulesource.deployment_of(api, rules)
    now, kept = time.time(), retention(api)
    if baseline is not None:
        b_experiment, b_trial, b_rank = parse_reference(baseline)
        if (b_experiment, b_trial) == (experiment, trial) and b_rank in (None, rank):
            raise ValueError(f"--baseline {baseline} is the trial itself: compare it with "
                             "another trial (or another rank)")
    runs = find_runs(api, kept, experiment, trial, rank, now=now)
    if not runs:
        raise UnknownTrial(unknown_message(api, kept, experiment, trial, rank, now))
    runs = [as_ended(api, run) for run in runs]
    window = asked.window(runs, now, kept)
    runs = in_window(runs, window, experiment, trial, rank)
    # The verdict as diagnose gives it: now for a running trial, at its last sample for one
    # that ended (judged over its life), or as it was at --at or the end of the window asked.
    at = asked.at if asked.at is not None else (
        window.end if asked.given and not window.ends_now else None)
    if at is not None:  # a run that had ended by then is read at its last sample
        at = min(at, max(r.last for r in runs))
    reports = gather_runs(api, deployment, experiment, trial, rank, since=kept, at=at, now=now)
    read = None if window.ends_now else min(window.end, max(r.last for r in runs))
    doc = Document(api.url, experiment, trial, rank, window, read, reports, now=now,
                   stale_after=deployment.threshold(TRIAL_STALE),
                   thresholds_from=deployment.source)
    hosts = draw(api, doc, deployment, runs, force)
    if deployment.source is not None:  # a global view: the shipped rules' runbooks
        rules = rulesource.shipped_rules()
    runbooks = {r["name"]: (r.get("annotations") or {}).get("runbook_url")
                for r in rules if r.get("type") == "alerting"}
    doc.alerts = fired(api, window, reports, runbooks, hosts)
    if baseline is not None:
        doc.comparison = compare_with(api, deployment, reports, baseline, kept, now)
    else:
        against_own(api, deployment, doc, kept, now)
    return doc


def against_own(api: PrometheusAPI, deployment: Deployment, doc: Document, kept: float,
                now: float) -> None:
    """A report of one trial: its lowest rank's run against the last runs of its experiment
    (the baseline `check` and `diagnose` use), compared with the baseline run nearest the
    median where there is a baseline."""
    runs = [r.run for r in doc.reports if r.run is not None]
    if len({(r.experiment, r.trial) for r in runs}) != 1:
        return
    baselines = own_baseline.Baselines(api, deployment, now=now, since=kept)
    [found] = own_baseline.for_reports(baselines, runs).values()
    doc.baseline_line, doc.comparison = found.line(), found.comparison


def draw(api: PrometheusAPI, doc: Document, deployment: Deployment, runs: list[Run],
         force: str | None) -> dict[str, str]:
    """The document's plots and step-time histogram; the hosts (exporter instance -> node
    name) they found."""
    window, sel = doc.window, {"experiment": doc.experiment, "trial": doc.trial,
                               "rank": doc.rank}
    seen = seen_at(api, doc.experiment, doc.trial, doc.rank, window)
    if seen:  # the plots span the trial's part of the window, not an hour of empty axes
        doc.span = (max(window.start, seen[0] - window.step),
                    min(window.end, seen[-1] + window.step))
    pinned = api.pinned(doc.evaluated_at)
    hosts = {labels.get("instance", ""): labels.get("nodename", "")
             for labels, _ in pinned.query(HOST_INFO)}
    doc.gpu_names = {labels.get("uuid", ""): labels.get("name", "") for labels, _ in
                     pinned.query(f"{GPU_INFO} * on (uuid) group_left () max by (uuid) "
                                  f"({selector(names.GPU_INFO, **sel)})")}
    n = recorded_window(api, deployment, sel, window)
    doc.rate_window = n.window
    trials = sorted({r.trial for r in doc.reports})
    trial_specs = [s for t in trials for s in panels.trial_panels(n, sel, t, len(trials) > 1)]
    gpus = [fetch(api, s, window, hosts) for s in panels.gpu_panels(sel)]
    no_gpu = None
    if gpus[0].empty:  # not even NVML utilization: the trial has no GPU series
        gpus, no_gpu = [], ("No GPU series for this trial in the window: it reported no GPU "
                            f"({names.GPU_INFO}) or no exporter exports its GPUs' uuid.")
    doc.sections = [
        ("Training loop", [fetch(api, s, window, hosts, force) for s in trial_specs],
         None),
        ("GPUs", gpus, no_gpu),
        ("Nodes", [fetch(api, s, window, hosts, force=force)
                   for s in panels.node_panels(n, sel)], None),
    ]
    end = window.end if doc.evaluated_at is None else doc.evaluated_at
    doc.histogram = step_histogram(pinned, sel, max(1, round(end - window.start)))
    return hosts


def compare_with(api: PrometheusAPI, deployment: Deployment, reports: list[RankReport],
                 baseline: str, kept: float, now: float) -> Comparison:
    """compare's answer for the report's trial (its one trial; its rank when it has one)
    against ``baseline``."""
    trials = sorted({(r.experiment, r.trial) for r in reports})
    if len(trials) != 1:
        raise ValueError(f"--baseline compares one trial: name it with --trial (this report "
                         f"has {len(trials)}: {', '.join(t for _, t in trials)})")
    ranks = {r.rank for r in reports}
    ref = "/".join(trials[0]) + (f"/{ranks.pop()}" if len(ranks) == 1 else "")
    return compare_refs(api, deployment, ref, baseline, since=kept, now=now)


def step_histogram(api: PrometheusAPI, sel: dict[str, str | None], seconds: int
                   ) -> dict[str, list[tuple[float, float]]]:
    """trial -> [(bucket upper bound in seconds, steps in that bucket)] over the window."""
    bucket = selector(f"{names.STEP_SECONDS}_bucket", **sel)
    cumulative: dict[str, list[tuple[float, float]]] = {}
    for labels, count in api.query(f"sum by (trial, le) (increase({bucket}[{seconds}s]))"):
        if not math.isnan(count):
            cumulative.setdefault(labels.get("trial", ""), []).append(
                (float(labels.get("le", "inf")), count))
    found = {}
    for trial, rows in cumulative.items():
        rows.sort()
        per = [(le, max(0.0, c - (rows[i - 1][1] if i else 0.0))) for i, (le, c) in
               enumerate(rows)]
        if any(c > 0 for _, c in per):
            found[trial] = per
    return found


def fired(api: PrometheusAPI, window: Window, reports: list[RankReport],
          runbooks: dict[str, Any], hosts: dict[str, str]) -> list[FiredAlert]:
    """Alerts pending or firing during the window on the trial's ranks, GPUs or nodes
    (diagnose's rule: a node's own alerts, not other trials' on it); one row per alert and
    subject, with when it fired (or, if it never did, when it was pending)."""
    ranks = {(r.experiment, r.trial, r.rank) for r in reports}
    uuids = {g.uuid for r in reports for g in r.gpus}
    nodes = {r.nodename for r in reports if r.nodename}
    instances = {instance for instance, node in hosts.items() if node in nodes}
    found: dict[tuple[str, str], FiredAlert] = {}
    for labels, points in api.query_range("ALERTS", window.start, window.end, window.step):
        key = (labels.get("experiment"), labels.get("trial"), labels.get("rank"))
        mine = (key in ranks or labels.get("uuid") in uuids
                or ("trial" not in labels and (labels.get("nodename") in nodes
                                               or labels.get("instance") in instances)))
        if not (mine and points):
            continue
        about = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())
                          if k not in ("__name__", "alertname", "alertstate", "severity", "job"))
        name, firing = labels.get("alertname", "?"), labels.get("alertstate") == "firing"
        row = FiredAlert(name, about, points[0][0], points[-1][0], runbooks.get(name), firing)
        seen = found.get((name, about))
        if seen is None or (firing and not seen.fired):
            found[(name, about)] = row
    return sorted(found.values(), key=lambda a: (not a.fired, a.first, a.name))
