"""The verdict: which bottleneck holds a trial rank back, decided with the deployed thresholds.

The checks run in the order of ``CHECKS``, which the Trial profile dashboard's Bottleneck panel
(grafana/verdict.py) builds its query from: the first that holds wins, so the CLI and the
dashboard agree.
"""

from __future__ import annotations

import dataclasses
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
    # Early: decided over the trial's whole life so far, shorter than the rate window.
    early: bool = False
    steps: int | None = None  # the steps an early or a stale verdict rests on
    last_profile: str | None = None  # stale: what its pushed timings said before it stopped
    cleanup: str | None = None  # stale: the command that deletes its Pushgateway group

    @property
    def exit_code(self) -> int:
        if self.kind == NO_TIMINGS:
            return EXIT_USAGE
        return EXIT_BOTTLENECK if self.bottleneck else EXIT_OK


NO_TIMINGS, NO_GPU_METRICS, GPU_BOUND = "no_timings", "no_gpu_metrics", "gpu_bound"
STALE = "stale"
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
                       "No finished step of this trial has reached Prometheus yet: a new trial "
                       "shows up one push and one scrape after its first step; otherwise check "
                       "that it times its loop (trial.loader(), trial.phase()).", None)
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


def early(verdict: Verdict, steps: int | None) -> Verdict:
    """``verdict`` marked as decided early, over ``steps`` steps of a trial younger than the
    rate window."""
    return dataclasses.replace(verdict, early=True, steps=steps)


def ago(seconds: float) -> str:
    """``ago(75)`` -> '75 seconds'; ``ago(420)`` -> '7 minutes'; ``ago(9000)`` -> '2.5 hours'."""
    if seconds < 120:
        return f"{seconds:.0f} seconds"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def stale(push_age: float, rule: AlertRule, profile: Verdict, steps: int | None,
          cleanup: str) -> Verdict:
    """The verdict on a rank whose last push is older than TrainwatchTrialStale's threshold:
    it stopped, whatever its timings said; ``profile`` is what they said up to then.

    Example:
        >>> rule = AlertRule("TrainwatchTrialStale", 300, "delete the group")
        >>> profile = Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, None, "", None)
        >>> v = stale(420, rule, profile, 1200, "curl -X DELETE ...")
        >>> v.title, v.last_profile, v.exit_code
        ('Stopped pushing 7 minutes ago: crashed or killed', 'Data loader: 90.0% > threshold 30.0%', 1)
    """
    said = profile.title
    if profile.measured is not None and profile.threshold is not None and profile.comparison:
        said += (f": {profile.measured:.1%} {profile.comparison} threshold "
                 f"{profile.threshold:.1%}")
    return Verdict(STALE, f"Stopped pushing {ago(push_age)} ago: crashed or killed", True,
                   push_age, ">", rule.threshold, rule.name, rule.remedy, rule.runbook_url,
                   steps=steps, last_profile=said, cleanup=cleanup)
