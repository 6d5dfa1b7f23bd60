"""The alerts, one function per alert group; expressions read thresholds.yaml via Settings.

Every alert gets `for`, a `severity` label, `summary`, `description` (the measured value and
what to change, from trainwatch/contract/remedies.py), a `runbook_url` into docs/runbooks.md,
the plain `remedy` and, when it compares against one, its `threshold` (`trainwatch diagnose`
reads both back from Prometheus, so the CLI never hard-codes a number) and `measured`, the value that crossed it
with its unit (Alertmanager's notifications and webhook payloads carry annotations, not the
expression's value, and its templates cannot humanize a number).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus.rulegen.promql import live_trials
from prometheus.rulegen.settings import Settings, SettingsError
from trainwatch.contract import figures, remedies
from trainwatch.contract.alerts import (
    COLLECTOR_FAILING,
    CPU_SATURATED,
    DATALOADER_BOUND,
    EXPORTER_DOWN,
    GPU_LAUNCH_BOUND,
    GPU_MEMORY_NEARLY_FULL,
    GPU_ROW_REMAP_FAILED,
    GPU_ROW_REMAP_PENDING,
    GPU_TENSOR_CORES_IDLE,
    GPU_THROTTLED,
    GPU_UNDERUTILIZED,
    HOST_MEMORY_LOW,
    HOST_TO_DEVICE_BOUND,
    RANK_STRAGGLER,
    SCALING_INEFFICIENT,
    SLOWER_THAN_BASELINE,
    TRIAL_FAILED,
    TRIAL_KEY_SHARED,
    TRIAL_PUSH_FAILING,
    TRIAL_STALE,
)
from trainwatch.contract.checks import EXCHANGE_CAUSE_THRESHOLDS, LOADER_CAUSE_THRESHOLDS
from trainwatch.contract.promql import GPU_LABELS, TRIAL_LABELS, by, number, on, select
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names

_TRIAL_ID = "{{ $labels.experiment }}/{{ $labels.trial }} rank {{ $labels.rank }}"
_TRIAL = f"Trial {_TRIAL_ID}"
_GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.instance }}"


@dataclass(frozen=True)
class _Shown:
    """How an alert's value reads (a Prometheus template) and its threshold beside it."""

    value: str
    threshold: Callable[[float], str]

def _pct(value: float) -> str:
    return f"{value:.0%}"


_AS_PERCENT = _Shown("{{ $value | humanizePercentage }}", _pct)
_AS_DURATION = _Shown("{{ $value | humanizeDuration }}", lambda t: f"{number(t)}s")
_AS_NUMBER = _Shown("{{ $value | humanize }}", number)


