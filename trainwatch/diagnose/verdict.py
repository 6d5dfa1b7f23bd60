"""The verdict: which bottleneck holds a trial rank back, decided with the deployed thresholds.

The checks run in the order of ``CHECKS`` (trainwatch.contract.checks), which the Trial profile
dashboard's Bottleneck panel (grafana/verdict.py) builds its query from: the first that holds
wins, so the CLI and the dashboard agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainwatch.cliutil import EXIT_FOUND, EXIT_OK, EXIT_USAGE, ago
from trainwatch.contract import remedies
from trainwatch.contract.alerts import CPU_SATURATED, GPU_UNDERUTILIZED, TRIAL_FAILED
from trainwatch.contract.checks import CHECKS, GATES, LOW_MFU
from trainwatch.contract.records import BUSY_SOURCES
from trainwatch.diagnose.deployed import AlertRule
from trial_instrumentation import names

HOST_TO_DEVICE_PHASES = (names.TO_DEVICE, names.FROM_DEVICE)


@dataclass(frozen=True)
class Measurements:
    """A rank's numbers over the rate window; None where no series answered."""

    phase_shares: Mapping[str, float]
    node_cpu: float | None = None
    gpu_utilization: float | None = None  # averaged over the rank's GPUs
    gpu_sm_active: float | None = None  # GPM (Hopper and newer), likewise
    gpu_tensor_active: float | None = None
    # The GPU-busy rule's value and its source label (records.BUSY_SOURCES), where deployed.
    gpu_busy_recorded: float | None = None
    gpu_busy_source: str | None = None
    # Model FLOPs utilization (the MFU recording rule), over a whole rate window; None where
    # unknown (no FLOPs figure or peak) or the rank is younger than the window (it reads low).
    mfu: float | None = None

    @property
    def gpu_busy(self) -> float | None:
        """How busy the GPU is: the GPU-busy rule (SM activity wherever GPM gives it: NVML
        utilization says only that *some* kernel ran; else NVML utilization); rules older than
        it, the same choice made here."""
        if self.gpu_busy_recorded is not None:
            return self.gpu_busy_recorded
        return self.gpu_sm_active if self.gpu_sm_active is not None else self.gpu_utilization

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
    metric: str | None = None  # what ``measured`` is, in words (which GPU metric was used)
    exit_reason: str | None = None  # stale: what its final push said (names.EXIT_*), if any
    life_kind: str | None = None  # ended or stopped: the kind its life's profile had
    # What else the same figures say that the finding alone would hide (see :func:`context`).
    notes: tuple[str, ...] = ()

    @property
    def finding(self) -> str:
        """What was found, the same word live and after the end: an ended run's is its life's
        profile (``dataloader`` while it ran stays ``dataloader`` once it ended)."""
        return self.life_kind or self.kind

    @property
    def exit_code(self) -> int:
        if self.kind == NO_TIMINGS:
            return EXIT_USAGE
        return EXIT_FOUND if self.bottleneck else EXIT_OK


NO_TIMINGS, NO_GPU_METRICS, GPU_BOUND = "no_timings", "no_gpu_metrics", "gpu_bound"
LOW_MFU_KIND, LOW_MFU_TITLE = LOW_MFU
STALE = "stale"
# A rank whose final push said how it ended: not a threshold crossed, so no measured figure.
ENDED = "ended"
OFF_THE_AIR = (STALE, ENDED)  # the kinds judged over a run's whole life, not a window
# What each measurement is, for the reader of the verdict.
METRICS = {
    "dataloader_share": "dataloader_next share of step time",
    "host_to_device_share": "to_device + from_device share of step time",
    "node_cpu": "node CPU busy",
    "gpu_utilization": "NVML utilization (any kernel running)",
    "gpu_sm_active": "SM activity (NVML GPM)",
    "gpu_tensor_active": "tensor-core activity (NVML GPM)",
}


def metric_of(m: Measurements, measurement: str) -> str:
    if measurement == "gpu_busy" and m.gpu_busy_source is not None:
        return BUSY_SOURCES.get(m.gpu_busy_source, m.gpu_busy_source)
    if measurement == "gpu_busy":
        measurement = "gpu_sm_active" if m.gpu_sm_active is not None else "gpu_utilization"
    return METRICS[measurement]


