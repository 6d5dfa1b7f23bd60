"""trainwatch/diagnose/rulesource.py without a stack: the shipped rules read in the API's shape,
the deployment a server (or a global view loading no rules) is judged by, and its alerts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_diagnose import loaded_rules
from trainwatch.contract.alerts import DATALOADER_BOUND
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.deployed import Deployment, DeploymentError
from trainwatch.diagnose.rulesource import (
    SHARE_PREFIX,
    alerts,
    choose,
    deployment_of,
    global_note,
    received_shares,
    shipped_rules,
    shipped_source,
)


def test_the_shipped_rules_are_read_in_the_apis_shape_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(
        "groups:\n- name: g\n  rules:\n"
        "  - record: r:x:sum\n    expr: sum(x)\n    labels: {source: s}\n"
        "  - alert: A\n    expr: up == 0\n    annotations: {threshold: '0.5'}\n"
        "- name: h\n  rules:\n  - alert: B\n    expr: vector(1)\n")
    (tmp_path / "a.yml").write_text("groups:\n- name: first\n  rules:\n"
                                    "  - record: r:first:sum\n    expr: sum(y)\n")
    (tmp_path / "c.yml").write_text("")  # empty: no groups
    (tmp_path / "d.yml").write_text("groups:\n")  # no groups either
    (tmp_path / "notes.txt").write_text("not a rule file")
    assert shipped_rules(tmp_path) == [
        {"type": "recording", "name": "r:first:sum", "query": "sum(y)", "labels": {},
         "annotations": {}},
        {"type": "recording", "name": "r:x:sum", "query": "sum(x)", "labels": {"source": "s"},
         "annotations": {}},
        {"type": "alerting", "name": "A", "query": "up == 0", "labels": {},
         "annotations": {"threshold": "0.5"}},
        {"type": "alerting", "name": "B", "query": "vector(1)", "labels": {}, "annotations": {}},
    ]


@pytest.mark.parametrize("text", [
    "groups: [\n",  # not YAML
    "groups:\n- name: a\n",  # a group without rules
    "groups: 5\n",  # not a list
    "- a\n- b\n",  # not a mapping
    "groups:\n- name: a\n  rules: 3\n",
])
def test_a_rule_file_that_is_no_rule_groups_is_named_with_the_reason(tmp_path: Path,
                                                                  text: str) -> None:
    (tmp_path / "x.yml").write_text(text)
    with pytest.raises(DeploymentError) as err:
        shipped_rules(tmp_path)
    said = str(err.value)
    assert said.startswith(f"{tmp_path / 'x.yml'}: cannot read its rule groups (")
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_an_install_without_rule_files_says_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("groups: []\n")  # *.yml only
    with pytest.raises(DeploymentError, match=f"^{tmp_path} not found: this install ships no "):
        shipped_rules(tmp_path)


def test_the_shipped_source_is_thresholds_yaml_beside_the_rules(tmp_path: Path) -> None:
    rules = tmp_path / "prometheus" / "rules"
    assert shipped_source(rules) == f"{tmp_path / 'prometheus' / 'thresholds.yaml'} as this " \
                                    "trainwatch ships it"
    assert global_note("http://c:9090", rules) == (
        f"{shipped_source(rules)} (Prometheus at http://c:9090 loads no trainwatch rules: a "
        "global view, read from the recorded series it receives; figures only the raw series "
        "give are not available from it)")
    assert SHARE_PREFIX == "trial_phase:trainwatch_trial_phase_seconds:share_rate"


def never() -> list[dict[str, Any]]:
    raise AssertionError("the shipped rules were read, though the server loads its own")


def test_only_a_loaded_recording_rule_makes_the_server_its_own_deployment() -> None:
    share = RecordNames("5m").phase_share
    # A phase share's name on an alerting rule is no recording rule.
    misnamed = [{"type": "alerting", "name": share}, {"type": "recording", "name": "a:b:c"}]
    with pytest.raises(DeploymentError, match="^Q has no trainwatch recording rules"):
        choose(misnamed, [], never, "Q")
    found = choose(misnamed, [RecordNames("7s").phase_share], loaded_rules, "Q", "shipped")
    assert (found.names, found.source, found.queries) == (RecordNames("7s"), "shipped", {})


class Api:
    """A PrometheusAPI's rules, label values, alerts and instant queries, canned and recorded."""

    url = "http://prom:9090"

    def __init__(self, rules: list[dict[str, Any]], shares: list[str]) -> None:
        self._rules, self.shares, self.asked = rules, shares, []

    def rules(self) -> list[dict[str, Any]]:
        self.asked.append("rules")
        return self._rules

    def label_values(self, label: str, **params: str) -> list[str]:
        self.asked.append(("label_values", label, params))
        return self.shares

    def alerts(self) -> list[dict[str, Any]]:
        return [{"labels": {"alertname": "Own"}, "state": "firing"}]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        assert expr == "ALERTS"
        return [({"__name__": "ALERTS", "alertname": "TrainwatchX", "alertstate": "pending",
                  "trial": "t"}, 1.0),
                ({"alertname": "TrainwatchY"}, 0.25)]


