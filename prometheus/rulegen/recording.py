"""Recording rules: per-trial phase shares and quantiles, trial GPUs, host throughput.

The names (RecordNames) live in the contract, trainwatch/contract/records.py, because the
dashboards and `trainwatch diagnose` read the same series; the rate window from thresholds.yaml
is part of every rate-derived name (``..._rate5m``).
"""

from __future__ import annotations

from typing import Any

from prometheus.rulegen.causes import cause_rules, loader_figure_rules
from prometheus.rulegen.settings import Settings
from prometheus.rulegen.usage import usage_group
from trainwatch.contract import figures
from trainwatch.contract.alerts import SLOWER_THAN_BASELINE
from trainwatch.contract.promql import GPU_LABELS, TRIAL_LABELS, by, on, select
from trainwatch.contract.records import QUANTILES, RecordNames
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

# Host counters recorded as per-device rates: (recorded metric stem, exporter counter).
_DEVICE_RATES = (
    ("network_receive_bytes", "trainwatch_network_receive_bytes_total"),
    ("network_transmit_bytes", "trainwatch_network_transmit_bytes_total"),
    ("disk_read_bytes", "trainwatch_disk_read_bytes_total"),
    ("disk_written_bytes", "trainwatch_disk_written_bytes_total"),
    ("disk_reads_completed", "trainwatch_disk_reads_completed_total"),
    ("disk_writes_completed", "trainwatch_disk_writes_completed_total"),
)


