"""Each cause decision, defined once as a table (docs/design.md, "Why the loader is slow", "Why
the exchange is slow"): `trainwatch diagnose` evaluates it (:func:`decide`) and the rule
generator renders it to PromQL (prometheus/rulegen/causes.py), so the recorded cause and the
CLI's cannot differ.

A decision names its figures (each with its meaning; a derived figure with its formula), its
thresholds (each an alert's own threshold or a name under its ``causes`` in thresholds.yaml)
and its causes in order: each cause a conjunction of predicates, a figure compared with a
threshold or a named constant. The first cause whose predicates all hold is the cause; a
predicate on a figure that is unknown (no series) never holds, so a rank without the figures a
cause needs is not given it. A cause without predicates holds for every rank (trial) judged.

>>> decide(EXCHANGE, {"straggler_ratio": 1.1, "loader_share": 0.35, "network_busy": 0.9},
...        {"straggler": 1.25, "dataloader_bound": 0.3, "network_busy": 0.6})
'loader'
>>> evaluate(IDLE_CORES, {"node_cpu": 0.75, "cpu_count": 16.0})
4.0
>>> evaluate(RCHAR_OVER_READ, {"rchar": 2e6, "read_bytes": 0.0})
inf
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    RANK_STRAGGLER,
    SCALING_INEFFICIENT,
)


@dataclass(frozen=True)
class Figure:
    """A measured figure of the rank (trial) judged; None where no series answered."""

    name: str
    meaning: str


@dataclass(frozen=True)
class Derived:
    """A figure computed from others: ``left op right`` with ``op`` one of ``-``, ``*``, ``/``
    (a number for a constant operand). ``/`` divides as PromQL does (x/0 is +Inf for x > 0);
    with ``absent_is_zero``, an unknown right operand counts as 0 (x/absent is +Inf too)."""

    name: str
    meaning: str
    left: Figure | Derived | float
    op: str
    right: Figure | Derived | float
    absent_is_zero: bool = False


@dataclass(frozen=True)
class Threshold:
    """A deployed threshold: ``alert``'s own (``key`` None) or the one named ``key`` under its
    ``causes`` in thresholds.yaml (carried to diagnose as its ``cause_<key>`` annotation)."""

    name: str
    alert: str
    key: str | None
    meaning: str


@dataclass(frozen=True)
class Constant:
    """A fixed level a figure is compared with, named for what it means."""

    name: str
    value: float
    meaning: str


@dataclass(frozen=True)
class Predicate:
    figure: Figure | Derived
    op: str  # ">=", ">", "<"
    level: Threshold | Constant


@dataclass(frozen=True)
class Cause:
    name: str
    when: tuple[Predicate, ...]  # all must hold; empty: every rank (trial) judged


@dataclass(frozen=True)
class Decision:
    thresholds: tuple[Threshold, ...]
    causes: tuple[Cause, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.causes)

    def cause_keys(self, alert: str) -> tuple[str, ...]:
        """The names under ``alert``'s ``causes`` in thresholds.yaml this decision reads."""
        return tuple(t.key for t in self.thresholds if t.alert == alert and t.key is not None)


COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<": operator.lt}
ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "-": operator.sub, "*": operator.mul, "/": lambda x, y: (
        x / y if y else math.copysign(math.inf, x) if x else math.nan)}
# Two predicates that no figure satisfies both of (the same figure and level): a cause holding
# one is never an earlier cause holding the other.
OPPOSITE = {(">=", "<"), ("<", ">=")}

NOTHING = Constant("nothing", 0.0, "none at all")
ONE_CORE = Constant("one_core", 1.0, "a whole idle core: one more worker would have a CPU")

# --- why the loader is slow (trainwatch/diagnose/loader_cause.py) ---------------------------
WORKER_CPU = Figure("worker_cpu", "CPU one DataLoader worker wants, s/s: what the workers ran "
                    "plus what they waited for on a run queue, over their count; with no "
                    "workers, the trial process's own CPU")
NODE_CPU = Figure("node_cpu", "the rank's node's busy CPU ratio")
CPU_COUNT = Figure("cpu_count", "the rank's node's logical CPUs")
DISK_BUSY = Figure("disk_busy", "the rank's node's busiest block device: its busy fraction")
READ_BYTES = Figure("read_bytes", "bytes/s the trial read from block devices")
RCHAR = Figure("rchar", "bytes/s the trial read of any kind (files, sockets, caches)")
NODE_NIC_BUSY = Figure("network_busy", "the rank's node's busiest NIC: received bytes/s over "
                       "its link speed (absent where no NIC reports a speed)")
IDLE_CORES = Derived("idle_cores", "the node's idle cores: (1 - node_cpu) * cpu_count",
                     Derived("node_idle", "the node's idle CPU ratio", 1.0, "-", NODE_CPU),
                     "*", CPU_COUNT)
RCHAR_OVER_READ = Derived("rchar_over_read", "rchar over read_bytes: how much of what the "
                          "trial reads comes from elsewhere (+Inf where it reads nothing from "
                          "block devices, 0 or absent)", RCHAR, "/", READ_BYTES,
                          absent_is_zero=True)

WORKER_BUSY = Threshold("worker_busy", DATALOADER_BOUND, "worker_busy",
                        "CPU one worker wants, s/s, at which it computes rather than waits")
DISK_BUSY_AT = Threshold("disk_busy", DATALOADER_BOUND, "disk_busy",
                         "a local disk's busy fraction at which it holds the reads back")
LOADER_NIC_AT = Threshold("network_busy", DATALOADER_BOUND, "network_busy",
                          "a NIC's received bytes/s over its link speed at which it is full")
