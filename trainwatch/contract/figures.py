"""Each recorded figure's expression over the raw series, defined once: the rule generator
(prometheus/rulegen) renders the recording rules from these, and the report's raw fallback
(trainwatch/report/rates.py) evaluates the same expressions where no recorded series covers
its window. ``trial`` and ``exporter`` are the selectors' written matchers, ``window`` the
rate window and ``seconds`` the same in seconds.

**One window rule** (docs/design.md, ``run_age``): a figure of a run covers the rate window,
or, for a run younger than the window, the run's own age, from its start to its counters'
latest reading. A counter the trial starts at zero with its run (phases, step, steps, samples)
is read as its value over that age, so what it counted before its series' first scrape is not
lost to ``rate()``; a counter that did not start at zero (process CPU, reads) as its rate times
the window over the age. `trainwatch diagnose` reads a young rank over its life the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from trainwatch.contract.promql import GPU_LABELS, TRIAL_LABELS, by, number, on, select
from trainwatch.contract.records import BUSY_SOURCES
from trial_instrumentation import names

# CPU modes that are not work done for the node (as node-mixin counts them).
NOT_BUSY_MODES = 'mode=~"idle|iowait|steal"'
# The GPU-busy rule's sources (its ``source`` label) -> the exporter series each reads, in the
# rule's order of preference.
BUSY_METRICS = {"sm_active": "trainwatch_gpu_sm_active_ratio",
                "utilization": "trainwatch_gpu_utilization_ratio"}
# The exporter's host identity series (instance, nodename): the join from a trial's nodename to
# its node's series.
HOST_INFO = "trainwatch_host_info"
# The exporter's GPU identity series (instance, gpu, uuid, name): a GPU's product by its uuid.
GPU_INFO = "trainwatch_gpu_info"


def run_age(trial: str, seconds: float) -> str:
    """A rank whose run started (``trainwatch_trial_start_time_seconds``) less than ``seconds``
    ago: the seconds from that start to its counters' latest reading (``push_time_seconds``;
    pulled, its last scrape), at least 1."""
    read_at = (f"max {by(*TRIAL_LABELS)} ({select('push_time_seconds', trial)})\n"
               f"  or max {by(*TRIAL_LABELS)} "
               f"(timestamp({select(f'{names.STEPS}_total', trial)}))")
    started = (f"max {by(*TRIAL_LABELS)} ({select(names.START_TIME, trial)})\n"
               f"  > time() - {number(seconds)}")
    return f"clamp_min(\n  (\n{indent(read_at, 2)}\n  )\n  - ({started}),\n  1\n)"


def inline_age(trial: str, seconds: float) -> str:
    """:func:`run_age` as an operand, for an expression that cannot read its record."""
    return f"(\n{indent(run_age(trial, seconds))}\n)"


def over_run(rate: str, young: Callable[[str], str], age: str, *extra: str) -> str:
    """A per-rank figure: ``rate`` over the rate window for a rank older than it,
    ``young(matched)`` over the run's own ``age`` (the run_age record, or :func:`inline_age`)
    for a younger one. ``extra``: the labels the figure has beyond the rank's (the young side
    is then many-to-one)."""
    on_rank = on(*TRIAL_LABELS)
    many = " group_left ()" if extra else ""  # () : an inline age opens with a parenthesis
    if "\n" in rate:  # an expression of its own: kept whole under `unless`, which binds tighter
        rate = f"(\n{indent(rate)}\n)"
    return (f"(\n{indent(rate)}\n  unless {on_rank} {age}\n)\nor\n"
            f"{young(f'{on_rank}{many} {age}')}")


def born_at_zero(metric: str, trial: str, window: str, age: str, *extra: str) -> str:
    """Per rank (and ``extra`` labels): the rate of a counter the trial starts at zero with its
    run, over the window or, for a young rank, its value over its ``age``."""
    grouped = by(*TRIAL_LABELS, *extra)
    return over_run(f"sum {grouped} (rate({select(metric, trial)}[{window}]))",
                    lambda matched: f"sum {grouped} ({select(metric, trial)})\n/ {matched}",
                    age, *extra)


def over_window(rate: str, seconds: float, age: str) -> str:
    """A per-rank figure of rates over the window; for a young rank the same rates times the
    window over its ``age``: its counters did not start at zero with the run, so the rates'
    increase is all there is, and the part of the window before the run began must not
    dilute it."""
    return over_run(rate, lambda matched: f"(\n{indent(rate)}\n)\n* {number(seconds)}\n/ "
                                          f"{matched}", age)


def over_life(window_seconds: float, life_seconds: float) -> Callable[[str], str]:
    """A ``span`` for :func:`loader_worker_cpu`: rates over a window that holds all of an
    ended run's samples, as the increase over its life (from its start to its final push)
    per second of that life."""
    return lambda rate: (f"(\n{indent(rate)}\n)\n* {number(window_seconds)}\n"
                         f"/ {float(max(life_seconds, 1e-3))!r}")


def loader_worker_cpu(trial: str, window: str,
                      span: Callable[[str], str] | None = None) -> str:
    """Per rank: the CPU one DataLoader worker wants, seconds per second, **defined once** (the
    recording rule and ``trainwatch diagnose`` both read this): the workers' CPU seconds
    (``process="workers"``) plus their run-queue wait, over the seconds they lived
    (``trainwatch_trial_loader_worker_seconds_total``), both increases over ``window``. A
    worker forked late in the window, a young run's, or workers that restart each epoch are
    not diluted by the time no worker lived, and no age or life scaling applies: the two
    increases share every sample. With no worker in the window, the trial process's own CPU;
    a trial pushed by a library without the worker-seconds counter, the workers' CPU over the
    most workers seen in the window (diluted where they lived less than the window). ``span``:
    how those two rates over the window become the run's (a young run's age, an ended run's
    life: :func:`over_window`, :func:`over_life`); by default the window's rates as they are.
    """
    over = span or (lambda rate: rate)
    on_rank, per_rank = on(*TRIAL_LABELS), by(*TRIAL_LABELS)

    def rate(metric: str, *matchers: str) -> str:
        return f"sum {per_rank} (rate({select(metric, trial, *matchers)}[{window}]))"

    cpu = f"{names.LOADER_CPU_SECONDS}_total"
    workers = (f"max {per_rank} "
               f"(max_over_time({select(names.LOADER_WORKERS, trial)}[{window}]))")
    # The workers' CPU and run-queue wait summed in one pass (the two series differ in their
    # labels, so `or` keeps both; a trial without the wait counter sums its CPU alone).
    workers_cpu = select(cpu, trial, f'process="{names.PROCESS_WORKERS}"')
    waited = select(f"{names.LOADER_CPU_WAIT_SECONDS}_total", trial)
    wanted = (f"sum {per_rank} (\n  rate({workers_cpu}[{window}])\n"
              f"  or rate({waited}[{window}])\n)")
    lived = rate(f"{names.LOADER_WORKER_SECONDS}_total")
    main_cpu = rate(cpu, f'process="{names.PROCESS_MAIN}"')
    older = f"{wanted}\n/ ({workers} > 0)\nunless {on_rank}\n{lived}"
    return (f"(\n{indent(wanted)}\n  / {on_rank}\n  ({lived} > 0)\n)\nor\n"
            f"(\n{indent(over(older))}\n)\nor\n"
            f"(\n{indent(over(main_cpu))}\n)\nand {on_rank} ({workers} == 0)")


def phase_share(phase_rate: str, step_rate: str) -> str:
    """Each phase's share of the rank's step time, from the two per-rank rates."""
    return f"{phase_rate}\n/ {on(*TRIAL_LABELS)} group_left ()\n{step_rate}"


def cpu_utilization(exporter: str, window: str) -> str:
    """The share of a node's CPU time spent working."""
    idle = select("trainwatch_cpu_seconds_total", exporter, NOT_BUSY_MODES)
    return (f"1 - sum {by('instance')} (rate({idle}[{window}]))\n"
            f"/ max {by('instance')} ({select('trainwatch_cpu_count', exporter)})")


