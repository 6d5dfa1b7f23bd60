"""When a profiler trace's line says "launch-bound" (trainwatch.diagnose.traces.launch_bound):
short kernels and a GPU idle 30% of the step or more. The first case is what an H200 gave for
benchmarks/cuda_events.py's small MLP (`make gpu-check`): 56 kernels per step averaging 9 µs,
GPU idle 92%, which a fixed count of 200 kernels per step called not launch-bound."""

from __future__ import annotations

import pytest

from trainwatch.diagnose.traces import TraceSummary, launch_bound, trace_line


def summary(kernels: float | None, mean_us: float | None, idle: float | None,
            device: str | None = "cuda") -> TraceSummary:
    split = {} if idle is None else {"idle": idle * 1e-3, "compute": (1 - idle) * 1e-3,
                                     "communication": 0.0}
    return TraceSummary(path="p.json.gz", steps="4-8", device="cuda", self_seconds=1e-3,
                        ops=[("aten::mm", 1e-3)], kernels_per_step=kernels,
                        kernel_seconds_mean=None if mean_us is None else mean_us * 1e-6,
                        split_device=device if split else None, split=split)


@pytest.mark.parametrize(("kernels", "mean_us", "idle", "device", "expected"), [
    (56, 9, 0.92, "cuda", True),  # the H200's small MLP
    (56, 9, 0.10, "cuda", False),  # short kernels back to back: the GPU is busy
    (5000, 9, 0.29, "cuda", False),  # many, but the split says the GPU works most of the step
    (1900, 6, 0.38, "cuda", True),  # docs/instrumentation.md's example
    (56, 9, 0.30, "cuda", True),  # the edge counts
    (12, 1609, 0.0, "cuda", False),  # three 4096² matmuls
    (12, 1609, 0.95, "cuda", False),  # idle, but long kernels: not the launches' fault
    (56, 21, 0.92, "cuda", False),  # over 20 µs is not short
    (1900, 6, None, None, True),  # no split: many short kernels stand in for it
    (199, 6, None, None, False),
    (200, 6, 0.92, "cpu", True),  # a CPU split says nothing of the GPU's streams
    (56, 6, 0.92, "cpu", False),
    (None, None, 0.92, "cuda", False),  # no kernels captured (a CPU-only trace)
])
def test_launch_bound_is_short_kernels_and_an_idle_gpu(
        kernels: float | None, mean_us: float | None, idle: float | None, device: str | None,
        expected: bool) -> None:
    t = summary(kernels, mean_us, idle, device)
    assert launch_bound(t) is expected
    assert trace_line("0", t).endswith(": launch-bound (p.json.gz)") is expected


# Mutation testing (make mutation TARGETS=traces) found these unasserted.
def test_the_line_gives_kernels_per_step_and_their_mean_in_microseconds() -> None:
    assert trace_line("0", summary(56, 9, 0.92)) == (
        "trace of rank 0, steps 4\u20138: aten::mm 100%; GPU idle 92%, compute 8%, communication 0%;"
        " 56 kernels per step averaging 9 µs: launch-bound (p.json.gz)")


def test_no_kernel_count_no_kernel_words() -> None:
    t = summary(None, 9, 0.92)
    assert "kernels" not in trace_line("0", t) and not launch_bound(t)


def test_exactly_at_the_kernel_bound_is_not_short() -> None:
    from trainwatch.diagnose.traces import LAUNCH_BOUND_KERNEL_SECONDS

    t = summary(5000, None, 0.92)
    t = TraceSummary(**{**t.__dict__, "kernel_seconds_mean": LAUNCH_BOUND_KERNEL_SECONDS})
    assert not launch_bound(t)


def test_a_device_read_from_a_label_is_compared_by_value() -> None:
    t = summary(56, 9, 0.92)
    read = bytes("cuda", "ascii").decode()  # as a parsed label value: equal, not the same object
    t = TraceSummary(**{**t.__dict__, "split_device": read})
    assert launch_bound(t) and t.split_where == "GPU"
    assert TraceSummary(**{**t.__dict__, "split_device": "cpu"}).split_where == "CPU"


def test_gather_orders_operators_slowest_first_and_reads_the_gpus_split() -> None:
    from trainwatch.diagnose.traces import gather
    from trial_instrumentation import names

    key = ("e", "t", "0")
    rows = {
        names.PROFILE_INFO: [({"path": "/t/r0.json.gz", "steps": "4-8", "device": "cuda"}, 1)],
        names.PROFILE_SELF_SECONDS: [({}, 0.01)],
        names.PROFILE_OP_SELF_SECONDS: [({"op": "small"}, 0.001), ({"op": "big"}, 0.008)],
        names.PROFILE_KERNELS_PER_STEP: [({}, 56)],
        names.PROFILE_KERNEL_SECONDS_MEAN: [({}, 9e-6)],
        names.PROFILE_TIME_SECONDS: [({"device": "cuda", "kind": "idle"}, 0.009),
                                     ({"device": "cuda", "kind": "compute"}, 0.001)],
        names.PROFILE_END_TIME: [({}, 1_790_000_000.0)],
    }
    [(found_key, t)] = gather(lambda expr: {key: rows.get(expr.split("{")[0], [])}).items()
    assert found_key == key and [op for op, _ in t.ops] == ["big", "small"]
    assert t.split_device == "cuda" and t.split_where == "GPU" and launch_bound(t)
    assert t.split_shares() == {"idle": 0.9, "compute": pytest.approx(0.1), "communication": 0}
    assert (t.kernels_per_step, t.ended) == (56, 1_790_000_000.0)
    assert (t.path, t.steps, t.device) == ("/t/r0.json.gz", "4-8", "cuda")
    # The trace's own device, not its split's: operators timed on the CPU, a split of the GPU's.
    rows[names.PROFILE_INFO] = [({"path": "/t/r1.json.gz", "steps": "9", "device": "cpu"}, 1)]
    [(_, cpu)] = gather(lambda expr: {key: rows.get(expr.split("{")[0], [])}).items()
    assert (cpu.device, cpu.split_device, cpu.steps) == ("cpu", "cuda", "9")


def test_a_summary_cannot_be_changed() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        summary(56, 9, 0.92).path = "x"  # type: ignore[misc]
