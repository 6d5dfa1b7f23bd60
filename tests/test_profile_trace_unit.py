"""A finished capture written and summarised (trial_instrumentation/profile_trace.py) against a
stand-in profiler with known operators, kernels and trace: the per-step figures (CPU and CUDA),
the cut of a file over its limit (earliest events kept, said in the file), the split and when it
is skipped, and the collector's gauges."""

from __future__ import annotations

import gzip
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from torch.autograd import DeviceType

from trial_instrumentation import names, profile_trace, trace_split
from trial_instrumentation.profile_trace import ProfileCollector, ProfileSummary


class Op:
    def __init__(self, key: str, cpu: float, device: float = 0.0) -> None:
        self.key, self.self_cpu_time_total, self.self_device_time_total = key, cpu, device


class Span:
    def __init__(self, us: float) -> None:
        self.us = us

    def elapsed_us(self) -> float:
        return self.us


class Kernel:
    def __init__(self, us: float, device_type: Any = DeviceType.CUDA) -> None:
        self.device_type, self.time_range = device_type, Span(us)


class Profiler:
    def __init__(self, ops: list[Op], kernels: list[Kernel] | None = None,
                 trace: Any = None, raw: bytes | None = None) -> None:
        self.ops, self.kernels, self.trace, self.raw = ops, kernels or [], trace, raw

    def key_averages(self) -> list[Op]:
        return self.ops

    def events(self) -> list[Kernel]:
        return self.kernels

    def export_chrome_trace(self, path: str) -> None:
        if self.raw is not None:
            Path(path).write_bytes(self.raw)
        else:
            with gzip.open(path, "wt") as file:
                json.dump(self.trace, file)


CPU_OPS = [Op("ProfilerStep#7", 90000), Op("aten::mm", 3000), Op("aten::add", 1000),
           Op("aten::zero_", 0), Op("a", 600), Op("b", 500), Op("c", 400), Op("d", 300),
           Op("e", 200)]


def test_a_cpu_capture_ranks_operators_by_cpu_self_time_per_step() -> None:
    kernels = [Kernel(5000, DeviceType.CPU)]
    summary = profile_trace.summarise(Profiler(CPU_OPS, kernels), "/p.gz", 40, 4)
    assert (summary.path, summary.first_step, summary.steps, summary.device) == ("/p.gz", 40, 4,
                                                                                 "cpu")
    assert summary.self_seconds == pytest.approx(6000e-6 / 4)  # the step annotation left out
    assert [s for _, s in summary.top_ops] == pytest.approx([7.5e-4, 2.5e-4, 1.5e-4, 1.25e-4,
                                                             1e-4])
    assert [op for op, _ in summary.top_ops] == ["aten::mm", "aten::add", "a", "b", "c"]
    assert summary.kernels_per_step is None and summary.kernel_seconds_mean is None
    assert summary.ended is None and summary.split is None


def test_a_cuda_capture_ranks_by_device_self_time_and_counts_kernels() -> None:
    ops = [Op("aten::mm", 10, 2000), Op("aten::relu", 5000, 0), Op("nccl:all_reduce", 1, 500),
           Op("ProfilerStep#1", 1, 99999)]
    kernels = [Kernel(100), Kernel(200), Kernel(600), Kernel(5000, DeviceType.CPU)]
    summary = profile_trace.summarise(Profiler(ops, kernels), "/g.gz", 3, 2)
    assert summary.device == "cuda"
    assert summary.self_seconds == pytest.approx(2500e-6 / 2)
    assert [s for _, s in summary.top_ops] == pytest.approx([1e-3, 2.5e-4])
    assert [op for op, _ in summary.top_ops] == ["aten::mm", "nccl:all_reduce"]  # no 0 s op
    assert summary.kernels_per_step == pytest.approx(1.5)
    assert summary.kernel_seconds_mean == pytest.approx(300e-6)


