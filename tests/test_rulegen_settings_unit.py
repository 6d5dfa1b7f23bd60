"""Fast in-process checks of rulegen's settings: the intervals a rate-window override keeps or
replaces (each side of the comparison), mfu_low's bounds, the causes map's values and the
alert's cause names, and the idle-cause guard. Each bad file is refused with the file and the
key in the message. Part of the `rulegen` mutation target (mutation/targets.toml); every test
name holds "rulegen" so the target's `-k "(rules or rulegen)"` selects it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from prometheus import generate_rules
from prometheus.rulegen import usage
from prometheus.rulegen.alerts import ALERT_GROUPS
from prometheus.rulegen.render import render_files
from prometheus.rulegen.settings import DEFAULT_THRESHOLDS, SettingsError, load_settings
from trainwatch.contract.alerts import GPU_UNDERUTILIZED
from trainwatch.contract.records import IDLE_CAUSES, RecordNames
from trial_instrumentation.durations import parse_duration

DATALOADER = "TrainwatchDataloaderBound"
SCALING = "TrainwatchScalingInefficient"
CPU = "TrainwatchCPUSaturated"


def _shipped() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_THRESHOLDS.read_text())


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "my-thresholds.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _refused(path: Path) -> str:
    """The message a render of ``path`` is refused with; it always names the file."""
    with pytest.raises(SettingsError) as err:
        generate_rules.render(path)
    message = str(err.value)
    assert str(path) in message
    return message


def _groups(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in yaml.safe_load(files["recording.yml"])["groups"]}


def _alerts(files: dict[str, str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name, text in files.items():
        if name != "recording.yml":
            for group in yaml.safe_load(text)["groups"]:
                found.update({rule["alert"]: rule for rule in group["rules"]})
    return found


# --- a rate-window override against the quantile and usage intervals --------------------------

def test_rulegen_shipped_file_names_a_minute_for_both_intervals() -> None:
    """The premise of the window tests below: the file's quantile interval and the contract's
    usage interval are both one minute, so 30s is shorter, 60s equal (spelt otherwise) and
    5m longer."""
    s = load_settings()
    assert s.quantile_interval is not None
    assert parse_duration(s.quantile_interval) == parse_duration(s.usage_interval) == 60


@pytest.mark.parametrize(("window", "quantiles", "usage_interval"), [
    ("30s", None, "30s"),   # shorter than the minute: quantiles at the global interval, usage at 30s
    ("60s", "1m", "1m"),    # as long as the minute: both keep the file's own spelling
    ("5m", "1m", "1m"),     # longer: both keep the minute
    ("1h", "1m", "1m"),
])
def test_rulegen_rate_window_override_against_the_minute_intervals(
        window: str, quantiles: str | None, usage_interval: str) -> None:
    s = load_settings().with_overrides(rate_window=window)
    assert (s.rate_window, s.quantile_interval, s.usage_interval) == (
        window, quantiles, usage_interval)
    groups = _groups(generate_rules.render(rate_window=window))
    quantile_group = groups["trainwatch.trial.quantiles"]
    if quantiles is None:
        assert "interval" not in quantile_group
    else:
        assert quantile_group["interval"] == quantiles
    usage_group = groups["trainwatch.usage.rules"]
    assert usage_group["interval"] == usage_interval
    # Each usage sample is one interval's GPU-seconds: the multiplier follows the interval.
    held = next(r for r in usage_group["rules"]
                if r["record"] == RecordNames(window).gpu_seconds_held)
    multiplier = re.match(r"([\d.]+) \* count", held["expr"])
    assert multiplier and float(multiplier[1]) == parse_duration(usage_interval)


def test_rulegen_a_file_without_a_quantile_interval_keeps_none_for_any_window(
        tmp_path: Path) -> None:
    doc = _shipped()
    del doc["quantile_interval"]
    path = _write(tmp_path, doc)
    for window in ("30s", "60s", "5m"):
        s = load_settings(path).with_overrides(rate_window=window)
        assert s.quantile_interval is None
        assert "interval" not in _groups(render_files(s))["trainwatch.trial.quantiles"]


# --- mfu_low: an MFU strictly between 0 and 1 --------------------------------------------------

@pytest.mark.parametrize("mfu_low", [0, 0.0, -0.1, -1, 1, 1.0, 1.5, 2])
def test_rulegen_mfu_low_outside_zero_to_one_is_refused(tmp_path: Path, mfu_low: float) -> None:
    doc = _shipped()
    doc["alerts"][GPU_UNDERUTILIZED]["mfu_low"] = mfu_low
    message = _refused(_write(tmp_path, doc))
    assert (f"alerts.{GPU_UNDERUTILIZED}.mfu_low: {mfu_low!r} is not an MFU between 0 and 1"
            in message)


@pytest.mark.parametrize("mfu_low", [0.001, 0.2, 0.5, 0.999])
def test_rulegen_mfu_low_inside_zero_to_one_reaches_the_annotation(
        tmp_path: Path, mfu_low: float) -> None:
    doc = _shipped()
    doc["alerts"][GPU_UNDERUTILIZED]["mfu_low"] = mfu_low
    path = _write(tmp_path, doc)
    assert load_settings(path).mfu_low(GPU_UNDERUTILIZED) == mfu_low
    rule = _alerts(generate_rules.render(path))[GPU_UNDERUTILIZED]
    assert float(rule["annotations"]["mfu_low"]) == mfu_low


def test_rulegen_mfu_low_true_is_not_a_number(tmp_path: Path) -> None:
    doc = _shipped()
    doc["alerts"][GPU_UNDERUTILIZED]["mfu_low"] = True
    assert (f"alerts.{GPU_UNDERUTILIZED}.mfu_low: True is not a number"
            in _refused(_write(tmp_path, doc)))


# --- the causes map: a number per cause, and exactly the causes the alert names ---------------

@pytest.mark.parametrize("value", [True, False, "0.5", "high", None, [0.5]])
def test_rulegen_a_cause_value_that_is_not_a_number_is_refused(
        tmp_path: Path, value: object) -> None:
    doc = _shipped()
    doc["alerts"][DATALOADER]["causes"]["disk_busy"] = value
    message = _refused(_write(tmp_path, doc))
    assert f"alerts.{DATALOADER}.causes.disk_busy: {value!r} is not a number" in message


def test_rulegen_cause_values_int_or_float_reach_their_annotations(tmp_path: Path) -> None:
    doc = _shipped()
    doc["alerts"][DATALOADER]["causes"].update({"disk_busy": 0.45, "rchar_over_read": 7})
    path = _write(tmp_path, doc)
    causes = load_settings(path).alert(DATALOADER).causes
    assert causes["disk_busy"] == 0.45 and causes["rchar_over_read"] == 7.0
    assert all(type(v) is float for v in causes.values())
    annotations = _alerts(generate_rules.render(path))[DATALOADER]["annotations"]
    assert float(annotations["cause_disk_busy"]) == 0.45
    assert float(annotations["cause_rchar_over_read"]) == 7


def test_rulegen_a_causes_value_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    doc = _shipped()
    doc["alerts"][DATALOADER]["causes"] = [0.5, 0.6]
    assert (f"alerts.{DATALOADER}.causes must be a mapping, got list"
            in _refused(_write(tmp_path, doc)))


def _cause_names(alert: str) -> list[str]:
    return sorted(_shipped()["alerts"][alert].get("causes", {}))


@pytest.mark.parametrize(("alert", "group", "edit"), [
    # One fewer than the alert names (a subset) ...
    (DATALOADER, "trial", lambda c: c.pop("rchar_over_read")),
    # ... one more (a superset) ...
    (DATALOADER, "trial", lambda c: c.update({"memory_busy": 0.7})),
    # ... as many, one of them another (neither).
    (DATALOADER, "trial", lambda c: c.update({"nic_busy": c.pop("network_busy")})),
    (SCALING, "trial", lambda c: c.clear()),
    (SCALING, "trial", lambda c: c.update({"disk_busy": 0.6})),
    (CPU, "host", lambda c: c.update({"network_busy": 0.6})),
])
def test_rulegen_causes_that_differ_by_one_name_are_refused_with_both_lists(
        tmp_path: Path, alert: str, group: str, edit: Any) -> None:
    """The alert refuses causes other than those it names (each way: one missing, one too
    many, one swapped), naming both lists; the whole render refuses the file too (a missing
    threshold may be caught first, by the cause rules that read it)."""
    expected = _cause_names(alert)
    doc = _shipped()
    causes = doc["alerts"][alert].setdefault("causes", {})
    edit(causes)
    got = sorted(causes)
    assert got != expected
    path = _write(tmp_path, doc)
    settings = load_settings(path)
    with pytest.raises(SettingsError) as err:
        ALERT_GROUPS[group](settings)
    assert str(err.value) == (f"{path}: alerts.{alert}.causes must name exactly {expected}, "
                              f"got {got}")
    message = _refused(path)
    assert any(name in message for name in set(expected) ^ set(got))


def test_rulegen_each_alert_group_renders_the_shipped_causes() -> None:
    """The other side: each alert, with the causes it names, builds without complaint."""
    settings = load_settings()
    built = {rule["alert"] for build in ALERT_GROUPS.values() for rule in build(settings)}
    assert {DATALOADER, SCALING, CPU} <= built
    assert _cause_names(DATALOADER) and _cause_names(SCALING) and not _cause_names(CPU)


def test_rulegen_the_shipped_causes_in_another_order_render(tmp_path: Path) -> None:
    """The names are compared as a set: the same causes written in another order render,
    each with its own value."""
    doc = _shipped()
    causes = doc["alerts"][DATALOADER]["causes"]
    doc["alerts"][DATALOADER]["causes"] = dict(reversed(list(causes.items())))
    annotations = _alerts(generate_rules.render(_write(tmp_path, doc)))[DATALOADER]["annotations"]
    assert {k: float(v) for k, v in annotations.items() if k.startswith("cause_")} == {
        f"cause_{k}": float(v) for k, v in causes.items()}


# --- the idle GPU-seconds split: exactly the contract's causes --------------------------------

def test_rulegen_idle_record_splits_by_exactly_the_contracts_causes_in_order() -> None:
    expr = usage.idle_by_cause(RecordNames("5m"))
    assert re.findall(r'"cause", "(\w+)"', expr) == list(IDLE_CAUSES)


@pytest.mark.parametrize("contract", [
    {**IDLE_CAUSES, "checkpoint": "writing a checkpoint"},            # one the generator lacks
    {k: v for k, v in IDLE_CAUSES.items() if k != "other"},           # one fewer (the last)
    {k: v for k, v in IDLE_CAUSES.items() if k != "data"},            # one fewer (the first)
    dict(reversed(list(IDLE_CAUSES.items()))),                        # the same, reordered
])
def test_rulegen_refuses_to_render_idle_causes_the_contract_does_not_list(
        monkeypatch: pytest.MonkeyPatch, contract: dict[str, str]) -> None:
    """A cause added to (or dropped from) records.IDLE_CAUSES without the generator's fraction
    for it stops the render, instead of recording a split that `trainwatch usage` reads
    wrong."""
    monkeypatch.setattr(usage, "IDLE_CAUSES", contract)
    with pytest.raises(AssertionError):
        usage.idle_by_cause(RecordNames("5m"))
    with pytest.raises(AssertionError):
        render_files(load_settings())


@pytest.mark.parametrize("key", ["threshold", "busy"])
def test_rulegen_a_threshold_or_busy_level_that_is_not_a_number_is_refused_by_its_key(
        tmp_path: Path, key: str) -> None:
    """Each key's own name in the message (the gate's level is `busy`, not another key)."""
    doc = _shipped()
    alert = next(name for name, a in doc["alerts"].items() if "busy" in a and "threshold" in a)
    doc["alerts"][alert][key] = "high"
    assert f"alerts.{alert}.{key}: 'high' is not a number" in _refused(_write(tmp_path, doc))
