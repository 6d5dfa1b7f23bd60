"""`diagnose`'s MFU line (trainwatch/diagnose/mfu.py) from the recorded series, and which part
it names when one is missing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.mfu import NO_FLOPS, Rows, gather
from trial_instrumentation import names

N = RecordNames("5m")
KEY = ("e", "t", "0")
H100 = "NVIDIA H100 80GB HBM3"


def by_rank(series: dict[str, list[tuple[dict[str, str], float]]]) -> Callable[[str], Rows]:
    """A by_rank over canned rows, keyed by the metric the query starts with."""
    def answer(expr: str) -> Rows:
        metric = expr.split("{", 1)[0]
        return {KEY: series[metric]} if series.get(metric) else {}
    return answer


def gpus(*products: str) -> list[tuple[dict[str, str], float]]:
    return [({"uuid": f"GPU-{i}", "name": p}, 1.0) for i, p in enumerate(products)]


BF16 = [({"precision": "bf16"}, 6e9)]


@pytest.mark.parametrize(("series", "line"), [
    ({N.mfu: [({}, 0.31)], N.trial_peak_flops: [({}, 8 * 989.4e12)], names.MODEL_FLOPS: BF16,
      names.GPU_INFO: gpus(*[H100] * 8)},
     "MFU 31% of 989 TFLOPS bf16 dense on 8 × H100 80GB HBM3"),
    ({names.GPU_INFO: gpus(H100)}, f"MFU unknown: {NO_FLOPS}"),
    ({names.MODEL_FLOPS: BF16, names.GPU_INFO: gpus("NVIDIA A10G")},
     ("MFU unknown: no bf16 peak for NVIDIA A10G: give it to the exporter with "
      "--gpu.peak-flops bf16=FLOPS")),
    ({names.MODEL_FLOPS: BF16},
     "MFU unknown: no GPU of the trial has exporter series (trainwatch_trial_gpu_info ⋈ uuid)"),
    ({N.trial_peak_flops: [({}, 989.4e12)], names.MODEL_FLOPS: BF16, names.GPU_INFO: gpus(H100)},
     "MFU unknown: no samples/s over the rate window yet"),
])
def test_the_mfu_line_or_the_missing_part(series: dict[str, list[tuple[dict[str, str], float]]],
                                          line: str) -> None:
    found = gather(by_rank(series), N, experiment="e", trial="t")
    assert found[KEY].line() == line
