"""What the report plots: one PromQL range query per line, joined to the trial's GPUs on
``uuid`` and to its nodes on ``nodename`` (docs/design.md, joins), named as the reader sees them.

A line drawn from a recorded series also carries the same figure computed from the raw series
(:mod:`trainwatch.report.rates`), which the report draws where the recorded one does not cover
the window."""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.contract.promql import select as selector
from trainwatch.contract.records import RecordNames
from trainwatch.report.rates import RawRates
from trial_instrumentation import names

BUSY_PANEL = "gpu-busy"
GIB = 2.0**30
PERCENT, MHZ = 100.0, 1e-6
GPM_NOTE = ("not exported for these GPUs: NVML GPM needs a Hopper or newer GPU and a driver that "
            "supports it; NVML utilization above says only that some kernel ran")


@dataclass(frozen=True)
class Line:
    """One query; each series it returns is a line named by ``legend`` (str.format over its
    labels plus ``host``, the node name of its ``instance``)."""

    expr: str
    legend: str
    scale: float = 1.0
    reference: bool = False  # a ceiling (total, limit): drawn dashed, never spread
    raw: str | None = None  # the same figure from the raw series, when ``expr`` is recorded


@dataclass(frozen=True)
class PanelSpec:
    """A plot: its title, the y axis's label with its unit, and its lines."""

    key: str
    title: str
    ylabel: str
    lines: tuple[Line, ...]
    stacked: bool = False
    when_empty: str = "no data in this window"
    drop_zero: bool = False  # leave out lines that stay 0 (a throttle reason never active)
    # Lines in bytes/s: drawn in the largest binary unit that keeps them readable, named by
    # ``{unit}`` in ``ylabel``.
    byte_rate: bool = False
    # The title names the GPU-busy rule's source(s) its series carry (records.BUSY_SOURCES),
    # e.g. "GPU busy: SM activity (NVML GPM)"; legends name each line's with {busy_source}.
    title_names_source: bool = False


def trial_panels(n: RecordNames, sel: dict[str, str | None], trial: str,
                 several_trials: bool) -> list[PanelSpec]:
    """The training loop's panels for one trial of the selection."""
    one = {**sel, "trial": trial}
    raw = RawRates(n.window)
    who = "trial {trial} rank {rank}" if several_trials else "rank {rank}"
    suffix = f" — trial {trial}" if several_trials else ""
    by_rank = "sum by (trial, rank)"

    def per_rank(record: str, counter: str) -> Line:
        return Line(f"{by_rank} ({selector(record, **one)})", who,
                    raw=f"{by_rank} ({raw.counter_rate(counter, **one)})")

    return [
        PanelSpec(f"phases-{trial}", f"Share of step time by phase{suffix}",
                  "share of step time (%)",
                  (Line(f"avg by (phase) ({selector(n.phase_share, **one)})", "{phase}",
                        PERCENT, raw=f"avg by (phase) ({raw.phase_share(**one)})"),),
                  stacked=True),
        PanelSpec(f"steps-{trial}", f"Steps per second{suffix}", "steps/s",
                  (per_rank(n.steps_rate, f"{names.STEPS}_total"),)),
        PanelSpec(f"samples-{trial}", f"Samples per second{suffix}", "samples/s", (
            per_rank(n.samples_rate, f"{names.SAMPLES}_total"),
            Line(f"max ({selector(names.LOADER_LIMIT, **one)})", "loader limit (measured)",
                 reference=True),
            Line(f"max ({selector(names.STEP_LIMIT, **one)})", "step limit (measured)",
                 reference=True))),
    ]


