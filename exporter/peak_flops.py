"""A GPU's peak arithmetic per precision: the denominator of model FLOPs utilization (MFU).

Dense (no 2:4 structured sparsity) tensor-core peaks at the boost clock, in FLOP/s, from
NVIDIA's datasheets, keyed by the product name NVML reports. The datasheets print the
tensor-core figures *with* sparsity (marked "*"): the dense figure is half of it (where a
datasheet also prints the dense figure, as A100's, A10's, A30's and L40S's do, the table takes
it as printed; each entry's comment quotes what its datasheet prints). ``fp32`` is
the plain (non-tensor-core) FP32 peak; ``tf32`` the TF32 tensor-core one. A precision the board
has no tensor cores for (V100 and T4: no bf16, tf32 or fp8) is absent, never 0.

A product not in the table publishes no peak (one log line per name); ``--gpu.peak-flops
bf16=989.4e12,fp8=1979e12`` overrides or adds figures for every GPU of the node.

>>> PEAK_FLOPS["NVIDIA H100 80GB HBM3"]["bf16"]
989400000000000.0
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

# The precisions a trial declares (trainwatch_trial_model_flops_per_sample{precision}).
DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32")
T = 1e12
log = logging.getLogger("exporter.gpu")


def _peaks(fp32: float, tf32: float | None = None, half: float | None = None,
           fp8: float | None = None, fp16: float | None = None) -> dict[str, float]:
    """Dense TFLOP/s -> FLOP/s per dtype; ``half`` is both bf16 and fp16 (the same rate on
    every board with bf16), ``fp16`` alone for boards without bf16."""
    found = {"fp32": fp32, "tf32": tf32, "bf16": half, "fp16": fp16 or half, "fp8": fp8}
    return {dtype: float(round(value * T)) for dtype, value in found.items() if value is not None}


# Each entry: the datasheet it comes from and the figures it prints, in TFLOPS ("*": with 2:4
# sparsity, halved here; a figure without "*" is dense as printed). Internal consistency, checked
# by tests/test_exporter_peak_flops.py: on every tensor-core board listed, tf32 = bf16 / 2 and
# fp8 = 2 x bf16 (within the datasheets' rounding), fp16 = bf16, and plain fp32 below all of them.
_H100_SXM = _peaks(66.9, 494.7, 989.4, 1978.9)  # FP32 67 | TF32 989* | BF16 1,979* | FP8 3,958*
_H100_NVL = _peaks(60.0, 417.5, 835.5, 1670.5)  # FP32 60 | TF32 835* | BF16 1,671* | FP8 3,341*
_A100 = _peaks(19.5, 156.0, 312.0)  # FP32 19.5 | TF32 156 (312*) | BF16 312 (624*); no FP8

# NVML product name -> dense peaks. Source of each entry: the NVIDIA datasheet named.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column; the dense figures to one decimal are the
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper's (H100 SXM5: 66.9, 494.7, 989.4,
    # 1,978.9).
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    # Same datasheet, PCIe column: FP32 51 | TF32 756* | BF16 1,513* | FP8 3,026* (whitepaper:
    # FP32 51.2).
    "NVIDIA H100 PCIe": _peaks(51.2, 378.0, 756.5, 1513.0),
    # Same datasheet, H100 NVL column, per GPU (an early edition printed the NVL pair's figures,
    # two GPUs together; these are per GPU).
    "NVIDIA H100 NVL": _H100_NVL,
    # NVIDIA H200 Tensor Core GPU datasheet: H200 SXM prints H100 SXM's figures, H200 NVL H100
    # NVL's.
    "NVIDIA H200": _H100_SXM,
    "NVIDIA H200 NVL": _H100_NVL,
    # NVIDIA GH200 Grace Hopper Superchip datasheet: the Hopper GPU prints H100 SXM's figures.
    "NVIDIA GH200 480GB": _H100_SXM,
    # NVIDIA A100 Tensor Core GPU datasheet: the same for SXM and PCIe, 40 and 80 GB.
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    # NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2 | TF32 62.5 (125*) | BF16 125 (250*).
    "NVIDIA A10": _peaks(31.2, 62.5, 125.0),
    # NVIDIA A30 Tensor Core GPU datasheet: FP32 10.3 | TF32 82 (165*) | BF16 165 (330*).
    "NVIDIA A30": _peaks(10.3, 82.0, 165.0),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 | TF32 120* | BF16 242* | FP8 485*.
    "NVIDIA L4": _peaks(30.3, 60.0, 121.0, 242.5),
    # NVIDIA L40S GPU datasheet: FP32 91.6 | TF32 183 (366*) | BF16 362.05 (733*) | FP8 733
    # (1,466*). BF16/FP16 is the dense figure as printed: half the sparse one would be 366.5
    # (1.2% more), the only entry where the two disagree.
    "NVIDIA L40S": _peaks(91.6, 183.0, 362.05, 733.0),
    # NVIDIA HGX B200 datasheet, 8 GPUs: FP32 600 | TF32 18,000* | BF16 36,000* | FP8 72,000*;
    # per GPU / 8, sparsity halved. The least certain entry: no per-GPU B200 datasheet, and
    # NVIDIA's Blackwell figures changed between editions (and with the board's power limit).
    "NVIDIA B200": _peaks(75.0, 1125.0, 2250.0, 4500.0),
    # NVIDIA V100 Tensor Core GPU datasheet: FP32 15.7 (SXM2) / 14 (PCIe); fp16 is the tensor
    # cores' mixed-precision peak, 125 / 112 (no bf16, tf32 or fp8 on Volta).
    "Tesla V100-SXM2-16GB": _peaks(15.7, fp16=125.0),
    "Tesla V100-SXM2-32GB": _peaks(15.7, fp16=125.0),
    "Tesla V100-PCIE-16GB": _peaks(14.0, fp16=112.0),
    "Tesla V100-PCIE-32GB": _peaks(14.0, fp16=112.0),
    # NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1 | mixed-precision FP16 65 (no bf16 or tf32).
    "Tesla T4": _peaks(8.1, fp16=65.0),
    # Not listed: NVIDIA A10G (AWS only; NVIDIA publishes no datasheet for it). Give its
    # figures with --gpu.peak-flops.
}

def parse_overrides(text: str) -> dict[str, float]:
    """``"bf16=989.4e12,fp8=1979e12"`` -> {dtype: FLOP/s}; ValueError names what is wrong."""
    found: dict[str, float] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        dtype, sep, value = pair.partition("=")
        if not sep or dtype.strip() not in DTYPES:
            raise ValueError(f"{pair!r} is not DTYPE=FLOPS with DTYPE one of {', '.join(DTYPES)}")
        try:
            flops = float(value)
        except ValueError:
            raise ValueError(f"{pair!r}: {value!r} is not a number") from None
        if not 0 < flops < float("inf"):
            raise ValueError(f"{pair!r}: the peak must be a finite number > 0")
        found[dtype.strip()] = flops
    return found


class PeakTable:
    """The peaks of each GPU product, with the node's overrides on top; an unknown product is
    logged once per table (one per collector).

    >>> table = PeakTable(parse_overrides("bf16=1e15"))
    >>> table.peaks("NVIDIA H100 80GB HBM3")["bf16"], table.peaks("Some Future GPU")
    (1000000000000000.0, {'bf16': 1000000000000000.0})
    """

    def __init__(self, overrides: Mapping[str, float] | None = None) -> None:
        self._overrides = dict(overrides or {})
        self._logged: set[str] = set()

    def peaks(self, name: str) -> dict[str, float]:
        """{dtype: FLOP/s}; empty when neither the table nor the overrides know ``name``."""
        found = {**PEAK_FLOPS.get(name, {}), **self._overrides}
        if not found and name not in self._logged:
            self._logged.add(name)
            log.info("no peak FLOPs known for GPU product %r: trainwatch_gpu_peak_flops (and "
                     "MFU) left out; give them with --gpu.peak-flops DTYPE=FLOPS", name)
        return found
