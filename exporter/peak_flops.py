"""A GPU's peak arithmetic per precision: the denominator of model FLOPs utilization (MFU).

Dense (no 2:4 structured sparsity) tensor-core peaks at the boost clock, in FLOP/s, from
NVIDIA's datasheets, keyed by the product name NVML reports. The datasheets print the
tensor-core figures *with* sparsity (marked "*"): the dense figure is half of it. ``fp32`` is
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


_H100_SXM = _peaks(66.9, 494.7, 989.4, 1978.9)  # H100 whitepaper / datasheet, SXM5 column
_H100_NVL = _peaks(60.0, 417.5, 835.5, 1670.5)  # H100 datasheet, NVL column (per GPU)
_A100 = _peaks(19.5, 156.0, 312.0)  # A100 datasheet: identical for SXM/PCIe, 40/80 GB

# NVML product name -> dense peaks. Source of each entry: the NVIDIA datasheet named.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU datasheet (and the Hopper whitepaper's dense figures).
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _peaks(51.2, 378.0, 756.5, 1513.0),
    "NVIDIA H100 NVL": _H100_NVL,
    # NVIDIA H200 Tensor Core GPU datasheet: H200 SXM as H100 SXM; H200 NVL as H100 NVL.
    "NVIDIA H200": _H100_SXM,
    "NVIDIA H200 NVL": _H100_NVL,
    # NVIDIA GH200 Grace Hopper Superchip datasheet (the Hopper GPU's figures).
    "NVIDIA GH200 480GB": _H100_SXM,
    # NVIDIA A100 Tensor Core GPU datasheet.
    "NVIDIA A100-SXM4-40GB": _A100,
    "NVIDIA A100-SXM4-80GB": _A100,
    "NVIDIA A100-PCIE-40GB": _A100,
    "NVIDIA A100 80GB PCIe": _A100,
    # NVIDIA A10 Tensor Core GPU datasheet.
    "NVIDIA A10": _peaks(31.2, 62.5, 125.0),
    # NVIDIA A30 Tensor Core GPU datasheet.
    "NVIDIA A30": _peaks(10.3, 82.0, 165.0),
    # NVIDIA L4 Tensor Core GPU datasheet.
    "NVIDIA L4": _peaks(30.3, 60.0, 121.0, 242.5),
    # NVIDIA L40S GPU datasheet.
    "NVIDIA L40S": _peaks(91.6, 183.0, 362.05, 733.0),
    # NVIDIA HGX B200 datasheet (per GPU: the 8-GPU board's figures / 8, sparsity halved).
    "NVIDIA B200": _peaks(75.0, 1125.0, 2250.0, 4500.0),
    # NVIDIA V100 Tensor Core GPU datasheet: fp16 is the tensor cores' mixed-precision peak.
    "Tesla V100-SXM2-16GB": _peaks(15.7, fp16=125.0),
    "Tesla V100-SXM2-32GB": _peaks(15.7, fp16=125.0),
    "Tesla V100-PCIE-16GB": _peaks(14.0, fp16=112.0),
    "Tesla V100-PCIE-32GB": _peaks(14.0, fp16=112.0),
    # NVIDIA T4 Tensor Core GPU datasheet.
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