def node_cpu_count(exporter: str) -> str:
    """Per node: its logical CPUs."""
    return f"max {by('instance')} ({select('trainwatch_cpu_count', exporter)})"


def node_disk_busy(exporter: str, range_: str) -> str:
    """Per node: its busiest disk's share of time busy over ``range_`` (``[5m]``, or a run's
    life: ``[60s] offset 116s``)."""
    return (f"max {by('instance')} (rate("
            f"{select('trainwatch_disk_io_time_seconds_total', exporter)}{range_}))")


def node_nic_busy(receive_rate: str, exporter: str) -> str:
    """Per node: its busiest NIC's receive rate over its link speed, from ``receive_rate``
    (per node and device: the recorded :func:`device_rate`, or that expression over a run's
    life)."""
    speed = select("trainwatch_network_speed_bytes", exporter)
    return (f"max {by('instance')} (\n  {receive_rate}\n"
            f"  / {on('instance', 'device')} max {by('instance', 'device')} ({speed})\n)")


def device_rate(counter: str, exporter: str, window: str) -> str:
    """An exporter byte or operation counter's rate, per node and device (``window`` a
    duration, or a range with its brackets: ``[60s] offset 116s``)."""
    range_ = window if window.startswith("[") else f"[{window}]"
    return f"sum {by('instance', 'device')} (rate({select(counter, exporter)}{range_}))"


def gpu_busy(exporter: str) -> str:
    """"GPU busy": SM activity where GPM reports it (NVML utilization counts a GPU busy while
    any kernel runs: 99% on an H100 whose SMs were 22.5% active), else NVML utilization, per
    GPU, with the one used in the ``source`` label (no rate: the window plays no part)."""
    def per_gpu(metric: str) -> str:
        return f"max {by(*GPU_LABELS)} ({select(metric, exporter)})"

    labelled = [f'label_replace({per_gpu(BUSY_METRICS[source])}, "source", "{source}", "", "")'
                for source in BUSY_SOURCES]
    return f"\nor {on(*GPU_LABELS)}\n".join(labelled)