def _record(name: str, expr: str, **labels: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _trial_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Per-rank trial records, chained so each raw series is read once per evaluation: the
    run's age (for a run younger than the window) and the rates of the phases' and the step's
    sums and counts first, then everything from them (a rule reads the records above it in the
    same group at the same evaluation time). The histograms' buckets are read only by the
    quantiles, in their own group (_quantile_rules)."""
    trial, w = s.selector("trial"), s.rate_window

    def born_at_zero(metric: str, *extra: str) -> str:
        return figures.born_at_zero(metric, trial, w, n.run_age, *extra)

    rules = [
        _record(n.run_age, figures.run_age(trial, parse_duration(w))),
        _record(n.phase_sum_rate, born_at_zero(f"{names.PHASE_SECONDS}_sum", "phase")),
        _record(n.step_sum_rate, born_at_zero(f"{names.STEP_SECONDS}_sum")),
        _record(n.step_count_rate, born_at_zero(f"{names.STEP_SECONDS}_count")),
        _record(n.phase_share, figures.phase_share(n.phase_sum_rate, n.step_sum_rate)),
        _record(n.steps_rate, born_at_zero(f"{names.STEPS}_total")),
        _record(n.samples_rate, born_at_zero(f"{names.SAMPLES}_total")),
        *loader_figure_rules(s),
    ]
    return rules + [_pulled_last_scrape(s, n)] + _rank_rules(s, n) + _baseline_rules(s, n)


def _baseline_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Each run that ended clean, its throughput over its life and when it ended, kept while
    its group is scraped; and per experiment the median of the last ones, within
    TrainwatchTrialSlowerThanBaseline's ``window``, which that alert compares a running rank
    with (docs/design.md, "The run that got slower")."""
    trial, lookback = s.selector("trial"), s.window(SLOWER_THAN_BASELINE)
    return [_record(n.run_throughput, figures.run_throughput(trial)),
            _record(n.run_phase_per_step, figures.run_phase_per_step(trial)),
            _record(n.run_clean_end, figures.run_clean_end(trial)),
            _record(n.baseline, figures.baseline(n.run_throughput, n.run_clean_end, lookback,
                                                 "unit")),
            _record(n.baseline_low, figures.baseline(n.run_throughput, n.run_clean_end,
                                                     lookback, "unit", lowest=True)),
            _record(n.baseline_phase, figures.baseline(n.run_phase_per_step, n.run_clean_end,
                                                       lookback, "phase"))]


def _quantile_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """The step and phase duration quantiles: the histograms' buckets (about 140 of a rank's
    ~170 series with the default phase buckets) are read here only, each rule summing the
    rates per rank and le before histogram_quantile. No alert reads them (the dashboards and
    `diagnose` do), so their group runs at thresholds.yaml's quantile_interval: at 10,000
    ranks their cost would otherwise fill the trial group's interval (benchmarks/README.md)."""
    trial, w = s.selector("trial"), s.rate_window

    def rate(metric: str) -> str:
        return f"rate({select(metric, trial)}[{w}])"

    rules = []
    for q in QUANTILES:
        rules.append(_record(n.phase_quantile, (
            f"histogram_quantile({q}, sum {by(*TRIAL_LABELS, 'phase', 'le')}"
            f" ({rate('trainwatch_trial_phase_seconds_bucket')}))"), quantile=q))
    for q in QUANTILES:
        rules.append(_record(n.step_quantile, (
            f"histogram_quantile({q}, sum {by(*TRIAL_LABELS, 'le')}"
            f" ({rate('trainwatch_trial_step_seconds_bucket')}))"), quantile=q))
    return rules


def _pulled_last_scrape(s: Settings, n: RecordNames) -> dict[str, Any]:
    """A pulled trial's push_time_seconds: the time of its last successful scrape. A failed
    scrape marks its series stale at once, so the rule keeps its own last value while the
    target's scrapes fail (up == 0), as the Pushgateway keeps a crashed trial's group; when
    the target goes away (its pod ended), up goes too and so does this series. Pulled series
    carry the target's instance, pushed ones none (honor_labels, empty instance)."""
    trial = s.selector("trial")
    pulled = select("trainwatch_trial_info", trial, 'instance!=""')
    return _record(n.pulled_last_scrape, (
        f"max {by('job', 'instance', *TRIAL_LABELS)} (timestamp({pulled}))\n"
        f"or\n({n.pulled_last_scrape} and {on('job', 'instance')} {select('up', trial)} == 0)"))


def _rank_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Each rank's own mean step time (without the phases in which it waits for the other
    ranks: in lockstep every rank's whole step lasts as long as the slowest one's) and, per
    trial, the slowest rank's over the median rank's."""
    trial = s.selector("trial")
    waited = (f"sum {by(*TRIAL_LABELS)} "
              f"({select(n.phase_sum_rate, s.selector('rank_wait_phases'))})")
    own_mean = (f"(\n  {n.step_sum_rate}\n  - ({waited} or 0 * {n.step_sum_rate})\n)\n"
                f"/ ({n.step_count_rate} > 0)")
    per_trial = [label for label in TRIAL_LABELS if label != "rank"]
    spread = (f"max {by(*per_trial)} ({n.rank_step_mean})\n"
              f"/ quantile {by(*per_trial)} (0.5, {n.rank_step_mean})")
    # Scaling efficiency: only trials that measured their single-rank step limit
    # (Trial.measure_step_limit) have it; every rank pushes a group, so the ranks counted are
    # the world size.
    efficiency = (f"sum {by(*per_trial)} ({n.samples_rate})\n/ (\n"
                  f"  count {by(*per_trial)} ({select('trainwatch_trial_info', trial)})\n"
                  f"  * avg {by(*per_trial)} "
                  f"({select('trainwatch_trial_step_limit_samples_per_second', trial)})\n)")
    return [_record(n.rank_step_mean, own_mean), _record(n.rank_spread, spread),
            _record(n.scaling_efficiency, efficiency)]


def _gpu_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    exporter, trial = s.selector("exporter"), s.selector("trial")

    def per_gpu(metric: str) -> str:
        return f"max {by(*GPU_LABELS)} ({select(metric, exporter)})"

    # The trial side is the "many" side: two trials sharing one GPU (MPS, MIG parent) both get
    # its value instead of a many-to-many error; the exporter side is unique per uuid.
    def for_trials(per_gpu_expr: str, *copied: str) -> str:
        return (f"max {by(*TRIAL_LABELS, 'uuid')} ({select('trainwatch_trial_gpu_info', trial)})\n"
                f"* {on('uuid')} group_left ({', '.join(('instance', 'gpu', *copied))})\n"
                f"{per_gpu_expr}")

    return [
        _record(n.gpu_memory_used, (f"{per_gpu('trainwatch_gpu_memory_used_bytes')}\n"
                                    f"/\n{per_gpu('trainwatch_gpu_memory_total_bytes')}")),
        _record(n.gpu_busy, figures.gpu_busy(exporter)),
        _record(n.trial_gpu_busy, for_trials(n.gpu_busy, "source")),
        _record(n.trial_gpu_utilization, for_trials(per_gpu("trainwatch_gpu_utilization_ratio"))),
        # GPM activity: recorded only for GPUs that have it (Hopper and newer).
        _record(n.trial_gpu_sm_active, for_trials(per_gpu("trainwatch_gpu_sm_active_ratio"))),
        _record(n.trial_gpu_tensor_active,
                for_trials(per_gpu("trainwatch_gpu_tensor_active_ratio"))),
        _record(n.trial_gpu_memory_used, for_trials(n.gpu_memory_used)),
        *_mfu_rules(s, n),
    ]


def _mfu_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Model FLOPs utilization (PaLM, appendix B): samples/s x the model's FLOPs per sample
    over the peak of the rank's GPUs in the precision the rank declared. A rank without a FLOPs
    figure, or with a GPU whose peak is unknown (or unscraped), has no series: never 0."""
    exporter, trial = s.selector("exporter"), s.selector("trial")
    rank_precision = (*TRIAL_LABELS, "precision")
    flops = f"max {by(*rank_precision)} ({select(names.MODEL_FLOPS, trial)})"
    gpus = f"max {by(*TRIAL_LABELS, 'uuid')} ({select(names.GPU_INFO, trial)})"
    # Each trial GPU once, labelled with its rank's precision (the many side of the uuid join).
    wanted = (f"count {by(*rank_precision, 'uuid')} (\n  {gpus}\n"
              f"  * {on(*TRIAL_LABELS)} group_left (precision)\n  {flops}\n)")
    peaks = (f'max {by("uuid", "precision")} (label_replace('
             f'{select("trainwatch_gpu_peak_flops", exporter)}, "precision", "$1", "dtype", "(.+)"))')
    peak_sum = (f"sum {by(*rank_precision)} (\n{wanted}\n* {on('uuid', 'precision')} "
                f"group_left\n{peaks}\n)\n"
                f"and {on(*TRIAL_LABELS)}\n"
                f"(count {by(*TRIAL_LABELS)} ({wanted} * {on('uuid', 'precision')} group_left "
                f"{peaks})\n == count {by(*TRIAL_LABELS)} ({gpus}))")
    model_flops = f"{flops}\n* {on(*TRIAL_LABELS)} group_left\n{n.samples_rate}"
    per_trial = [label for label in TRIAL_LABELS if label != "rank"]
    return [
        _record(n.trial_peak_flops, peak_sum),
        _record(n.mfu, f"{model_flops}\n/ {on(*rank_precision)}\n{n.trial_peak_flops}"),
        _record(n.trial_mfu, (
            f"sum {by(*per_trial)} (\n  {n.mfu} * {on(*rank_precision)} {n.trial_peak_flops}\n)"
            f"\n/ sum {by(*per_trial)} (\n  {n.trial_peak_flops} and {on(*rank_precision)} "
            f"{n.mfu}\n)")),
    ]


