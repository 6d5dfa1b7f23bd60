"""Trial profile: one trial's timings, verdict, alerts, GPUs (uuid join) and node (nodename)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from grafana import verdict
from grafana.board import dashboard, query_variable
from grafana.layout import Layout
from grafana.loader_row import add_loader_row
from grafana.panels import Panel, Query, stat, table, timeseries
from grafana.promql import (
    GPU_LEGEND,
    TRIAL_GPU_INFO,
    TRIAL_INFO,
    TRIAL_LEGEND,
    Promql,
    parens,
)
from grafana.ranks import add_ranks_row
from grafana.sections import (
    BUSY_DESCRIPTION,
    MFU_DESCRIPTION,
    add_host_panels,
    gpu_activity,
    gpu_ratio,
)
from trainwatch.contract.alerts import DATALOADER_BOUND, HOST_TO_DEVICE_BOUND
from trainwatch.contract.figures import PER_SAMPLE
from trainwatch.contract.promql import BY_TRIAL, number, select

UID = "trainwatch-trial-profile"
# Variable names; the Fleet table's links set them as var-<name>.
EXPERIMENT, TRIAL, RANK = "experiment", "trial", "rank"
MATCHERS = (f'{EXPERIMENT}=~"${EXPERIMENT}"', f'{TRIAL}=~"${TRIAL}"', f'{RANK}=~"${RANK}"')
FIRING = 'ALERTS{alertstate="firing"}'


def firing_alerts(q: Promql) -> str:
    """Firing alerts about the selected trials, their GPUs (uuid) and their nodes (instance)."""
    trial_gpus = q.trial(TRIAL_GPU_INFO, *MATCHERS)
    return (f'ALERTS{{alertstate="firing", {EXPERIMENT}=~"${EXPERIMENT}", {TRIAL}=~"${TRIAL}"}}'
            f" or ({FIRING} and on(uuid) {trial_gpus})"
            f" or ({FIRING} and on(instance) ({q.trial_nodes(*MATCHERS)}))")


def share_title(what: str, window: str) -> str:
    """A share panel's title, naming the rules' rate window it is recorded over, as the figure
    `trainwatch diagnose` prints names its own (README, "Diagnosing a trial")."""
    return f"{what} over {window}"


def share_window(window: str) -> str:
    """What a recorded share is over, for a panel's description."""
    return (f"Each point is over the {window} before it (the rules' rate_window); a trial "
            f"younger than {window}: since its second scrape. `trainwatch diagnose` says which "
            f"time its own figure is over: the last {window} while the trial runs, its whole "
            "run while it is younger or once it ended, so the two can differ.")


def _share_against(q: Promql, what: str, phases: str, alert: str) -> Panel:
    """A phase group's share of step time with its alert's threshold drawn in."""
    threshold, window = q.settings.threshold(alert), q.settings.rate_window
    expr = f"sum {BY_TRIAL} ({select(q.names.phase_share, *MATCHERS, phases)})"
    return timeseries(share_title(what, window), "percentunit",
                      [Query(q.with_nodename(expr), TRIAL_LEGEND)],
                      description=f"Share of step time in {phases}; {alert} fires above "
                                  f"{number(threshold)} (thresholds.yaml). "
                                  f"{share_window(window)}",
                      max_value=1, threshold=(threshold, "red"))


BASELINE_DESCRIPTION = ("baseline: the median per rank of the experiment's last runs that "
                        "ended clean, per world size (the recorded baseline "
                        "TrainwatchTrialSlowerThanBaseline compares with)")


def _baseline(q: Promql, unit: str) -> Query:
    """The selected experiments' recorded baseline in ``unit`` (figures.PER_SAMPLE), per world
    size (a trial that counts no samples has its baseline in steps/s: `trainwatch check`)."""
    return Query(select(q.names.baseline, MATCHERS[0], f'unit="{unit}"'),
                 "baseline {{experiment}} · world size {{world_size}}")


