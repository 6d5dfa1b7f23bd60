"""trainwatch/demo/show.py, what `make demo` prints, line by line: the firing alerts sorted and
deduplicated per trial of the demo's experiment (pending ones, other experiments' and unknown
trials' left out), node-level ones with where they fire; a notification's heading and its
rendered lines; every notification's title; and the URLs to look at next, Grafana's and the
PATH hint only when there is one. amtool's rendering (a process) is stood in for by a renderer
that records the templates folder it was given."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from trainwatch.demo import show

TEMPLATES = Path("/t/templates")


def firing(alertname: str, state: str = "firing", **labels: str) -> dict[str, Any]:
    """An alert as Prometheus's JSON gives it (its strings decoded, not the literals here)."""
    return json.loads(json.dumps({"labels": {"alertname": alertname, **labels}, "state": state}))


def test_alerts_are_grouped_per_trial_and_node_sorted_once_each() -> None:
    alerts = [
        firing("Zeta", experiment="demo", trial="slow"),
        firing("Alpha", experiment="demo", trial="slow"),
        firing("Zeta", experiment="demo", trial="slow"),  # another rank's: once
        firing("Pending", "pending", experiment="demo", trial="slow"),
        firing("Gone", "inactive", experiment="demo", trial="healthy"),
        firing("Other", experiment="not-demo", trial="healthy"),
        firing("Stranger", experiment="demo", trial="not-listed"),
        firing("NoExperiment", trial="healthy"),
        firing("Mid", experiment="demo", trial="healthy"),
        firing("Node", instance="n2", job="exporter"),
        firing("Node", instance="n1"),
        firing("Node", instance="n1"),
        firing("ByJob", job="pushgateway"),
        firing("Nowhere"),
        firing("EmptyInstance", instance="", job="j"),
        firing("NodePending", "pending", instance="n1"),
    ]
    per_trial, node = show.alerts_by_trial(alerts, "demo", ["slow", "healthy", "quiet"])
    assert per_trial == {"slow": ["Alpha", "Zeta"], "healthy": ["Mid"], "quiet": []}
    assert list(per_trial) == ["slow", "healthy", "quiet"]  # the trials' order kept
    assert node == ["ByJob (pushgateway)", "EmptyInstance (j)", "Node (n1)", "Node (n2)",
                    "Nowhere (?)"]


def test_an_alert_with_an_empty_trial_label_is_no_node_alert() -> None:
    per_trial, node = show.alerts_by_trial([firing("A", experiment="demo", trial="",
                                                   instance="n1")], "demo", ["", "t"])
    assert per_trial == {"": ["A"], "t": []} and node == []


def test_alerts_print_one_line_per_trial_and_the_node_line_only_when_any() -> None:
    out = io.StringIO()
    show.print_alerts(out, {"slow-loader": ["A", "B"], "healthy": []}, ["N (n1)", "M (j)"])
    assert out.getvalue() == ("\n== Alerts firing in Prometheus ==\n"
                              "  trial slow-loader  A, B\n"
                              "  trial healthy      none\n"
                              "  the node         N (n1), M (j)\n")
    out = io.StringIO()
    show.print_alerts(out, {"x": ["A"]}, [])
    assert out.getvalue() == "\n== Alerts firing in Prometheus ==\n  trial x            A\n"


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Path]]:
    """notification_text stood in for: the note's title and alert names, one a line."""
    seen: list[tuple[Any, Path]] = []

    def render(note: dict[str, Any], templates: Path) -> str:
        seen.append((note, templates))
        return "\n".join([note.get("title", ""), *note.get("names", [])]).strip("\n")
    monkeypatch.setattr(show, "notification_text", render)
    return seen


def test_a_notification_prints_its_heading_receiver_and_each_rendered_line_indented(
        rendered: list[tuple[Any, Path]]) -> None:
    out = io.StringIO()
    note = {"receiver": "trainwatch-webhook", "title": "[FIRING:1] X", "names": ["a", "b"]}
    show.print_notification(out, "Notification delivered", note, TEMPLATES)
    assert out.getvalue() == ("\n== Notification delivered (webhook receiver "
                              "'trainwatch-webhook') ==\n  [FIRING:1] X\n  a\n  b\n")
    assert rendered == [(note, TEMPLATES)]
    out = io.StringIO()
    show.print_notification(out, "H", {"title": "t"}, TEMPLATES)
    assert out.getvalue() == "\n== H (webhook receiver 'None') ==\n  t\n"


def test_every_notification_is_one_line_its_time_and_first_rendered_line(
        rendered: list[tuple[Any, Path]]) -> None:
    out = io.StringIO()
    every = [("2026-01-01T00:00:01Z", {"title": "first", "names": ["x"]}),
             ("2026-01-01T00:00:09Z", {"title": "second"}),
             ("2026-01-01T00:00:10Z", {})]
    show.print_every_notification(out, every, TEMPLATES, Path("/s d"))
    assert out.getvalue() == (
        "\n== Every notification delivered (3; in full: trainwatch stack notifications "
        "--state-dir /s d) ==\n"
        "  2026-01-01T00:00:01Z  first\n"
        "  2026-01-01T00:00:09Z  second\n"
        "  2026-01-01T00:00:10Z  ?\n")
    assert [templates for _, templates in rendered] == [TEMPLATES] * 3


URLS = {"prometheus": "http://127.0.0.1:3001", "alertmanager": "http://127.0.0.1:3002"}


def next_steps(monkeypatch: pytest.MonkeyPatch, urls: dict[str, str], hint: str | None) -> str:
    monkeypatch.setattr(show, "path_hint", lambda: hint)
    out = io.StringIO()
    show.print_next_steps(out, urls, Path("/st"), "exp", "trainwatch:share:rate15s",
                          "http://rb/#x")
    return out.getvalue()


TAIL = ("  runbook              http://rb/#x\n"
        "  diagnose again       trainwatch diagnose --prometheus http://127.0.0.1:3001 "
        "--experiment exp\n"
        "  notifications        trainwatch stack notifications --state-dir /st\n"
        "  stop the demo stack  trainwatch stack down --state-dir /st\n"
        "  (the demo's stack keeps running for these URLs until you stop it)\n"
        "  your own training    `make run`, then export TRAINWATCH_PUSHGATEWAY as it says, and "
        "wrap your loop (README: Timing a training loop)\n")
HEAD = ("  Prometheus alerts    http://127.0.0.1:3001/alerts\n"
        "  where steps go       http://127.0.0.1:3001/graph?g0.expr=trainwatch:share:rate15s"
        "%7Bexperiment%3D%22exp%22%7D&g0.tab=0&g0.range_input=5m\n"
        "  Alertmanager         http://127.0.0.1:3002/#/alerts\n")


def test_next_steps_without_grafana_or_a_path_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert next_steps(monkeypatch, URLS, None) == "\n== Where to look next ==\n" + HEAD + TAIL


def test_next_steps_with_grafana_and_a_path_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    got = next_steps(monkeypatch, {**URLS, "grafana": "http://127.0.0.1:3003"}, "source it")
    assert got == ("\n== Where to look next ==\n  source it\n" + HEAD
                   + "  Grafana              http://127.0.0.1:3003/dashboards\n" + TAIL)