def gpu_panels(sel: dict[str, str | None]) -> list[PanelSpec]:
    """The trial's GPUs: every exporter series joined on uuid to trainwatch_trial_gpu_info;
    first "GPU busy" as the one rule defines it, which names its source in title and legend."""
    join = f"* on (uuid) group_left () max by (uuid) ({selector(names.GPU_INFO, **sel)})"
    gpu = "{host} GPU {gpu}"

    def line(metric: str, legend: str = gpu, scale: float = 1.0, ref: bool = False) -> Line:
        return Line(f"{metric} {join}", legend, scale, ref)

    # The rule is not windowed: any window gives the same expression.
    busy = Line(f"{RecordNames.gpu_busy} {join}", gpu + ": {busy_source}", PERCENT,
                raw=f"({RawRates('1m').gpu_busy()}) {join}")
    return [
        PanelSpec(BUSY_PANEL, "GPU busy", "busy (%)", (busy,), title_names_source=True),
        PanelSpec("gpu-util", "GPU utilization (NVML: share of time any kernel ran)",
                  "utilization (%)", (line("trainwatch_gpu_utilization_ratio", scale=PERCENT),)),
        PanelSpec("gpu-sm", "SM activity (NVML GPM)", "SMs active (%)",
                  (line("trainwatch_gpu_sm_active_ratio", scale=PERCENT),), when_empty=GPM_NOTE),
        PanelSpec("gpu-tensor", "Tensor-core activity (NVML GPM)", "tensor cores active (%)",
                  (line("trainwatch_gpu_tensor_active_ratio", scale=PERCENT),),
                  when_empty=GPM_NOTE),
        PanelSpec("gpu-memory", "GPU memory used against total", "memory (GiB)", (
            line("trainwatch_gpu_memory_used_bytes", gpu + " used", 1 / GIB),
            line("trainwatch_gpu_memory_total_bytes", gpu + " total", 1 / GIB, True))),
        PanelSpec("gpu-power", "GPU power against its limit", "power (W)", (
            line("trainwatch_gpu_power_watts", gpu),
            line("trainwatch_gpu_power_limit_watts", gpu + " limit", ref=True))),
        PanelSpec("gpu-clock", "GPU SM clock", "clock (MHz)",
                  (line("trainwatch_gpu_sm_clock_hertz", scale=MHZ),)),
        PanelSpec("gpu-throttle", "Clock-event reasons (throttling), any of the trial's GPUs",
                  "reason active (0 = no, 1 = yes)",
                  (Line(f"max by (reason) (trainwatch_gpu_clock_event_active {join})",
                        "{reason}"),),
                  when_empty="no clock-event reason held the clocks down in this window",
                  drop_zero=True),
    ]


def node_panels(n: RecordNames, sel: dict[str, str | None]) -> list[PanelSpec]:
    """The trial's nodes: exporter series joined on nodename to trainwatch_trial_info."""
    nodes = f"max by (nodename) ({selector(names.TRIAL_INFO, **sel)})"
    join = (f"* on (instance) group_left (nodename) (trainwatch_host_info * on (nodename) "
            f"group_left () {nodes})")

    raw = RawRates(n.window)
    not_lo = 'device!="lo"'

    def summed(stem: str, legend: str) -> Line:
        return Line(f"sum by (instance) ({selector(n.device_rate(stem), not_lo)}) {join}",
                    legend, raw=f"sum by (instance) ({raw.device_rate(stem, not_lo)}) {join}")

    return [
        PanelSpec("node-cpu", "Node CPU busy", "CPU busy (%)",
                  (Line(f"{n.cpu_utilization} {join}", "{nodename}", PERCENT,
                        raw=f"({raw.cpu_utilization()}) {join}"),)),
        PanelSpec("node-memory", "Node memory available", "memory (GiB)", (
            Line(f"trainwatch_memory_available_bytes {join}", "{nodename} available", 1 / GIB),
            Line(f"trainwatch_memory_total_bytes {join}", "{nodename} total", 1 / GIB, True))),
        PanelSpec("node-disk", "Disk throughput", "throughput ({unit})", (
            summed("disk_read_bytes", "{nodename} read"),
            summed("disk_written_bytes", "{nodename} written")), byte_rate=True),
        PanelSpec("node-network", "Network throughput (all devices but lo)",
                  "throughput ({unit})", (
                      summed("network_receive_bytes", "{nodename} received"),
                      summed("network_transmit_bytes", "{nodename} sent")), byte_rate=True),
    ]


def byte_unit(largest: float) -> tuple[str, float]:
    """The unit to draw byte rates up to ``largest`` in, and its size in bytes.

    >>> byte_unit(3e6), byte_unit(10)
    (('MiB/s', 1048576.0), ('B/s', 1.0))
    """
    for unit, size in (("GiB/s", 2.0**30), ("MiB/s", 2.0**20), ("KiB/s", 2.0**10)):
        if largest >= size:
            return unit, size
    return "B/s", 1.0