def test_a_cuda_capture_without_kernels_has_no_mean_and_zero_steps_count_as_one() -> None:
    summary = profile_trace.summarise(Profiler([Op("k", 0, 40)]), "/z.gz", 0, 0)
    assert summary.device == "cuda" and summary.kernels_per_step == 0.0
    assert summary.kernel_seconds_mean is None
    assert summary.self_seconds == pytest.approx(40e-6)
    empty = profile_trace.summarise(Profiler([]), "/e.gz", 0, 1)
    assert (empty.device, empty.self_seconds, empty.top_ops) == ("cpu", 0, ())


def test_the_step_range_names_the_first_and_last_recorded_step() -> None:
    def summary(first: int, steps: int) -> ProfileSummary:
        return ProfileSummary("/p", first, steps, "cpu", 0.0, ())
    assert summary(1204, 5).step_range == "1204-1208"
    assert summary(7, 1).step_range == "7-7"
    assert summary(7, 0).step_range == "7-7"


def cpu_trace(n: int, steps: int = 2) -> dict[str, Any]:
    """``n`` operators (one in four communication) in ``steps`` annotated steps."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "ts": s * 1000,
         "dur": 1000} for s in range(steps)]
    events += [{"ph": "X", "cat": "cpu_op", "ts": 10 + i * 7 % (steps * 1000 - 20), "dur": 5,
                "name": ("nccl:all_reduce" if i % 4 == 0 else "aten::op") + os.urandom(6).hex()}
               for i in range(n)]
    return {"traceEvents": events, "schemaVersion": 1}


def test_write_summarises_and_splits_the_file_per_step(tmp_path: Path) -> None:
    trace = cpu_trace(20)
    path = tmp_path / "t.pt.trace.json.gz"
    before = time.time()
    summary = profile_trace.write(Profiler(CPU_OPS, trace=trace), path, 11, 2, 1 << 30)
    assert before <= summary.ended <= time.time()  # type: ignore[operator]
    assert (summary.path, summary.first_step, summary.steps) == (str(path), 11, 2)
    assert summary.self_seconds == pytest.approx(6000e-6 / 2)
    expected = trace_split.split(trace).scaled(0.5)  # type: ignore[union-attr]
    assert summary.split == expected and expected.communication > 0 and expected.idle > 0
    with gzip.open(path, "rt") as file:
        assert json.load(file) == trace  # under the limit: as exported


def test_a_file_over_its_limit_keeps_its_earliest_events_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace = cpu_trace(3000, steps=4)
    trace["traceEvents"].reverse()  # the cut sorts by time
    trace["traceEvents"].append({"ph": "i", "name": "no time"})  # sorts as time 0
    path = tmp_path / "big.json.gz"
    Profiler([], trace=trace).export_chrome_trace(str(path))
    full = path.stat().st_size
    limit = full // 3
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.profile_trace"):
        summary = profile_trace.write(Profiler(CPU_OPS, trace=trace), path, 0, 4, limit)
    assert path.stat().st_size <= limit
    with gzip.open(path, "rt") as file:
        written = json.load(file)
    total = len(trace["traceEvents"])
    kept = written["trainwatch"]["kept_events"]
    assert written["trainwatch"] == {"cut": True, "kept_events": kept, "events": total,
                                     "max_bytes": limit}
    assert total // 5 < kept < total // 2  # about a third, not far below
    ordered = sorted(trace["traceEvents"], key=lambda e: e.get("ts", 0))
    assert written["traceEvents"] == ordered[:kept]
    assert {"ph": "i", "name": "no time"} in written["traceEvents"]  # as at time 0
    assert written["schemaVersion"] == 1
    assert summary.split == trace_split.split(written).scaled(1 / 4)  # of what the file kept
    assert [r.getMessage() for r in caplog.records] == [
        (f"trainwatch: profile {path} cut to {limit} bytes: kept the first {kept} of {total} "
         "events")]


def test_a_file_at_its_limit_is_not_cut(tmp_path: Path) -> None:
    trace = cpu_trace(50)
    path = tmp_path / "x.json.gz"
    Profiler([], trace=trace).export_chrome_trace(str(path))
    size = path.stat().st_size
    summary = profile_trace.write(Profiler([], trace=trace), path, 0, 2, size)
    with gzip.open(path, "rt") as file:
        assert json.load(file) == trace
    assert summary.split == trace_split.split(trace).scaled(0.5)  # type: ignore[union-attr]


def test_a_file_over_the_split_limit_is_not_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(profile_trace, "SPLIT_MAX_BYTES", 3 << 20 | 1234)
    raw = os.urandom((3 << 20) + 2000)  # not even gzip: never opened
    path = tmp_path / "huge.json.gz"
    with caplog.at_level(logging.INFO, logger="trial_instrumentation.profile_trace"):
        summary = profile_trace.write(Profiler(CPU_OPS, raw=raw), path, 5, 2, 1 << 30)
    assert summary.split is None and summary.ended is not None
    assert summary.self_seconds == pytest.approx(3e-3)
    assert path.read_bytes() == raw
    assert [r.getMessage() for r in caplog.records] == [
        (f"trainwatch: profile {path} is over 3 MB: no idle/compute/communication split here "
         "(Holistic Trace Analysis reads the file)")]


def test_a_file_at_the_split_limit_is_split(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    trace = cpu_trace(10)
    path = tmp_path / "s.json.gz"
    Profiler([], trace=trace).export_chrome_trace(str(path))
    monkeypatch.setattr(profile_trace, "SPLIT_MAX_BYTES", path.stat().st_size)
    summary = profile_trace.write(Profiler([], trace=trace), path, 0, 2, 1 << 30)
    assert summary.split == trace_split.split(trace).scaled(0.5)  # type: ignore[union-attr]
    monkeypatch.setattr(profile_trace, "SPLIT_MAX_BYTES", path.stat().st_size - 1)
    assert profile_trace.write(Profiler([], trace=trace), path, 0, 2, 1 << 30).split is None


def test_a_trace_with_nothing_to_split_or_a_surprise_keeps_the_summary(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "n.json.gz"
    nothing = profile_trace.write(Profiler(CPU_OPS, trace={"traceEvents": []}), path, 0, 1,
                                  1 << 30)
    assert nothing.split is None and nothing.self_seconds == pytest.approx(6e-3)
    with caplog.at_level(logging.ERROR, logger="trial_instrumentation.profile_trace"):
        odd = profile_trace.write(Profiler(CPU_OPS, trace={"traceEvents": 5}), path, 0, 1,
                                  1 << 30)
    assert odd.split is None and odd.self_seconds == pytest.approx(6e-3)
    assert [r.getMessage() for r in caplog.records] == [
        f"trainwatch: splitting profile {path} into idle/compute/communication failed"]


def test_a_single_step_split_is_not_scaled_and_zero_steps_count_as_one(tmp_path: Path) -> None:
    trace = cpu_trace(12, steps=1)
    path = tmp_path / "one.json.gz"
    for steps in (0, 1):
        summary = profile_trace.write(Profiler([], trace=trace), path, 0, steps, 1 << 30)
        assert summary.split == trace_split.split(trace)


def gauges(collector: ProfileCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {m.name: [(s.labels, s.value) for s in m.samples] for m in collector.collect()}


def test_the_collector_shows_nothing_before_a_trace_and_polls_on_every_collection() -> None:
    polled: list[int] = []
    collector = ProfileCollector(lambda: polled.append(1), {"rank": "3"})
    assert collector.describe() == [] and polled == []  # registering does not poll
    assert gauges(collector) == {} and polled == [1]
    assert gauges(collector) == {} and polled == [1, 1]


def test_the_collector_shows_the_latest_traces_gauges_with_the_trials_labels() -> None:
    collector = ProfileCollector(lambda: None, {"trial": "t", "rank": "3"})
    collector.latest = ProfileSummary(
        "/tr/r3.json.gz", 1204, 5, "cuda", 0.02, (("aten::mm", 0.008), ("nccl", 0.004)),
        kernels_per_step=12.5, kernel_seconds_mean=3e-5, ended=1_790_000_000.5,
        split=trace_split.Split("cuda", 0.008, 0.002, 0.01))
    trial = {"trial": "t", "rank": "3"}
    assert gauges(collector) == {
        names.PROFILE_INFO: [({**trial, "path": "/tr/r3.json.gz", "steps": "1204-1208",
                               "device": "cuda"}, 1.0)],
        names.PROFILE_STEPS: [(trial, 5.0)],
        names.PROFILE_SELF_SECONDS: [(trial, 0.02)],
        names.PROFILE_KERNELS_PER_STEP: [(trial, 12.5)],
        names.PROFILE_KERNEL_SECONDS_MEAN: [(trial, 3e-5)],
        names.PROFILE_END_TIME: [(trial, 1_790_000_000.5)],
        names.PROFILE_OP_SELF_SECONDS: [({**trial, "op": "aten::mm"}, 0.008),
                                        ({**trial, "op": "nccl"}, 0.004)],
        names.PROFILE_TIME_SECONDS: [({**trial, "device": "cuda", "kind": "idle"}, 0.01),
                                     ({**trial, "device": "cuda", "kind": "compute"}, 0.008),
                                     ({**trial, "device": "cuda", "kind": "communication"},
                                      0.002)],
    }


def test_the_collector_leaves_out_what_a_trace_does_not_have() -> None:
    collector = ProfileCollector(lambda: None)
    collector.latest = ProfileSummary("/c.json.gz", 3, 0, "cpu", 0.0, ())
    assert gauges(collector) == {
        names.PROFILE_INFO: [({"path": "/c.json.gz", "steps": "3-3", "device": "cpu"}, 1.0)],
        names.PROFILE_STEPS: [({}, 0.0)],
        names.PROFILE_SELF_SECONDS: [({}, 0.0)],
        names.PROFILE_OP_SELF_SECONDS: [],
    }


def test_the_split_limit_is_the_documented_32_mib() -> None:
    assert profile_trace.SPLIT_MAX_BYTES == 32 * 2**20  # docs/design.md, docs/instrumentation.md
    assert profile_trace.TOP_OPS == 5  # the op label's bound


def test_sub_microsecond_times_still_count() -> None:
    """Times are in µs and may be fractions of one: a capture whose only device time is 0.6 µs
    ran on the GPU, and an operator of 0.7 µs is among the top ones."""
    summary = profile_trace.summarise(Profiler([Op("k", 3, 0.6)]), "/f.gz", 0, 1)
    assert summary.device == "cuda" and summary.top_ops == (("k", pytest.approx(0.6e-6)),)
    cpu = profile_trace.summarise(Profiler([Op("tiny", 0.7), Op("none", 0.0)]), "/c.gz", 0, 1)
    assert cpu.device == "cpu" and cpu.top_ops == (("tiny", pytest.approx(0.7e-6)),)


def test_a_summary_is_a_value() -> None:
    import dataclasses
    summary = ProfileSummary("/p", 3, 5, "cpu", 0.25, (("aten::mm", 0.2),))
    assert hash(summary) == hash(ProfileSummary("/p", 3, 5, "cpu", 0.25, (("aten::mm", 0.2),)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.steps = 6  # type: ignore[misc]


def test_the_cut_leaves_a_tenth_of_headroom_and_writes_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events that compress alike: the first estimate, 90% of the events' share of the limit,
    fits at once (one rewrite of a large file, not a search)."""
    trace = cpu_trace(3000, steps=4)
    path = tmp_path / "even.json.gz"
    Profiler([], trace=trace).export_chrome_trace(str(path))
    full, total = path.stat().st_size, len(trace["traceEvents"])
    limit = full // 3
    writes: list[str] = []
    real_open = gzip.open

    def counting_open(name: Any, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            writes.append(str(name))
        return real_open(name, mode, *args, **kwargs)

    monkeypatch.setattr(profile_trace.gzip, "open", counting_open)
    profile_trace.write(Profiler([], trace=trace), path, 0, 4, limit)
    with real_open(path, "rt") as file:
        kept = json.load(file)["trainwatch"]["kept_events"]
    assert kept == int(total * limit / full * 0.9)
    assert writes == [str(path)] * 2  # the export (this stand-in's gzip), then one cut


def test_a_limit_below_an_empty_trace_keeps_no_event_and_stops(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace = cpu_trace(400)
    path = tmp_path / "tiny.json.gz"
    with caplog.at_level(logging.WARNING, logger="trial_instrumentation.profile_trace"):
        profile_trace.write(Profiler([], trace=trace), path, 0, 2, 16)
    with gzip.open(path, "rt") as file:
        written = json.load(file)
    assert written["traceEvents"] == [] and written["trainwatch"]["kept_events"] == 0
    assert caplog.records[-1].getMessage().endswith(f"kept the first 0 of {402} events")


def exported(tmp_path: Path, name: str, n: int) -> tuple[dict[str, Any], Path, int]:
    """A trace of ``n`` operators as the profiler exports it: the trace, its file and size."""
    trace = cpu_trace(n)
    path = tmp_path / name
    Profiler([], trace=trace).export_chrome_trace(str(path))
    return trace, path, path.stat().st_size


def test_a_file_at_its_limit_is_neither_cut_nor_said_to_be(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trace, path, size = exported(tmp_path, "at.json.gz", 50)
    with caplog.at_level(logging.INFO, logger="trial_instrumentation.profile_trace"):
        profile_trace.write(Profiler([], trace=trace), path, 0, 2, size)
    assert caplog.records == []


def test_a_file_over_both_limits_is_still_cut_to_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the split limit too: read back anyway, because it must be cut."""
    trace, path, full = exported(tmp_path, "both.json.gz", 1000)
    monkeypatch.setattr(profile_trace, "SPLIT_MAX_BYTES", full // 4)
    profile_trace.write(Profiler([], trace=trace), path, 0, 2, full // 2)
    assert path.stat().st_size <= full // 2
    with gzip.open(path, "rt") as file:
        assert json.load(file)["trainwatch"]["cut"] is True


def test_at_its_own_limit_a_file_over_the_split_limit_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, path, size = exported(tmp_path, "eq.json.gz", 200)
    monkeypatch.setattr(profile_trace, "SPLIT_MAX_BYTES", size // 4)
    loaded: list[Path] = []
    monkeypatch.setattr(profile_trace, "_load", lambda p: loaded.append(p) or trace)
    summary = profile_trace.write(Profiler([], trace=trace), path, 0, 2, size)
    assert loaded == [] and summary.split is None


def test_an_event_without_a_time_sorts_as_time_zero(tmp_path: Path) -> None:
    early = {"ph": "X", "cat": "cpu_op", "name": "half", "ts": 0.5, "dur": 1}
    timeless = {"ph": "i", "name": "no time"}
    trace = cpu_trace(3000, steps=4)
    trace["traceEvents"][1:1] = [early, timeless]
    path = tmp_path / "ts.json.gz"
    Profiler([], trace=trace).export_chrome_trace(str(path))
    profile_trace.write(Profiler([], trace=trace), path, 0, 4, path.stat().st_size // 3)
    with gzip.open(path, "rt") as file:
        first = json.load(file)["traceEvents"][:3]
    assert [e["name"] for e in first] == ["ProfilerStep#0", "no time", "half"]
