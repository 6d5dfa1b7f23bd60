"""trainwatch/diagnose/mfu.py without a stack: each rank's MFU from canned rows by rank, and
the line `trainwatch diagnose` says it with."""

from __future__ import annotations

import re

from tests.frozen import assert_frozen
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.mfu import NO_FLOPS, Key, Mfu, Rows, gather
from trial_instrumentation import names

N = RecordNames("30s")
A, B, C = ("e", "t", "0"), ("e", "t", "1"), ("e", "t", "2")
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


class Canned:
    """by_rank over rows keyed by the metric a query starts with; records every query."""

    def __init__(self, rows: dict[str, Rows]) -> None:
        self.rows, self.asked = rows, []

    def __call__(self, expr: str) -> Rows:
        self.asked.append(expr)
        metric = re.match(r"[\w:]+", expr)
        return self.rows.get(metric.group(0) if metric else "", {})


def gpu_rows(*products: str) -> list[tuple[dict[str, str], float]]:
    return [({"uuid": f"GPU-{i}", "name": p}, 1.0) for i, p in enumerate(products)]


def test_the_line_counts_each_product_without_the_vendor_prefix() -> None:
    m = Mfu(0.4237, "fp16", 312.5e12, (A100, H100, A100))
    assert m.line() == ("MFU 42% of 312 TFLOPS fp16 dense on 2 × A100-SXM4-40GB, "
                        "1 × H100 80GB HBM3")
    assert Mfu(0.05, "tf32", 1234.6e12, ("AMD MI300X",)).line() == (
        "MFU 5% of 1,235 TFLOPS tf32 dense on 1 × AMD MI300X")
    assert Mfu(0.5, "bf16", 1e15, ()).line() == "MFU 50% of 1,000 TFLOPS bf16 dense on ? GPUs"
    # TFLOPS are the FLOP/s over 1e12 exactly: 989.5 rounds (half to even) to 990
    assert Mfu(0.5, "bf16", 989.5e12, (H100,)).line().startswith("MFU 50% of 990 TFLOPS")


def test_the_line_is_unknown_without_a_value_or_a_peak_and_says_why() -> None:
    assert Mfu(0.3, "bf16", None, (H100,), missing="no peak").line() == "MFU unknown: no peak"
    assert Mfu(None, "bf16", 1e15, (H100,), missing="why").line() == "MFU unknown: why"
    assert Mfu(0.3, "bf16", None, (H100,)).line() == (
        "MFU unknown: no samples/s over the rate window yet")
    assert Mfu(0.0, "bf16", 1e15, (H100,)).line() == "MFU 0% of 1,000 TFLOPS bf16 dense on 1 × H100 80GB HBM3"
    assert_frozen(Mfu(0.3, "bf16", 1e15, (H100,)))


def test_gather_reads_each_rank_of_any_part_and_splits_the_peak_over_its_gpus() -> None:
    by_rank = Canned({
        N.mfu: {A: [({}, 0.27), ({}, 0.99)], C: [({}, 0.12)]},
        N.trial_peak_flops: {A: [({}, 3 * 312e12), ({}, 1.0)], B: [({}, 989e12)]},
        names.MODEL_FLOPS: {A: [({"precision": "fp16"}, 6e9), ({"precision": "bf16"}, 1.0)],
                            C: [({"precision": "tf32"}, 2e9)]},
        names.GPU_INFO: {A: gpu_rows(H100, A100, A100), B: [({"uuid": "GPU-9"}, 1.0)]},
    })
    found = gather(by_rank, N, experiment="e", trial="t")
    assert set(found) == {A, B, C}  # C: an MFU and a FLOPs figure but no GPU
    assert found[A] == Mfu(0.27, "fp16", 312e12, (A100, A100, H100), None)
    assert found[B] == Mfu(None, None, 989e12, ("?",), NO_FLOPS)
    assert found[C] == Mfu(0.12, "tf32", None, (), "no GPU of the trial has exporter series "
                           "(trainwatch_trial_gpu_info ⋈ uuid)")
    assert all('experiment="e"' in q and 'trial="t"' in q for q in by_rank.asked)
    [gpus] = [q for q in by_rank.asked if q.startswith(names.GPU_INFO)]
    assert gpus.endswith("* on (uuid) group_left (name) max by (uuid, name) (trainwatch_gpu_info)")


def test_a_rank_with_only_a_peak_is_not_reported() -> None:
    found = gather(Canned({N.trial_peak_flops: {A: [({}, 1e15)]}, N.mfu: {B: []}}), N)
    assert found == {B: Mfu(None, None, None, (), NO_FLOPS)}


def test_the_missing_part_is_the_first_of_flops_gpus_and_peak() -> None:
    def one(rows: dict[str, Rows]) -> Mfu:
        return gather(Canned(rows), N)[A]

    flops = {names.MODEL_FLOPS: {A: [({"precision": "bf16"}, 6e9)]}}
    gpus = {names.GPU_INFO: {A: gpu_rows(A100, H100, A100)}}
    peak = {N.trial_peak_flops: {A: [({}, 2e15)]}}
    assert one(gpus | peak).missing == NO_FLOPS
    assert one(flops | peak).missing == (
        "no GPU of the trial has exporter series (trainwatch_trial_gpu_info ⋈ uuid)")
    assert one(flops | peak).peak_per_gpu is None
    assert one(flops | gpus).missing == (
        f"no bf16 peak for {A100}, {H100}: give it to the exporter with "
        "--gpu.peak-flops bf16=FLOPS")
    done = one(flops | gpus | peak)
    assert done.missing is None and done.peak_per_gpu == 2e15 / 3 and done.value is None


def test_key_is_experiment_trial_rank() -> None:
    key: Key = ("e", "t", "0")
    assert gather(Canned({N.mfu: {key: [({}, 0.5)]}}), N)[key].value == 0.5
