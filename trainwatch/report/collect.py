"""Everything one report shows, read from Prometheus: diagnose's reports (its own code path),
the panels' series, the step-time histogram and the alerts that fired in the window."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainwatch.contract.promql import select as selector
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.report import RankReport, UnknownTrial, gather
from trainwatch.promapi import PrometheusAPI
from trainwatch.report import panels
from trainwatch.report.series import Panel, fetch
from trainwatch.report.window import Window, utc
from trial_instrumentation import names

# How far back to look for a trial's last push when the window holds none of it.
LOOKBACK = "30d"


class NoData(LookupError):
    """The trial exists, but the window holds none of its samples; the message says when it
    pushed."""


@dataclass
class FiredAlert:
    name: str
    about: str  # the labels that say what it fired on
    first: float
    last: float
    runbook_url: str | None


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
    span: tuple[float, float] | None = None  # the plots' time axis; None: the whole window
    gpu_names: dict[str, str] = field(default_factory=dict)  # uuid -> product name
    histogram: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    sections: list[tuple[str, list[Panel], str | None]] = field(default_factory=list)
    alerts: list[FiredAlert] = field(default_factory=list)


def seen_at(api: PrometheusAPI, experiment: str, trial: str | None, rank: str | None,
            window: Window) -> list[float]:
    """The instants of the window's range queries at which the trial had series."""
    sel = selector(names.TRIAL_INFO, experiment=experiment, trial=trial, rank=rank)
    return sorted(t for _, points in api.query_range(f"max ({sel})", window.start, window.end,
                                                     window.step) for t, _ in points)


def diagnose_at(api: PrometheusAPI, deployment: Deployment, experiment: str, trial: str | None,
                rank: str | None, window: Window, seen: list[float]
                ) -> tuple[list[RankReport], float | None]:
    """diagnose's reports at the window's end; for a trial that stopped before it, at its
    last sample in the window (a finished trial is read as it was)."""
    at = None if window.ends_now else window.end
    try:
        return gather(api.pinned(at), deployment, experiment, trial, rank), at
    except UnknownTrial:
        if seen:
            return gather(api.pinned(max(seen)), deployment, experiment, trial, rank), max(seen)
        pushes = selector("push_time_seconds", experiment=experiment, trial=trial, rank=rank)
        pushed = api.query(f"max (max_over_time({pushes}[{LOOKBACK}]))")
        if pushed and not math.isnan(pushed[0][1]):
            raise NoData(f"no samples of {_who(experiment, trial, rank)} in the window "
                         f"{window.describe()}; it last pushed at {utc(pushed[0][1])}: choose a "
                         "window that includes it (--since, or --start/--end)") from None
        raise


def _who(experiment: str, trial: str | None, rank: str | None) -> str:
    who = f"trial {experiment}/{trial}" if trial else f"experiment {experiment}"
    return who + (f" rank {rank}" if rank is not None else "")


def collect(api: PrometheusAPI, experiment: str, trial: str | None, rank: str | None,
            window: Window) -> Document:
    rules = api.rules()
    deployment = Deployment.from_rules(rules, where=f"Prometheus at {api.url}")
    seen = seen_at(api, experiment, trial, rank, window)
    reports, at = diagnose_at(api, deployment, experiment, trial, rank, window, seen)
    doc = Document(api.url, experiment, trial, rank, window, at, reports)
    if seen:  # the plots span the trial's part of the window, not an hour of empty axes
        doc.span = (max(window.start, seen[0] - window.step),
                    min(window.end, seen[-1] + window.step))
    sel: dict[str, str | None] = {"experiment": experiment, "trial": trial, "rank": rank}
    pinned = api.pinned(at)
    hosts = {labels.get("instance", ""): labels.get("nodename", "")
             for labels, _ in pinned.query("trainwatch_host_info")}
    doc.gpu_names = {labels.get("uuid", ""): labels.get("name", "") for labels, _ in
                     pinned.query(f"trainwatch_gpu_info * on (uuid) group_left () max by (uuid) "
                                  f"({selector(names.GPU_INFO, **sel)})")}
    trials = sorted({r.trial for r in reports})
    n = deployment.names
    trial_specs = [s for t in trials for s in panels.trial_panels(n, sel, t, len(trials) > 1)]
    gpus = [fetch(api, s, window, hosts) for s in panels.gpu_panels(sel)]
    no_gpu = None
    if gpus[0].empty:  # not even NVML utilization: the trial has no GPU series
        gpus, no_gpu = [], ("No GPU series for this trial in the window: it reported no GPU "
                            f"({names.GPU_INFO}) or no exporter exports its GPUs' uuid.")
    doc.sections = [
        ("Training loop", [fetch(api, s, window, hosts) for s in trial_specs], None),
        ("GPUs", gpus, no_gpu),
        ("Nodes", [fetch(api, s, window, hosts) for s in panels.node_panels(n, sel)], None),
    ]
    end = window.end if at is None else at
    doc.histogram = step_histogram(api.pinned(at), sel, max(1, round(end - window.start)))
    runbooks = {r["name"]: (r.get("annotations") or {}).get("runbook_url")
                for r in rules if r.get("type") == "alerting"}
    doc.alerts = fired(api, window, reports, runbooks, hosts)
    return doc


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
    """Alerts that fired during the window on the trial's ranks, GPUs or nodes (diagnose's
    rule: a node's own alerts, not other trials' on it)."""
    ranks = {(r.experiment, r.trial, r.rank) for r in reports}
    uuids = {g.uuid for r in reports for g in r.gpus}
    nodes = {r.nodename for r in reports if r.nodename}
    instances = {instance for instance, node in hosts.items() if node in nodes}
    found = []
    for labels, points in api.query_range('ALERTS{alertstate="firing"}', window.start,
                                          window.end, window.step):
        key = (labels.get("experiment"), labels.get("trial"), labels.get("rank"))
        mine = (key in ranks or labels.get("uuid") in uuids
                or ("trial" not in labels and (labels.get("nodename") in nodes
                                               or labels.get("instance") in instances)))
        if mine and points:
            about = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())
                              if k not in ("alertname", "alertstate", "severity", "job"))
            name = labels.get("alertname", "?")
            found.append(FiredAlert(name, about, points[0][0], points[-1][0], runbooks.get(name)))
    return sorted(found, key=lambda a: (a.first, a.name))
