"""The verdict: which bottleneck holds a trial rank back, decided with the deployed thresholds.

The checks run in the order of ``CHECKS``, which the Trial profile dashboard's Bottleneck panel
(grafana/verdict.py) builds its query from: the first that holds wins, so the CLI and the
dashboard agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainwatch.diagnose.deployed import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
    AlertRule,
)
from trial_instrumentation import names, remedies

HOST_TO_DEVICE_PHASES = (names.TO_DEVICE, names.FROM_DEVICE)
EXIT_OK, EXIT_BOTTLENECK, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class Measurements:
    """A rank's numbers over the rate window; None where no series answered."""

    phase_shares: Mapping[str, float]
    node_cpu: float | None = None
    gpu_utilization: float | None = None  # averaged over the rank's GPUs

    @property
    def dataloader_share(self) -> float | None:
        return self.phase_shares.get(names.DATALOADER_NEXT)

    @property
    def host_to_device_share(self) -> float | None:
        found = [self.phase_shares[p] for p in HOST_TO_DEVICE_PHASES if p in self.phase_shares]
        return sum(found) if found else None


@dataclass(frozen=True)
class Verdict:
    """The outcome: what holds the rank back, measured against which threshold, what to do."""

    kind: str
    title: str
    bottleneck: bool
    measured: float | None
    comparison: str | None  # ">" or "<": how ``measured`` crossed (or "<="/">=": did not)
    threshold: float | None
    alert: str | None
    remedy: str
    runbook_url: str | None

    @property
    def exit_code(self) -> int:
        if self.kind == NO_TIMINGS:
            return EXIT_USAGE
        return EXIT_BOTTLENECK if self.bottleneck else EXIT_OK


NO_TIMINGS, NO_GPU_METRICS, GPU_BOUND = "no_timings", "no_gpu_metrics", "gpu_bound"
# (kind, title, alert whose threshold decides, measurement, bottleneck when above it?)
CHECKS = (
    ("dataloader", "Data loader", DATALOADER_BOUND, "dataloader_share", True),
    ("memory_copies", "Host↔device copies", HOST_TO_DEVICE_BOUND, "host_to_device_share", True),
    ("busy_cpu", "Node CPUs saturated", CPU_SATURATED, "node_cpu", True),
    ("underused_gpu", "GPU underused", GPU_UNDERUTILIZED, "gpu_utilization", False),
)


def decide(m: Measurements, alerts: Mapping[str, AlertRule]) -> Verdict:
    """The first check whose measurement crosses its alert's threshold; else GPU-bound.

    Example:
        >>> rules = {a: AlertRule(a, t, f"fix {a}") for a, t in [(DATALOADER_BOUND, 0.3),
        ...     (HOST_TO_DEVICE_BOUND, 0.2), (CPU_SATURATED, 0.9), (GPU_UNDERUTILIZED, 0.5)]}
        >>> decide(Measurements({"dataloader_next": 0.6, "train_batch": 0.4}), rules).kind
        'dataloader'
        >>> decide(Measurements({"train_batch": 1.0}, gpu_utilization=0.97), rules).kind
        'gpu_bound'
    """
    if not m.phase_shares:
        return Verdict(NO_TIMINGS, "No timings yet", False, None, None, None, None,
                       "The trial has pushed no phase timings over the rate window yet: wait "
                       "one window after it starts, or check that it times its loop "
                       "(trial.loader(), trial.phase()).", None)
    for kind, title, alert, measurement, above in CHECKS:
        value: float | None = getattr(m, measurement)
        rule = alerts[alert]
        if value is not None and (value > rule.threshold if above else value < rule.threshold):
            return Verdict(kind, title, True, value, ">" if above else "<", rule.threshold,
                           alert, rule.remedy, rule.runbook_url)
    if m.gpu_utilization is None:
        return Verdict(NO_GPU_METRICS, "No GPU metrics", False, None, None, None, None,
                       remedies.NO_GPU_METRICS, None)
    rule = alerts[GPU_UNDERUTILIZED]
    return Verdict(GPU_BOUND, "GPU-bound", False, m.gpu_utilization, ">=", rule.threshold,
                   None, remedies.BUSY_GPU, None)


def worst_exit_code(verdicts: Iterable[Verdict]) -> int:
    """The exit code of several ranks: the worst one's, so one bottlenecked rank beside healthy
    ones still fails a CI gate (and one without timings makes it a usage error).

    >>> worst_exit_code([])
    0
    """
    return max((v.exit_code for v in verdicts), default=EXIT_OK)