RCHAR_AT = Threshold("rchar_over_read", DATALOADER_BOUND, "rchar_over_read",
                     "rchar over read_bytes at which the reads come from elsewhere")
CPU_SATURATED_AT = Threshold("cpu_saturated", CPU_SATURATED, None,
                             "the node's busy CPU ratio at which it is saturated")

_COMPUTES = Predicate(WORKER_CPU, ">=", WORKER_BUSY)
_WAITS = Predicate(WORKER_CPU, "<", WORKER_BUSY)
LOADER = Decision(
    thresholds=(WORKER_BUSY, DISK_BUSY_AT, LOADER_NIC_AT, RCHAR_AT, CPU_SATURATED_AT),
    causes=(
        # Workers that compute on a node with a whole idle core, not saturated: more would run.
        Cause("too_few_workers", (_COMPUTES, Predicate(IDLE_CORES, ">=", ONE_CORE),
                                  Predicate(NODE_CPU, "<", CPU_SATURATED_AT))),
        Cause("decode_bound", (_COMPUTES,)),
        # Workers that wait, a local disk busy while the trial reads from block devices.
        Cause("storage_bound", (_WAITS, Predicate(DISK_BUSY, ">=", DISK_BUSY_AT),
                                Predicate(READ_BYTES, ">", NOTHING))),
        # Reads from elsewhere with a NIC receiving near its speed (no reads at all: 0/0 is
        # NaN, under every level).
        Cause("remote_storage", (_WAITS, Predicate(RCHAR_OVER_READ, ">=", RCHAR_AT),
                                 Predicate(NODE_NIC_BUSY, ">=", LOADER_NIC_AT))),
        Cause("latency_bound", (_WAITS,)),
    ))

# --- why the exchange is slow (trainwatch/diagnose/exchange.py) -----------------------------
STRAGGLER_RATIO = Figure("straggler_ratio", "the trial's slowest rank's own step time (less "
                         "its wait for the others) over the median rank's")
LOADER_SHARE = Figure("loader_share", "the median rank's dataloader_next share of its step")
TRIAL_NIC_BUSY = Figure("network_busy", "the busiest NIC of the trial's nodes: sent or "
                        "received bytes/s over its link speed (absent where no NIC reports a "
                        "speed)")

STRAGGLER_AT = Threshold("straggler", RANK_STRAGGLER, None,
                         "own step time over the median rank's at which a rank straggles")
LOADER_BOUND_AT = Threshold("dataloader_bound", DATALOADER_BOUND, None,
                            "dataloader_next share at which a rank waits for its loader")
EXCHANGE_NIC_AT = Threshold("network_busy", SCALING_INEFFICIENT, "network_busy",
                            "a NIC's bytes/s over its link speed at which it is full")
EXCHANGE = Decision(
    thresholds=(STRAGGLER_AT, LOADER_BOUND_AT, EXCHANGE_NIC_AT),
    causes=(
        Cause("straggler", (Predicate(STRAGGLER_RATIO, ">", STRAGGLER_AT),)),
        Cause("loader", (Predicate(LOADER_SHARE, ">", LOADER_BOUND_AT),)),
        Cause("network", (Predicate(TRIAL_NIC_BUSY, ">=", EXCHANGE_NIC_AT),)),
        # Not shown bound by bandwidth: the all-reduce and waiting for ranks.
        Cause("exchange", ()),
    ))


def evaluate(figure: Figure | Derived | float, figures: Mapping[str, float | None]
             ) -> float | None:
    """A figure's value from the measured ones (None where one it needs is unknown)."""
    if isinstance(figure, (int, float)):
        return float(figure)
    if isinstance(figure, Figure):
        return figures.get(figure.name)
    left, right = evaluate(figure.left, figures), evaluate(figure.right, figures)
    if right is None and figure.absent_is_zero:
        right = 0.0
    if left is None or right is None:
        return None
    return ARITHMETIC[figure.op](left, right)


def holds(predicate: Predicate, figures: Mapping[str, float | None],
          thresholds: Mapping[str, float | None]) -> bool:
    value = evaluate(predicate.figure, figures)
    level = (predicate.level.value if isinstance(predicate.level, Constant)
             else thresholds.get(predicate.level.name))
    return value is not None and level is not None and COMPARE[predicate.op](value, level)


def decide(decision: Decision, figures: Mapping[str, float | None],
           thresholds: Mapping[str, float | None]) -> str | None:
    """The first cause whose predicates all hold (``thresholds`` by their names; an unknown
    one holds nowhere); None where none does."""
    for cause in decision.causes:
        if all(holds(p, figures, thresholds) for p in cause.when):
            return cause.name
    return None


def disjoint(earlier: Cause, later: Cause) -> bool:
    """No rank holds both: they compare one figure with one level in opposite directions."""
    return any((a.figure, a.level) == (b.figure, b.level) and (a.op, b.op) in OPPOSITE
               for a in earlier.when for b in later.when)


class Deployed(Protocol):
    """An alert's deployed settings: its threshold and its ``causes`` thresholds (the rule
    generator's settings, or the rules diagnose reads back)."""

    @property
    def threshold(self) -> float | None: ...

    @property
    def causes(self) -> Mapping[str, float]: ...


def deployed(decision: Decision, alerts: Mapping[str, Deployed]) -> dict[str, float | None]:
    """Each of ``decision``'s thresholds by name, from ``alerts`` (None where not deployed)."""
    found: dict[str, float | None] = {}
    for t in decision.thresholds:
        alert = alerts.get(t.alert)
        found[t.name] = (None if alert is None else alert.threshold if t.key is None
                         else alert.causes.get(t.key))
    return found