def _host_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    exporter, w = s.selector("exporter"), s.rate_window
    return [_record(n.cpu_utilization, figures.cpu_utilization(exporter, w)),
            *(_record(n.device_rate(stem), figures.device_rate(counter, exporter, w))
              for stem, counter in _DEVICE_RATES)]


def recording_groups(s: Settings) -> list[dict[str, Any]]:
    """The rule groups of rules/recording.yml (order inside a group matters: later rules read
    earlier ones in the same evaluation).

    Example:
        >>> from prometheus.rulegen.settings import load_settings
        >>> [g["name"] for g in recording_groups(load_settings())]  # doctest: +NORMALIZE_WHITESPACE
        ['trainwatch.trial.rules', 'trainwatch.trial.quantiles', 'trainwatch.gpu.rules',
         'trainwatch.host.rules', 'trainwatch.causes.rules', 'trainwatch.usage.rules']
    """
    n = RecordNames(s.rate_window)
    quantiles: dict[str, Any] = {"name": "trainwatch.trial.quantiles"}
    if s.quantile_interval is not None:
        quantiles["interval"] = s.quantile_interval
    return [
        {"name": "trainwatch.trial.rules", "rules": _trial_rules(s, n)},
        {**quantiles, "rules": _quantile_rules(s, n)},
        {"name": "trainwatch.gpu.rules", "rules": _gpu_rules(s, n)},
        {"name": "trainwatch.host.rules", "rules": _host_rules(s, n)},
        {"name": "trainwatch.causes.rules", "rules": cause_rules(s)},
        usage_group(s, n),
    ]
