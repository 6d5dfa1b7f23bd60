"""Write a finished capture as a gzip Chrome trace and summarise it into a few gauges.

The file opens in Perfetto (ui.perfetto.dev), TensorBoard's profiler plugin and Holistic Trace
Analysis. Over ``max_bytes`` its events are cut (the earliest kept) and the file says so in a
top-level ``trainwatch`` object. The summary comes from the profiler's own
``key_averages()``: the top :data:`TOP_OPS` operators by self time (on the GPU where CUDA was
captured), and kernels per step with their mean duration (CUDA only); and from the written file
itself, read back once: its idle / compute / communication split
(:mod:`trial_instrumentation.trace_split`; not for a file over :data:`SPLIT_MAX_BYTES`, which
the training process would take seconds and gigabytes to parse).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trial_instrumentation import names, trace_split

log = logging.getLogger(__name__)
TOP_OPS = 5  # bounded: the op label never has more values than this per trial
MICRO = 1e-6
SPLIT_MAX_BYTES = 32 * 1024 * 1024  # compressed; a 5-step trace of a small model is ~10 kB


@dataclass(frozen=True)
class ProfileSummary:
    """One written trace: per-step figures over its ``steps`` recorded steps."""

    path: str
    first_step: int
    steps: int
    device: str  # "cuda" where kernels were captured (op times are GPU self time), else "cpu"
    self_seconds: float  # every operator's self time, per step
    top_ops: tuple[tuple[str, float], ...]  # (op, self seconds per step), largest first
    kernels_per_step: float | None = None
    kernel_seconds_mean: float | None = None
    ended: float | None = None  # when it was written (Unix seconds)
    split: trace_split.Split | None = None  # idle / compute / communication, per step

    @property
    def step_range(self) -> str:
        return f"{self.first_step}-{self.first_step + max(self.steps, 1) - 1}"


def write(profiler: Any, path: Path, first_step: int, steps: int,
          max_bytes: int) -> ProfileSummary:
    """Export ``profiler``'s trace to ``path`` (gzip) and summarise it."""
    profiler.export_chrome_trace(str(path))  # a .gz path: torch compresses it
    size = path.stat().st_size
    trace = _load(path) if size > max_bytes or size <= SPLIT_MAX_BYTES else None
    if trace is not None and size > max_bytes:
        _cut(path, trace, max_bytes)  # the split is then of the events the file kept
    summary = summarise(profiler, str(path), first_step, steps)
    return dataclasses.replace(summary, ended=time.time(),
                               split=_split(trace, path, steps))


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as file:
        trace: dict[str, Any] = json.load(file)
    return trace


def _split(trace: dict[str, Any] | None, path: Path, steps: int) -> trace_split.Split | None:
    if trace is None:
        log.info("trainwatch: profile %s is over %d MB: no idle/compute/communication split "
                 "here (Holistic Trace Analysis reads the file)", path, SPLIT_MAX_BYTES >> 20)
        return None
    try:
        found = trace_split.split(trace)
    except Exception:  # a surprise in the file must not lose the summary
        log.exception("trainwatch: splitting profile %s into idle/compute/communication failed",
                      path)
        return None
    return None if found is None else found.scaled(1 / max(steps, 1))


def _cut(path: Path, trace: dict[str, Any], max_bytes: int) -> None:
    events = sorted(trace.get("traceEvents", []), key=lambda e: e.get("ts", 0))
    kept, size = len(events), path.stat().st_size
    while size > max_bytes and kept > 0:
        kept = int(kept * max_bytes / size * 0.9)
        trace["traceEvents"] = events[:kept]
        trace["trainwatch"] = {"cut": True, "kept_events": kept, "events": len(events),
                               "max_bytes": max_bytes}
        with gzip.open(path, "wt") as file:
            json.dump(trace, file)
        size = path.stat().st_size
    log.warning("trainwatch: profile %s cut to %d bytes: kept the first %d of %d events",
                path, max_bytes, kept, len(events))


def summarise(profiler: Any, path: str, first_step: int, steps: int) -> ProfileSummary:
    from torch.autograd import DeviceType

    per_step = 1 / max(steps, 1)
    ops = [e for e in profiler.key_averages() if not e.key.startswith("ProfilerStep")]
    on_gpu = any(e.self_device_time_total > 0 for e in ops)

    def self_us(event: Any) -> float:
        return float(event.self_device_time_total if on_gpu else event.self_cpu_time_total)

    ranked = sorted(ops, key=self_us, reverse=True)[:TOP_OPS]
    kernels = [e for e in profiler.events() if e.device_type == DeviceType.CUDA]
    kernel_us = sum(e.time_range.elapsed_us() for e in kernels)
    return ProfileSummary(
        path=path, first_step=first_step, steps=steps, device="cuda" if on_gpu else "cpu",
        self_seconds=sum(map(self_us, ops)) * MICRO * per_step,
        top_ops=tuple((e.key, self_us(e) * MICRO * per_step) for e in ranked if self_us(e) > 0),
        kernels_per_step=len(kernels) * per_step if on_gpu else None,
        kernel_seconds_mean=kernel_us * MICRO / len(kernels) if on_gpu and kernels else None)


class ProfileCollector(Collector):
    """The latest trace's gauges; ``poll`` runs first on each collection (the trigger file)."""

    def __init__(self, poll: Any, const_labels: Mapping[str, str] | None = None) -> None:
        self.latest: ProfileSummary | None = None
        self._poll = poll
        self._keys = list(const_labels or {})
        self._values = list((const_labels or {}).values())

    def describe(self) -> list[Metric]:
        return []  # registering must not poll

    def collect(self) -> Iterator[Metric]:
        self._poll()
        latest = self.latest
        if latest is None:
            return
        info = self._gauge(names.PROFILE_INFO, "The latest on-demand profiler trace: its file "
                           "and step range.", "path", "steps", "device")
        info.add_metric([*self._values, latest.path, latest.step_range, latest.device], 1)
        yield info
        for name, doc, value in (
                (names.PROFILE_STEPS, "Steps recorded in the latest profiler trace.",
                 latest.steps),
                (names.PROFILE_SELF_SECONDS, "Every operator's self time per recorded step.",
                 latest.self_seconds),
                (names.PROFILE_KERNELS_PER_STEP, "CUDA kernels per recorded step.",
                 latest.kernels_per_step),
                (names.PROFILE_KERNEL_SECONDS_MEAN, "Mean CUDA kernel duration.",
                 latest.kernel_seconds_mean),
                (names.PROFILE_END_TIME, "When the latest profiler trace was written.",
                 latest.ended)):
            if value is not None:
                gauge = self._gauge(name, doc)
                gauge.add_metric(self._values, value)
                yield gauge
        ops = self._gauge(names.PROFILE_OP_SELF_SECONDS, "Self time per recorded step of one "
                          "of the trace's top operators.", "op")
        for op, seconds in latest.top_ops:
            ops.add_metric([*self._values, op], seconds)
        yield ops
        if latest.split is not None:
            split = self._gauge(names.PROFILE_TIME_SECONDS, "Time per recorded step that "
                                "the GPU's streams (device=cuda; else the process's CPU "
                                "operators) were idle, computing or only communicating.",
                                "device", "kind")
            for kind, seconds in latest.split.seconds().items():
                split.add_metric([*self._values, latest.split.device, kind], seconds)
            yield split

    def _gauge(self, name: str, doc: str, *labels: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*self._keys, *labels])
