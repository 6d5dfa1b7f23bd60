"""trainwatch.diagnose.deployed over made-up /api/v1/rules answers: every annotation read (and
what is refused, naming the server and the alert), the loaded expressions with their labels and
chained records inlined, and a deployment read over another window."""

from __future__ import annotations

from typing import Any

import pytest

from trainwatch.contract.alerts import GPU_LAUNCH_BOUND, RANK_STRAGGLER
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.deployed import (
    OPTIONAL_ALERTS,
    REQUIRED_ALERTS,
    AlertRule,
    Deployment,
    DeploymentError,
)

SHARE = RecordNames("3m").phase_share
WHERE = "http://prom:9"


def alerting(name: str, **annotations: Any) -> dict[str, Any]:
    return {"type": "alerting", "name": name, "annotations": annotations}


def required(**extra: Any) -> list[dict[str, Any]]:
    """Each required alert with its own threshold (0.11, 0.12, ...) and remedy."""
    return [alerting(name, threshold=f"0.1{i + 1}", remedy=f"fix {i}", **extra)
            for i, name in enumerate(REQUIRED_ALERTS)]


def test_the_required_alerts_are_read_with_defaults_for_what_they_lack() -> None:
    d = Deployment.from_rules([{"type": "recording", "name": SHARE}, *required(),
                               {"name": "TrainwatchUntyped", "annotations": {}},
                               alerting("SomeoneElsesAlert")])
    assert d.names == RecordNames("3m") and d.dashboard_window == "3m"
    assert list(d.alerts) == list(REQUIRED_ALERTS)
    assert [d.threshold(n) for n in REQUIRED_ALERTS] == [0.11, 0.12, 0.13, 0.14, 0.15]
    first = d.alerts[REQUIRED_ALERTS[0]]
    assert first == AlertRule(REQUIRED_ALERTS[0], 0.11, "fix 0", None, None, {}, None)
    assert (d.queries, d.replaced_window, d.source) == ({}, None, None)


def test_every_annotation_of_a_loaded_optional_alert_is_read() -> None:
    optional = alerting(GPU_LAUNCH_BOUND, threshold=0.4, remedy="launch less", busy="0.6",
                        cause_sync="1e-3", cause_small=" 7 ", mfu_low="0.05",
                        runbook_url="https://rb#launch", other="x")
    d = Deployment.from_rules([{"type": "recording", "name": SHARE}, *required(), optional])
    assert set(d.alerts) == {*REQUIRED_ALERTS, GPU_LAUNCH_BOUND}
    assert d.alerts[GPU_LAUNCH_BOUND] == AlertRule(
        GPU_LAUNCH_BOUND, 0.4, "launch less", "https://rb#launch", 0.6,
        {"sync": 0.001, "small": 7.0}, 0.05)
    assert RANK_STRAGGLER in OPTIONAL_ALERTS and RANK_STRAGGLER not in d.alerts


def test_no_recording_rules_is_refused_naming_the_server() -> None:
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules([*required(), {"type": "alerting", "name": SHARE}], WHERE)
    assert str(err.value) == (
        f"{WHERE} has no trainwatch recording rules loaded (no "
        f"{RecordNames('<window>').phase_share}): load prometheus/rules/*.yml (rule_files in "
        "prometheus.yml, or the Helm chart's PrometheusRule)")
    with pytest.raises(DeploymentError, match="^Prometheus has no trainwatch recording"):
        Deployment.from_rules(required())


def test_a_missing_required_alert_is_refused_naming_it() -> None:
    rules = [{"type": "recording", "name": SHARE}, *required()]
    missing = REQUIRED_ALERTS[2]
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules([r for r in rules if r["name"] != missing], WHERE)
    assert str(err.value) == (f"{WHERE} has no alerting rule {missing} loaded: load "
                              "prometheus/rules/*.yml")
    recorded_only = [{**r, "type": "recording"} if r["name"] == missing else r for r in rules]
    with pytest.raises(DeploymentError, match=f"no alerting rule {missing} loaded"):
        Deployment.from_rules(recorded_only)


def _one(**annotations: Any) -> list[dict[str, Any]]:
    """The required alerts, the first with ``annotations`` instead of its own."""
    rules = [{"type": "recording", "name": SHARE}, *required()]
    rules[1] = {**rules[1], "annotations": annotations}
    return rules


@pytest.mark.parametrize("raw", [None, "", "high", "nan", "inf", "-inf", [0.3]])
def test_a_threshold_that_is_no_finite_number_is_refused(raw: Any) -> None:
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules(_one(threshold=raw, remedy="x"), WHERE)
    assert str(err.value) == (
        f"{WHERE}: alert {REQUIRED_ALERTS[0]} has no numeric `threshold` annotation (got "
        f"{raw!r}); its rules predate `trainwatch diagnose`: deploy the current prometheus/rules")


def test_rules_without_annotations_are_refused_for_their_threshold() -> None:
    rules = _one()
    rules[1]["annotations"] = None
    with pytest.raises(DeploymentError, match="no numeric `threshold` annotation \\(got None\\)"):
        Deployment.from_rules(rules)


