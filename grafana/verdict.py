"""The verdict: one word per trial rank naming its bottleneck, from the alerts' thresholds.

The expression is an ``or`` chain of conditions in priority order; each yields a constant code
and ``or`` keeps the first that holds for a (experiment, trial, rank), so a rank gets exactly
one code. The thresholds are the alerts' (thresholds.yaml), so the verdict and the alerts
never disagree about what counts as bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rulegen import remedies
from rulegen.promql import number, select

from grafana.panels import Mapping
from grafana.promql import BY_TRIAL, Promql


@dataclass(frozen=True)
class Verdict:
    """One outcome: the condition that selects it, the word shown and what to change."""

    code: int
    text: str
    color: str
    condition: str
    remedy: str


def verdicts(q: Promql, matchers: Sequence[str]) -> list[Verdict]:
    """The outcomes in priority order, for the trials picked by ``matchers``."""
    s, n = q.settings, q.names

    def share(phases: str) -> str:
        return f"sum {BY_TRIAL} ({select(n.phase_share, *matchers, phases)})"

    def over(alert: str) -> str:
        return f"> {number(s.threshold(alert))}"

    gpu = (f"avg {BY_TRIAL} (avg_over_time("
           f"{select(n.trial_gpu_utilization, *matchers)}[{s.rate_window}]))")
    cpu = q.per_trial(n.cpu_utilization, *matchers)
    return [
        Verdict(1, "Data loader", "red",
                f"{share(s.selector('dataloader_phase'))} {over('TrainwatchDataloaderBound')}",
                remedies.DATALOADER),
        Verdict(2, "Host↔device copies", "orange",
                f"{share(s.selector('host_to_device_phases'))} "
                f"{over('TrainwatchHostToDeviceBound')}", remedies.MEMORY_COPIES),
        Verdict(3, "Node CPUs saturated", "orange", f"{cpu} {over('TrainwatchCPUSaturated')}",
                remedies.BUSY_CPU),
        Verdict(4, "GPU underused", "yellow",
                f"{gpu} < {number(s.threshold('TrainwatchGPUUnderutilized'))}",
                remedies.UNDERUTILIZED_GPU),
        Verdict(5, "GPU-bound", "green", gpu, remedies.BUSY_GPU),
        # Any trial that reports phases at all gets a verdict, GPU metrics or not.
        Verdict(6, "No GPU metrics", "blue", f"sum {BY_TRIAL} "
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
