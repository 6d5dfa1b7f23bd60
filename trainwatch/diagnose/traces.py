"""The latest on-demand profiler trace of each rank (``trainwatch_trial_profile_*``, pushed by
trial_instrumentation.profiling), said in one line under `diagnose`'s verdict.

>>> t = TraceSummary("/t/rank0.pt.trace.json.gz", "1204-1208", "cuda", 0.010,
...                  [("aten::mm", 0.0041), ("aten::add_", 0.001)], 1900.0, 6e-6,
...                  split_device="cuda",
...                  split={"idle": 0.0076, "compute": 0.0122, "communication": 0.0002})
>>> trace_line("0", t)
'trace of rank 0, steps 1,204–1,208: aten::mm 41%, aten::add_ 10%; GPU idle 38%, compute 61%, communication 1%; 1,900 kernels per step averaging 6 µs: launch-bound (/t/rank0.pt.trace.json.gz)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trainwatch.contract.promql import select
from trial_instrumentation import names
from trial_instrumentation.trace_split import KINDS

Key = tuple[str, str, str]
Rows = dict[Key, list[tuple[dict[str, str], float]]]
# Kernels shorter than this on average while the GPU's streams sit idle 30% of the step or more: the
# CPU's launches, not the GPU's work, set the pace (CUDA graphs, torch.compile or larger
# batches fuse them). Without the GPU's split, many such kernels per step stand in for the idle
# share. On an H200, a small MLP's 56 kernels per step averaging 9 µs left the GPU 92% idle.
LAUNCH_BOUND_KERNEL_SECONDS = 20e-6
LAUNCH_BOUND_IDLE_SHARE = 0.3
LAUNCH_BOUND_KERNELS_PER_STEP = 200


@dataclass(frozen=True)
class TraceSummary:
    path: str
    steps: str  # the trial's step numbers, "1204-1208"
    device: str  # where the operator times were measured: cpu or cuda
    self_seconds: float | None  # every operator's self time per step
    ops: list[tuple[str, float]] = field(default_factory=list)  # (op, seconds per step)
    kernels_per_step: float | None = None
    kernel_seconds_mean: float | None = None
    ended: float | None = None  # when the trace was written (Unix seconds)
    split_device: str | None = None  # the split's: cuda (the GPU's streams) or cpu (operators)
    split: dict[str, float] = field(default_factory=dict)  # kind -> seconds per step

    def split_shares(self) -> dict[str, float]:
        """Each kind's share of the split's span (trace_split.KINDS), empty without a split."""
        span = sum(self.split.values())
        return {kind: self.split.get(kind, 0.0) / span for kind in KINDS} if span > 0 else {}

    @property
    def split_where(self) -> str:
        return "GPU" if self.split_device == "cuda" else "CPU"


def gather(by_rank: Callable[[str], Rows], times: Callable[[str], Rows] | None = None,
           **sel: str | None) -> dict[Key, TraceSummary]:
    """Each rank's latest trace, from ``by_rank(expr)`` (rows by experiment, trial, rank); its
    end time from ``times(expr)`` (default ``by_rank``): a reader that refuses a value that is
    no Unix time (promapi.TIME)."""
    info = by_rank(select(names.PROFILE_INFO, **sel))
    values = {metric: by_rank(select(metric, **sel)) for metric in (
        names.PROFILE_SELF_SECONDS, names.PROFILE_OP_SELF_SECONDS,
        names.PROFILE_KERNELS_PER_STEP, names.PROFILE_KERNEL_SECONDS_MEAN,
        names.PROFILE_TIME_SECONDS)}
    values[names.PROFILE_END_TIME] = (times or by_rank)(select(names.PROFILE_END_TIME, **sel))

    def one(metric: str, key: Key) -> float | None:
        rows = values[metric].get(key)
        return rows[0][1] if rows else None

    found = {}
    for key, rows in info.items():
        labels = rows[0][0]
        ops = sorted(((lab.get("op", ""), v) for lab, v in
                      values[names.PROFILE_OP_SELF_SECONDS].get(key, [])), key=lambda o: -o[1])
        split = values[names.PROFILE_TIME_SECONDS].get(key, [])
        found[key] = TraceSummary(labels.get("path", ""), labels.get("steps", ""),
                                  labels.get("device", ""), one(names.PROFILE_SELF_SECONDS, key),
                                  ops, one(names.PROFILE_KERNELS_PER_STEP, key),
                                  one(names.PROFILE_KERNEL_SECONDS_MEAN, key),
                                  one(names.PROFILE_END_TIME, key),
                                  split[0][0].get("device") if split else None,
                                  {lab.get("kind", ""): v for lab, v in split})
    return found


def step_range(t: TraceSummary) -> str:
    """The trial's steps the trace recorded, ``1,204–1,208`` (``7`` for one)."""
    first, _, last = t.steps.partition("-")
    return "–".join(f"{int(s):,}" for s in dict.fromkeys((first, last or first)) if s.isdigit())


def launch_bound(t: TraceSummary) -> bool:
    """Short kernels and, where the trace split the GPU's streams, a GPU idle 30% of the step or more;
    without that split, many short kernels per step."""
    if (t.kernels_per_step is None or t.kernel_seconds_mean is None
            or t.kernel_seconds_mean >= LAUNCH_BOUND_KERNEL_SECONDS):
        return False  # the line gives no kernel figures to say it with
    if t.split_device == "cuda" and (shares := t.split_shares()):
        return shares["idle"] >= LAUNCH_BOUND_IDLE_SHARE
    return t.kernels_per_step >= LAUNCH_BOUND_KERNELS_PER_STEP


def trace_line(rank: str, t: TraceSummary) -> str:
    line = f"trace of rank {rank}, steps {step_range(t)}: "
    total = t.self_seconds or sum(s for _, s in t.ops)
    line += ", ".join(f"{op} {s / total:.0%}" for op, s in t.ops) if total else "no operators"
    if shares := t.split_shares():
        line += f"; {t.split_where} " + ", ".join(f"{kind} {share:.0%}"
                                                 for kind, share in shares.items())
    if t.kernels_per_step is not None and t.kernel_seconds_mean is not None:
        line += (f"; {t.kernels_per_step:,.0f} kernels per step averaging "
                 f"{t.kernel_seconds_mean * 1e6:.0f} µs")
        if launch_bound(t):
            line += ": launch-bound"
    return f"{line} ({t.path})"
