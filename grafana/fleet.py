"""Fleet: every trial in one table linked to its profile, GPUs across nodes, idle GPUs."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from grafana import trial_profile
from grafana.board import dashboard, query_variable
from grafana.layout import Layout
from grafana.panels import DATASOURCE_VAR, Column, Query, table
from grafana.promql import GPU_LEGEND, TRIAL_INFO, Promql
from grafana.ranks import scaling_panel, stragglers_table
from grafana.sections import BUSY_DESCRIPTION, MFU_DESCRIPTION, gpu_ratio
from prometheus.rulegen.alerts import underutilized_trial_gpus
from trainwatch.contract.alerts import (
    DATALOADER_BOUND,
    GPU_UNDERUTILIZED,
    TRIAL_STALE,
)
from trainwatch.contract.promql import BY_TRIAL, TRIAL_LABELS, by, number, select

UID = "trainwatch-fleet"
TRIALS_TABLE = "Trials, one row per rank"
EXPERIMENT = f'experiment=~"${trial_profile.EXPERIMENT}"'
# A cell's link opens the row's trial; the time range and datasource come along.
PROFILE_LINK = (
    f"/d/{trial_profile.UID}?${{{DATASOURCE_VAR}:queryparam}}&${{__url_time_range}}&"
    + "&".join(f"var-{name}=${{__data.fields.{name}}}"
               for name in (trial_profile.EXPERIMENT, trial_profile.TRIAL, trial_profile.RANK)))


def build(q: Promql) -> db.Dashboard:
    n, s = q.names, q.settings
    stale_after = s.threshold(TRIAL_STALE)
    idle_below = s.threshold(GPU_UNDERUTILIZED)
    layout = Layout()
    layout.row("Trials")
    loader_share = select(n.phase_share, EXPERIMENT, s.selector("dataloader_phase"))
    layout.add(table(TRIALS_TABLE, [
        Query(select(n.steps_rate, EXPERIMENT)),
        Query(f"sum {BY_TRIAL} ({loader_share})"),
        Query(f"avg {BY_TRIAL} ({select(n.trial_gpu_busy, EXPERIMENT)})"),
        Query(f"max {BY_TRIAL} (time() - {q.trial('push_time_seconds', EXPERIMENT)})"),
        Query(f"max {BY_TRIAL} ({select(n.mfu, EXPERIMENT)})"),
        Query(f"max {by(*TRIAL_LABELS, 'nodename')} "
              f"({q.trial(TRIAL_INFO, EXPERIMENT)})"),
    ], description=f"Every trial with a Pushgateway group, one row per rank; click a row for "
                   f"its Trial profile. A last push older than {number(stale_after)} s "
                   f"(TrainwatchTrialStale) means the trial crashed or hangs. {MFU_DESCRIPTION}",
        columns=[Column("Steps/s", "suffix: steps/s"),
                 Column(f"Data loader share ({s.rate_window})", "percentunit",
                        steps=((s.threshold(DATALOADER_BOUND), "red"),)),
                 Column("GPU busy", "percentunit", base="red",
                        steps=((idle_below, "green"),)),
                 Column("Last push", "s", steps=((stale_after, "red"),)),
                 Column("MFU", "percentunit")],
        hide=["Value #F"], links=[("Trial profile", PROFILE_LINK)]), 24, 9)
    layout.add(stragglers_table(q, EXPERIMENT), 14, 8)
    layout.add(scaling_panel(q, EXPERIMENT), 10, 8)
    layout.row("GPUs")
    layout.add(gpu_ratio(q, "GPU busy across nodes", n.gpu_busy,
                         legend=f"{GPU_LEGEND} ({{{{source}}}})",
                         description=f"Every GPU of every node. {BUSY_DESCRIPTION}"), 12, 8)
    layout.add(gpu_ratio(q, "GPU memory used across nodes", n.gpu_memory_used,
                         description="Used / total memory of every GPU of every node."), 12, 8)
    layout.add(table("GPUs allocated to trials but idle", [
        Query(q.with_gpu_name(underutilized_trial_gpus(s, EXPERIMENT))),
    ], description=f"GPUs of live trials averaging under {number(idle_below)} busy "
                   f"over {s.rate_window} (TrainwatchGPUUnderutilized). {BUSY_DESCRIPTION}",
        columns=[Column("Busy", "percentunit")]), 24, 8)
    return dashboard(UID, "trainwatch / Fleet",
                     "Every trial and GPU at once: who is slow, who is idle.", layout,
                     [query_variable(trial_profile.EXPERIMENT, "Experiment", f"label_values("
                                     f"{q.trial(TRIAL_INFO)}, {trial_profile.EXPERIMENT})")])
