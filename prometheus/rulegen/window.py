"""One window rule for the per-rank trial records: a figure of a run covers the rate window,
or, for a run younger than the window, the run's own age (from its start to its counters'
latest reading), so a new run's rates are not diluted by the part of the window before it
began, and what it counted before its series' first scrape is not lost to ``rate()``.
trainwatch diagnose reads a young rank over its life the same way (diagnose.lifetime)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus.rulegen.settings import Settings
from trainwatch.contract.promql import TRIAL_LABELS, by, number, on, select
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration


def run_age(s: Settings) -> str:
    """The run_age record: a rank whose run started (``trainwatch_trial_start_time_seconds``)
    less than one rate window ago, and the seconds from that start to its counters' latest
    reading (``push_time_seconds``; pulled, its last scrape), at least 1."""
    trial, w = s.selector("trial"), s.rate_window
    read_at = (f"max {by(*TRIAL_LABELS)} ({select('push_time_seconds', trial)})\n"
               f"  or max {by(*TRIAL_LABELS)} "
               f"(timestamp({select(f'{names.STEPS}_total', trial)}))")
    started = (f"max {by(*TRIAL_LABELS)} ({select(names.START_TIME, trial)})\n"
               f"  > time() - {number(parse_duration(w))}")
    return f"clamp_min(\n  (\n{_indent(_indent(read_at))}\n  )\n  - ({started}),\n  1\n)"


def over_run(rate: str, young: Callable[[str], str], age: str, *extra: str) -> str:
    """One window rule for a per-rank figure: ``rate`` over the rate window for a rank older
    than it, ``young(matched)`` (over the run's own ``age``, the run_age record or its
    expression, matched as ``matched`` says) for a younger one. ``extra``: the labels the
    figure has beyond the rank's (the young side is then many-to-one)."""
    on_rank = on(*TRIAL_LABELS)
    many = " group_left" if extra else ""
    if "\n" in rate:  # an expression of its own: kept whole under `unless`, which binds tighter
        rate = f"(\n{_indent(rate)}\n)"
    return (f"(\n{_indent(rate)}\n  unless {on_rank} {age}\n)\nor\n"
            f"{young(f'{on_rank}{many} {age}')}")


def born_at_zero(s: Settings, n: RecordNames, metric: str, *extra: str) -> str:
    """A per-rank rate of a counter the trial starts at zero with its run (phases, step,
    steps, samples): over the window, or for a young rank its value over its age, so what was
    counted before the series' first scrape is not lost to rate()."""
    trial, w = s.selector("trial"), s.rate_window
    grouped = by(*TRIAL_LABELS, *extra)
    return over_run(f"sum {grouped} (rate({select(metric, trial)}[{w}]))",
                    lambda age: f"sum {grouped} ({select(metric, trial)})\n/ {age}", n.run_age,
                    *extra)


def over_window(s: Settings, rate: str) -> str:
    """A per-rank figure of rates over the rate window, for a rank younger than the window
    over its own age instead (the rates times the window over the age, n.run_age): its
    counters did not start at zero with the run (process CPU, reads), so the rates' increase
    is all there is, and the part of the window before the run began must not dilute it."""
    seconds = number(parse_duration(s.rate_window))
    # The age's own expression, not the record: these rules run in another group, which may
    # be evaluated before the trial group's and would read the age of one evaluation before.
    age = f"(\n{_indent(run_age(s))}\n)"
    return over_run(rate, lambda matched: f"(\n{_indent(rate)}\n)\n* {seconds}\n/ {matched}",
                    age)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