class _Group:
    """Collects one group's alerts, filling in for/severity/runbook from Settings."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.rules: list[dict[str, Any]] = []

    def add(self, name: str, expr: str, summary: str, description: str, remedy: str,
            measured: _Shown | None = None, uses_busy: bool = False,
            uses_window: bool = False, causes: tuple[str, ...] = (),
            uses_mfu_low: bool = False, cause: str | None = None) -> None:
        """``measured`` is how the value shows (``_AS_PERCENT``...); None for a yes/no alert,
        whose value is only the fact that it fired, and which takes no threshold.
        ``uses_busy``: the alert has a gate, whose level (thresholds.yaml ``busy``) it exposes
        in a ``busy`` annotation for ``trainwatch diagnose``; ``causes``, the names of the
        thresholds (thresholds.yaml ``causes``) it exposes as ``cause_<name>`` annotations;
        ``uses_mfu_low``: it carries thresholds.yaml ``mfu_low`` (the verdict "GPU busy, MFU
        low", which no alert fires on) in a ``mfu_low`` annotation; ``cause``, a template that
        names the cause behind it (``_recorded_cause``), in a ``cause`` annotation."""
        setting = self.s.alert(name)
        if set(setting.causes) != set(causes):
            raise SettingsError(f"{self.s.source}: alerts.{name}.causes must name exactly "
                                f"{sorted(causes)}, got {sorted(setting.causes)}")
        if measured is None and setting.threshold is not None:
            raise SettingsError(f"{self.s.source}: alerts.{name}.threshold is not used by this "
                                "yes/no alert; remove it")
        if not uses_busy and setting.busy is not None:
            raise SettingsError(f"{self.s.source}: alerts.{name}.busy is not used by this "
                                "alert; remove it")
        if not uses_mfu_low and setting.mfu_low is not None:
            raise SettingsError(f"{self.s.source}: alerts.{name}.mfu_low is not used by this "
                                "alert; remove it")
        if not uses_window and setting.window is not None:
            raise SettingsError(f"{self.s.source}: alerts.{name}.window is not used by this "
                                "alert; remove it")
        annotations = {"summary": summary, "description": f"{description} {remedy}",
                       "runbook_url": f"{self.s.runbook_url}#{name.lower()}", "remedy": remedy}
        if measured is not None:
            # The deployed number, for readers of /api/v1/rules (trainwatch diagnose).
            threshold = self.s.threshold(name)
            annotations["threshold"] = number(threshold)
            shown = measured.threshold(threshold)
            annotations["measured"] = f"{measured.value} (threshold {shown})"
        if uses_busy:
            annotations["busy"] = number(self.s.busy(name))
        if uses_mfu_low:
            annotations["mfu_low"] = number(self.s.mfu_low(name))
        annotations.update({f"cause_{key}": number(value)
                            for key, value in setting.causes.items()})
        if cause is not None:
            annotations["cause"] = cause
        self.rules.append({"alert": name, "expr": expr, "for": setting.for_,
                           "labels": {"severity": setting.severity},
                           "annotations": annotations})


def _recorded_cause(record: str, *labels: str) -> str:
    """A template naming the cause ``record`` (prometheus/rulegen/causes.py) holds for the
    alert's own ``labels`` when it fires, else "unknown" (no figures to tell: an older
    library, no /proc, no step limit measured)."""
    matchers = ",".join(f"{label}=%q" for label in labels)
    args = " ".join(f"$labels.{label}" for label in labels)
    return (f"{{{{ with printf `{record}{{{matchers}}}` {args} | query }}}}"
            '{{ . | first | label "cause" }}{{ else }}unknown{{ end }}')


def _while_live(s: Settings, condition: str) -> str:
    """``condition`` only for live trials (promql.live_trials): a trial's final push carries
    ``trainwatch_trial_exit``, which ends the alert at the next scrape and evaluation, while a
    rate over the window would still hold the old samples for a whole window."""
    live = live_trials(s.selector("trial"), s.threshold(TRIAL_STALE))
    return f"{condition}\nand {on(*TRIAL_LABELS)}\n{live}"


def trial_alerts(s: Settings) -> list[dict[str, Any]]:
    g, n, trial = _Group(s), RecordNames(s.rate_window), s.selector("trial")
    t = s.threshold(DATALOADER_BOUND)
    g.add(DATALOADER_BOUND,
          _while_live(s, f"{select(n.phase_share, s.selector('dataloader_phase'))} > {number(t)}"),
          "Training waits for the data loader.",
          f"{_TRIAL} spends {_AS_PERCENT.value} of its step time in "
          f"dataloader_next (threshold {_pct(t)}).", remedies.DATALOADER,
          measured=_AS_PERCENT, causes=LOADER_CAUSE_THRESHOLDS,
          cause=_recorded_cause(n.loader_cause, *TRIAL_LABELS))
    t = s.threshold(HOST_TO_DEVICE_BOUND)
    g.add(HOST_TO_DEVICE_BOUND,
          _while_live(s, f"sum {by(*TRIAL_LABELS)} "
                      f"({select(n.phase_share, s.selector('host_to_device_phases'))})"
                      f" > {number(t)}"),
          "Training waits for host<->device memory copies.",
          f"{_TRIAL} spends {_AS_PERCENT.value} of its step time in "
          f"to_device/from_device (threshold {_pct(t)}).", remedies.MEMORY_COPIES,
          measured=_AS_PERCENT)
    t = s.threshold(TRIAL_STALE)
    # Pushed: the group's push_time_seconds; pulled (series with the target's instance): the
    # recorded time of its last successful scrape, kept while its scrapes fail.
    exited = select(names.EXIT, trial)
    g.add(TRIAL_STALE,
          f"(\n  time() - {select('push_time_seconds', trial)} > {number(t)}\n"
          f"  or\n  time() - {select(n.pulled_last_scrape, trial)} > {number(t)}\n)\n"
          # It said why it stopped: TrainwatchTrialFailed, or a terminated trial's leftover.
          f"unless {on(*TRIAL_LABELS)} {exited}",
          "A trial stopped pushing its metrics.",
          f"{_TRIAL} {{{{ if $labels.instance }}}}was last scraped from "
          f"{{{{ $labels.instance }}}} {_AS_DURATION.value} ago (threshold {number(t)}s) and "
          "its target still fails to answer (up == 0).{{ else }}last pushed "
          f"{_AS_DURATION.value} ago (threshold {number(t)}s)."
          "{{ end }}", remedies.STALE_TRIAL, measured=_AS_DURATION)
    # The final push of a trial that raised (or exited non-zero) carries reason="failed" and
    # its group is left: the value is the seconds since that push.
    failed = select(names.EXIT, trial, f'reason="{names.EXIT_FAILED}"')
    g.add(TRIAL_FAILED,
          f"time() - {select('push_time_seconds', trial)}\nand {on(*TRIAL_LABELS)}\n{failed}",
          "A trial ended with an exception or a non-zero exit status.",
          f"{_TRIAL} ended with an exception or a non-zero exit status "
          "{{ $value | humanizeDuration }} ago; its last push says reason=failed.",
          remedies.TRIAL_FAILED)
    t = s.threshold(TRIAL_PUSH_FAILING)
    g.add(TRIAL_PUSH_FAILING,
          _while_live(s, f"increase({select('trainwatch_trial_push_failures_total', trial)}"
                      f"[{s.rate_window}]) > {number(t)}"),
          "A trial keeps failing to push its metrics.",
          f"{_TRIAL} failed {_AS_NUMBER.value} pushes to the Pushgateway in the last "
          f"{s.rate_window}.", remedies.PUSH_FAILING, measured=_AS_NUMBER)
    _key_shared_alert(g)
    _straggler_alert(g, n)
    _scaling_alert(g, n)
    _baseline_alert(g, n)
    return g.rules


def _key_shared_alert(g: _Group) -> None:
    """Two processes pushing to one group replace each other's series at every push, so within
    the window the key shows trainwatch_trial_info under two pids or nodes; after a restart
    the old process's series leaves the window, which is shorter than `for`, so only a lasting
    share fires."""
    trial, window = g.s.selector("trial"), g.s.window(TRIAL_KEY_SHARED)
    processes = (f"count {by(*TRIAL_LABELS, 'nodename', 'pid')} "
                 f"(count_over_time({select('trainwatch_trial_info', trial)}[{window}]))")
    # Every process seen under this key in the window, named in the description.
    keyed = select('trainwatch_trial_info', trial, 'experiment=%q', 'trial=%q', 'rank=%q')
    listed = ('{{ range $i, $p := printf `'
              + processes.replace(select('trainwatch_trial_info', trial), keyed)
              + '` $labels.experiment $labels.trial $labels.rank | query | sortByLabel "pid" }}'
              '{{ if $i }}, {{ end }}node {{ $p.Labels.nodename }} pid {{ $p.Labels.pid }}'
              '{{ end }}')
    g.add(TRIAL_KEY_SHARED,
          f"count {by(*TRIAL_LABELS)} (\n  {processes}\n) > 1",
          "Two processes push metrics under one trial's grouping key.",
          f"{_TRIAL} was pushed by {{{{ $value }}}} processes within {window} ({listed}): "
          "they overwrite each other's series at every push, and the final push of one marks "
          "the other ended until it pushes again.", remedies.KEY_SHARED, uses_window=True)


def straggling_ranks(s: Settings, *trial_matchers: str) -> str:
    """The ranks of live trials whose own step time is over TrainwatchRankStraggler's threshold
    times the median rank's, each labelled with its node: the alert's condition and the fleet
    dashboard's straggler table."""
    n, trial = RecordNames(s.rate_window), s.selector("trial")
    per_trial = [label for label in TRIAL_LABELS if label != "rank"]
    mean = select(n.rank_step_mean, *trial_matchers)
    live = live_trials(trial, s.threshold(TRIAL_STALE))
    return (f"(\n  {mean}\n  / {on(*per_trial)} group_left\n"
            f"  quantile {by(*per_trial)} (0.5, {mean})\n"
            f"  > {number(s.threshold('TrainwatchRankStraggler'))}\n)\n"
            f"* {on(*TRIAL_LABELS)} group_left (nodename)\n"
            f"max {by(*TRIAL_LABELS, 'nodename')} ({select('trainwatch_trial_info', trial)})\n"
            f"and {on(*TRIAL_LABELS)}\n{live}")


