"""Rule files: promtool check/test, regeneration from thresholds.yaml, runbooks, prometheus.yml.

The live end-to-end test is in test_rules_live.py.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, promtool

PROM_DIR = REPO / "prometheus"
from prometheus import generate_rules
from prometheus.rulegen import SettingsError
from prometheus.rulegen.alerts import ALERT_GROUPS

RUNBOOKS = REPO / "docs" / "runbooks.md"
PROMTOOL_TESTS = sorted((PROM_DIR / "tests").glob("*.yml"))


def alert_rules(rules_dir: Path) -> dict[str, dict[str, Any]]:
    """Alert name -> rule, from every rule file in ``rules_dir``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(rules_dir.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            found.update({rule["alert"]: rule for rule in group["rules"] if "alert" in rule})
    return found


def test_prometheus_yml_passes_promtool_check_config() -> None:
    out = promtool("check", "config", PROM_DIR / "prometheus.yml").stdout
    assert "SUCCESS: 5 rule files found" in out


def test_prometheus_yml_scrapes_the_jobs_the_selectors_name() -> None:
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    selectors = generate_rules.load_settings().selectors
    exporter_job = re.fullmatch(r'job="([^"]+)"', selectors["exporter"])
    assert exporter_job and exporter_job.group(1) in jobs
    assert jobs["pushgateway"]["honor_labels"] is True
    assert jobs["trainwatch-exporter"]["static_configs"][0]["targets"] == ["localhost:10910"]
    assert config["rule_files"] == ["rules/*.yml"]
    # Alerts go to Alertmanager (prometheus/alertmanager/alertmanager.yml) on its default port.
    [alertmanager] = config["alerting"]["alertmanagers"]
    assert alertmanager["static_configs"] == [{"targets": ["localhost:9093"]}]


def test_rule_files_pass_promtool_check_rules() -> None:
    files = sorted((PROM_DIR / "rules").glob("*.yml"))
    assert [f.name for f in files] == ["exporter.yml", "gpu.yml", "host.yml", "recording.yml",
                                       "trial.yml"]
    promtool("check", "rules", *files)


@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    assert "SUCCESS" in promtool("test", "rules", test_file).stdout


def test_every_alert_group_has_a_promtool_file_testing_each_alert_fire_and_stay_silent() -> None:
    rules = alert_rules(PROM_DIR / "rules")
    for group in ALERT_GROUPS:
        doc = yaml.safe_load((PROM_DIR / "tests" / f"{group}.yml").read_text())
        assert f"../rules/{group}.yml" in doc["rule_files"]
        cases = [case for test in doc["tests"] for case in test.get("alert_rule_test", [])]
        group_alerts = {rule["alert"] for rule in yaml.safe_load(
            (PROM_DIR / "rules" / f"{group}.yml").read_text())["groups"][0]["rules"]}
        for name in group_alerts:
            assert name in rules
            checks = [c for c in cases if c["alertname"] == name]
            assert any(not c["exp_alerts"] for c in checks), f"{name}: no silent check"
            assert any(c["exp_alerts"] for c in checks), f"{name}: no firing check"
        assert all(test.get("name") for test in doc["tests"]), f"{group}.yml: unnamed case"


def test_committed_rules_equal_a_fresh_render() -> None:
    assert generate_rules.drift() == [], "prometheus/rules drifted: run `make rules` and commit"


def test_every_alert_has_for_severity_summary_description_and_runbook() -> None:
    rules = alert_rules(PROM_DIR / "rules")
    settings = generate_rules.load_settings()
    assert set(rules) == set(settings.alerts)
    headings = {re.sub(r"[^a-z0-9_-]", "", line[3:].strip().lower().replace(" ", "-"))
                for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")}
    for name, rule in rules.items():
        assert rule["for"] and rule["labels"]["severity"] in ("info", "warning", "critical")
        notes = rule["annotations"]
        assert notes["summary"] and len(notes["description"]) > 150, name  # value + remedy
        if settings.alert(name).threshold is not None:  # yes/no alerts have no value to show
            assert "{{ $value" in notes["description"], name
            # Notifications carry annotations, not the value: `measured` says it with its unit.
            assert re.fullmatch(r"\{\{ \$value \| humanize\w* \}\} \(threshold \S+\)",
                                notes["measured"]), name
        else:
            assert "measured" not in notes and "threshold" not in notes, name
        url, _, anchor = notes["runbook_url"].partition("#")
        assert url.endswith("/docs/runbooks.md") and anchor == name.lower(), name
        assert anchor in headings, f"{name}: no '## {name}' section in docs/runbooks.md"


def test_overrides_shorten_every_for_and_the_rate_window_in_another_directory(
        tmp_path: Path) -> None:
    written = generate_rules.write_rules(tmp_path, for_="20s", rate_window="30s")
    assert sorted(p.name for p in written) == sorted(p.name for p in (PROM_DIR / "rules").glob("*.yml"))
    assert {rule["for"] for rule in alert_rules(tmp_path).values()} == {"20s"}
    text = "".join(p.read_text() for p in written)
    assert "[5m]" not in text and "rate5m" not in text and "[30s]" in text
    assert "trial_phase:trainwatch_trial_phase_seconds:share_rate30s" in text
    promtool("check", "rules", *written)
    assert generate_rules.drift() == [], "an override render must not touch the committed files"


def test_a_threshold_change_reaches_the_expression_and_the_description(tmp_path: Path) -> None:
    doc = yaml.safe_load((PROM_DIR / "thresholds.yaml").read_text())
    doc["alerts"]["TrainwatchDataloaderBound"]["threshold"] = 0.45
    changed = tmp_path / "thresholds.yaml"
    changed.write_text(yaml.safe_dump(doc))
    rule = yaml.safe_load(generate_rules.render(changed)["trial.yml"])["groups"][0]["rules"][0]
    assert rule["alert"] == "TrainwatchDataloaderBound"
    assert "> 0.45\n" in rule["expr"] and "(threshold 45%)" in rule["annotations"]["description"]


def test_every_trial_alert_holds_only_while_the_trials_group_is_present_and_fresh() -> None:
    # A rate over the window keeps a finished trial's samples for a whole window; the gate on
    # push_time_seconds ends the alert when the group is deleted (live: test_first_hour_live);
    # a pulled trial's last scrape stands in for it (live: test_trial_pull_live).
    stale_after = generate_rules.load_settings().threshold("TrainwatchTrialStale")
    by_rank = "max by (experiment, trial, rank)"
    # A group whose final push carries trainwatch_trial_exit has ended however fresh it is
    # (promtool: prometheus/tests/trial.yml, TrialFailed).
    gate = (f"and on (experiment, trial, rank)\n(({by_rank} (time() - "
            f'push_time_seconds{{job="trainwatch_trial"}}) or {by_rank} (time() - '
            f'timestamp(trainwatch_trial_info{{job="trainwatch_trial"}}))) < {stale_after:g} '
            'unless on (experiment, trial, rank) trainwatch_trial_exit{job="trainwatch_trial"})')
    rules = alert_rules(PROM_DIR / "rules")
    for name in ("TrainwatchDataloaderBound", "TrainwatchHostToDeviceBound",
                 "TrainwatchTrialPushFailing", "TrainwatchGPUUnderutilized"):
        assert rules[name]["expr"].endswith(gate), name
    assert generate_rules.load_settings().with_overrides(stale_after=7).threshold(
        "TrainwatchTrialStale") == 7


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["alerts"]["TrainwatchTrialStale"].pop("severity"),
     "alerts.TrainwatchTrialStale.severity: None is not one of"),
    (lambda d: d["alerts"]["TrainwatchGPUThrottled"].update({"for": "10 minutes"}),
     "alerts.TrainwatchGPUThrottled.for: '10 minutes' is not a positive Prometheus duration"),
    (lambda d: d["alerts"]["TrainwatchExporterDown"].update({"threshold": 1}),
     "alerts.TrainwatchExporterDown.threshold is not used"),
    (lambda d: d["alerts"]["TrainwatchExporterDown"].update({"window": "2m"}),
     "alerts.TrainwatchExporterDown.window is not used"),
    (lambda d: d["alerts"].pop("TrainwatchHostMemoryLow"), "alerts.TrainwatchHostMemoryLow is missing"),
    (lambda d: d["alerts"].update({"TrainwatchTypo": {"for": "1m", "severity": "info"}}),
     "alerts ['TrainwatchTypo'] match no alert"),
    (lambda d: d["selectors"].pop("trial"), "selectors.trial is missing"),
    # The phase names are the library's (trial_instrumentation/names.py), never a second copy.
    (lambda d: d["selectors"].update({"dataloader_phase": 'phase="next_batch"'}),
     ("selectors.dataloader_phase is not set here: the phase names come from "
     "trial_instrumentation/names.py")),
    (lambda d: d.pop("alerts"), "top-level key 'alerts' is missing"),
    (lambda d: d.pop("rate_window"), "top-level key 'rate_window' is missing"),
    (lambda d: d["selectors"].update({"trial": ""}), "selectors.trial must be a non-empty string"),
    (lambda d: d["selectors"].update({"exporter": 5}),
     "selectors.exporter must be a non-empty string"),
    (lambda d: d.update({"rate_window": "0m"}), "rate_window: '0m' is not a positive"),
    (lambda d: d["alerts"]["TrainwatchCPUSaturated"].update({"threshold": "high"}),
     "alerts.TrainwatchCPUSaturated.threshold: 'high' is not a number"),
    (lambda d: d["alerts"]["TrainwatchGPUUnderutilized"].update({"mfu_low": 20}),
     "alerts.TrainwatchGPUUnderutilized.mfu_low: 20 is not an MFU between 0 and 1"),
    (lambda d: d["alerts"]["TrainwatchGPUUnderutilized"].update({"mfu_low": "low"}),
     "alerts.TrainwatchGPUUnderutilized.mfu_low: 'low' is not a number"),
    (lambda d: d["alerts"]["TrainwatchCPUSaturated"].update({"mfu_low": 0.2}),
     "alerts.TrainwatchCPUSaturated.mfu_low is not used"),
    (lambda d: d["alerts"]["TrainwatchGPUUnderutilized"].pop("mfu_low"),
     "alerts.TrainwatchGPUUnderutilized.mfu_low is missing"),
])
def test_bad_thresholds_fail_with_the_file_and_key(tmp_path: Path, edit: Any, message: str) -> None:
    doc = yaml.safe_load((PROM_DIR / "thresholds.yaml").read_text())
    edit(doc)
    bad = tmp_path / "thresholds.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(SettingsError) as err:
        generate_rules.render(bad)
    assert str(bad) in str(err.value) and message in str(err.value)


