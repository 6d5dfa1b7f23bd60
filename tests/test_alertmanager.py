"""The shipped Alertmanager config and notification templates, checked by the real amtool and a
real Alertmanager: valid as shipped (and with its commented receivers switched on), routed on
`severity`, grouped per trial, the inhibit rule muting the symptom, the templates carrying
summary, measured value, remedy and runbook, and the renderer the demo and the tests use."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, Service, http_get, require_binary, start_alertmanager, wait_until
from prometheus import generate_rules
from trainwatch.alertmanager import AlertmanagerConfigError, render_config
from trial_instrumentation.names import GROUPING_LABELS

AM_DIR = REPO / "prometheus" / "alertmanager"
SHIPPED = AM_DIR / "alertmanager.yml"
TEMPLATES = sorted(AM_DIR.glob("templates/*.tmpl"))
# A commented-out YAML line of the examples (`# slack_configs:`, `#   - to: x`), not prose.
EXAMPLE_LINE = re.compile(r"^(\s*)# (\s*(?:- )?[A-Za-z_]+:.*)$")


def amtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([require_binary("amtool"), *map(str, args)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, f"amtool {args} failed:\n{proc.stdout}{proc.stderr}"
    return proc


def with_examples_switched_on() -> dict[str, Any]:
    text = "\n".join(EXAMPLE_LINE.sub(r"\1\2", line) for line in SHIPPED.read_text().splitlines())
    return dict(yaml.safe_load(text))


def rules() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule
            for text in generate_rules.render().values()
            for group in yaml.safe_load(text)["groups"] for rule in group["rules"]
            if "alert" in rule}


def test_shipped_config_passes_amtool_check_config() -> None:
    out = amtool("check-config", SHIPPED).stdout
    assert "SUCCESS" in out and " - 2 receivers" in out and " - 1 templates" in out, out
    assert TEMPLATES, "no templates/*.tmpl beside alertmanager.yml"


def test_commented_slack_email_and_pagerduty_receivers_are_valid(tmp_path: Path) -> None:
    config = with_examples_switched_on()
    kinds = {key for r in config["receivers"] for key in r if key.endswith("_configs")}
    assert kinds == {"webhook_configs", "slack_configs", "email_configs", "pagerduty_configs"}
    config["templates"] = [str(AM_DIR / t) for t in config["templates"]]
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    amtool("check-config", tmp_path / "am.yml")
    # Every template they name is defined.
    used = set(re.findall(r'template "([\w.]+)"', (tmp_path / "am.yml").read_text()))
    defined = set(re.findall(r'define "([\w.]+)"', "".join(t.read_text() for t in TEMPLATES)))
    assert used and used <= defined, used - defined


@pytest.mark.parametrize("severity", sorted({a.severity for a in
                                             generate_rules.load_settings().alerts.values()}))
def test_every_severity_of_thresholds_yaml_is_routed(severity: str) -> None:
    out = amtool("config", "routes", "test", "--config.file", SHIPPED,
                 "alertname=TrainwatchDataloaderBound", f"severity={severity}").stdout.strip()
    assert out == ("trainwatch-critical" if severity == "critical" else "trainwatch-warning")


def test_notifications_are_grouped_per_alert_and_trial_and_resolutions_sent() -> None:
    config = yaml.safe_load(SHIPPED.read_text())
    assert config["route"]["group_by"] == ["alertname", "experiment", "trial"]
    hooks = [h for r in config["receivers"] for h in r["webhook_configs"]]
    assert hooks and all(h["send_resolved"] is True for h in hooks)
    # Grouped by the trial's identity as trial_instrumentation pushes it (every rank of one
    # trial is one notification).
    assert set(config["route"]["group_by"]) - {"alertname"} == set(GROUPING_LABELS) - {"rank"}


def test_inhibit_rule_names_alerts_that_exist() -> None:
    names = set(rules())
    for rule in yaml.safe_load(SHIPPED.read_text())["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            pattern = matcher.split("=", 1)[1].lstrip("~").strip('"')
            assert any(re.fullmatch(pattern, n) for n in names), matcher


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Service]:
    config = render_config(SHIPPED, webhook_url="http://127.0.0.1:9/unused")
    with start_alertmanager(tmp_path, config) as am:
        yield am


def post_alerts(am: Service, *alerts: dict[str, Any]) -> None:
    import urllib.request

    request = urllib.request.Request(f"{am.url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.status == 200


def test_a_data_loader_bound_trial_mutes_its_idle_gpu_alert_only(alertmanager: Service) -> None:
    def alert(name: str, trial: str, rank: str = "0", experiment: str = "e") -> dict[str, Any]:
        return {"labels": {"alertname": name, "severity": "warning", "experiment": experiment,
                           "trial": trial, "rank": rank}}

    idle = "TrainwatchGPUUnderutilized"
    post_alerts(alertmanager, alert("TrainwatchDataloaderBound", "slow"),
                alert(idle, "slow"), alert(idle, "other"), alert(idle, "slow", rank="1"),
                alert(idle, "slow", experiment="e2"), alert("TrainwatchGPULaunchBound", "slow"))

    expected = {
        ("TrainwatchDataloaderBound", "e", "slow", "0"): "active",
        (idle, "e", "slow", "0"): "suppressed",  # the cause is firing
        # Not muted: another trial, another rank of the slow trial (its own loader is not
        # known to be slow), a trial of the same name in another experiment, and an alert
        # other than the idle GPU of the slow rank itself.
        (idle, "e", "other", "0"): "active",
        (idle, "e", "slow", "1"): "active",
        (idle, "e2", "slow", "0"): "active",
        ("TrainwatchGPULaunchBound", "e", "slow", "0"): "active",
    }
    seen: list[dict[tuple[str, str, str, str], str]] = []

    def states() -> bool:
        # The inhibitor learns of new alerts asynchronously: the state settles within moments.
        _, body = http_get(f"{alertmanager.url}/api/v2/alerts")
        seen.append({tuple(a["labels"][k] for k in ("alertname", "experiment", "trial", "rank")):
                     a["status"]["state"] for a in json.loads(body)})
        return seen[-1] == expected

    try:
        wait_until(states, timeout=10, what="the idle-GPU alert of the slow trial suppressed")
    except TimeoutError:
        pytest.fail(f"Alertmanager's alert states: {seen[-1] if seen else None}")


def render_template(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    (tmp_path / "data.json").write_text(json.dumps(data))
    return amtool("template", "render", f"--template.glob={AM_DIR}/templates/*.tmpl",
                  f"--template.text={{{{ template \"{name}\" . }}}}",
                  f"--template.data={tmp_path / 'data.json'}").stdout


def notification(status: str, *alerts: dict[str, Any]) -> dict[str, Any]:
    common = {k: v for k, v in alerts[0]["annotations"].items()
              if all(a["annotations"].get(k) == v for a in alerts)}
    return {"receiver": "trainwatch-warning", "status": status, "alerts": list(alerts),
            "groupLabels": {k: alerts[0]["labels"][k] for k in ("alertname", "experiment", "trial")
                            if k in alerts[0]["labels"]},
            "commonLabels": {}, "commonAnnotations": common, "externalURL": "http://am"}


def as_fired(name: str, status: str, value: str, **labels: str) -> dict[str, Any]:
    """The alert of the shipped rule ``name`` as Alertmanager holds it: Prometheus has expanded
    its annotations' templates (here: the value and the labels, as the rule's tests do)."""
    rule = rules()[name]
    full = {"alertname": name, **rule["labels"], **labels}

    def expand(text: str) -> str:
        text = re.sub(r"\{\{ \$value \| \w+ \}\}", value, text)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: full.get(m.group(1), ""), text)

    ends = "2026-11-23T07:05:00Z" if status == "resolved" else "0001-01-01T00:00:00Z"
    return {"status": status, "labels": full,
            "annotations": {k: expand(v) for k, v in rule["annotations"].items()},
            "startsAt": "2026-11-23T07:00:00Z", "endsAt": ends,
            "generatorURL": "http://prometheus:9090/graph?g0.expr=x"}


def test_templates_carry_summary_measured_value_remedy_and_runbook(tmp_path: Path) -> None:
    slow = as_fired("TrainwatchDataloaderBound", "firing", "95.2%", experiment="exp",
                    trial="slow", rank="0", phase="dataloader_next")
    data = notification("firing", slow)
    title = render_template(tmp_path, "trainwatch.title", data)
    assert title == "[FIRING:1] TrainwatchDataloaderBound exp/slow: Training waits for the data loader."
    text = render_template(tmp_path, "trainwatch.text", data)
    notes = slow["annotations"]
    assert text.startswith("Firing:\n* trial exp/slow rank 0 (warning, firing since 07:00:00 UTC)\n")
    for line in (notes["summary"], "Measured: 95.2% (threshold 30%)", f"Remedy: {notes['remedy']}",
                 f"Runbook: {notes['runbook_url']}", f"Graph: {slow['generatorURL']}"):
        assert f"\n  {line}\n" in text, (line, text)
    assert "Resolved:" not in text


def test_templates_count_and_list_a_groups_firing_and_resolved_ranks_apart(
        tmp_path: Path) -> None:
    """One trial's notification with ranks in both states (ranks 0 and 2 firing at different
    figures, rank 1 resolved): the title counts the firing ones, each section lists its own
    ranks in order, each with its own figure and time."""
    def rank(number: str, status: str, value: str) -> dict[str, Any]:
        return as_fired("TrainwatchDataloaderBound", status, value, experiment="exp",
                        trial="slow", rank=number)

    data = notification("firing", rank("0", "firing", "95.2%"), rank("1", "resolved", "41.3%"),
                        rank("2", "firing", "61.7%"))
    assert render_template(tmp_path, "trainwatch.title", data) == \
        "[FIRING:2] TrainwatchDataloaderBound exp/slow: Training waits for the data loader."
    text = render_template(tmp_path, "trainwatch.text", data)
    assert text.startswith("Firing:\n") and text.count("Resolved:\n") == 1, text
    firing, resolved = text.split("Resolved:\n")

    def subjects(part: str) -> list[str]:
        return re.findall(r"^\* (.*)$", part, re.MULTILINE)

    assert subjects(firing) == ["trial exp/slow rank 0 (warning, firing since 07:00:00 UTC)",
                                "trial exp/slow rank 2 (warning, firing since 07:00:00 UTC)"]
    assert subjects(resolved) == ["trial exp/slow rank 1 (warning, resolved at 07:05:00 UTC)"]
    assert re.findall(r"Measured: (\S+)", firing) == ["95.2%", "61.7%"]
    assert re.findall(r"Measured: (\S+)", resolved) == ["41.3%"]


def test_templates_show_resolved_alerts_and_yes_no_alerts_without_a_measure(tmp_path: Path) -> None:
    down = as_fired("TrainwatchExporterDown", "resolved", "0", instance="node1:10910")
    text = render_template(tmp_path, "trainwatch.text", notification("resolved", down))
    assert text.startswith("Resolved:\n* node1:10910 (critical, resolved at 07:05:00 UTC)\n")
    assert "Measured:" not in text and "Firing:" not in text
    assert render_template(tmp_path, "trainwatch.title", notification("resolved", down)) == \
        "[RESOLVED] TrainwatchExporterDown: trainwatch-exporter is down."
    # A GPU's alert (no trial) names the GPU by index and UUID on its node.
    hot = as_fired("TrainwatchGPUThrottled", "firing", "1", instance="node2:10910", gpu="3",
                   uuid="GPU-5e1f", reason="hw_slowdown")
    text = render_template(tmp_path, "trainwatch.text", notification("firing", hot))
    assert text.startswith("Firing:\n* GPU 3 (GPU-5e1f) on node2:10910 (warning, firing since "
                           "07:00:00 UTC)\n  A GPU is slowing its clocks down.\n  Remedy: "), text
    assert "Measured:" not in text and "Resolved:" not in text


def test_render_config_points_every_receiver_at_one_url_and_shortens_the_route(
        tmp_path: Path) -> None:
    before = SHIPPED.read_bytes()
    config = render_config(SHIPPED, webhook_url="http://127.0.0.1:1234/x", group_wait="1s",
                           group_interval="2s", repeat_interval="1h")
    assert SHIPPED.read_bytes() == before
    assert [[h["url"] for h in r["webhook_configs"]] for r in config["receivers"]] == \
        [["http://127.0.0.1:1234/x"]] * 2
    route = config["route"]
    assert (route["group_wait"], route["group_interval"], route["repeat_interval"]) == \
        ("1s", "2s", "1h")
    assert all("repeat_interval" not in sub for sub in route["routes"])  # the override holds
    assert route["group_by"] == yaml.safe_load(before)["route"]["group_by"]  # the rest kept
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    assert " - 1 templates" in amtool("check-config", tmp_path / "am.yml").stdout


def test_render_config_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "am.yml"
    bad.write_text("route: {}\n")
    with pytest.raises(AlertmanagerConfigError, match=f"^{bad}: `receivers` is missing"):
        render_config(bad, webhook_url="http://127.0.0.1:1/")
    with pytest.raises(AlertmanagerConfigError, match="cannot read"):
        render_config(tmp_path / "missing.yml", webhook_url="http://127.0.0.1:1/")



def test_webhook_printer_shows_what_alertmanager_delivers(tmp_path: Path) -> None:
    """`python -m trainwatch.webhook`, for the `make run` stack: each notification printed
    through the shipped templates; Ctrl-C ends it cleanly."""
    import signal
    import urllib.request

    from benchmarks.stack import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "trainwatch.webhook", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=REPO)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == f"listening on http://127.0.0.1:{port}/alerts; Ctrl-C stops\n"
        slow = as_fired("TrainwatchDataloaderBound", "firing", "95.2%", experiment="exp",
                        trial="slow", rank="0")
        body = json.dumps(notification("firing", slow)).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/alerts/warning", data=body)
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert resp.status == 200
        lines = [proc.stdout.readline() for _ in range(4)]
        # Stamped with the time it arrived (RFC 3339, UTC).
        assert re.fullmatch(r"--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ via receiver "
                            r"trainwatch-warning\n", lines[0]), lines[0]
        assert lines[1].startswith("[FIRING:1] TrainwatchDataloaderBound exp/slow: ")
        assert lines[3].startswith("* trial exp/slow rank 0 (warning, firing since ")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_webhook_printer_on_a_taken_port_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from trainwatch.webhook import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["--port", str(taken.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert "cannot listen on 127.0.0.1:" in err and "pass --port PORT" in err
    assert err.count("\n") == 1


def test_render_config_keeps_other_integrations_and_adds_a_webhook_where_none(
        tmp_path: Path) -> None:
    source = with_examples_switched_on()
    source["receivers"].append({"name": "email-only", "email_configs": [{"to": "a@example.com"}]})
    (tmp_path / "am.yml").write_text(yaml.safe_dump(source))
    config = render_config(tmp_path / "am.yml", webhook_url="http://127.0.0.1:1234/x")
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["trainwatch-warning"]["slack_configs"] == \
        next(r for r in source["receivers"] if r["name"] == "trainwatch-warning")["slack_configs"]
    assert receivers["email-only"]["webhook_configs"] == [
        {"send_resolved": True, "url": "http://127.0.0.1:1234/x"}]
    assert receivers["email-only"]["email_configs"] == [{"to": "a@example.com"}]