# The straggler's GPUs, looked up when the alert fires (a rank may use several).
_RANK_GPUS = ('{{ range $i, $gpu := printf "trainwatch_trial_gpu_info{experiment=%q,trial=%q,rank=%q}" '
              '$labels.experiment $labels.trial $labels.rank | query }}'
              '{{ if $i }}, {{ end }}{{ $gpu.Labels.uuid }}{{ else }}none reported{{ end }}')


def _straggler_alert(g: _Group, n: RecordNames) -> None:
    t = g.s.threshold(RANK_STRAGGLER)
    g.add(RANK_STRAGGLER, straggling_ranks(g.s),
          "One rank holds its whole trial back.",
          f"{_TRIAL} on node {{{{ $labels.nodename }}}} (GPUs: {_RANK_GPUS}) takes "
          f"{_AS_NUMBER.value} times the median rank's own step time over {g.s.rate_window} "
          f"(threshold {number(t)}); every other rank waits for it at each collective.",
          remedies.STRAGGLER, measured=_AS_NUMBER)


def _scaling_alert(g: _Group, n: RecordNames) -> None:
    trial, t = g.s.selector("trial"), g.s.threshold(SCALING_INEFFICIENT)
    per_trial = [label for label in TRIAL_LABELS if label != "rank"]
    live = live_trials(trial, g.s.threshold(TRIAL_STALE))
    g.add(SCALING_INEFFICIENT,
          f"{n.scaling_efficiency} < {number(t)}\n"
          f"and {on(*per_trial)}\ncount {by(*per_trial)} "
          f"({select('trainwatch_trial_info', trial)}) > 1\n"
          f"and {on(*per_trial)}\n{live}",
          "A multi-rank trial gets little out of its ranks.",
          "Trial {{ $labels.experiment }}/{{ $labels.trial }} trains at "
          f"{_AS_PERCENT.value} of its ranks times its measured single-rank step limit over "
          f"{g.s.rate_window} (threshold {_pct(t)}): a straggler, the loader or the exchange "
          "between ranks holds it back (trainwatch diagnose says which).", remedies.SCALING,
          measured=_AS_PERCENT, causes=EXCHANGE_CAUSE_THRESHOLDS,
          cause=_recorded_cause(n.exchange_cause, *per_trial))