@pytest.mark.parametrize("remedy", [None, ""])
def test_an_alert_without_a_remedy_is_refused(remedy: str | None) -> None:
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules(_one(threshold="0.2", remedy=remedy), WHERE)
    assert str(err.value) == (f"{WHERE}: alert {REQUIRED_ALERTS[0]} has no `remedy` annotation; "
                              "deploy the current prometheus/rules")


@pytest.mark.parametrize("key", ["busy", "mfu_low"])
@pytest.mark.parametrize("raw", ["lots", "nan", "inf"])
def test_a_gate_or_mfu_level_that_is_no_finite_number_is_refused(key: str, raw: str) -> None:
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules(_one(threshold="0.2", remedy="x", **{key: raw}), WHERE)
    assert str(err.value) == (f"{WHERE}: alert {REQUIRED_ALERTS[0]} has a non-numeric `{key}` "
                              f"annotation ({raw!r}); deploy the current prometheus/rules")


@pytest.mark.parametrize("raw", ["some", "nan"])
def test_a_cause_that_is_no_finite_number_is_refused(raw: str) -> None:
    with pytest.raises(DeploymentError) as err:
        Deployment.from_rules(_one(threshold="0.2", remedy="x", cause_a="0.5", cause_b=raw), WHERE)
    assert str(err.value) == (f"{WHERE}: alert {REQUIRED_ALERTS[0]} has a non-numeric `cause_` "
                              "annotation; deploy the current prometheus/rules")


def test_the_loaded_expressions_are_kept_with_their_labels_and_chains_inlined() -> None:
    rate = RecordNames("3m").phase_share.replace("share", "seconds")
    rules = [{"type": "recording", "name": SHARE, "query": f"a:b:rate3m / {rate}"},
             {"type": "recording", "name": "a:b:rate3m", "query": "sum(rate(a[3m]))"},
             {"type": "recording", "name": "q:x", "query": "quantile(0.5, a:b:rate3m)",
              "labels": {"quantile": "0.5"}},
             {"type": "recording", "name": "q:x", "query": "quantile(0.9, y)",
              "labels": {"quantile": "0.9"}},
             {"type": "recording", "name": "uses:q", "query": "q:x + 1", "labels": None},
             {"type": "recording", "name": "empty:rule", "query": ""},
             {"type": "alerting", "name": "alerting:rule", "query": "a:b:rate3m > 1"},
             *required()]
    d = Deployment.from_rules(rules)
    assert d.queries == {
        SHARE: ((f"(sum(rate(a[3m]))) / {rate}", {}),),
        "a:b:rate3m": (("sum(rate(a[3m]))", {}),),
        "q:x": (("quantile(0.5, (sum(rate(a[3m]))))", {"quantile": "0.5"}),
                ("quantile(0.9, y)", {"quantile": "0.9"})),
        "uses:q": (("q:x + 1", {}),),  # several expressions: never read bare
    }


def test_another_window_renames_the_records_and_their_expressions() -> None:
    d = Deployment(RecordNames("3m"), {}, {
        "a:b:rate3m": (("rate(x[3m]) + rate(y[3m:30s])", {"q": "0.5"}),),
        "c:d": (("c_rate3ms[3m]", {}),)})
    assert d.over("3m") is d
    wide = d.over("2h")
    assert wide.names == RecordNames("2h") and wide.replaced_window == "3m"
    assert wide.dashboard_window == "3m" and wide.alerts is d.alerts
    assert wide.queries == {"a:b:rate2h": (("rate(x[2h]) + rate(y[3m:30s])", {"q": "0.5"}),),
                            "c:d": (("c_rate2hs[2h]", {}),)}
    again = wide.over("10m")
    assert again.names == RecordNames("10m") and again.replaced_window == "3m"
    assert "a:b:rate10m" in again.queries
    assert d.replaced_window is None and d.names == RecordNames("3m")  # the original unchanged


def test_rules_as_prometheus_answers_them_in_json_are_read_the_same() -> None:
    """Types and names decoded from JSON are new strings, never the literals' objects."""
    import json
    rules = json.loads(json.dumps([{"type": "recording", "name": SHARE, "query": "sum(x)"},
                                   *required()]))
    d = Deployment.from_rules(rules)
    assert d.names == RecordNames("3m") and list(d.alerts) == list(REQUIRED_ALERTS)
    assert d.queries == {SHARE: (("sum(x)", {}),)}


def test_over_the_same_window_is_the_same_deployment_and_a_later_sorting_one_is_another(
        ) -> None:
    d = Deployment.from_rules([{"type": "recording", "name": SHARE,
                                "query": "rate(x[3m])"}, *required()])
    three = str(3) + "m"  # equal to the window, built at run time (not the same object)
    assert d.over(three) is d
    later = d.over("4m")  # sorts after 3m: renamed all the same
    assert later.names == RecordNames("4m") and later.replaced_window == "3m"
    assert later.queries == {RecordNames("4m").phase_share: (("rate(x[4m])", {}),)}


def test_a_rule_and_a_deployment_cannot_be_changed() -> None:
    import dataclasses
    d = Deployment.from_rules([{"type": "recording", "name": SHARE}, *required()])
    for value, field in ((d, "queries"), (d.alerts[REQUIRED_ALERTS[0]], "threshold")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
