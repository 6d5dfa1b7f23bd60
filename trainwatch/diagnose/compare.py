"""`trainwatch compare A B`: two trials side by side, and what changed between them.

Each side is one rank's run (the latest under its key; rank 0 unless the reference names one),
read where its numbers are (now while it runs, else at its last sample) and taken over its whole
life: steps/s and samples/s over its time from start to last push, each phase's mean time per
step (phase time over steps) and share of the step, GPU activity averaged over its life, and the
limits it measured. The answer to "what changed" ranks the phases by how much of the difference
in mean step time each explains: ``dataloader_next +29.0 ms per step: 85% of the slowdown``.
The difference is A minus B: B is the baseline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field

from trainwatch.cliutil import ago, ms, printable, signed
from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.promql import rank_order, select
from trainwatch.contract.records import BUSY_SOURCES
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import UnknownTrial
from trainwatch.diagnose.history import unknown_message
from trainwatch.diagnose.runs import Run, find_runs, latest_per_rank, life_range, retention
from trainwatch.promapi import COUNT, PrometheusAPI
from trial_instrumentation import names

# A step-time difference below this fraction of the baseline's is no change.
NO_CHANGE = 0.01
# The time in a step that no phase timed (the loop's own code between phases).
UNTIMED = "(untimed)"
# A difference of at most this many seconds is none: neither a change of the step nor an
# untimed row (float noise of sums of phase seconds).
RESOLUTION = 1e-9


@dataclass
class Side:
    """One run's figures over its life."""

    reference: str
    run: Run
    state: str
    steps: int | None = None
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    step_seconds: float | None = None  # mean time of one step
    phase_seconds: dict[str, float] = field(default_factory=dict)  # mean time per step
    gpu_busy: float | None = None  # SM activity where GPM reports it, else NVML utilization
    gpu_busy_source: str | None = None
    loader_limit: float | None = None  # samples/s, when measured
    step_limit: float | None = None

    def share(self, phase: str) -> float | None:
        seconds = self.phase_seconds.get(phase)
        return None if seconds is None or not self.step_seconds else seconds / self.step_seconds


@dataclass
class Change:
    phase: str  # UNTIMED for the step time in no phase (``untimed`` says which it is)
    delta_seconds: float  # A's mean time per step minus B's
    explained: float | None  # of the step-time difference; None when there is none
    untimed: bool = False  # the step time in no phase, not a phase a user named UNTIMED


@dataclass
class Comparison:
    a: Side
    b: Side
    delta_step_seconds: float | None
    changes: list[Change]  # the largest |delta| first
    summary: str


def parse_reference(text: str) -> tuple[str, str, str | None]:
    """``experiment/trial[/rank]``.

    >>> parse_reference("resnet/lr-0.1"), parse_reference("resnet/lr-0.1/3")
    (('resnet', 'lr-0.1', None), ('resnet', 'lr-0.1', '3'))
    """
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"{text!r} is not a trial reference: experiment/trial or "
                         "experiment/trial/rank, e.g. resnet/lr-0.1")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def compare_refs(api: PrometheusAPI, deployment: Deployment, first: str, second: str,
                 since: float | None = None, now: float | None = None) -> Comparison:
    now = time.time() if now is None else now
    a_ref, b_ref = parse_reference(first), parse_reference(second)
    since = retention(api) if since is None else since
    (a_run, a_label), (b_run, b_label) = (run_of_ref(api, ref, since, now)
                                          for ref in (a_ref, b_ref))
    if a_run.identity == b_run.identity:  # E/T/0 and E/T: the same run however spelled
        raise ValueError(f"{first} and {second} are the same run ({a_run.experiment}/"
                         f"{a_run.trial} rank {a_run.rank}): compare two different trials or "
                         "ranks")
    return compare(run_side(api, deployment, a_run, a_label, now),
                   run_side(api, deployment, b_run, b_label, now))


def side_of(api: PrometheusAPI, deployment: Deployment, ref: tuple[str, str, str | None],
            since: float, now: float) -> Side:
    return run_side(api, deployment, *run_of_ref(api, ref, since, now), now)


def run_of_ref(api: PrometheusAPI, ref: tuple[str, str, str | None], since: float,
               now: float) -> tuple[Run, str]:
    """The run a reference names (its lowest rank's latest without a rank), and its label."""
    experiment, trial, rank = ref
    runs = latest_per_rank(find_runs(api, since, experiment, trial, rank, now=now))
    if not runs:
        raise UnknownTrial(unknown_message(api, since, experiment, trial, rank, now))
    run = min(runs, key=lambda r: rank_order(r.rank))
    label = f"{experiment}/{trial}" + (f" rank {run.rank}" if rank is not None or len(runs) > 1
                                       else "")
    return run, label