def _baseline_alert(g: _Group, n: RecordNames) -> None:
    """A running rank's throughput over the rate window (samples/s, else steps/s) against its
    experiment's recorded baseline for its world size: the value is how much slower (0.23 is
    23%)."""
    trial, t = g.s.selector("trial"), g.s.threshold(SLOWER_THAN_BASELINE)
    now = figures.with_run(figures.throughput(n.samples_rate, n.steps_rate), trial,
                           "world_size")
    baseline = on('experiment', 'world_size', 'unit')
    ratio = f"{now}\n/ {baseline} group_left ()\n{n.baseline}"
    # Slower than its baseline's own spread too (under the slowest of its runs), as `check`
    # judges: a run inside the noise of the runs before it is no change.
    below = f"{now}\n< {baseline} group_left ()\n{n.baseline_low}"
    g.add(SLOWER_THAN_BASELINE,
          _while_live(g.s, f"(1 - (\n{figures.indent(ratio)}\n) > {number(t)})\n"
                           f"and {on(*TRIAL_LABELS)} (\n{figures.indent(below)}\n)"),
          "A trial trains slower than the last runs of its experiment.",
          f"{_TRIAL} trains {_AS_PERCENT.value} slower than the median of the last "
          f"{figures.BASELINE_RUNS} runs of its experiment that ended clean with its world size "
          f"and slower than the slowest of them (threshold {_pct(t)}, over {g.s.rate_window}; "
          "`trainwatch check` names the phase).",
          remedies.SLOWER_THAN_BASELINE, measured=_AS_PERCENT, uses_window=True,
          cause=_slowest_phase(n))


def _slowest_phase(n: RecordNames) -> str:
    """A template naming the phase of the alert's rank that takes the most time per step over
    its baseline's (the baseline_phase record), with how much more, else "unknown"."""
    rank = ",".join(f"{label}=%q" for label in TRIAL_LABELS)
    per_step = (f"{n.phase_sum_rate}{{{rank}}} / {on(*TRIAL_LABELS)} group_left () "
                f"{n.step_count_rate}{{{rank}}}")
    query = (f"topk(1, {per_step} - {on('experiment', 'phase')} group_left () "
             f"{n.baseline_phase}{{experiment=%q,world_size=%q}} > 0)")
    args = " ".join(f"$labels.{label}"
                    for label in (*TRIAL_LABELS, *TRIAL_LABELS, "experiment", "world_size"))
    return (f"{{{{ with printf `{query}` {args} | query }}}}"
            '{{ . | first | label "phase" }} {{ . | first | value | humanizeDuration }} more per '
            "step than the baseline{{ else }}unknown{{ end }}")