def test_a_server_loading_the_rules_is_judged_by_them_without_asking_what_it_received() -> None:
    api = Api(loaded_rules(), [RecordNames("3s").phase_share])
    found = deployment_of(api)  # type: ignore[arg-type]
    assert found == Deployment.from_rules(loaded_rules()) and found.source is None
    assert api.asked == ["rules"]
    given = Api([], [])
    assert deployment_of(given, loaded_rules()) == found  # type: ignore[arg-type]
    assert given.asked == []


def test_a_global_view_is_judged_by_the_shipped_rules_over_the_window_it_received() -> None:
    api = Api([{"type": "recording", "name": "job:up:sum"}], [RecordNames("20s").phase_share])
    found = deployment_of(api)  # type: ignore[arg-type]
    assert found.names == RecordNames("20s") and found.queries == {}
    assert found.source == global_note("http://prom:9090")
    assert found.threshold(DATALOADER_BOUND) == Deployment.from_rules(
        loaded_rules()).threshold(DATALOADER_BOUND)
    assert api.asked == ["rules", ("label_values", "__name__", {
        "match[]": '{__name__=~"trial_phase:trainwatch_trial_phase_seconds:share_rate.+"}'})]
    assert received_shares(api) == [RecordNames("20s").phase_share]  # type: ignore[arg-type]


def test_neither_rules_nor_shares_is_the_usual_error_naming_the_server() -> None:
    with pytest.raises(DeploymentError, match="^Prometheus at http://prom:9090 has no "):
        deployment_of(Api([], []))  # type: ignore[arg-type]


def test_a_global_views_alerts_are_its_alerts_series_and_a_servers_its_own() -> None:
    own = Deployment.from_rules(loaded_rules())
    assert alerts(Api([], []), own) == [  # type: ignore[arg-type]
        {"labels": {"alertname": "Own"}, "state": "firing"}]
    shipped = dataclasses.replace(own, source="shipped")
    assert alerts(Api([], []), shipped) == [  # type: ignore[arg-type]
        {"labels": {"alertname": "TrainwatchX", "trial": "t"}, "state": "pending",
         "value": "1"},
        {"labels": {"alertname": "TrainwatchY"}, "state": "?", "value": "0.25"}]


def as_served(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rules`` as /api/v1/rules serves them: decoded from JSON, so none of their strings is
    an interned constant of a module."""
    served: list[dict[str, Any]] = json.loads(json.dumps(rules))
    return served


def test_rules_as_the_api_serves_them_are_read_by_value() -> None:
    served = as_served(loaded_rules())
    assert served[0]["type"] is not loaded_rules()[0]["type"]
    api = Api(served, [RecordNames("3s").phase_share])
    assert deployment_of(api) == Deployment.from_rules(loaded_rules())  # type: ignore[arg-type]
    assert api.asked == ["rules"]
    assert choose(served, [], never, "P").source is None
    found = choose(served, [RecordNames("3s").phase_share], never, "P")
    assert found == Deployment.from_rules(loaded_rules()) and found.source is None


def test_a_share_named_alerting_rule_is_no_loaded_recording_rule() -> None:
    share = RecordNames("5m").phase_share
    api = Api(as_served([{"type": "alerting", "name": share}]), [RecordNames("20s").phase_share])
    found = deployment_of(api)  # type: ignore[arg-type]
    assert found.names == RecordNames("20s") and found.source == global_note(api.url)
    assert [a for a in api.asked if a != "rules"] != []  # it asked what the server received
