"""Where a captured trace's time went: idle, compute and communication, from the Chrome trace
itself (the file :mod:`trial_instrumentation.profile_trace` writes). Holistic Trace Analysis's
temporal breakdown (``TraceAnalysis.get_temporal_breakdown``), without its pandas stack.

**GPU traces** (any kernel, memcpy or memset): per device, over the span from its first activity's
start to its last one's end, with its streams merged as HTA merges them: *compute* is the time at
least one non-communication activity runs on some stream (memcpy and memset included);
*communication* the time only communication kernels run (a collective overlapped by compute is
hidden, and counts as compute, as in HTA); *idle* the rest, when no stream runs anything (a
launch-bound loop's gaps between kernels). Devices are summed (one per rank, usually).

**CPU traces** (no GPU activity: the figures are CPU time, ``device="cpu"``): over the recorded
steps (the first ``ProfilerStep#`` start to the last one's end; the operators' own extent in a
trace without them), operators of every thread of the process merged: *communication* is the time
a collective op runs (its nested ops are its work), *compute* the time any other operator runs,
*idle* the rest: Python between operators, waiting for the data loader, sleeps.

A name is communication when it matches :data:`COMMUNICATION` (NCCL kernels, Gloo and c10d
collectives). Times are in seconds.

>>> trace = {"traceEvents": [
...     {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 0, "dur": 10, "args": {"stream": 7}},
...     {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 5, "dur": 25,
...      "args": {"stream": 13}},
...     {"ph": "X", "cat": "kernel", "name": "relu", "ts": 35, "dur": 5, "args": {"stream": 7}}]}
>>> found = split(trace)
>>> found.device, {kind: round(seconds * 1e6) for kind, seconds in found.seconds().items()}
('cuda', {'idle': 5, 'compute': 15, 'communication': 20})
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COMMUNICATION = re.compile(
    r"nccl|gloo|c10d|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|record_param_comms",
    re.IGNORECASE)
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
KINDS = ("idle", "compute", "communication")
STEP = "ProfilerStep#"
MICRO = 1e-6  # Chrome trace times are microseconds
Interval = tuple[float, float]


@dataclass(frozen=True)
class Split:
    device: str  # "cuda": the GPUs' streams; "cpu": the process's operators (CPU time)
    compute: float
    communication: float
    idle: float

    @property
    def span(self) -> float:
        return self.compute + self.communication + self.idle

    def seconds(self) -> dict[str, float]:
        return {kind: getattr(self, kind) for kind in KINDS}

    def scaled(self, factor: float) -> Split:
        return Split(self.device, self.compute * factor, self.communication * factor,
                     self.idle * factor)


def split(trace: Mapping[str, Any]) -> Split | None:
    """The trace's split; None when it holds no operator, kernel nor step to split."""
    spans = [e for e in trace.get("traceEvents") or [] if _complete(e)]
    gpu = [e for e in spans if e.get("cat") in GPU_CATEGORIES]
    return _gpu(gpu) if gpu else _cpu(spans)


def _complete(event: Any) -> bool:
    """A complete ("X") event with a start and a non-negative duration."""
    if not isinstance(event, Mapping) or event.get("ph") != "X":
        return False
    ts, dur = event.get("ts"), event.get("dur")
    return (isinstance(ts, (int, float)) and isinstance(dur, (int, float))
            and not isinstance(ts, bool) and dur >= 0)


def _interval(event: Mapping[str, Any]) -> Interval:
    return float(event["ts"]), float(event["ts"]) + float(event["dur"])


def _is_communication(event: Mapping[str, Any]) -> bool:
    return bool(COMMUNICATION.search(str(event.get("name", ""))))


def _gpu(events: Sequence[Mapping[str, Any]]) -> Split:
    by_device: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        args = event.get("args")
        device = args.get("device") if isinstance(args, Mapping) else None
        by_device[str(event.get("pid", "") if device is None else device)].append(event)
    compute = communication = idle = 0.0
    for activity in by_device.values():
        intervals = [_interval(e) for e in activity]
        start, end = min(s for s, _ in intervals), max(e for _, e in intervals)
        busy = length(union(intervals))
        computing = length(union(_interval(e) for e in activity if not _is_communication(e)))
        compute += computing
        communication += busy - computing
        idle += end - start - busy
    return Split("cuda", compute * MICRO, communication * MICRO, idle * MICRO)


def _cpu(events: Sequence[Mapping[str, Any]]) -> Split | None:
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    steps = [_interval(e) for e in events if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith(STEP)]
    extent = steps or [_interval(e) for e in ops]
    if not extent:
        return None
    start, end = min(s for s, _ in extent), max(e for _, e in extent)
    busy = length(union(_clip(_interval(e), start, end) for e in ops))
    talking = length(union(_clip(_interval(e), start, end) for e in ops if _is_communication(e)))
    return Split("cpu", (busy - talking) * MICRO, talking * MICRO, (end - start - busy) * MICRO)


def _clip(interval: Interval, start: float, end: float) -> Interval:
    """The part of ``interval`` within ``start`` .. ``end`` (empty, at an edge, when outside:
    an operator wholly after the last step must not count negative time)."""
    return min(max(interval[0], start), end), max(min(interval[1], end), start)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, none overlapping or touching another.

    >>> union([(5, 8), (0, 2), (1, 3), (8, 9)])
    [(0, 3), (5, 9)]
    """
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = merged[-1][0], max(merged[-1][1], end)
        else:
            merged.append((start, end))
    return merged


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in intervals)
