"""Small PromQL builders shared by the recording rules and the alerts."""

from __future__ import annotations

from trial_instrumentation import names
from trial_instrumentation.names import GROUPING_LABELS

# A trial's identity: the Pushgateway grouping key of trial_instrumentation.
TRIAL_LABELS = GROUPING_LABELS
# A GPU's identity on the exporter side (instance comes from the scrape target).
GPU_LABELS = ("instance", "gpu", "uuid")


def by(*labels: str) -> str:
    return f"by ({', '.join(labels)})"


def on(*labels: str) -> str:
    return f"on ({', '.join(labels)})"


def select(metric: str, *matchers: str) -> str:
    """``select("up", 'job="x"')`` -> ``up{job="x"}``; empty matchers are skipped."""
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def number(value: float) -> str:
    """A threshold as PromQL writes it: 0.3 -> '0.3', 300.0 -> '300'."""
    return f"{value:g}"


def live_trials(trial_selector: str, stale_after_seconds: float) -> str:
    """One series per (experiment, trial, rank) that pushed within ``stale_after_seconds``, or,
    in pull mode (TRAINWATCH_PULL_PORT, no Pushgateway), was scraped within it.

    A trial that finished cleanly deleted its group (no series); a crashed one left it behind
    with an old ``push_time_seconds``; one whose final push carries ``trainwatch_trial_exit``
    (failed, or terminated and its delete did not get through) has ended, however fresh that
    push. None of them is live. A pulled trial has no
    ``push_time_seconds``: its freshness is the timestamp of its last scraped sample, and its
    series go stale when its pod (target) goes away.
    """
    info = select("trainwatch_trial_info", trial_selector)
    exited = select(names.EXIT, trial_selector)
    return (f"((max {by(*TRIAL_LABELS)} (time() - {select('push_time_seconds', trial_selector)})"
            f" or max {by(*TRIAL_LABELS)} (time() - timestamp({info})))"
            f" < {number(stale_after_seconds)} unless {on(*TRIAL_LABELS)} {exited})")
