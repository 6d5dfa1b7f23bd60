"""`trainwatch usage`: where the GPU-hours went (issue 40), per experiment, Kubernetes namespace,
Slurm job, user or node, from the GPU-seconds recording rules (prometheus/rulegen/usage.py).

    trainwatch usage [--since 7d] [--by experiment|namespace|job|user|node]
                     [--format table|json|csv]

One line per group: GPU-hours held, busy, wasted by cause (the ``cause`` label of
``trial:trainwatch_trial_gpu_idle:seconds_1m``, in the words of records.IDLE_CAUSES; the
verdict's titles and remedies where one exists), busy with a low MFU, MFU where known, and the
trial that wasted the most; then the totals, and the GPU-hours outside any trial: uninstrumented
(processes but no trial) per pod or Slurm job they work for, and unused. A few queries whatever
the fleet's size: each record's rollup (a series per trial and node carrying the group labels,
RecordNames.rolled) ``sum_over_time`` over the range and summed per group, no join. Bad input
(a ``--since`` beyond Prometheus's retention, an unknown ``--by``, a Prometheus without the
usage rules, one unreachable) is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainwatch import cliutil
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE, add_prometheus, span
from trainwatch.contract import remedies
from trainwatch.contract.checks import CHECKS, LOW_MFU
from trainwatch.contract.promql import by
from trainwatch.contract.records import IDLE_CAUSES, OWNER_LABELS, USAGE_GROUPS, RecordNames
from trainwatch.diagnose.runs import retention
from trainwatch.lookup import prometheus_url
from trainwatch.promapi import COUNT, PrometheusAPI, PrometheusError

# --by -> the label of trainwatch_trial_info (the trial's grouping key for experiment).
GROUPINGS = USAGE_GROUPS
DEFAULT_SINCE = 7 * 86400.0
NONE = "(none)"  # a group whose trials did not say (no namespace outside Kubernetes, ...)
_TITLES = {kind: title for kind, title, *_ in CHECKS}
# Each cause: (the verdict's title, its remedy), where the verdict names it.
VERDICTS: Mapping[str, tuple[str, str] | None] = {
    "data": (_TITLES["dataloader"], remedies.DATALOADER),
    "host_to_device": (_TITLES["memory_copies"], remedies.MEMORY_COPIES),
    "exchange": ("Scaling inefficient", remedies.SCALING),
    "straggler": ("Rank straggler", remedies.STRAGGLER),
    "other": None,
}
LOW_MFU_WORDS = LOW_MFU[1]  # "GPU busy, MFU low"
MAX_OWNERS = 10  # the table's lines of uninstrumented owners, most GPU-hours first


class UsageError(ValueError):
    """What makes `usage` answer nothing: exit 2, one line."""


@dataclass
class Group:
    """One group's GPU-seconds over the range."""

    name: str
    held: float = 0.0
    busy: float = 0.0
    wasted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(IDLE_CAUSES, 0.0))
    low_mfu: float = 0.0
    model: float = 0.0  # held x MFU
    held_mfu: float = 0.0  # held where the MFU is known
    top: tuple[str, str, float] | None = None  # (experiment, trial, wasted GPU-seconds)

    @property
    def idle(self) -> float:
        return sum(self.wasted.values())

    @property
    def mfu(self) -> float | None:
        return self.model / self.held_mfu if self.held_mfu > 0 else None

    def add(self, other: Group) -> None:
        self.held += other.held
        self.busy += other.busy
        for cause, seconds in other.wasted.items():
            self.wasted[cause] += seconds
        self.low_mfu += other.low_mfu
        self.model += other.model
        self.held_mfu += other.held_mfu
        if other.top is not None and (self.top is None or other.top[2] > self.top[2]):
            self.top = other.top


def add_parser(commands: Any) -> None:
    sub = commands.add_parser("usage", help="where the GPU-hours went: held, busy and wasted "
                              "by cause, per experiment, namespace, Slurm job, user or node")
    add_prometheus(sub)
    sub.add_argument("--since", type=span, metavar="DURATION",
                     help="how far back (default 7d, or Prometheus's retention where shorter; "
                     "at most the retention)")
    sub.add_argument("--by", choices=tuple(GROUPINGS), default="experiment",
                     help="one line per experiment (default), Kubernetes namespace, Slurm job, "
                     "user or node")
    sub.add_argument("--format", choices=("table", "json", "csv"), default="table")


def _range(seconds: float) -> str:
    return f"[{max(1, math.ceil(seconds))}s]"


