"""Load and validate prometheus/thresholds.yaml, the one place for selectors and thresholds.

Every error names the file and the key, so a typo in thresholds.yaml fails `make rules` with a
sentence instead of rendering a rule that never fires.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.records import USAGE_INTERVAL
from trial_instrumentation import names
from trial_instrumentation.durations import is_prometheus_duration, parse_duration

DEFAULT_THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds.yaml"
# Where alerts link when thresholds.yaml names no runbook_url: docs/runbooks.md as published.
RUNBOOK_URL = "https://github.com/trainwatch/trainwatch/blob/main/docs/runbooks.md"
SEVERITIES = ("info", "warning", "critical")


# The phase selectors, from the phase names the library times (trial_instrumentation.names),
# defined there once: `trainwatch diagnose` (verdict.py) reads the same names.
PHASE_SELECTORS = {
    "dataloader_phase": f'phase="{names.DATALOADER_NEXT}"',
    "host_to_device_phases": f'phase=~"{names.TO_DEVICE}|{names.FROM_DEVICE}"',
    "rank_wait_phases": f'phase="{names.WAIT_FOR_RANKS}"',
}


class SettingsError(ValueError):
    """thresholds.yaml (or an override) is missing a key or holds a bad value."""


def check_duration(value: object, where: str) -> str:
    if not isinstance(value, str) or not is_prometheus_duration(value):
        raise SettingsError(f"{where}: {value!r} is not a positive Prometheus duration like 5m")
    return value


@dataclass(frozen=True)
class AlertSetting:
    """One alert's tunables; ``threshold`` is None for yes/no alerts, ``busy`` (the level at
    which a gating measurement counts as busy) None where the alert has no gate, ``window``
    (a Prometheus duration the expression looks back over) None where it has none of its own."""

    threshold: float | None
    for_: str
    severity: str
    busy: float | None = None
    window: str | None = None
    # Thresholds that tell an alert's causes apart (contract.checks.LOADER_CAUSE_THRESHOLDS),
    # exposed as `cause_<name>` annotations for `trainwatch diagnose`.
    causes: Mapping[str, float] = field(default_factory=dict)
    # The MFU under which a GPU busy by this alert's measure gets the verdict "GPU busy, MFU
    # low" (TrainwatchGPUUnderutilized only; no alert fires on it: a `mfu_low` annotation for
    # `trainwatch diagnose`).
    mfu_low: float | None = None


@dataclass(frozen=True)
class Settings:
    """The parsed thresholds.yaml.

    Example:
        >>> s = load_settings().with_overrides(for_="20s", rate_window="30s")
        >>> s.alert("TrainwatchDataloaderBound").for_, s.rate_window
        ('20s', '30s')
    """

    source: str
    selectors: Mapping[str, str]
    rate_window: str
    alerts: Mapping[str, AlertSetting]
    # docs/runbooks.md where the readers of alerts can open it; each alert links to
    # <runbook_url>#<its name in lower case>.
    runbook_url: str = RUNBOOK_URL
    # How often the duration-quantile group runs (no alert reads it); None: Prometheus's
    # evaluation_interval, as every other group.
    quantile_interval: str | None = None
    # How often the usage group records its GPU-seconds (each sample is one interval's): the
    # contract's minute, or a shorter rate window's (with_overrides).
    usage_interval: str = USAGE_INTERVAL

    @property
    def usage_seconds(self) -> float:
        """One usage interval in seconds: the GPU-seconds of a GPU held for one interval."""
        return parse_duration(self.usage_interval)

    def selector(self, name: str) -> str:
        try:
            return self.selectors[name]
        except KeyError:
            raise SettingsError(f"{self.source}: selectors.{name} is missing") from None

    def alert(self, name: str) -> AlertSetting:
        try:
            return self.alerts[name]
        except KeyError:
            raise SettingsError(f"{self.source}: alerts.{name} is missing") from None

    def threshold(self, name: str) -> float:
        value = self.alert(name).threshold
        if value is None:
            raise SettingsError(f"{self.source}: alerts.{name}.threshold is missing")
        return value

    def busy(self, name: str) -> float:
        value = self.alert(name).busy
        if value is None:
            raise SettingsError(f"{self.source}: alerts.{name}.busy is missing")
        return value

    def mfu_low(self, name: str) -> float:
        value = self.alert(name).mfu_low
        if value is None:
            raise SettingsError(f"{self.source}: alerts.{name}.mfu_low is missing")
        return value

    def window(self, name: str) -> str:
        value = self.alert(name).window
        if value is None:
            raise SettingsError(f"{self.source}: alerts.{name}.window is missing")
        return value

    def with_overrides(self, *, for_: str | None = None, rate_window: str | None = None,
                       stale_after: float | None = None, window: str | None = None,
                       runbook_url: str | None = None) -> Settings:
        """A copy with every alert's ``for``, the rate window, TrainwatchTrialStale's
        threshold (seconds), the ``window`` of every alert that has one and/or the runbook's
        URL replaced (the live tests, `trainwatch stack up`)."""
        alerts = self.alerts
        runbook = check_url(runbook_url, "override runbook_url") if runbook_url else None
        if for_ is not None:
            check_duration(for_, "override for")
            alerts = {n: dataclasses.replace(a, for_=for_) for n, a in alerts.items()}
        if window is not None:
            check_duration(window, "override window")
            alerts = {n: dataclasses.replace(a, window=window) if a.window else a
                      for n, a in alerts.items()}
        if stale_after is not None:
            if not stale_after > 0:
                raise SettingsError(f"override stale_after: {stale_after!r} is not > 0 seconds")
            # From ``alerts``: a `for` override given with it applies to this alert too.
            self.alert(TRIAL_STALE)  # missing: the file's clear error, not a KeyError
            stale = dataclasses.replace(alerts[TRIAL_STALE], threshold=float(stale_after))
            alerts = {**alerts, TRIAL_STALE: stale}
        window = check_duration(rate_window, "override rate_window") if rate_window else None
        # The quantiles' slower group keeps its interval only while it is no longer than the
        # rate window: rules rendered with a 10 s window (live tests, a demo) evaluate them
        # at the global interval like the rest, not once a minute.
        quantiles = self.quantile_interval
        if window and quantiles and parse_duration(quantiles) > parse_duration(window):
            quantiles = None
        # The usage group likewise records at a rate window shorter than its minute, so a
        # short-lived stack's first GPU-seconds come within a window.
        usage = self.usage_interval
        if window and parse_duration(usage) > parse_duration(window):
            usage = window
        return dataclasses.replace(self, alerts=alerts, rate_window=window or self.rate_window,
                                   quantile_interval=quantiles, usage_interval=usage,
                                   runbook_url=runbook or self.runbook_url,
                                   source=f"{self.source} (with overrides)")


def check_url(value: object, where: str) -> str:
    if not isinstance(value, str) or not re.match(r"^(https?|file)://\S+$", value) \
            or "#" in value:
        raise SettingsError(f"{where}: {value!r} is not an http(s):// or file:// URL without "
                            "a #fragment (each alert adds its own)")
    return value


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingsError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _alert(doc: Mapping[str, Any], where: str) -> AlertSetting:
    unknown = set(doc) - {"threshold", "busy", "for", "severity", "window", "causes", "mfu_low"}
    if unknown:
        raise SettingsError(f"{where}: unknown key(s) {sorted(unknown)}")
    threshold, busy, mfu_low = doc.get("threshold"), doc.get("busy"), doc.get("mfu_low")
    for key, value in (("threshold", threshold), ("busy", busy), ("mfu_low", mfu_low)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SettingsError(f"{where}.{key}: {value!r} is not a number")
    if mfu_low is not None and not 0 < mfu_low < 1:
        raise SettingsError(f"{where}.mfu_low: {mfu_low!r} is not an MFU between 0 and 1")
    if "for" not in doc:
        raise SettingsError(f"{where}.for is missing")
    severity = doc.get("severity")
    if severity not in SEVERITIES:
        raise SettingsError(f"{where}.severity: {severity!r} is not one of {SEVERITIES}")
    causes = _mapping(doc.get("causes", {}), f"{where}.causes")
    for key, value in causes.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"{where}.causes.{key}: {value!r} is not a number")
    return AlertSetting(threshold=None if threshold is None else float(threshold),
                        for_=check_duration(doc["for"], f"{where}.for"), severity=severity,
                        busy=None if busy is None else float(busy),
                        window=None if "window" not in doc
                        else check_duration(doc["window"], f"{where}.window"),
                        causes={key: float(value) for key, value in causes.items()},
                        mfu_low=None if mfu_low is None else float(mfu_low))


def parse_settings(doc: object, source: str) -> Settings:
    """Validate a loaded thresholds document; ``source`` names it in errors."""
    root = _mapping(doc, source)
    for key in ("selectors", "rate_window", "alerts"):
        if key not in root:
            raise SettingsError(f"{source}: top-level key {key!r} is missing")
    selectors = _mapping(root["selectors"], f"{source}: selectors")
    for name, value in selectors.items():
        if name in PHASE_SELECTORS:
            raise SettingsError(f"{source}: selectors.{name} is not set here: the phase names "
                                "come from trial_instrumentation/names.py, as the library "
                                "times them")
        if not isinstance(value, str) or not value:
            raise SettingsError(f"{source}: selectors.{name} must be a non-empty string")
    alerts = {name: _alert(_mapping(body, f"{source}: alerts.{name}"), f"{source}: alerts.{name}")
              for name, body in _mapping(root["alerts"], f"{source}: alerts").items()}
    runbook = root.get("runbook_url", RUNBOOK_URL)
    quantile_interval = root.get("quantile_interval")
    return Settings(source=source, selectors={**selectors, **PHASE_SELECTORS}, alerts=alerts,
                    rate_window=check_duration(root["rate_window"], f"{source}: rate_window"),
                    runbook_url=check_url(runbook, f"{source}: runbook_url"),
                    quantile_interval=None if quantile_interval is None else
                    check_duration(quantile_interval, f"{source}: quantile_interval"))


def load_settings(path: Path = DEFAULT_THRESHOLDS) -> Settings:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise SettingsError(f"{path}: cannot read thresholds: {err}") from err
    return parse_settings(doc, str(path))