def underutilized_trial_gpus(s: Settings, *trial_matchers: str) -> str:
    """The GPUs of live trials (those ``trial_matchers`` pick) averaging under
    TrainwatchGPUUnderutilized's threshold over the rate window: the alert's condition, and
    the Fleet dashboard's idle-GPU table, so the two never disagree."""
    n = RecordNames(s.rate_window)
    live = live_trials(s.selector("trial"), s.threshold(TRIAL_STALE))
    return (f"avg_over_time({select(n.trial_gpu_busy, *trial_matchers)}[{s.rate_window}])"
            f" < {number(s.threshold('TrainwatchGPUUnderutilized'))}\n"
            f"and {on(*TRIAL_LABELS)}\n{live}")


def gpm_trial_gpus(s: Settings, alert: str, measured: str, gate: str,
                   *trial_matchers: str) -> str:
    """Live trials' GPUs whose ``measured`` recorded series averages under ``alert``'s
    threshold over the rate window while ``gate`` averages at least its ``busy`` level: the
    GPM alerts' condition (series exist only for GPUs with GPM)."""
    live = live_trials(s.selector("trial"), s.threshold(TRIAL_STALE))

    def avg(record: str) -> str:
        return f"avg_over_time({select(record, *trial_matchers)}[{s.rate_window}])"

    return (f"{avg(measured)} < {number(s.threshold(alert))}\n"
            f"and\n{avg(gate)} >= {number(s.busy(alert))}\n"
            f"and {on(*TRIAL_LABELS)}\n{live}")


def gpu_alerts(s: Settings) -> list[dict[str, Any]]:
    g, n, exporter = _Group(s), RecordNames(s.rate_window), s.selector("exporter")
    t = s.threshold(GPU_UNDERUTILIZED)
    g.add(GPU_UNDERUTILIZED, underutilized_trial_gpus(s),
          "A live trial leaves its GPU idle.",
          f"{_GPU}, used by trial {_TRIAL_ID}, was busy {_AS_PERCENT.value} over "
          f"{s.rate_window} by {{{{ $labels.source }}}} (threshold {_pct(t)}; sm_active: SM "
          "activity where GPM reports it, else NVML utilization).", remedies.UNDERUTILIZED_GPU,
          measured=_AS_PERCENT, uses_mfu_low=True)
    t = s.threshold(GPU_MEMORY_NEARLY_FULL)
    g.add(GPU_MEMORY_NEARLY_FULL, f"{n.gpu_memory_used} > {number(t)}",
          "A GPU's memory is nearly full.",
          f"{_GPU} has {_AS_PERCENT.value} of its memory in use (threshold "
          f"{_pct(t)}); the next larger batch or sequence runs out of memory.",
          remedies.GPU_MEMORY, measured=_AS_PERCENT)
    throttled = select("trainwatch_gpu_clock_event_active", exporter,
                       s.selector("throttle_reasons"))
    g.add(GPU_THROTTLED, f"max {by(*GPU_LABELS, 'reason')} ({throttled}) > 0",
          "A GPU is slowing its clocks down.",
          f"{_GPU} is throttled: clock event reason {{{{ $labels.reason }}}} is active.",
          remedies.THROTTLED_GPU)
    t, busy = s.threshold(GPU_LAUNCH_BOUND), s.busy(GPU_LAUNCH_BOUND)
    g.add(GPU_LAUNCH_BOUND,
          gpm_trial_gpus(s, GPU_LAUNCH_BOUND, n.trial_gpu_sm_active,
                         n.trial_gpu_utilization),
          "A live trial's GPU looks busy, but its SMs mostly idle.",
          f"{_GPU}, used by trial {_TRIAL_ID}, had {_AS_PERCENT.value} of its SMs active over "
          f"{s.rate_window} (threshold {_pct(t)}) while NVML utilization read at least "
          f"{_pct(busy)}.", remedies.LAUNCH_BOUND_GPU, measured=_AS_PERCENT, uses_busy=True)
    t, busy = s.threshold(GPU_TENSOR_CORES_IDLE), s.busy(GPU_TENSOR_CORES_IDLE)
    g.add(GPU_TENSOR_CORES_IDLE,
          gpm_trial_gpus(s, GPU_TENSOR_CORES_IDLE, n.trial_gpu_tensor_active,
                         n.trial_gpu_sm_active),
          "A live trial's SMs are busy, but its tensor cores idle.",
          f"{_GPU}, used by trial {_TRIAL_ID}, had its tensor cores active "
          f"{_AS_PERCENT.value} of the time over {s.rate_window} (threshold {_pct(t)}) while "
          f"at least {_pct(busy)} of its SMs were active.", remedies.TENSOR_CORES_IDLE,
          measured=_AS_PERCENT, uses_busy=True)
    for name, flag, summary, what, remedy in (
            (GPU_ROW_REMAP_PENDING, "trainwatch_gpu_row_remap_pending",
             "A GPU needs a reset to remap a failed memory row.",
             "has a memory row remap pending until the GPU is reset.",
             remedies.ROW_REMAP_PENDING),
            (GPU_ROW_REMAP_FAILED, "trainwatch_gpu_row_remap_failure",
             "A GPU could not remap a failed memory row.",
             "failed to remap a memory row (no spare rows left).", remedies.ROW_REMAP_FAILED)):
        g.add(name, f"max {by(*GPU_LABELS)} ({select(flag, exporter)}) > 0", summary,
              f"{_GPU} {what}", remedy)
    return g.rules