def queries(n: RecordNames, label: str, since: float) -> dict[str, str]:
    """The PromQL `usage` asks, one per figure: each record's rollup (per trial and node, with
    ``label``) summed over the range, per group (the idle GPU-seconds per trial and ``cause``:
    the group's causes and its top trial); the uninstrumented GPU-seconds per owner."""
    r = _range(since)

    def total(record: str, *extra: str) -> str:
        labels = dict.fromkeys((label, *extra))  # each once, in order
        return f"sum {by(*labels)} (sum_over_time({n.rolled(record)}{r}))"

    return {
        "held": total(n.gpu_seconds_held),
        "busy": total(n.gpu_seconds_busy),
        # Per trial and cause: the group's causes and its top trial from one read of a week of
        # the idle records (a topk query of its own read them all again: 2.7 s of 8 over a
        # week of a 1,000-GPU fleet, benchmarks/usage_scale.py).
        "idle": total(n.gpu_seconds_idle, "experiment", "trial", "cause"),
        "low_mfu": total(n.gpu_seconds_low_mfu),
        "model": total(n.gpu_seconds_model),
        "held_mfu": total(n.gpu_seconds_held_mfu),
        # GPUs no live rank held: with processes, per pod or Slurm job and node; without.
        "uninstrumented": (f"sum {by(*OWNER_LABELS)} "
                           f"(sum_over_time({n.gpu_seconds_uninstrumented}{r}))"),
        "uninstrumented_busy": (f"sum {by(*OWNER_LABELS)} "
                                f"(sum_over_time({n.gpu_seconds_uninstrumented_busy}{r}))"),
        "unused": f"sum(sum_over_time({n.gpu_seconds_unused}{r}))",
    }


def required(n: RecordNames) -> list[str]:
    """The records `usage` reads: the rollups, the two outside trials."""
    return [*map(n.rolled, n.gpu_seconds_per_rank), n.gpu_seconds_uninstrumented,
            n.gpu_seconds_uninstrumented_busy, n.gpu_seconds_unused]


def check_deployed(api: PrometheusAPI, n: RecordNames) -> None:
    """The usage rules are loaded (or, a global view loading none, their series are there)."""
    wanted = required(n)
    loaded = {r.get("name") for r in api.rules() if r.get("type") == "recording"}
    missing = [name for name in wanted if name not in loaded]
    if not missing:
        return
    names = "|".join(re.escape(name) for name in wanted)
    held = api.label_values("__name__", **{"match[]": f'{{__name__=~"{names}"}}'})
    if not loaded and set(wanted) <= set(held):
        return
    raise UsageError(f"Prometheus at {api.url} has no trainwatch usage rules ({missing[0]} "
                     f"and {len(missing) - 1} more not loaded): deploy this version's "
                     "prometheus/rules/recording.yml (group trainwatch.usage.rules)"
                     if len(missing) > 1 else
                     f"Prometheus at {api.url} has no trainwatch usage rule {missing[0]}: deploy "
                     "this version's prometheus/rules/recording.yml (group trainwatch.usage.rules)")


@dataclass(frozen=True)
class Owner:
    """Whom uninstrumented GPU-seconds went to: a pod, a Slurm job (the process cgroup's), or
    neither (both empty), on a node (empty where its exporter said none)."""

    pod_uid: str = ""
    slurm_job_id: str = ""
    nodename: str = ""

    @property
    def name(self) -> str:
        """'pod <uid>', 'job <id>' (both where a process said both), else 'no pod or job'."""
        said = [f"{kind} {value}" for kind, value in (("pod", self.pod_uid),
                                                      ("job", self.slurm_job_id)) if value]
        return ", ".join(said) or "no pod or job"

    def group(self, by_: str) -> str | None:
        """The ``--by`` group these GPU-seconds fall under where the labels say it (a Slurm
        job, a node), else None: a pod UID names no namespace, user or experiment."""
        label = GROUPINGS[by_]
        return (getattr(self, label) or None) if label in OWNER_LABELS else None


@dataclass(frozen=True)
class Uninstrumented:
    """One owner's GPU-seconds on GPUs no live trial held, and how many of them were busy."""

    owner: Owner
    held: float
    busy: float = 0.0


@dataclass(frozen=True)
class Outside:
    """GPU-seconds of GPUs no live trial rank held: with processes on them (uninstrumented:
    the exporter's opt-in process collector), per owner, and with none (unused)."""

    owners: tuple[Uninstrumented, ...] = ()  # most GPU-seconds first
    unused: float = 0.0

    @property
    def uninstrumented(self) -> float:
        return sum(o.held for o in self.owners)