# The baseline (docs/design.md, "The run that got slower"): the median throughput of the last
# BASELINE_RUNS runs of an experiment that ended clean with a world size; fewer than
# BASELINE_MIN_RUNS make none. `trainwatch check` and the recorded baseline count alike.
BASELINE_RUNS, BASELINE_MIN_RUNS = 5, 2
# A baseline pinned by `trainwatch baseline set E/T`: this series, pushed to the Pushgateway as
# its own group (job BASELINE_PIN_JOB, grouping key experiment), which gc never sweeps.
BASELINE_PIN, BASELINE_PIN_JOB = "trainwatch_baseline_pinned", "trainwatch_baseline"
# A throughput's ``unit`` label: samples/s per rank where the trial counts samples, else steps/s.
PER_SAMPLE, PER_STEP = "sample", "step"
# A run's identity beside its rank's key (trainwatch_trial_info's labels).
RUN_LABELS = (*TRIAL_LABELS, "pid", "nodename", "world_size")


def throughput(samples: str, steps: str) -> str:
    """Per rank: ``samples`` where it counts any (``unit="sample"``), else ``steps``."""
    return (f'(\n  label_replace({samples} > 0, "unit", "{PER_SAMPLE}", "", "")\n'
            f"  or {on(*TRIAL_LABELS)}\n"
            f'  label_replace({steps}, "unit", "{PER_STEP}", "", "")\n)')


def with_run(expr: str, trial: str, *labels: str) -> str:
    """``expr`` (per rank) with ``labels`` of its run's trainwatch_trial_info (one series per
    rank: two under one key, a shared key, would make the join fail)."""
    info = f"topk {by(*TRIAL_LABELS)} (1, {select(names.TRIAL_INFO, trial)})"
    return f"{expr}\n* {on(*TRIAL_LABELS)} group_left ({', '.join(labels)})\n{info}"


def _ended_clean(expr: str, trial: str, *extra: str) -> str:
    """``expr`` (per rank, and ``extra`` labels) for the ranks whose run ended clean, with
    their run's identity (RUN_LABELS)."""
    clean = select(names.EXIT, trial, f'reason="{names.EXIT_CLEAN}"')
    return (f"max {by(*RUN_LABELS, *extra)} (\n"
            f"{indent(with_run(expr, trial, 'pid', 'nodename', 'world_size'))}\n"
            f"  and {on(*TRIAL_LABELS)} {clean}\n)")


def run_throughput(trial: str) -> str:
    """A rank of a run that ended clean: its final samples (steps) over its life, from its
    start to its final push, while its group is scraped."""
    counted = throughput(select(f"{names.SAMPLES}_total", trial),
                         select(f"{names.STEPS}_total", trial))
    life = (f"({select('push_time_seconds', trial)} - {on(*TRIAL_LABELS)} "
            f"{select(names.START_TIME, trial)} > 0)")
    # group_left: one-to-one under on() would keep the on() labels only, not the unit
    return _ended_clean(f"{counted}\n/ {on(*TRIAL_LABELS)} group_left () {life}", trial, "unit")


def run_phase_per_step(trial: str) -> str:
    """A rank of a run that ended clean: each phase's seconds per step over its life."""
    steps = f"({select(f'{names.STEPS}_total', trial)} > 0)"
    return _ended_clean(f"{select(f'{names.PHASE_SECONDS}_sum', trial)}\n"
                        f"/ {on(*TRIAL_LABELS)} group_left () {steps}", trial, "phase")


def run_clean_end(trial: str) -> str:
    """A rank of a run that ended clean: its final push's time."""
    return _ended_clean(select("push_time_seconds", trial), trial)


def baseline(figure: str, ends: str, lookback: str, label: str, lowest: bool = False) -> str:
    """Per experiment, world size and ``label`` (unit, phase): the median (``lowest``: the
    least) of rank 0's ``figure`` (a record per run, run_throughput or run_phase_per_step) of
    the last BASELINE_RUNS runs by ``ends`` (run_clean_end) within ``lookback``, where there
    are at least BASELINE_MIN_RUNS (each run's last reading: after gc retired its group too)."""
    rank0 = 'rank="0"'
    last = (f"last_over_time({select(figure, rank0)}[{lookback}])\n"
            f"and {on(*RUN_LABELS)}\n"
            f"topk by (experiment, world_size) ({BASELINE_RUNS}, "
            f"last_over_time({select(ends, rank0)}[{lookback}]))")
    per = by("experiment", "world_size", label)
    of = f"min {per} (\n" if lowest else f"quantile {per} (0.5,\n"
    return (f"{of}{indent(last)}\n)\n"
            f"and {on('experiment', 'world_size', label)}\n"
            f"count {per} (\n{indent(last)}\n) >= {BASELINE_MIN_RUNS}")


def indent(text: str, depth: int = 1) -> str:
    """Each line of ``text`` indented ``depth`` steps of two spaces, as the rule files nest."""
    return "\n".join(f"{'  ' * depth}{line}" for line in text.splitlines())