def test_cli_check_reports_drift_and_names_a_bad_file(tmp_path: Path) -> None:
    script = [sys.executable, "-m", "prometheus.generate_rules"]
    assert subprocess.run([*script, "--check"], check=False, capture_output=True,
                          cwd=REPO).returncode == 0
    generate_rules.write_rules(tmp_path, for_="1s")
    drifted = subprocess.run([*script, "--check", "--out", str(tmp_path)], check=False,
                             capture_output=True, text=True, cwd=REPO)
    assert drifted.returncode == 1 and "trial.yml differs" in drifted.stdout
    missing = subprocess.run([*script, "--thresholds", str(tmp_path / "nope.yaml"), "--out",
                              str(tmp_path)], check=False, capture_output=True, text=True,
                             cwd=REPO)
    assert missing.returncode == 2 and "nope.yaml: cannot read thresholds" in missing.stderr


def test_settings_are_immutable_once_loaded() -> None:
    # One Settings object is shared by every rule and dashboard generator in a run.
    settings = generate_rules.load_settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.rate_window = "1m"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.alert("TrainwatchDataloaderBound").threshold = 0.9  # type: ignore[misc]


def test_a_stale_after_override_must_be_positive() -> None:
    settings = generate_rules.load_settings()
    assert settings.with_overrides(stale_after=0.5).alert("TrainwatchTrialStale").threshold == 0.5
    both = settings.with_overrides(stale_after=0.5, for_="3s").alert("TrainwatchTrialStale")
    assert (both.threshold, both.for_) == (0.5, "3s")  # one override does not undo the other
    for bad in (0, -5, float("nan")):
        with pytest.raises(SettingsError, match=f"stale_after: {bad!r} is not > 0 seconds"):
            settings.with_overrides(stale_after=bad)


