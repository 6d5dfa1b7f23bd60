"""The verdict: one word per trial rank naming its bottleneck, from the alerts' thresholds.

The expression is an ``or`` chain of conditions in priority order; each yields a constant code
and ``or`` keeps the first that holds for a (experiment, trial, rank), so a rank gets exactly
one code. The thresholds are the alerts' (thresholds.yaml), so the verdict and the alerts
never disagree about what counts as bound; the checks, their order and their titles are
`trainwatch diagnose`'s table (trainwatch/contract/checks.py CHECKS), so the panel and the
CLI name the same bottleneck.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grafana.panels import Mapping
from grafana.promql import Promql
from trainwatch.contract import remedies
from trainwatch.contract.alerts import GPU_UNDERUTILIZED
from trainwatch.contract.checks import CHECKS, GATES, LOW_MFU
from trainwatch.contract.promql import BY_TRIAL, number, select
from trial_instrumentation import names


@dataclass(frozen=True)
class Verdict:
    """One outcome: the condition that selects it, the word shown and what to change."""

    code: int
    text: str
    color: str
    condition: str
    remedy: str


# The dashboard's colour and remedy for each check of the CLI's table.
_LOOK = {
    "dataloader": ("red", remedies.DATALOADER),
    "memory_copies": ("orange", remedies.MEMORY_COPIES),
    "busy_cpu": ("orange", remedies.BUSY_CPU),
    "launch_bound": ("yellow", remedies.LAUNCH_BOUND_GPU),
    "underused_gpu": ("yellow", remedies.UNDERUTILIZED_GPU),
    "tensor_cores_idle": ("purple", remedies.TENSOR_CORES_IDLE),
}


def verdicts(q: Promql, matchers: Sequence[str]) -> list[Verdict]:
    """The outcomes in priority order, for the trials picked by ``matchers``."""
    s, n = q.settings, q.names

    def share(phases: str) -> str:
        return f"sum {BY_TRIAL} ({select(n.phase_share, *matchers, phases)})"

    def window_avg(record: str) -> str:
        return f"avg {BY_TRIAL} (avg_over_time({select(record, *matchers)}[{s.rate_window}]))"

    gpu, sm = window_avg(n.trial_gpu_utilization), window_avg(n.trial_gpu_sm_active)
    # PromQL for each measurement the CLI's checks name (trainwatch diagnose's Measurements).
    measured = {
        "dataloader_share": share(s.selector("dataloader_phase")),
        "host_to_device_share": share(s.selector("host_to_device_phases")),
        "node_cpu": q.per_trial(n.cpu_utilization, *matchers),
        "gpu_utilization": gpu,
        "gpu_sm_active": sm,
        "gpu_tensor_active": window_avg(n.trial_gpu_tensor_active),
        # The GPU-busy rule: SM activity where GPM gives it, else NVML utilization.
        "gpu_busy": window_avg(n.trial_gpu_busy),
    }
    outcomes = []
    for code, (kind, title, alert, measurement, above) in enumerate(CHECKS, start=1):
        color, remedy = _LOOK[kind]
        condition = (f"{measured[measurement]} {'>' if above else '<'} "
                     f"{number(s.threshold(alert))}")
        if kind in GATES:
            condition = f"({condition}) and ({measured[GATES[kind]]} >= {number(s.busy(alert))})"
        outcomes.append(Verdict(code, title, color, condition, remedy))
    code = len(outcomes)
    # A busy GPU (the checks above did not find it underused) whose MFU is under mfu_low, once
    # the rank has counted samples for a whole rate window (the MFU rate reads low before).
    low_mfu = (f"(max {BY_TRIAL} ({select(n.mfu, *matchers)}) "
               f"< {number(s.mfu_low(GPU_UNDERUTILIZED))})\n"
               f"and ({measured['gpu_busy']} >= {number(s.threshold(GPU_UNDERUTILIZED))})\n"
               f"and max {BY_TRIAL} ({select(f'{names.SAMPLES}_total', *matchers)} "
               f"offset {s.rate_window})")
    return [
        *outcomes,
        Verdict(code + 1, LOW_MFU[1], "dark-purple", low_mfu, remedies.LOW_MFU),
        Verdict(code + 2, "GPU-bound", "green", measured["gpu_busy"], remedies.BUSY_GPU),
        # Any trial that reports phases at all gets a verdict, GPU metrics or not.
        Verdict(code + 3, "No GPU metrics", "blue", f"sum {BY_TRIAL} "
                f"({select(n.phase_share, *matchers)})", remedies.NO_GPU_METRICS),
    ]


def expression(outcomes: Sequence[Verdict]) -> str:
    """``(cond1) * 0 + 1 or (cond2) * 0 + 2 ...``: the first holding condition's code."""
    return "\nor\n".join(f"({v.condition}) * 0 + {v.code}" for v in outcomes)


def mappings(outcomes: Sequence[Verdict]) -> list[Mapping]:
    return [Mapping(v.code, v.text, v.color) for v in outcomes]


def description(outcomes: Sequence[Verdict]) -> str:
    """Markdown for the panel's info tooltip: each outcome and what to change."""
    lines = ["The first of these that holds for the rank, with the alerts' thresholds:", ""]
    lines += [f"{v.code}. **{v.text}**: {v.remedy}" for v in outcomes]
    return "\n".join(lines)