def build(q: Promql) -> db.Dashboard:
    n, s = q.names, q.settings

    def per_rank(name: str, *extra: str) -> str:
        return q.with_nodename(select(name, *MATCHERS, *extra))

    outcomes = verdict.verdicts(q, MATCHERS)
    layout = Layout()
    layout.row("Verdict")
    layout.add(stat("Bottleneck", "none", [
        Query(q.with_nodename(verdict.expression(outcomes)), TRIAL_LEGEND),
    ], description=verdict.description(outcomes), mappings=verdict.mappings(outcomes)), 12, 7)
    layout.add(table("Firing alerts", [Query(firing_alerts(q))],
                     description="Alerts firing now for the selected trials, for the GPUs they "
                                 "use and for the nodes they run on.",
                     hide=["Value", "alertstate"]), 12, 7)
    layout.row("Steps")
    layout.add(timeseries("Step time", "s", [
        Query(per_rank(n.step_quantile), f"{TRIAL_LEGEND} q{{{{quantile}}}}"),
    ], description=f"Median and 95th percentile of one training iteration over "
                   f"{s.rate_window}."), 12, 8)
    layout.add(timeseries("Steps per second", "suffix: steps/s", [
        Query(per_rank(n.steps_rate), TRIAL_LEGEND),
    ], description=f"Training iterations per second over {s.rate_window}."), 6, 8)
    layout.add(timeseries("Samples per second", "suffix: samples/s", [
        Query(per_rank(n.samples_rate), TRIAL_LEGEND), _baseline(q, PER_SAMPLE),
    ], description=f"Samples per second over {s.rate_window}; {BASELINE_DESCRIPTION}."), 6, 8)
    layout.add(timeseries("MFU", "percentunit", [
        Query(per_rank(n.mfu), f"{TRIAL_LEGEND} {{{{precision}}}}"),
    ], description=MFU_DESCRIPTION, max_value=1), 12, 8)
    add_ranks_row(layout, q, *MATCHERS[:2])
    layout.row("Phases")
    layout.add(timeseries(share_title("Share of step time by phase", s.rate_window),
                          "percentunit", [
        Query(f"avg by (phase) ({select(n.phase_share, *MATCHERS)})", "{{phase}}"),
    ], description="Where a step's time goes, averaged over the selected ranks. "
                   + share_window(s.rate_window),
        stacked=True, max_value=1), 12, 8)
    layout.add(timeseries("Phase time", "s", [
        Query(per_rank(n.phase_quantile), f"{{{{phase}}}} q{{{{quantile}}}} · {TRIAL_LEGEND}"),
    ], description=f"Median and 95th percentile per phase over {s.rate_window}."), 12, 8)
    layout.add(_share_against(q, "Data loader share", s.selector("dataloader_phase"),
                              DATALOADER_BOUND), 12, 8)
    layout.add(_share_against(q, "Host↔device copy share", s.selector("host_to_device_phases"),
                              HOST_TO_DEVICE_BOUND), 12, 8)
    add_loader_row(layout, q, *MATCHERS)
    layout.row("The trial's GPUs")
    rank_gpu = f"{GPU_LEGEND} · rank {{{{rank}}}}"
    layout.add(gpu_ratio(q, "GPU busy", select(n.trial_gpu_busy, *MATCHERS),
                         legend=f"{rank_gpu} ({{{{source}}}})", description=BUSY_DESCRIPTION
                         + " Exactly the GPUs the trial reported (trainwatch_trial_gpu_info, "
                         "joined on uuid)."), 12, 8)
    layout.add(gpu_activity(q, select(n.trial_gpu_utilization, *MATCHERS),
                            select(n.trial_gpu_sm_active, *MATCHERS),
                            select(n.trial_gpu_tensor_active, *MATCHERS), legend=rank_gpu),
               12, 8)
    layout.add(gpu_ratio(q, "GPU memory used", select(n.trial_gpu_memory_used, *MATCHERS),
                         legend=rank_gpu, description="Used / total memory of the trial's "
                         "GPUs."), 12, 8)
    layout.row("The trial's nodes")
    add_host_panels(layout, q, restrict=lambda expr: (
        f"{parens(expr)} and on(instance) ({q.trial_nodes(*MATCHERS)})"))

    def trial_var(name: str, label: str, *matchers: str) -> db.QueryVariable:
        return query_variable(name, label, f"label_values({q.trial(TRIAL_INFO, *matchers)}, "
                                           f"{name})")

    return dashboard(UID, "trainwatch / Trial profile",
                     "Why one trial is slow: its timings, verdict, alerts, GPUs and node.",
                     layout, [trial_var(EXPERIMENT, "Experiment"),
                              trial_var(TRIAL, "Trial", MATCHERS[0]),
                              trial_var(RANK, "Rank", *MATCHERS[:2])])
