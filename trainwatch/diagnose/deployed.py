"""What a Prometheus server was deployed with: the recording-rule window and the alerts'
thresholds, remedies and runbooks, read from ``/api/v1/rules`` so nothing is hard-coded here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_LAUNCH_BOUND,
    GPU_TENSOR_CORES_IDLE,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
    RANK_STRAGGLER,
    SCALING_INEFFICIENT,
    TRIAL_STALE,
)
from trainwatch.contract.promql import inline
from trainwatch.contract.records import RecordNames

# The alerts whose threshold the CLI reads (names: trainwatch.contract.alerts).
REQUIRED_ALERTS = (DATALOADER_BOUND, HOST_TO_DEVICE_BOUND, CPU_SATURATED, GPU_UNDERUTILIZED,
                   TRIAL_STALE)
# GPM alerts (threshold and `busy` gate) and the rank alerts: read when loaded; rules deployed
# before them lack them, and the CLI then skips their checks.
OPTIONAL_ALERTS = (GPU_LAUNCH_BOUND, GPU_TENSOR_CORES_IDLE, RANK_STRAGGLER, SCALING_INEFFICIENT)


class DeploymentError(ValueError):
    """The Prometheus server lacks the trainwatch rules (or carries ones too old to read)."""


@dataclass(frozen=True)
class AlertRule:
    """One loaded alerting rule's annotations that the CLI uses."""

    name: str
    threshold: float
    remedy: str
    runbook_url: str | None = None
    busy: float | None = None  # the gate's level, for alerts that have one
    # Thresholds that tell its causes apart (`cause_<name>` annotations; contract.checks).
    causes: Mapping[str, float] = field(default_factory=dict)
    # TrainwatchGPUUnderutilized's `mfu_low` annotation: the MFU under which a busy GPU gets
    # the verdict "GPU busy, MFU low"; None where the rules predate it (the check is skipped).
    mfu_low: float | None = None


@dataclass(frozen=True)
class Deployment:
    """The loaded trainwatch rules.

    Example:
        >>> rules = [{"type": "recording", "name": RecordNames("5m").phase_share}] + [
        ...     {"type": "alerting", "name": a, "annotations": {"threshold": "0.3", "remedy": "x"}}
        ...     for a in REQUIRED_ALERTS]
        >>> d = Deployment.from_rules(rules)
        >>> d.names.window, d.threshold(DATALOADER_BOUND)
        ('5m', 0.3)
    """

    names: RecordNames
    alerts: Mapping[str, AlertRule]
    # Each recording rule's expressions and the labels it adds, as loaded (a name may have
    # several: one per quantile): evaluated inline where the recorded series do not cover a
    # trial's time.
    queries: Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]] = field(default_factory=dict)
    # The window the loaded rules record over, where :meth:`over` replaced it for a report.
    replaced_window: str | None = None
    # Where the thresholds come from when not from the server's own loaded rules (a global
    # view loading none: trainwatch.diagnose.rulesource), said in the output; None: its own.
    source: str | None = None

    @property
    def dashboard_window(self) -> str:
        """The window the recorded series, and so the dashboards, average over."""
        return self.replaced_window or self.names.window

    def threshold(self, alert: str) -> float:
        return self.alerts[alert].threshold

    def over(self, window: str) -> Deployment:
        """The same rules with another rate window: each windowed record's name and loaded
        expression rewritten. No such series exist, so `diagnose` evaluates the expressions
        inline: the deployed figures, over ``window``.

        >>> d = Deployment(RecordNames("5m"), {}, {"a:b:rate5m": (("rate(x[5m])", {}),)})
        >>> d.over("1h").names.window, d.over("1h").queries, d.over("1h").dashboard_window
        ('1h', {'a:b:rate1h': (('rate(x[1h])', {}),)}, '5m')
        """
        old = self.names.window
        if window == old:
            return self

        def rename(text: str) -> str:
            return text.replace(f"rate{old}", f"rate{window}").replace(f"[{old}]", f"[{window}]")

        queries = {rename(name): tuple((rename(q), labels) for q, labels in found)
                   for name, found in self.queries.items()}
        return dataclasses.replace(self, names=RecordNames(window), queries=queries,
                                   replaced_window=self.dashboard_window)

    @classmethod
    def from_rules(cls, rules: Iterable[Mapping[str, Any]], where: str = "Prometheus"
                   ) -> Deployment:
        rules = list(rules)
        recorded = [r["name"] for r in rules if r.get("type") == "recording"]
        names = RecordNames.discover(recorded)
        if names is None:
            raise DeploymentError(
                f"{where} has no trainwatch recording rules loaded (no "
                f"{RecordNames('<window>').phase_share}): load prometheus/rules/*.yml "
                "(rule_files in prometheus.yml, or the Helm chart's PrometheusRule)")
        loaded = {r["name"]: r for r in rules if r.get("type") == "alerting"}
        alerts = {name: _alert_rule(name, loaded.get(name), where) for name in REQUIRED_ALERTS}
        alerts.update({name: _alert_rule(name, loaded[name], where)
                       for name in OPTIONAL_ALERTS if name in loaded})
        queries: dict[str, tuple[tuple[str, Mapping[str, str]], ...]] = {}
        for rule in rules:
            if rule.get("type") == "recording" and rule.get("query"):
                found = (str(rule["query"]), dict(rule.get("labels") or {}))
                queries[rule["name"]] = (*queries.get(rule["name"], ()), found)
        # A chained rule reads records evaluated just before it: inline, it reads their
        # expressions instead (a name with several expressions is never read bare).
        single = {name: found[0][0] for name, found in queries.items() if len(found) == 1}
        queries = {name: tuple((inline(q, single, (name,)), labels) for q, labels in found)
                   for name, found in queries.items()}
        return cls(names=names, alerts=alerts, queries=queries)