def _holds(m: Measurements, kind: str, measurement: str, above: bool,
           rule: AlertRule) -> float | None:
    """The measured value when the check holds, else None."""
    value: float | None = getattr(m, measurement)
    if value is None or not (value > rule.threshold if above else value < rule.threshold):
        return None
    gate = GATES.get(kind)
    if gate is not None:
        gated: float | None = getattr(m, gate)
        if gated is None or rule.busy is None or gated < rule.busy:
            return None
    return value


def decide(m: Measurements, alerts: Mapping[str, AlertRule]) -> Verdict:
    """The first check whose measurement crosses its alert's threshold; else GPU-bound.

    Checks whose alert is not deployed (rules older than the GPM alerts) are skipped.

    Example:
        >>> from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND
        >>> from trainwatch.contract.alerts import HOST_TO_DEVICE_BOUND
        >>> rules = {a: AlertRule(a, t, f"fix {a}") for a, t in [(DATALOADER_BOUND, 0.3),
        ...     (HOST_TO_DEVICE_BOUND, 0.2), (CPU_SATURATED, 0.9), (GPU_UNDERUTILIZED, 0.5)]}
        >>> decide(Measurements({"dataloader_next": 0.6, "train_batch": 0.4}), rules).kind
        'dataloader'
        >>> decide(Measurements({"train_batch": 1.0}, gpu_utilization=0.97), rules).kind
        'gpu_bound'
        >>> decide(Measurements({"train_batch": 1.0}, gpu_utilization=0.97, gpu_sm_active=0.2),
        ...        rules).metric
        'SM activity (NVML GPM)'
        >>> low = AlertRule(GPU_UNDERUTILIZED, 0.5, "x", mfu_low=0.2)
        >>> decide(Measurements({"train_batch": 1.0}, gpu_sm_active=0.9, mfu=0.08),
        ...        {**rules, GPU_UNDERUTILIZED: low}).title
        'GPU busy, MFU low'
    """
    if not m.phase_shares:
        return Verdict(NO_TIMINGS, "No timings yet", False, None, None, None, None,
                       "No finished step of this trial has reached Prometheus yet: a new trial "
                       "shows up one push and one scrape after its first step; otherwise check "
                       "that it times its loop (trial.loader(), trial.phase()).", None)
    for kind, title, alert, measurement, above in CHECKS:
        rule = alerts.get(alert)
        value = None if rule is None else _holds(m, kind, measurement, above, rule)
        if rule is not None and value is not None:
            return Verdict(kind, title, True, value, ">" if above else "<", rule.threshold,
                           alert, rule.remedy, rule.runbook_url, metric=metric_of(m, measurement),
                           notes=context(m, kind, value, alerts))
    if m.gpu_busy is None:
        return Verdict(NO_GPU_METRICS, "No GPU metrics", False, None, None, None, None,
                       remedies.NO_GPU_METRICS, None)
    rule = alerts[GPU_UNDERUTILIZED]
    busy = f"GPU busy {m.gpu_busy:.1%} by {metric_of(m, 'gpu_busy')}"
    if (rule.mfu_low is not None and m.mfu is not None and m.mfu < rule.mfu_low
            and m.gpu_busy >= rule.threshold):
        return Verdict(LOW_MFU_KIND, LOW_MFU_TITLE, True, m.mfu, "<", rule.mfu_low, None,
                       remedies.LOW_MFU, None,
                       metric=f"model FLOPs utilization (MFU), while {busy} "
                              f"(at least {rule.threshold:.0%})")
    return Verdict(GPU_BOUND, "GPU-bound", False, m.gpu_busy, ">=", rule.threshold,
                   None, remedies.BUSY_GPU, None, metric=metric_of(m, "gpu_busy"))


# The phase checks: the phases each one's measurement adds up.
_PHASES_OF = {"dataloader": (names.DATALOADER_NEXT,), "memory_copies": HOST_TO_DEVICE_PHASES}


