"""Where diagnose takes its thresholds from (trainwatch.diagnose.rulesource): the server's own
loaded rules where it has them, else (a global view of a sharded Prometheus, loading none)
the rules this trainwatch ships, with the window of the recorded series the server holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import promtool
from prometheus.rulegen import load_settings
from tests.test_diagnose import loaded_rules
from trainwatch.contract.alerts import DATALOADER_BOUND, SCALING_INEFFICIENT, TRIAL_STALE
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.deployed import Deployment, DeploymentError
from trainwatch.diagnose.loader_cause import node_cpu, node_figure
from trainwatch.diagnose.rulesource import (
    SHIPPED_RULES,
    choose,
    global_note,
    shipped_rules,
)


def never() -> list[dict[str, Any]]:
    raise AssertionError("the shipped rules were read, though the server loads its own")


def with_threshold(rules: list[dict[str, Any]], alert: str, value: str) -> list[dict[str, Any]]:
    return [{**r, "annotations": {**r["annotations"], "threshold": value}}
            if r["name"] == alert else r for r in rules]


def test_a_server_loading_the_rules_is_judged_by_them_whatever_it_received() -> None:
    own = with_threshold(loaded_rules(), DATALOADER_BOUND, "0.45")
    found = choose(own, [RecordNames("3s").phase_share], never, "P")
    assert found.source is None
    assert found.threshold(DATALOADER_BOUND) == 0.45
    assert found.names == Deployment.from_rules(own).names


def test_a_global_view_is_judged_by_the_shipped_thresholds_over_the_window_it_received(
        ) -> None:
    shipped = with_threshold(loaded_rules(), DATALOADER_BOUND, "0.45")
    # Other rules loaded (not trainwatch's) do not count as trainwatch's.
    other = [{"type": "recording", "name": "job:up:sum"}]
    found = choose(other, [RecordNames("3s").phase_share, RecordNames("3s").phase_share],
                   lambda: shipped, "P", "the note")
    assert found.source == "the note"
    assert found.names == RecordNames("3s")  # the series it holds, not the shipped 5m-style one
    assert found.threshold(DATALOADER_BOUND) == 0.45
    assert found.queries == {}  # no inline fallback: the raw series are on the shards
    # over() (diagnose --window) keeps saying where the thresholds came from.
    assert found.over("1h").source == "the note"


def test_neither_rules_nor_recorded_series_is_the_usual_error() -> None:
    with pytest.raises(DeploymentError, match="P has no trainwatch recording rules loaded"):
        choose([], [], never, "P")


def test_the_shipped_rules_carry_thresholds_yaml() -> None:
    rules = shipped_rules()
    settings = load_settings()
    found = Deployment.from_rules(rules)
    assert found.threshold(DATALOADER_BOUND) == settings.alert(DATALOADER_BOUND).threshold
    assert found.alerts[SCALING_INEFFICIENT].causes == dict(
        settings.alert(SCALING_INEFFICIENT).causes)
    assert found.threshold(TRIAL_STALE) == Deployment.from_rules(loaded_rules()).threshold(
        TRIAL_STALE)
    # Recording rules keep their expressions (the API's `query`).
    assert all(r["query"] for r in rules if r["type"] == "recording")
    assert str(SHIPPED_RULES.parent / "thresholds.yaml") in global_note("http://central:9090")


def test_an_install_without_rules_says_so_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError) as err:
        shipped_rules(tmp_path / "rules")
    assert str(tmp_path / "rules") in str(err.value) and "\n" not in str(err.value)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.yml").write_text("groups: [{name: a}]\n")
    with pytest.raises(DeploymentError, match=f"{bad / 'x.yml'}: cannot read its rule groups"):
        shipped_rules(bad)



def test_a_node_held_once_per_shard_joins_as_one_node(tmp_path: Path) -> None:
    """On a global view a node's host_info and CPU series may arrive from every shard that
    scraped it (kube-prometheus-stack's shardExporters: all), told apart only by
    `prometheus_shard`: diagnose's node join must neither fail (many-to-many) nor count twice.
    promtool evaluates the query diagnose sends."""
    cpu = RecordNames("5m").cpu_utilization
    rank = 'experiment="e", trial="t", rank="0"'
    series = [(f'trainwatch_trial_info{{{rank}, nodename="n1", prometheus_shard="0"}}', "1x5")]
    for shard in ("0", "1"):
        host = f'instance="h1:9400", nodename="n1", prometheus_shard="{shard}"'
        series += [(f"trainwatch_host_info{{{host}}}", "1x5"),
                   (f'{cpu}{{instance="h1:9400", prometheus_shard="{shard}"}}', "0.25x5")]
    series += [('trainwatch_host_info{instance="h2:9400", nodename="n2"}', "1x5"),
               (f'{cpu}{{instance="h2:9400"}}', "0.75x5")]
    cases = {"tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [
            {"expr": node_cpu(cpu, experiment="e", trial="t"), "eval_time": "2m",
             "exp_samples": [{"labels": f"{{{rank}}}", "value": 0.25}]},
            {"expr": node_figure("max by (instance) (trainwatch_host_info)", experiment="e"),
             "eval_time": "2m", "exp_samples": [{"labels": f"{{{rank}}}", "value": 1}]},
        ]}]}
    path = tmp_path / "joins.yml"
    path.write_text(yaml.safe_dump(cases))
    promtool("test", "rules", path)