def _alert_rule(name: str, rule: Mapping[str, Any] | None, where: str) -> AlertRule:
    if rule is None:
        raise DeploymentError(f"{where} has no alerting rule {name} loaded: load "
                              "prometheus/rules/*.yml")
    annotations = rule.get("annotations") or {}
    raw = annotations.get("threshold")
    try:
        threshold = _finite(raw)
    except (TypeError, ValueError):
        raise DeploymentError(
            f"{where}: alert {name} has no numeric `threshold` annotation (got {raw!r}); its "
            "rules predate `trainwatch diagnose`: deploy the current prometheus/rules") from None
    remedy = annotations.get("remedy")
    if not remedy:
        raise DeploymentError(f"{where}: alert {name} has no `remedy` annotation; deploy the "
                              "current prometheus/rules")
    gate = _optional_number(annotations, "busy", name, where)
    try:
        causes = {key.removeprefix("cause_"): _finite(value)
                  for key, value in annotations.items() if key.startswith("cause_")}
    except ValueError:
        raise DeploymentError(f"{where}: alert {name} has a non-numeric `cause_` annotation; "
                              "deploy the current prometheus/rules") from None
    mfu_low = _optional_number(annotations, "mfu_low", name, where)
    return AlertRule(name, threshold, str(remedy), annotations.get("runbook_url"), gate, causes,
                     mfu_low)


def _optional_number(annotations: Mapping[str, Any], key: str, name: str, where: str
                     ) -> float | None:
    """An annotation that holds a number, or None where the rule has none."""
    raw = annotations.get(key)
    try:
        return None if raw is None else _finite(raw)
    except ValueError:
        raise DeploymentError(f"{where}: alert {name} has a non-numeric `{key}` annotation "
                              f"({raw!r}); deploy the current prometheus/rules") from None


def _finite(raw: object) -> float:
    """An annotation's number; ValueError unless it is one, and finite (a NaN threshold is
    never crossed, an infinite one always or never)."""
    number = float(str(raw))
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {raw!r}")
    return number