def context(m: Measurements, kind: str, measured: float,
            alerts: Mapping[str, AlertRule]) -> tuple[str, ...]:
    """What a phase finding alone would hide, from the same figures: a larger share elsewhere
    (fixing the loader of a rank at 43% loader, 56% train_batch leaves it train-bound), and
    node CPUs saturated while the rank is found loader- or copy-bound (its workers compete with
    the training for them). Checked in that order; empty for the other findings.

    >>> from trainwatch.contract.alerts import CPU_SATURATED
    >>> rules = {CPU_SATURATED: AlertRule(CPU_SATURATED, 0.9, "x")}
    >>> context(Measurements({"dataloader_next": 0.43, "train_batch": 0.56}, node_cpu=0.97),
    ...         "dataloader", 0.43, rules)  # doctest: +NORMALIZE_WHITESPACE
    ('train_batch takes a larger share of the step (56.0%): with a faster loader, the step is the limit',
     'node CPUs saturated (97.0% > threshold 90.0%): the loader and the training compete for them')
    """
    phases = _PHASES_OF.get(kind)
    if phases is None:
        return ()
    notes = []
    others = [(share, phase) for phase, share in m.phase_shares.items() if phase not in phases]
    if others and max(others)[0] > measured:
        share, phase = max(others)
        notes.append(f"{phase} takes a larger share of the step ({share:.1%}): with a faster "
                     f"{'loader' if kind == 'dataloader' else 'copy'}, the step is the limit")
    cpu = alerts.get(CPU_SATURATED)
    if cpu is not None and m.node_cpu is not None and m.node_cpu > cpu.threshold:
        notes.append(f"node CPUs saturated ({m.node_cpu:.1%} > threshold {cpu.threshold:.1%}): "
                     f"the loader and the training compete for them")
    return tuple(notes)


@dataclass(frozen=True)
class ComputeThreads:
    """What tells whether CPU compute has more threads than cores to run them on: torch's
    intra-op threads (``trainwatch_trial_compute_threads``), the node's cores
    (``trainwatch_cpu_count``) and the trial process's own CPU (cores it ran on, the loader's
    ``process="main"`` series); None where no series answered."""

    threads: float | None
    cpu_count: float | None
    trial_cpu: float | None = None


def compute_threads_note(m: Measurements, c: ComputeThreads,
                         alerts: Mapping[str, AlertRule]) -> str | None:
    """A note when ``train_batch`` is the largest share, the node's CPUs are saturated
    (TrainwatchCPUSaturated's threshold) and the rank computes with more threads than the cores
    the rest of the node leaves it: its node's busy cores less its own CPU are other work's; the
    others are free (all of them where its own CPU is unknown). None otherwise.

    >>> from trainwatch.contract.alerts import CPU_SATURATED
    >>> rules = {CPU_SATURATED: AlertRule(CPU_SATURATED, 0.9, "x")}
    >>> busy = Measurements({"train_batch": 0.7, "dataloader_next": 0.3}, node_cpu=0.98)
    >>> compute_threads_note(busy, ComputeThreads(2, 2, 1.2), rules)  # doctest: +ELLIPSIS
    'train_batch runs 2 compute threads on 1.2 free cores of 2 (node CPU 98.0% busy, 0.8 cores of it other work): ...'
    >>> compute_threads_note(busy, ComputeThreads(1, 2, 1.2), rules) is None
    True
    """
    cpu = alerts.get(CPU_SATURATED)
    if (cpu is None or c.threads is None or c.cpu_count is None or m.node_cpu is None
            or m.node_cpu <= cpu.threshold or not m.phase_shares
            or max(m.phase_shares.items(), key=lambda item: item[1])[0] != names.TRAIN_BATCH):
        return None
    others = 0.0 if c.trial_cpu is None else max(m.node_cpu * c.cpu_count - c.trial_cpu, 0.0)
    free = max(c.cpu_count - others, 0.0)
    if c.threads <= max(free, 1.0):  # one thread is the least: nothing fewer to advise
        return None
    fit = max(int(free), 1)
    return (f"train_batch runs {c.threads:g} compute threads on {free:.1f} free cores of "
            f"{c.cpu_count:g} (node CPU {m.node_cpu:.1%} busy, {others:.1f} cores of it other "
            f"work): its threads wait for cores; torch.set_num_threads({fit}) or "
            f"OMP_NUM_THREADS={fit} (docs/instrumentation.md, CPU training)")