def host_alerts(s: Settings) -> list[dict[str, Any]]:
    g, n, exporter, trial = (_Group(s), RecordNames(s.rate_window), s.selector("exporter"),
                             s.selector("trial"))
    t = s.threshold(HOST_MEMORY_LOW)
    g.add(HOST_MEMORY_LOW,
          f"{select('trainwatch_memory_available_bytes', exporter)}\n"
          f"/\n{select('trainwatch_memory_total_bytes', exporter)}\n< {number(t)}",
          "A node is running out of memory.",
          f"{{{{ $labels.instance }}}} has only {_AS_PERCENT.value} of its memory "
          f"available (threshold {_pct(t)}); the OOM killer ends data loader workers or the "
          "trial next.", remedies.HOST_MEMORY, measured=_AS_PERCENT)
    t = s.threshold(CPU_SATURATED)
    live = live_trials(trial, s.threshold(TRIAL_STALE))
    nodes_with_live_trials = (
        f"{select('trainwatch_host_info', exporter)}\n* {on('nodename')} group_left ()\n"
        f"count {by('nodename')} ({select('trainwatch_trial_info', trial)}"
        f" and {on(*TRIAL_LABELS)} ({live}))")
    g.add(CPU_SATURATED,
          f"{n.cpu_utilization} > {number(t)}\nand {on('instance')}\n{nodes_with_live_trials}",
          "The CPUs of a node running a trial are saturated.",
          "{{ $labels.instance }} runs a live trial and its CPUs are "
          f"{_AS_PERCENT.value} busy (threshold {_pct(t)}); data loading and "
          "the Python side of the step compete for them.", remedies.BUSY_CPU,
          measured=_AS_PERCENT)
    return g.rules


def exporter_alerts(s: Settings) -> list[dict[str, Any]]:
    g, exporter = _Group(s), s.selector("exporter")
    g.add(EXPORTER_DOWN, f"{select('up', exporter)} == 0",
          "trainwatch-exporter is down.",
          "Prometheus cannot scrape trainwatch-exporter on {{ $labels.instance }}.",
          remedies.EXPORTER_DOWN)
    # A node without NVML (a CPU-only node) is a state, not a failure: its gpu collector is
    # left alone, unless the node exported a GPU within the hour (a driver that went away).
    no_nvml = (f"{select('trainwatch_gpu_nvml_absent', exporter)} == 1\n"
               f"  unless {on('job', 'instance')}\n"
               f"  max_over_time({select(figures.GPU_INFO, exporter)}[1h])")
    g.add(COLLECTOR_FAILING,
          f"{select('trainwatch_scrape_collector_success', exporter)} == 0\n"
          f"unless {on('job', 'instance', 'collector')}\n"
          f'label_replace(\n  {no_nvml},\n  "collector", "gpu", "", "")',
          "A trainwatch-exporter collector is failing.",
          "Collector {{ $labels.collector }} of trainwatch-exporter on {{ $labels.instance }} "
          "fails on every scrape; its metrics are missing.",
          remedies.COLLECTOR_FAILING)
    return g.rules


# Alert group -> its rules; each renders to rules/<group>.yml and is tested by tests/<group>.yml.
ALERT_GROUPS: dict[str, Callable[[Settings], list[dict[str, Any]]]] = {
    "trial": trial_alerts,
    "gpu": gpu_alerts,
    "host": host_alerts,
    "exporter": exporter_alerts,
}
