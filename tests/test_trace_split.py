"""The idle / compute / communication split (trial_instrumentation.trace_split) on small hand-made
Chrome traces, in microseconds as torch writes them: kernels overlapping on two streams, gaps,
communication hidden behind compute or exposed, memory copies, several devices, CPU-only traces
(nested operators, collectives, operators outside the recorded steps) and empty ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frozen import assert_frozen
from trial_instrumentation.trace_split import Split, split, union


def kernel(name: str, ts: float, dur: float, stream: int = 7, device: int = 0,
           cat: str = "kernel") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": device, "stream": stream}}


def op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts,
            "dur": dur}


def step(k: int, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 100,
            "tid": 1, "ts": ts, "dur": dur}


def micro(found: Split | None) -> tuple[str, dict[str, float]]:
    assert found is not None
    return found.device, {k: round(v * 1e6, 6) for k, v in found.seconds().items()}


def test_kernels_overlapping_on_two_streams_count_once() -> None:
    # Summed per kernel this would be 25 us of compute in a 15 us span.
    trace = {"traceEvents": [kernel("sgemm", 0, 10, stream=7), kernel("relu", 5, 10, stream=13)]}
    assert micro(split(trace)) == ("cuda", {"idle": 0, "compute": 15, "communication": 0})


def test_gaps_between_kernels_are_idle_and_the_span_is_the_kernels() -> None:
    # A launch-bound stream: short kernels, long gaps; CPU events outside the kernels' span
    # (the steps, the launches) do not stretch it, as in HTA.
    trace = {"traceEvents": [step(1, -500, 2000), op("aten::mm", -400, 100),
                             kernel("a", 0, 4), kernel("b", 20, 4), kernel("c", 40, 4),
                             kernel("d", 41, 2)]}  # d inside c's time on the same stream
    assert micro(split(trace)) == ("cuda", {"idle": 32, "compute": 12, "communication": 0})


def test_communication_hidden_behind_compute_is_compute_and_the_rest_is_communication() -> None:
    trace = {"traceEvents": [
        kernel("volta_sgemm_128x64_nn", 0, 20, stream=7),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 30, stream=13),  # 20 us exposed
        kernel("ncclKernel_AllGather_RING_LL", 50, 10, stream=13),  # alone
        kernel("elementwise", 70, 10, stream=7)]}
    assert micro(split(trace)) == ("cuda", {"idle": 20, "compute": 30, "communication": 30})


def test_memory_copies_are_busy_time_and_devices_are_summed() -> None:
    trace = {"traceEvents": [
        kernel("Memcpy HtoD (Pageable -> Device)", 0, 10, cat="gpu_memcpy"),
        kernel("Memset (Device)", 10, 5, cat="gpu_memset"),
        kernel("sgemm", 25, 5),
        # Device 1, at the same times as device 0: its own span, its own idle.
        kernel("ncclKernel_AllReduce", 0, 5, device=1), kernel("sgemm", 20, 5, device=1)]}
    assert micro(split(trace)) == ("cuda", {"idle": 10 + 15, "compute": 20 + 5,
                                            "communication": 5})


def test_a_cpu_trace_splits_its_recorded_steps_by_operator() -> None:
    trace = {"traceEvents": [
        step(4, 0, 100), step(5, 100, 100),  # the span: 0 to 200
        op("aten::linear", 10, 30), op("aten::addmm", 15, 20),  # nested: 30 us
        op("autograd::engine::evaluate_function: AddmmBackward0", 20, 25, tid=2),  # 5 us more
        op("c10d::allreduce_", 110, 40), op("aten::empty", 120, 1),  # the collective's own op
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 100, "tid": 3,
         "ts": 140, "dur": 20},  # on gloo's thread, 10 us past the c10d op
        op("aten::randn", -50, 60),  # started before the first step: 10 us inside it
        op("aten::copy_", 190, 30),  # ended after the last one: 10 us inside it
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 100,
         "tid": 1, "ts": 0, "dur": 200}]}  # Python frames are not operators
    assert micro(split(trace)) == ("cpu", {"idle": 200 - 55 - 50, "compute": 35 + 10 + 10,
                                           "communication": 50})


def test_a_cpu_trace_without_steps_spans_its_operators() -> None:
    trace = {"traceEvents": [op("aten::mm", 0, 10), op("aten::add", 30, 10)]}
    assert micro(split(trace)) == ("cpu", {"idle": 20, "compute": 20, "communication": 0})


def test_steps_without_operators_are_all_idle() -> None:
    assert micro(split({"traceEvents": [step(1, 0, 50)]})) == \
        ("cpu", {"idle": 50, "compute": 0, "communication": 0})


@pytest.mark.parametrize("trace", [
    {}, {"traceEvents": []}, {"traceEvents": None},
    {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                      "args": {"name": "python"}},
                     {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "ts": 5},
                     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1},  # no dur
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 5},
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -5}, "junk"]},
])
def test_a_trace_with_nothing_to_split_has_no_split(trace: dict[str, Any]) -> None:
    assert split(trace) is None


def test_union_merges_overlapping_and_touching_intervals() -> None:
    assert union([(10, 20), (0, 5), (5, 7), (12, 15), (30, 31)]) == [(0, 7), (10, 20), (30, 31)]
    assert union([]) == []


def test_a_split_has_its_span_its_kinds_in_order_and_scales_by_a_factor() -> None:
    found = Split("cuda", compute=3.0, communication=2.5, idle=0.25)
    assert found.span == 5.75
    assert list(found.seconds().items()) == [("idle", 0.25), ("compute", 3.0),
                                             ("communication", 2.5)]
    assert found.scaled(0.5) == Split("cuda", 1.5, 1.25, 0.125)
    assert Split("cpu", 2.0, 0.0, 1.0).scaled(3.0) == Split("cpu", 6.0, 0.0, 3.0)
    assert_frozen(found)  # shared by the trace's readers: none may change it under another


def test_without_a_device_argument_the_process_is_the_device() -> None:
    # Two processes' kernels, one after the other: each its own span, no idle between them.
    first, second = kernel("sgemm", 0, 10), kernel("relu", 30, 10)
    for event, pid in ((first, 3), (second, 4)):
        event["pid"] = pid
    del first["args"]["device"]
    second["args"] = None
    assert micro(split({"traceEvents": [first, second]})) == \
        ("cuda", {"idle": 0, "compute": 20, "communication": 0})
    # Device 0 named in the arguments wins over the process (both kernels on one device).
    same = [kernel("sgemm", 0, 10, device=0), kernel("relu", 30, 10, device=0)]
    same[1]["pid"] = 9
    assert micro(split({"traceEvents": same})) == \
        ("cuda", {"idle": 20, "compute": 20, "communication": 0})


def test_an_annotation_that_is_not_a_step_does_not_span_the_trace() -> None:
    region = {**step(1, 0, 100), "name": "forward_region"}
    trace = {"traceEvents": [region, op("aten::mm", 40, 10), op("aten::add", 70, 10)]}
    assert micro(split(trace)) == ("cpu", {"idle": 20, "compute": 20, "communication": 0})


def test_an_operator_wholly_outside_the_steps_counts_nothing() -> None:
    # Before the first step and after the last (an operator recorded while the profiler
    # stopped): neither counts, where the one after it once counted as negative busy time.
    trace = {"traceEvents": [step(1, 100, 50), op("aten::mm", 0, 20), op("aten::add", 300, 20),
                             op("nccl:all_reduce", 20, 10), op("aten::relu", 110, 5)]}
    assert micro(split(trace)) == ("cpu", {"idle": 45, "compute": 5, "communication": 0})


def test_a_zero_length_kernel_is_complete_and_a_boolean_start_is_not() -> None:
    assert micro(split({"traceEvents": [kernel("a", 10, 0), kernel("b", 20, 5)]})) == \
        ("cuda", {"idle": 10, "compute": 5, "communication": 0})
    assert split({"traceEvents": [{**kernel("a", 0, 5), "ts": True}]}) is None
    assert split({"traceEvents": [kernel("a", 0, -0.5)]}) is None  # any negative duration


def test_only_complete_events_count_whatever_their_phase_letter() -> None:
    # Instant, flow and async events (lower-case phases, after "X"), or no phase at all, are not
    # spans even where they carry a duration.
    others = [{**kernel("k", 0, 5), "ph": ph} for ph in ("i", "s", "f", "b", "B", "E")]
    assert split({"traceEvents": [*others, {"cat": "kernel", "name": "k", "ts": 1, "dur": 5}]}) \
        is None


def test_a_step_is_a_user_annotation_and_nothing_else_of_that_name() -> None:
    # The same name on another category (the GPU timeline's copy, a Python frame) or on none
    # does not stretch the recorded steps.
    lookalikes = [{**step(1, -100, 400), "cat": cat} for cat in ("gpu_user_annotation",
                                                                 "python_function")]
    uncategorized = {k: v for k, v in step(2, -200, 600).items() if k != "cat"}
    trace = {"traceEvents": [*lookalikes, uncategorized, step(3, 0, 100), op("aten::mm", 20, 30)]}
    assert micro(split(trace)) == ("cpu", {"idle": 70, "compute": 30, "communication": 0})


def test_a_trace_read_from_its_json_text_splits_as_one_written_here() -> None:
    # Its strings are the decoder's own objects, not this file's constants.
    events = [step(1, 0, 100), op("aten::mm", 10, 30), op("c10d::allreduce_", 60, 20)]
    text = json.dumps({"traceEvents": events})
    assert micro(split(json.loads(text))) == micro(split({"traceEvents": events})) == \
        ("cpu", {"idle": 50, "compute": 30, "communication": 20})