def over(api: PrometheusAPI, since: float | None) -> float:
    """The range asked: ``--since``, refused beyond Prometheus's retention; without it 7 days,
    or the retention where that is shorter."""
    kept = retention(api)
    if since is None:
        return min(DEFAULT_SINCE, kept)
    if since > kept:
        raise UsageError(f"--since {cliutil.bounded(_duration(since))} is beyond Prometheus's "
                         f"retention ({_duration(kept)}) at {api.url}: nothing older is kept; "
                         f"use --since {_duration(kept)} or less")
    return since


def gather(api: PrometheusAPI, by_: str, since: float) -> tuple[list[Group], Outside]:
    """Each group's figures over ``since`` seconds, most wasted first, and the GPUs outside
    any trial."""
    n = RecordNames("5m")  # the GPU-seconds records' names carry no rate window
    check_deployed(api, n)
    label = GROUPINGS[by_]
    groups: dict[str, Group] = {}

    def group(labels: Mapping[str, str]) -> Group:
        name = labels.get(label) or NONE
        return groups.setdefault(name, Group(name))

    asked = queries(n, label, since)
    for figure in ("held", "busy", "low_mfu", "model", "held_mfu"):
        # GPU-seconds are finite and at least 0 (COUNT): a NaN, an infinity or a negative
        # sum is a broken answer, said in one line, never a wrong table.
        for labels, value in api.query(asked[figure], COUNT):
            found = group(labels)
            setattr(found, figure, getattr(found, figure) + value)
    trials: dict[tuple[str, str, str], float] = {}  # (group, experiment, trial) -> wasted
    for labels, value in api.query(asked["idle"], COUNT):
        cause = labels.get("cause", "")
        if cause in IDLE_CAUSES:  # a value outside the contract's five is not ours
            found = group(labels)
            found.wasted[cause] += value
            key = (found.name, labels.get("experiment", ""), labels.get("trial", ""))
            trials[key] = trials.get(key, 0.0) + value
    # Each group's top offender: the trial that wasted the most (the first by name of a tie).
    for (name, experiment, trial), value in sorted(trials.items()):
        top = groups[name].top
        if top is None or value > top[2]:
            groups[name].top = (experiment, trial, value)
    owners: dict[str, dict[Owner, float]] = {"uninstrumented": {}, "uninstrumented_busy": {}}
    for figure, found_ in owners.items():
        for labels, value in api.query(asked[figure], COUNT):
            owner = Owner(**{label: labels.get(label, "") for label in OWNER_LABELS})
            found_[owner] = found_.get(owner, 0.0) + value
    used = [Uninstrumented(owner, held, owners["uninstrumented_busy"].get(owner, 0.0))
            for owner, held in owners["uninstrumented"].items()]
    outside = Outside(tuple(sorted(used, key=lambda o: (-o.held, o.owner.name,
                                                        o.owner.nodename))),
                      sum(value for _, value in api.query(asked["unused"], COUNT)))
    return sorted(groups.values(), key=lambda g: (-g.idle, g.name)), outside


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def totals(groups: list[Group]) -> Group:
    whole = Group("total")
    for g in groups:
        whole.add(g)
    return whole


def hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:.1f}" if h >= 10 else f"{h:.2f}" if h >= 0.1 else f"{h:.3f}"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def as_dict(g: Group) -> dict[str, Any]:
    return {"group": g.name, "held_gpu_seconds": g.held, "busy_gpu_seconds": g.busy,
            "wasted_gpu_seconds": g.idle, "wasted_by_cause": dict(g.wasted),
            "busy_low_mfu_gpu_seconds": g.low_mfu, "mfu": g.mfu,
            "top_offender": None if g.top is None else
            {"experiment": g.top[0], "trial": g.top[1], "wasted_gpu_seconds": g.top[2]}}


def as_json(by_: str, since: float, groups: list[Group], outside: Outside) -> str:
    causes = {cause: {"words": words, "verdict": None if VERDICTS[cause] is None else
                      VERDICTS[cause][0],  # type: ignore[index]
                      "remedy": None if VERDICTS[cause] is None else VERDICTS[cause][1]}  # type: ignore[index]
              for cause, words in IDLE_CAUSES.items()}
    return json.dumps({"by": by_, "since_seconds": since, "causes": causes,
                       "low_mfu": {"words": LOW_MFU_WORDS, "remedy": remedies.LOW_MFU},
                       "groups": [as_dict(g) for g in groups],
                       "total": as_dict(totals(groups)),
                       "outside_trials": {
                           "uninstrumented_gpu_seconds": outside.uninstrumented,
                           "unused_gpu_seconds": outside.unused,
                           "uninstrumented_by_owner": [
                               {"owner": o.owner.name, "pod_uid": o.owner.pod_uid or None,
                                "slurm_job_id": o.owner.slurm_job_id or None,
                                "node": o.owner.nodename or None,
                                "group": o.owner.group(by_), "gpu_seconds": o.held,
                                "busy_gpu_seconds": o.busy}
                               for o in outside.owners]}}, indent=2)


