"""The verdict's checks, in priority order: `trainwatch diagnose` runs them on a rank's numbers
and the Trial profile dashboard's Bottleneck panel builds its query from them, so both name the
same bottleneck; each is decided with its alert's deployed threshold."""

from __future__ import annotations

from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_LAUNCH_BOUND,
    GPU_TENSOR_CORES_IDLE,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
    SCALING_INEFFICIENT,
)
from trainwatch.contract.causes import EXCHANGE, LOADER

# (kind, title, alert whose threshold decides, measurement, bottleneck when above it?)
CHECKS = (
    ("dataloader", "Data loader", DATALOADER_BOUND, "dataloader_share", True),
    ("memory_copies", "Host↔device copies", HOST_TO_DEVICE_BOUND, "host_to_device_share", True),
    ("busy_cpu", "Node CPUs saturated", CPU_SATURATED, "node_cpu", True),
    # Before underused_gpu: a GPU that looks busy with idle SMs needs this remedy, not that one.
    ("launch_bound", "Kernels too small", GPU_LAUNCH_BOUND, "gpu_sm_active", False),
    ("underused_gpu", "GPU underused", GPU_UNDERUTILIZED, "gpu_busy", False),
    ("tensor_cores_idle", "Tensor cores idle", GPU_TENSOR_CORES_IDLE, "gpu_tensor_active", False),
)
# After every check above, where none holds and the GPU is busy (the GPU-busy rule at least
# TrainwatchGPUUnderutilized's threshold): a rank whose model FLOPs utilization is under that
# alert's `mfu_low` (thresholds.yaml) gets this verdict instead of "GPU-bound". No alert fires
# on it, and a rank without an MFU (no FLOPs figure, no peak) never gets it.
LOW_MFU = ("low_mfu", "GPU busy, MFU low")
# A gated check holds only while this measurement is at least its alert's `busy` level (the
# alert's own gate): launch-bound needs a GPU that *looks* busy, idle tensor cores busy SMs.
GATES = {"launch_bound": "gpu_utilization", "tensor_cores_idle": "gpu_sm_active"}

# The loader's causes in the order they are tried, and the names under
# thresholds.yaml `alerts.TrainwatchDataloaderBound.causes` that tell them apart (carried to
# `trainwatch diagnose` as that alert's `cause_<name>` annotations): from the decision's table
# (contract.causes.LOADER), as are a slow multi-rank exchange's (contract.causes.EXCHANGE,
# `alerts.TrainwatchScalingInefficient.causes`). The recorded causes' `cause` label values.
LOADER_CAUSES = LOADER.names
LOADER_CAUSE_THRESHOLDS = LOADER.cause_keys(DATALOADER_BOUND)
EXCHANGE_CAUSES = EXCHANGE.names
EXCHANGE_CAUSE_THRESHOLDS = EXCHANGE.cause_keys(SCALING_INEFFICIENT)