def run_side(api: PrometheusAPI, deployment: Deployment, run: Run, label: str,
             now: float) -> Side:
    """One run's side (any run, not only its key's latest: the baselines of
    trainwatch.diagnose.baseline read earlier runs under one key too)."""
    pinned = api if run.current else api.pinned(run.last)
    side = Side(label, run, run.state(deployment.threshold(TRIAL_STALE), now))
    sel = dict(zip(names.GROUPING_LABELS, run.key))

    value = pinned.value
    steps = value(select(f"{names.STEPS}_total", **sel), COUNT)
    samples = value(select(f"{names.SAMPLES}_total", **sel), COUNT)
    step_sum = value(select(f"{names.STEP_SECONDS}_sum", **sel))
    life = (now if run.current and run.exit_reason is None else run.end) - run.start
    side.steps = None if steps is None else int(steps)
    if life > 0:
        side.steps_per_second = None if steps is None else steps / life
        side.samples_per_second = None if samples is None else samples / life
    if steps and step_sum is not None:
        side.step_seconds = step_sum / steps
        for labels, total in pinned.query(select(f"{names.PHASE_SECONDS}_sum", **sel)):
            side.phase_seconds[labels.get("phase", "")] = total / steps
    side.loader_limit = value(select(names.LOADER_LIMIT, **sel))
    side.step_limit = value(select(names.STEP_LIMIT, **sel))
    # Running: over its life so far, up to now. Ended: over its life, start to final push,
    # read at its last sample (Run.life_range), not the minutes its group stayed after it.
    running = run.current and run.exit_reason is None
    window = life_range(life, 0.0) if running else run.life_range  # whole seconds, rounded up
    at = pinned if running else api.pinned(run.last)
    # "GPU busy" as the one recording rule defines it, with the source it came from.
    busy = f"avg_over_time({select(deployment.names.trial_gpu_busy, **sel)}{window})"
    for labels, found in at.query(f"avg by (source) ({busy})"):
        if not math.isnan(found):
            side.gpu_busy = found
            side.gpu_busy_source = BUSY_SOURCES.get(labels.get("source", ""), "?")
            break
    return side


def compare(a: Side, b: Side) -> Comparison:
    """What changed from ``b`` (the baseline) to ``a``."""
    if a.step_seconds is None or b.step_seconds is None:
        missing = a.reference if a.step_seconds is None else b.reference
        return Comparison(a, b, None, [], f"No comparison: {missing} has no finished step in "
                          "Prometheus")
    delta = a.step_seconds - b.step_seconds
    phases = sorted(set(a.phase_seconds) | set(b.phase_seconds))
    # (name, seconds, untimed): a phase a user named UNTIMED stays a row of its own.
    deltas = [(p, a.phase_seconds.get(p, 0.0) - b.phase_seconds.get(p, 0.0), False)
              for p in phases]
    untimed = ((a.step_seconds - sum(a.phase_seconds.values()))
               - (b.step_seconds - sum(b.phase_seconds.values())))
    if abs(untimed) > RESOLUTION:
        deltas.append((UNTIMED, untimed, True))
    # Two steps of 0 s (a step time sum of 0), or a nanosecond apart, differ by nothing: no
    # change, not a division by 0. A difference over it is in a phase or the untimed row, so a
    # change always has a top row.
    significant = abs(delta) > RESOLUTION and abs(delta) >= NO_CHANGE * b.step_seconds
    changes = [Change(p, d, d / delta if significant else None, rest)
               for p, d, rest in sorted(deltas, key=lambda item: -abs(item[1]))]
    if not significant:
        summary = (f"No change: mean step time {ms(a.step_seconds)} against "
                   f"{ms(b.step_seconds)} (within {NO_CHANGE:.0%})")
    else:
        word = "slowdown" if delta > 0 else "speed-up"
        ratio = a.step_seconds / b.step_seconds if b.step_seconds else math.inf
        top = changes[0]
        summary = (f"{a.reference} takes {ms(a.step_seconds)} per step, {ratio:.2f}x "
                   f"{b.reference}'s {ms(b.step_seconds)} ({_signed_ms(delta)}); "
                   f"{top.phase} {_signed_ms(top.delta_seconds)} per step: "
                   f"{top.explained or 0:.0%} of the {word}")
    return Comparison(a, b, delta, changes, summary)


def _signed_ms(seconds: float) -> str:
    return signed(seconds * 1000, unit=" ms")


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def as_text(c: Comparison) -> str:
    a, b = c.a, c.b
    rows = [("", "A", "B (baseline)"),
            ("trial", a.reference, b.reference),
            ("state", a.state, b.state),
            ("ran", ago(a.run.seconds), ago(b.run.seconds)),
            ("steps", _num(a.steps, 0), _num(b.steps, 0)),
            ("steps/s", _num(a.steps_per_second), _num(b.steps_per_second)),
            ("samples/s", _num(a.samples_per_second, 1), _num(b.samples_per_second, 1)),
            ("step time", ms(a.step_seconds), ms(b.step_seconds)),
            ("GPU busy", _gpu(a), _gpu(b))]
    if a.loader_limit or b.loader_limit or a.step_limit or b.step_limit:
        rows += [("loader limit", _num(a.loader_limit, 0), _num(b.loader_limit, 0)),
                 ("step limit", _num(a.step_limit, 0), _num(b.step_limit, 0))]
    for change in c.changes:
        p = change.phase
        if change.untimed:
            continue
        rows.append((f"  {p}", f"{ms(a.phase_seconds.get(p))} {_pct(a.share(p))}",
                     f"{ms(b.phase_seconds.get(p))} {_pct(b.share(p))}"))
    cells = [[printable(cell) for cell in row] for row in rows]  # a name stays on its line
    widths = [max(len(r[i]) for r in cells) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells]
    lines += ["", f"WHAT CHANGED: {c.summary}"]
    if c.delta_step_seconds is not None:
        for change in c.changes:
            share = "" if change.explained is None else f": {change.explained:.0%} of the difference"
            lines.append(f"  {change.phase} {_signed_ms(change.delta_seconds)} per step{share}")
    return "\n".join(printable(line) for line in lines)


def _gpu(side: Side) -> str:
    if side.gpu_busy is None:
        return "-"
    return f"{side.gpu_busy:.1%} ({side.gpu_busy_source})"


def as_json(c: Comparison) -> str:
    return json.dumps({"comparison": dataclasses.asdict(c)}, indent=2, ensure_ascii=False)