def test_a_window_override_reaches_only_the_alerts_that_have_a_window() -> None:
    settings = generate_rules.load_settings()
    windowed = {n for n, a in settings.alerts.items() if a.window}
    assert "TrainwatchTrialKeyShared" in windowed and "TrainwatchDataloaderBound" not in windowed
    short = settings.with_overrides(window="30s")
    assert {n: a.window for n, a in short.alerts.items()} == {
        n: "30s" if n in windowed else None for n in settings.alerts}


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read thresholds: .*No such file"),
    ("alerts: [unclosed", "cannot read thresholds: while parsing"),
])
def test_an_unreadable_thresholds_file_is_named_with_the_reason(
        tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "thresholds.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError, match=f"^{re.escape(str(path))}: {message}"):
        generate_rules.load_settings(path)


def test_overrides_are_named_so_a_duration_cannot_land_in_the_wrong_field() -> None:
    # for_ and rate_window are both duration strings: a positional "5m" would silently set
    # whichever comes first, so with_overrides takes them by name only.
    settings = generate_rules.load_settings()
    with pytest.raises(TypeError):
        settings.with_overrides("5m")  # type: ignore[misc]
    assert settings.with_overrides(rate_window="5m").rate_window == "5m"


def alert_links(texts: dict[str, str]) -> list[str]:
    return [r["annotations"]["runbook_url"] for text in texts.values()
            for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r]


def test_the_runbook_url_is_one_setting_that_an_override_replaces(tmp_path: Path) -> None:
    base = yaml.safe_load((REPO / "prometheus" / "thresholds.yaml").read_text())["runbook_url"]
    assert {link.split("#")[0] for link in alert_links(generate_rules.render())} == {base}
    local = "http://127.0.0.1:10919/runbooks"
    links = alert_links(generate_rules.render(runbook_url=local))
    assert links and all(link.startswith(local + "#") for link in links)
    for bad in ("wiki.example/runbooks", "https://wiki.example/runbooks.md#x"):
        with pytest.raises(SettingsError, match="runbook_url"):
            generate_rules.render(runbook_url=bad)
