"""The notes a verdict carries besides its finding (trainwatch.diagnose.verdict): context()
(a larger share elsewhere, saturated node CPUs) and compute_threads_note() (more compute
threads than free cores), each condition from both sides, with figures chosen so that a wrong
operand, a swapped limit or a dropped clamp reads differently."""

from __future__ import annotations

import dataclasses
import json

import pytest

from trainwatch.contract.alerts import CPU_SATURATED
from trainwatch.diagnose.deployed import AlertRule
from trainwatch.diagnose.verdict import (
    ComputeThreads,
    Measurements,
    Verdict,
    compute_threads_note,
    context,
    noted,
)
from trial_instrumentation import names

RULES = {CPU_SATURATED: AlertRule(CPU_SATURATED, 0.9, "x")}
LOADER, TRAIN = names.DATALOADER_NEXT, names.TRAIN_BATCH
TO, FROM = names.TO_DEVICE, names.FROM_DEVICE


def larger(phase: str, share: float, faster: str) -> str:
    return (f"{phase} takes a larger share of the step ({share:.1%}): with a faster {faster}, "
            "the step is the limit")


def saturated(cpu: float) -> str:
    return (f"node CPUs saturated ({cpu:.1%} > threshold 90.0%): the loader and the training "
            "compete for them")


def test_a_loader_finding_names_the_larger_share_elsewhere_and_the_saturated_cpus() -> None:
    m = Measurements({LOADER: 0.4137, TRAIN: 0.5211, TO: 0.0652}, node_cpu=0.9731)
    assert context(m, "dataloader", 0.4137, RULES) == (larger(TRAIN, 0.5211, "loader"),
                                                       saturated(0.9731))


def test_a_copy_finding_leaves_both_copy_phases_out_and_says_copy() -> None:
    # to_device + from_device = 0.43 measured; the loader's 0.45 is larger, from_device's is not
    # counted as "elsewhere" although it is the second largest single phase.
    m = Measurements({TO: 0.3117, FROM: 0.1183, LOADER: 0.4507, TRAIN: 0.1193}, node_cpu=0.41)
    assert context(m, "memory_copies", 0.43, RULES) == (larger(LOADER, 0.4507, "copy"),)
    fine = Measurements({TO: 0.3117, FROM: 0.1183, LOADER: 0.2207, TRAIN: 0.3493})
    assert context(fine, "memory_copies", 0.43, RULES) == ()


def test_the_kind_is_compared_by_value() -> None:
    m = Measurements({LOADER: 0.4137, TRAIN: 0.5211})
    assert context(m, json.loads('"dataloader"'), 0.4137, RULES) == (
        larger(TRAIN, 0.5211, "loader"),)


def test_an_equal_share_elsewhere_is_not_larger() -> None:
    m = Measurements({LOADER: 0.4137, TRAIN: 0.4137, TO: 0.1726})
    assert context(m, "dataloader", 0.4137, RULES) == ()


def test_cpus_at_the_threshold_or_unknown_or_without_the_rule_are_not_saturated() -> None:
    shares = {LOADER: 0.61, TRAIN: 0.39}
    assert context(Measurements(shares, node_cpu=0.9), "dataloader", 0.61, RULES) == ()
    assert context(Measurements(shares, node_cpu=0.9001), "dataloader", 0.61, RULES) == (
        saturated(0.9001),)
    assert context(Measurements(shares), "dataloader", 0.61, RULES) == ()
    assert context(Measurements(shares, node_cpu=0.99), "dataloader", 0.61, {}) == ()


def test_other_findings_carry_no_context() -> None:
    m = Measurements({LOADER: 0.2, TRAIN: 0.7}, node_cpu=0.99)
    assert context(m, "gpu_bound", 0.2, RULES) == ()
    assert context(m, "no_gpu_metrics", 0.2, RULES) == ()


def note(threads: float, free: float, cores: float, cpu: float, others: float,
         fit: int) -> str:
    return (f"train_batch runs {threads:g} compute threads on {free:.1f} free cores of "
            f"{cores:g} (node CPU {cpu:.1%} busy, {others:.1f} cores of it other work): its "
            f"threads wait for cores; torch.set_num_threads({fit}) or OMP_NUM_THREADS={fit} "
            "(docs/instrumentation.md, CPU training)")


BUSY = Measurements({TRAIN: 0.6211, LOADER: 0.3789}, node_cpu=0.955)


def test_threads_beyond_the_free_cores_are_noted_with_the_figures() -> None:
    # 0.955 x 8 = 7.64 busy cores, 2.3 of them the trial's own: 5.34 other work, 2.66 free.
    assert compute_threads_note(BUSY, ComputeThreads(6, 8, 2.3), RULES) == note(
        6, 2.66, 8, 0.955, 5.34, 2)


