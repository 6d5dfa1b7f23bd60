"""Where the GPU-hours went (issue 40): GPU-seconds held, busy and wasted by cause over time,
and the experiments and namespaces that wasted the most, from the usage records
(prometheus/rulegen/usage.py), as `trainwatch usage` reads them."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from grafana import trial_profile
from grafana.board import dashboard, query_variable
from grafana.layout import Layout
from grafana.panels import Column, Query, stat, table, timeseries
from grafana.promql import TRIAL_INFO, Promql
from trainwatch.contract.promql import by, number, select
from trainwatch.contract.records import IDLE_CAUSES

UID = "trainwatch-gpu-hours"
EXPERIMENT = f'experiment=~"${trial_profile.EXPERIMENT}"'
RANGE = "[$__range]"
CAUSES = ", ".join(f"{cause} ({words})" for cause, words in IDLE_CAUSES.items())
TOP = 10


def _hours(expr: str) -> str:
    return f"{expr} / 3600"


def build(q: Promql) -> db.Dashboard:
    n = q.names
    # The per-rank records' rollups (per trial and node, with the group labels), as `trainwatch
    # usage` reads them: no join, a series per trial and node rather than one per rank.
    held, busy, idle, low_mfu = (select(n.rolled(record), EXPERIMENT) for record in (
        n.gpu_seconds_held, n.gpu_seconds_busy, n.gpu_seconds_idle, n.gpu_seconds_low_mfu))
    # A record's samples are one usage interval's GPU-seconds (a minute): over its seconds, the
    # GPUs held (idle, ...) then.
    gpus = number(q.settings.usage_seconds)
    layout = Layout()
    layout.row("Over the dashboard's time range")
    layout.add(stat("GPU-hours", "none", [
        Query(_hours(f"sum(sum_over_time({held}{RANGE}))"), "held"),
        Query(_hours(f"sum(sum_over_time({busy}{RANGE}))"), "busy"),
        Query(_hours(f"sum(sum_over_time({idle}{RANGE}))"), "wasted"),
        Query(_hours(f"sum(sum_over_time({low_mfu}{RANGE}))"), "busy, MFU low"),
    ], description="GPU-hours live trial ranks held, their GPUs were busy (the one GPU-busy "
                   "rule), idle (held - busy) and busy with an MFU under mfu_low, over the "
                   "time range; `trainwatch usage` gives the same per group."), 9, 5)
    layout.add(stat("Wasted GPU-hours by cause", "none", [
        Query(_hours(f"sum {by('cause')} (sum_over_time({idle}{RANGE}))"), "{{cause}}"),
    ], description=f"Idle GPU-hours split by the phase shares of each minute: {CAUSES}."),
        9, 5)
    layout.add(stat("GPU-hours outside trials", "none", [
        Query(_hours(f"sum(sum_over_time({n.gpu_seconds_uninstrumented}{RANGE}))"),
              "uninstrumented"),
        Query(_hours(f"sum(sum_over_time({n.gpu_seconds_unused}{RANGE}))"), "unused"),
    ], description="GPU-hours of GPUs no live trial rank held, every experiment's: with "
                   "processes on them (uninstrumented use, from the exporter's opt-in process "
                   "collector; without it every such GPU reads unused) and with none."), 6, 5)
    layout.row("Over time")
    layout.add(timeseries("Idle GPUs by cause", "none", [
        Query(f"sum {by('cause')} ({idle}) / {gpus}", "{{cause}}"),
    ], description=f"GPUs held by live trial ranks but idle, stacked by cause: {CAUSES}. "
                   "Each point is one minute's idle GPU-seconds over 60.", stacked=True), 16, 9)
    layout.add(timeseries("GPUs held and busy", "none", [
        Query(f"sum({held}) / {gpus}", "held"),
        Query(f"sum({busy}) / {gpus}", "busy"),
    ], description="GPUs live trial ranks held, and how many of them were busy (GPU-busy "
                   "rule), one minute at a time."), 8, 9)
    layout.row("Who wasted them")
    wasted_by = {label: f"sum {by(label)} (sum_over_time({idle}{RANGE}))"
                 for label in ("experiment", "k8s_namespace")}
    layout.add(table("Top experiments by wasted GPU-hours", [
        Query(_hours(f"topk({TOP}, {wasted_by['experiment']})")),
    ], description=f"The {TOP} experiments whose trials' GPUs idled longest over the time "
                   "range.", columns=[Column("Wasted GPU-hours", "none")]), 12, 8)
    layout.add(table("Top namespaces by wasted GPU-hours", [
        Query(_hours(f"topk({TOP}, {wasted_by['k8s_namespace']})")),
    ], description=f"The {TOP} Kubernetes namespaces (trainwatch_trial_info's k8s_namespace; "
                   "empty outside Kubernetes) whose trials' GPUs idled longest.",
        columns=[Column("Wasted GPU-hours", "none")]), 12, 8)
    return dashboard(UID, "trainwatch / Where the GPU-hours went",
                     "GPU-hours held, busy and wasted by cause; who wasted them.", layout,
                     [query_variable(trial_profile.EXPERIMENT, "Experiment", f"label_values("
                                     f"{q.trial(TRIAL_INFO)}, {trial_profile.EXPERIMENT})")])
