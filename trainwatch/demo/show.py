"""What `make demo` prints: the alerts per trial, a delivered notification, where to look next.

Example:
    >>> firing = [{"labels": {"alertname": "TrainwatchDataloaderBound", "experiment": "demo",
    ...            "trial": "slow-loader"}, "state": "firing"},
    ...           {"labels": {"alertname": "TrainwatchCPUSaturated", "instance": "n1"},
    ...            "state": "firing"}]
    >>> alerts_by_trial(firing, "demo", ["slow-loader", "healthy"])
    ({'slow-loader': ['TrainwatchDataloaderBound'], 'healthy': []}, ['TrainwatchCPUSaturated (n1)'])
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from trainwatch.layout import path_hint
from trainwatch.webhook import Notification, notification_text


def alerts_by_trial(alerts: Iterable[dict[str, Any]], experiment: str, trials: Iterable[str]
                    ) -> tuple[dict[str, list[str]], list[str]]:
    """Firing alert names per trial of ``experiment``, and the node-level ones (no trial)."""
    per_trial: dict[str, list[str]] = {t: [] for t in trials}
    node: list[str] = []
    for alert in alerts:
        if alert.get("state") != "firing":
            continue
        labels = alert["labels"]
        if labels.get("trial") is None:
            where = labels.get("instance") or labels.get("job") or "?"
            node.append(f"{labels['alertname']} ({where})")
        elif labels.get("experiment") == experiment and labels["trial"] in per_trial:
            per_trial[labels["trial"]].append(labels["alertname"])
    return {t: sorted(set(names)) for t, names in per_trial.items()}, sorted(set(node))


def print_alerts(out: TextIO, per_trial: dict[str, list[str]], node: list[str]) -> None:
    out.write("\n== Alerts firing in Prometheus ==\n")
    out.writelines(f"  trial {trial:<12} {', '.join(names) if names else 'none'}\n"
                   for trial, names in per_trial.items())
    if node:
        out.write(f"  the node         {', '.join(node)}\n")


def print_notification(out: TextIO, heading: str, note: Notification, templates: Path) -> None:
    out.write(f"\n== {heading} (webhook receiver '{note.get('receiver')}') ==\n")
    out.writelines(f"  {line}\n" for line in notification_text(note, templates).splitlines())


def print_every_notification(out: TextIO, every: list[tuple[str, Notification]],
                             templates: Path, state_dir: Path) -> None:
    """Each notification delivered, one line: when, and its title as the shipped templates
    render it (the first line `trainwatch stack notifications` prints for it)."""
    out.write(f"\n== Every notification delivered ({len(every)}; in full: trainwatch stack "
              f"notifications --state-dir {state_dir}) ==\n")
    for received, note in every:
        title = next(iter(notification_text(note, templates).splitlines()), "?")
        out.write(f"  {received}  {title}\n")


def print_next_steps(out: TextIO, urls: dict[str, str], state_dir: Path,
                     experiment: str, share: str, runbook: str) -> None:
    """URLs into the demo stack; ``share`` is the recorded phase-share series."""
    prometheus, alertmanager = urls["prometheus"], urls["alertmanager"]
    out.write("\n== Where to look next ==\n")
    hint = path_hint()
    if hint:
        out.write(f"  {hint}\n")
    out.write(f"  Prometheus alerts    {prometheus}/alerts\n")
    out.write(f"  where steps go       {prometheus}/graph?g0.expr={share}"
              f"%7Bexperiment%3D%22{experiment}%22%7D&g0.tab=0&g0.range_input=5m\n")
    out.write(f"  Alertmanager         {alertmanager}/#/alerts\n")
    if "grafana" in urls:
        out.write(f"  Grafana              {urls['grafana']}/dashboards\n")
    out.write(f"  runbook              {runbook}\n")
    out.write(f"  diagnose again       trainwatch diagnose --prometheus {prometheus} "
              f"--experiment {experiment}\n")
    out.write(f"  notifications        trainwatch stack notifications --state-dir {state_dir}\n")
    out.write(f"  stop the demo stack  trainwatch stack down --state-dir {state_dir}\n")
    out.write("  (the demo's stack keeps running for these URLs until you stop it)\n")
    out.write("  your own training    `make run`, then export TRAINWATCH_PUSHGATEWAY as it says, "
              "and wrap your loop (README: Timing a training loop)\n")
