"""Each rank's model FLOPs utilization (the MFU recording rule), said in one line by `diagnose`,
or which of its parts is missing.

>>> Mfu(0.31, "bf16", 989.4e12, ("NVIDIA H100 80GB HBM3",) * 8).line()
'MFU 31% of 989 TFLOPS bf16 dense on 8 × H100 80GB HBM3'
>>> Mfu(None, None, None, ("NVIDIA A10G",), missing="no FLOPs per sample from the trial").line()
'MFU unknown: no FLOPs per sample from the trial'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from trainwatch.contract.figures import GPU_INFO
from trainwatch.contract.promql import select
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names

Key = tuple[str, str, str]
Rows = dict[Key, list[tuple[dict[str, str], float]]]
NO_FLOPS = ("no FLOPs per sample from the trial: pass Trial(flops_per_sample=, precision=) or "
            "call trial.measure_flops_per_sample(model, batch, precision)")


@dataclass(frozen=True)
class Mfu:
    value: float | None  # 0-1
    precision: str | None
    peak_per_gpu: float | None  # FLOP/s, the rank's summed peak over its GPU count
    products: tuple[str, ...]  # the NVML product name of each GPU of the rank
    missing: str | None = None  # why value is None

    def line(self) -> str:
        if self.value is None or self.peak_per_gpu is None:
            return f"MFU unknown: {self.missing or 'no samples/s over the rate window yet'}"
        on = ", ".join(f"{count} × {name.removeprefix('NVIDIA ')}"
                       for name, count in Counter(self.products).items())
        return (f"MFU {self.value:.0%} of {self.peak_per_gpu / 1e12:,.0f} TFLOPS "
                f"{self.precision} dense on {on or '? GPUs'}")


def gather(by_rank: Callable[[str], Rows], n: RecordNames, **sel: str | None) -> dict[Key, Mfu]:
    """Each rank's MFU, from ``by_rank(expr)`` (rows by experiment, trial, rank)."""
    mfu, peak = by_rank(select(n.mfu, **sel)), by_rank(select(n.trial_peak_flops, **sel))
    flops = by_rank(select(names.MODEL_FLOPS, **sel))
    gpus = by_rank(f"{select(names.GPU_INFO, **sel)} * on (uuid) group_left (name) "
                   f"max by (uuid, name) ({GPU_INFO})")
    found = {}
    for key in set(mfu) | set(flops) | set(gpus):
        products = tuple(sorted(labels.get("name", "?") for labels, _ in gpus.get(key, [])))
        precision = next((labels.get("precision") for labels, _ in flops.get(key, [])), None)
        value = mfu[key][0][1] if mfu.get(key) else None
        total = peak[key][0][1] if peak.get(key) else None
        per_gpu = total / len(products) if total is not None and products else None
        found[key] = Mfu(value, precision, per_gpu, products,
                         _missing(precision, total, products))
    return found


def _missing(precision: str | None, peak: float | None, products: tuple[str, ...]) -> str | None:
    if precision is None:
        return NO_FLOPS
    if not products:
        return "no GPU of the trial has exporter series (trainwatch_trial_gpu_info ⋈ uuid)"
    if peak is None:
        unknown = ", ".join(sorted(set(products)))
        return (f"no {precision} peak for {unknown}: give it to the exporter with "
                f"--gpu.peak-flops {precision}=FLOPS")
    return None