def test_without_its_own_cpu_every_core_counts_as_free() -> None:
    assert compute_threads_note(BUSY, ComputeThreads(9, 8, None), RULES) == note(
        9, 8.0, 8, 0.955, 0.0, 8)
    assert compute_threads_note(BUSY, ComputeThreads(8, 8, None), RULES) is None


def test_its_own_cpu_above_the_node_busy_leaves_no_other_work() -> None:
    # 7.64 busy, 7.9 its own (counted a moment apart): other work 0, not -0.26.
    assert compute_threads_note(BUSY, ComputeThreads(12, 8, 7.9), RULES) == note(
        12, 8.0, 8, 0.955, 0.0, 8)


def test_fewer_than_one_free_core_advises_one_thread() -> None:
    m = Measurements({TRAIN: 0.71, LOADER: 0.29}, node_cpu=0.99)  # 3.96 busy of 4, 0.5 its own
    assert compute_threads_note(m, ComputeThreads(2, 4, 0.5), RULES) == note(
        2, 0.54, 4, 0.99, 3.46, 1)
    assert compute_threads_note(m, ComputeThreads(1, 4, 0.5), RULES) is None  # one is the least


def test_a_node_read_above_one_leaves_no_free_core_not_a_negative_count() -> None:
    m = Measurements({TRAIN: 0.71, LOADER: 0.29}, node_cpu=1.02)  # 8.16 busy of 8
    assert compute_threads_note(m, ComputeThreads(3, 8, 0.05), RULES) == note(
        3, 0.0, 8, 1.02, 8.11, 1)


def test_threads_equal_to_the_free_cores_fit() -> None:
    m = Measurements({TRAIN: 0.6, LOADER: 0.4}, node_cpu=0.9375)  # 7.5 busy of 8, 2.5 own: 3 free
    assert compute_threads_note(m, ComputeThreads(3, 8, 2.5), RULES) is None
    assert compute_threads_note(m, ComputeThreads(4, 8, 2.5), RULES) == note(
        4, 3.0, 8, 0.9375, 5.0, 3)


@pytest.mark.parametrize("missing", ["rule", "threads", "cpu_count", "node_cpu"])
def test_any_figure_missing_gives_no_note(missing: str) -> None:
    m = dataclasses.replace(BUSY, node_cpu=None) if missing == "node_cpu" else BUSY
    c = ComputeThreads(None if missing == "threads" else 6,
                       None if missing == "cpu_count" else 8, 2.3)
    assert compute_threads_note(m, c, {} if missing == "rule" else RULES) is None


def test_node_cpu_at_the_threshold_gives_no_note_just_above_it_does() -> None:
    for below in (0.9, 0.4217):  # 9 threads on 8 free cores: only the CPU keeps the note out
        at = dataclasses.replace(BUSY, node_cpu=below)
        assert compute_threads_note(at, ComputeThreads(9, 8, None), RULES) is None
    above = dataclasses.replace(BUSY, node_cpu=0.9001)
    assert compute_threads_note(above, ComputeThreads(9, 8, None), RULES) == note(
        9, 8.0, 8, 0.9001, 0.0, 8)


@pytest.mark.parametrize("shares", [
    {},
    {LOADER: 0.5523, TRAIN: 0.4477},  # the largest is a phase named before train_batch
    {"zero_grad": 0.5523, TRAIN: 0.4477},  # ... and one named after it
])
def test_only_a_largest_train_batch_is_noted(shares: dict[str, float]) -> None:
    m = Measurements(shares, node_cpu=0.955)
    assert compute_threads_note(m, ComputeThreads(6, 8, 2.3), RULES) is None


def test_the_largest_share_is_found_by_share_and_phase_names_by_value() -> None:
    # Phase names come from Prometheus's labels (decoded JSON); zero_grad sorts last by name.
    m = Measurements({json.loads('"train_batch"'): 0.6211, "zero_grad": 0.0317, LOADER: 0.3472},
                     node_cpu=0.955)
    assert compute_threads_note(m, ComputeThreads(6, 8, 2.3), RULES) == note(
        6, 2.66, 8, 0.955, 5.34, 2)


def verdict() -> Verdict:
    return Verdict("dataloader", "Dataloader-bound", True, 0.41, ">", 0.3, "A", "r", None,
                   notes=("first",))


def test_noted_appends_a_note_and_leaves_the_verdict_without_one() -> None:
    v = verdict()
    assert noted(v, None) is v
    assert noted(v, "second").notes == ("first", "second")
    assert dataclasses.replace(noted(v, "second"), notes=v.notes) == v


def test_compute_threads_are_a_value() -> None:
    c = ComputeThreads(6, 8, 2.3)
    assert hash(c) == hash(ComputeThreads(6, 8, 2.3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.threads = 1  # type: ignore[misc]