def noted(verdict: Verdict, note: str | None) -> Verdict:
    """``verdict`` with ``note`` added to its notes (unchanged when there is none)."""
    return verdict if note is None else dataclasses.replace(verdict,
                                                            notes=(*verdict.notes, note))


def limits_advice(loader: float | None, step: float | None) -> str | None:
    """What the measured ceilings (trial_instrumentation.limits) say: which side is slower and
    by how much; None until both are measured.

    >>> limits_advice(400.0, 1000.0)
    'the loader delivers 400 samples/s, the step consumes 1000 samples/s: the loader must get 2.5x faster'
    >>> limits_advice(3000.0, 1000.0)
    'the loader delivers 3000 samples/s, the step consumes 1000 samples/s: the step is the limit; the loader has 3.0x headroom'
    """
    if loader is None or step is None or loader <= 0 or step <= 0:
        return None
    said = f"the loader delivers {loader:.0f} samples/s, the step consumes {step:.0f} samples/s"
    if loader < step:
        return f"{said}: the loader must get {step / loader:.1f}x faster"
    return f"{said}: the step is the limit; the loader has {loader / step:.1f}x headroom"


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
    return Verdict(STALE, f"Stopped pushing {ago(push_age)} ago: crashed or killed", True,
                   push_age, ">", rule.threshold, rule.name, rule.remedy, rule.runbook_url,
                   steps=steps, last_profile=profile_line(profile), cleanup=cleanup)


def profile_line(profile: Verdict) -> str:
    """A profile's title with its figure against its threshold, where it crossed one.

    >>> profile_line(Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, None, "", None))
    'Data loader: 90.0% > threshold 30.0%'
    """
    said = profile.title
    if profile.measured is not None and profile.threshold is not None and profile.comparison:
        said += (f": {profile.measured:.1%} {profile.comparison} threshold "
                 f"{profile.threshold:.1%}")
    return said


# A final push's trainwatch_trial_exit reason: (how the title says it, alert, remedy).
EXITED = {
    names.EXIT_FAILED: ("an exception or a non-zero exit", TRIAL_FAILED, remedies.TRIAL_FAILED),
    names.EXIT_TERMINATED: ("terminated (SIGTERM), its group left", None, remedies.EXITED_LEFT),
    names.EXIT_CLEAN: ("finished, its group left", None, remedies.EXITED_LEFT),
}


def exited(reason: str, push_age: float, stale_verdict: Verdict) -> Verdict:
    """The verdict on a rank whose final push said why it ended (``trainwatch_trial_exit``),
    however recent that push: ``stale_verdict`` (from :func:`stale`) retitled with the reason,
    of kind ``ended``: it crossed no threshold, so it carries no measured figure.

    Example:
        >>> rule = AlertRule("TrainwatchTrialStale", 300, "delete the group")
        >>> profile = Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, None, "", None)
        >>> v = exited("failed", 42, stale(42, rule, profile, 1200, "curl -X DELETE ..."))
        >>> v.kind, v.title, v.alert, v.exit_reason, v.exit_code, v.measured
        ('ended', 'Ended 42 seconds ago: an exception or a non-zero exit', 'TrainwatchTrialFailed', 'failed', 1, None)
    """
    how, alert, remedy = EXITED.get(reason, (f"reason={reason}", None, remedies.EXITED_LEFT))
    runbook = stale_verdict.runbook_url  # the deployed runbook, at the alert's own section
    if alert is not None and runbook is not None:
        runbook = f"{runbook.split('#')[0]}#{alert.lower()}"
    return dataclasses.replace(stale_verdict, kind=ENDED, title=f"Ended {ago(push_age)} ago: {how}",
                               measured=None, comparison=None, threshold=None,
                               alert=alert, remedy=remedy, exit_reason=reason,
                               runbook_url=runbook)