def as_csv(by_: str, groups: list[Group]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([by_, "held_gpu_hours", "busy_gpu_hours", "wasted_gpu_hours",
                *(f"wasted_{c}_gpu_hours" for c in IDLE_CAUSES), "busy_low_mfu_gpu_hours",
                "mfu", "top_offender", "top_offender_wasted_gpu_hours"])
    for g in [*groups, totals(groups)]:
        w.writerow([g.name, g.held / 3600, g.busy / 3600, g.idle / 3600,
                    *(g.wasted[c] / 3600 for c in IDLE_CAUSES), g.low_mfu / 3600,
                    "" if g.mfu is None else g.mfu,
                    "" if g.top is None else f"{g.top[0]}/{g.top[1]}",
                    "" if g.top is None else g.top[2] / 3600])
    return out.getvalue().rstrip("\n")


def as_table(by_: str, since: float, groups: list[Group], outside: Outside) -> str:
    header = [by_, "held", "busy", "wasted", *IDLE_CAUSES.values(), LOW_MFU_WORDS, "MFU",
              "top offender (wasted)"]
    rows = []
    for g in [*groups, totals(groups)]:
        top = "-" if g.top is None else (f"{cliutil.printable(g.top[0])}/"
                                         f"{cliutil.printable(g.top[1])} ({hours(g.top[2])})")
        rows.append([cliutil.printable(g.name), hours(g.held),
                     f"{hours(g.busy)} ({_percent(g.busy, g.held)})",
                     f"{hours(g.idle)} ({_percent(g.idle, g.held)})",
                     *(hours(g.wasted[c]) for c in IDLE_CAUSES), hours(g.low_mfu),
                     "-" if g.mfu is None else f"{100 * g.mfu:.0f}%", top])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"GPU-hours over the last {_duration(since)}, by {by_}:"]
    for i, row in enumerate([header, *rows]):
        if i == len(rows):  # before the totals
            lines.append("  ".join("-" * w for w in widths))
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    whole = totals(groups)
    for cause, words in IDLE_CAUSES.items():
        verdict = VERDICTS[cause]
        if verdict is not None and whole.wasted[cause] > 0:
            lines.append(f"{words}: {hours(whole.wasted[cause])} GPU-h "
                         f"({_percent(whole.wasted[cause], whole.held)} of held), as diagnose "
                         f"says it: {verdict[0]}. {verdict[1]}")
    if whole.low_mfu > 0:
        lines.append(f"{LOW_MFU_WORDS}: {hours(whole.low_mfu)} GPU-h busy. {remedies.LOW_MFU}")
    if outside.uninstrumented or outside.unused:
        lines.append(f"Outside any trial: {hours(outside.uninstrumented)} GPU-h on GPUs with "
                     f"processes but no trial (uninstrumented), {hours(outside.unused)} GPU-h "
                     "on GPUs with neither (unused).")
    for o in outside.owners[:MAX_OWNERS]:
        node = f" on {cliutil.printable(o.owner.nodename)}" if o.owner.nodename else ""
        lines.append(f"  uninstrumented: {cliutil.printable(o.owner.name)}{node}: "
                     f"{hours(o.held)} GPU-h, {hours(o.busy)} busy ({_percent(o.busy, o.held)})")
    if len(outside.owners) > MAX_OWNERS:
        lines.append(f"  ... and {len(outside.owners) - MAX_OWNERS} more (--format json lists "
                     "them all)")
    if not groups:
        lines.append(f"(no GPU-seconds recorded in the last {_duration(since)})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        api = PrometheusAPI(prometheus_url(args.prometheus), timeout=args.timeout)
        since = over(api, args.since)
        groups, outside = gather(api, args.by, since)
    except (ValueError, PrometheusError) as err:
        print(f"trainwatch usage: error: {cliutil.printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(as_json(args.by, since, groups, outside))
    elif args.format == "csv":
        print(as_csv(args.by, groups))
    else:
        print(as_table(args.by, since, groups, outside))
    return EXIT_OK
