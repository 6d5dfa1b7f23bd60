"""The step and phase quantiles' group runs at thresholds.yaml's quantile_interval, and rules
rendered with a shorter rate window (live tests, a local demo) evaluate them with the rest."""

from __future__ import annotations

import re
from typing import Any

from prometheus.rulegen.recording import recording_groups
from prometheus.rulegen.settings import load_settings
from trainwatch.contract.records import QUANTILES, RecordNames


def _quantile_group(settings: object) -> dict[str, object]:
    [group] = [g for g in recording_groups(settings)  # type: ignore[arg-type]
               if any("quantile_rate" in r["record"] for r in g["rules"])]
    return group


def test_the_quantile_group_holds_each_quantile_it_names_and_nothing_else() -> None:
    """Every record of the slow group is a step or phase quantile, each of QUANTILES once, its
    `quantile` label the one histogram_quantile computes: a record the alerts read evaluated
    once a minute, or a 0.95 that computes the median, would pass the interval alone."""
    names = RecordNames(load_settings().rate_window)
    rules: list[dict[str, Any]] = _quantile_group(load_settings())["rules"]  # type: ignore[assignment]
    assert sorted((r["record"], r["labels"]["quantile"]) for r in rules) == sorted(
        (record, q) for record in (names.step_quantile, names.phase_quantile) for q in QUANTILES)
    for rule in rules:
        computed = re.match(r"histogram_quantile\(([\d.]+), ", rule["expr"])
        assert computed and computed[1] == rule["labels"]["quantile"], rule


def test_the_deployed_quantiles_run_at_their_own_interval() -> None:
    settings = load_settings()
    assert settings.quantile_interval == "1m"
    assert _quantile_group(settings)["interval"] == "1m"


def test_a_rate_window_shorter_than_the_quantile_interval_drops_it() -> None:
    short = load_settings().with_overrides(rate_window="10s")
    assert short.quantile_interval is None and "interval" not in _quantile_group(short)
    assert load_settings().with_overrides(rate_window="1m").quantile_interval == "1m"
    assert load_settings().with_overrides(rate_window="10m").quantile_interval == "1m"
    assert load_settings().with_overrides(for_="5s").quantile_interval == "1m"



def test_diagnose_inlines_the_chained_rules_so_a_window_without_records_reads_raw_series() -> None:
    import yaml

    from prometheus.rulegen import render_files
    from trainwatch.contract.records import RecordNames
    from trainwatch.diagnose.deployed import Deployment

    settings = load_settings().with_overrides(rate_window="30s")
    loaded = [r for text in render_files(settings).values()
              for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    rules = [{"type": "recording", "name": r["record"], "query": r["expr"],
              "labels": r.get("labels")} if "record" in r else
             {"type": "alerting", "name": r["alert"], "annotations": r["annotations"]}
             for r in loaded]
    deployment = Deployment.from_rules(rules)
    [(share, _)] = deployment.queries[RecordNames("30s").phase_share]
    assert ":rate30s" not in share, share  # only raw series: nothing recorded is read
    assert "rate(trainwatch_trial_phase_seconds_sum{" in share
    assert "rate(trainwatch_trial_step_seconds_sum{" in share
