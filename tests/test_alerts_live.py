"""Alerts delivered, end to end: a slow-loader PyTorch CPU trial makes TrainwatchDataloaderBound
fire in a real Prometheus, which sends it to a real Alertmanager running the shipped config,
which notifies a webhook receiver this test runs; a healthy trial beside it gets nothing; when
the slow trial ends cleanly the alert resolves and the resolution is delivered too.

Short windows come from the rule generator's overrides and from rendering the shipped
Alertmanager config with a local URL and short grouping delays (trainwatch/alertmanager.py):
never an edited copy of either.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import REPO, require_binary, start_alertmanager, wait_until
from tests.live_stack import HEALTHY_STEP, live_stack
from trainwatch.alertmanager import render_config
from trainwatch.contract import remedies
from trainwatch.contract.records import RecordNames
from trainwatch.webhook import Notification, WebhookReceiver, alerts_in

pytest.importorskip("torch")

ALERT = "TrainwatchDataloaderBound"
EXPERIMENT = "live-alerts"
FOR_SECONDS, RATE_WINDOW = 5, "10s"
AM_DIR = REPO / "prometheus" / "alertmanager"
COMMON = ("--workers", "0", "--batch-size", "8")
# slow: 50 ms per batch in its Dataset, 400 batches: ~20 s of steps, long enough for the alert
# to fire (~10 s after its first push) and short enough to end on its own, cleanly.
SLOW = ("--loader-delay", "0.05", "--steps", "400")
# healthy: epoch after epoch over a small data set until the stack stops it.
HEALTHY = (*HEALTHY_STEP, "--steps", "2000", "--max-seconds", "1800")


@dataclass
class Story:
    """What the webhook received at each point of the story."""

    at_firing: list[Notification]
    slow_exit: int
    at_resolution: list[Notification]
    at_end: list[Notification]
    workdir: Path


def live_slow(notes: list[Notification], status: str) -> list[tuple[Notification, dict[str, Any]]]:
    return alerts_in(notes, ALERT, status, experiment=EXPERIMENT, trial="slow")


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    workdir = tmp_path_factory.mktemp("alerts_live")
    # The shipped config with the webhooks sent here; group_wait 1s: notify a new group at once; group_interval 1s: deliver its resolution at
    # once; repeat_interval 1h: a firing group is notified once within the test.
    with WebhookReceiver() as hook:
        config = render_config(AM_DIR / "alertmanager.yml", webhook_url=hook.url,
                               group_wait="1s", group_interval="1s", repeat_interval="1h")
        with start_alertmanager(workdir, config) as am, \
                live_stack(workdir, rate_window=RATE_WINDOW, for_=f"{FOR_SECONDS}s",
                           alertmanager=am) as live:
            slow = live.start_trial(EXPERIMENT, "slow", *COMMON, *SLOW)
            healthy = live.start_trial(EXPERIMENT, "healthy", *COMMON, *HEALTHY)

            def fired() -> list[Notification] | None:
                assert slow.poll() is None, f"slow exited early:\n{live.trial_log('slow')}"
                notes = hook.notifications()
                return notes if live_slow(notes, "firing") else None

            at_firing = wait_until(fired, timeout=90, what=f"{ALERT} delivered for slow",
                                   interval=0.2)
            slow_exit = slow.wait(timeout=90)

            def resolved() -> list[Notification] | None:
                notes = hook.notifications()
                return notes if live_slow(notes, "resolved") else None

            at_resolution = wait_until(resolved, timeout=60, what="the resolution delivered",
                                       interval=0.2)
            # The healthy trial has been judged for longer than `for` (+3 evaluations), so an
            # alert that was going to fire for it has fired and been delivered by now.
            window = FOR_SECONDS + 3
            share = (f'{RecordNames(RATE_WINDOW).phase_share}{{experiment="{EXPERIMENT}", '
                     f'trial="healthy", phase="dataloader_next"}}')
            live.prometheus.wait_for_series(f"count_over_time({share}[{window}s]) >= {window - 1}",
                                            timeout=30)
            assert healthy.poll() is None, live.trial_log("healthy")
            yield Story(at_firing, slow_exit, at_resolution, hook.notifications(), workdir)


def test_slow_trial_alert_is_delivered_once_with_measure_remedy_and_runbook(story: Story) -> None:
    [(note, alert)] = live_slow(story.at_end, "firing")
    assert note["receiver"] == "trainwatch-warning" and note["status"] == "firing"
    assert note["groupLabels"] == {"alertname": ALERT, "experiment": EXPERIMENT, "trial": "slow"}
    labels, notes = alert["labels"], alert["annotations"]
    assert (labels["severity"], labels["rank"]) == ("warning", "0")
    assert notes["remedy"] == remedies.DATALOADER
    assert notes["runbook_url"].endswith("/docs/runbooks.md#trainwatchdataloaderbound")
    assert notes["summary"] == "Training waits for the data loader."
    # Prometheus expanded the value into the annotations: ~98% of each step waits for 50 ms.
    measured, threshold = notes["measured"].split(" (threshold ")
    assert float(measured.rstrip("%")) > 90 and threshold == "30%)", notes["measured"]
    assert f"Trial {EXPERIMENT}/slow rank 0 spends {measured} of its step time" in \
        notes["description"]


def test_healthy_trial_gets_no_notification(story: Story) -> None:
    assert alerts_in(story.at_end, None, None, trial="healthy") == []


def test_clean_exit_resolves_the_alert_and_the_resolution_is_delivered(story: Story) -> None:
    assert story.slow_exit == 0
    [(note, alert)] = live_slow(story.at_end, "resolved")
    assert note["status"] == "resolved" and alert["endsAt"] > alert["startsAt"]
    assert alert["annotations"]["remedy"] == remedies.DATALOADER
    # Exactly two notifications for the slow trial's group: firing, then resolved.
    group = [n for n in story.at_end if n["groupLabels"].get("trial") == "slow"]
    assert [n["status"] for n in group] == ["firing", "resolved"]


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_the_templates_render_the_delivered_notification(story: Story, status: str) -> None:
    """The notifications Alertmanager really sent (a webhook body is its template data), the
    firing one and its resolution, put through the shipped templates the Slack/email/PagerDuty
    receivers use: every line carries this alert's own figure, time and links."""
    [(note, alert)] = live_slow(story.at_end, status)
    data = story.workdir / f"notification-{status}.json"
    data.write_text(json.dumps(note))
    text = subprocess.run(
        [require_binary("amtool"), "template", "render",
         f"--template.glob={AM_DIR}/templates/*.tmpl",
         '--template.text={{ template "trainwatch.text" . }}', f"--template.data={data}"],
        capture_output=True, text=True, timeout=30, check=True).stdout
    notes = alert["annotations"]
    # A firing alert shows when it started, a resolved one when it ended (RFC 3339, UTC).
    firing = status == "firing"
    match = re.search(r"T(\d\d:\d\d:\d\d)", alert["startsAt" if firing else "endsAt"])
    assert match, alert
    when = f"since {match[1]}" if firing else f"at {match[1]}"
    assert notes["measured"] and alert["generatorURL"].startswith("http://"), alert
    assert text == (f"{status.capitalize()}:\n"
                    f"* trial {EXPERIMENT}/slow rank 0 (warning, {status} {when} UTC)\n"
                    f"  {notes['summary']}\n"
                    f"  Measured: {notes['measured']}\n"
                    f"  Remedy: {notes['remedy']}\n"
                    f"  Runbook: {notes['runbook_url']}\n"
                    f"  Graph: {alert['generatorURL']}\n"), text
