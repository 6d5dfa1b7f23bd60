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
)

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

# The thresholds that tell the data loader's causes apart (trainwatch/diagnose/loader_cause.py):
# thresholds.yaml `alerts.TrainwatchDataloaderBound.causes`, carried to `trainwatch diagnose` as
# that alert's `cause_<name>` annotations. Node CPU saturation is TrainwatchCPUSaturated's own.
# The loader's causes, in the order they are tried (trainwatch/diagnose/loader_cause.py, the
# recorded trial:trainwatch_trial_loader_cause:info_rate5m's `cause` label).
LOADER_CAUSES = ("too_few_workers", "decode_bound", "storage_bound", "remote_storage",
                 "latency_bound")
LOADER_CAUSE_THRESHOLDS = (
    "worker_busy",  # CPU one worker wants (ran + waited for on a run queue), s/s: it computes
    "disk_busy",  # a local disk's busy fraction (rate of its I/O time)
    "network_busy",  # a NIC's received bytes/s over its link speed
    "rchar_over_read",  # bytes read over bytes the block devices read: reads from elsewhere
)

# The thresholds that tell a slow multi-rank exchange's causes apart
# (trainwatch/diagnose/exchange.py): thresholds.yaml `alerts.TrainwatchScalingInefficient.causes`,
# carried as that alert's `cause_<name>` annotations. A straggler is TrainwatchRankStraggler's
# own threshold, the loader TrainwatchDataloaderBound's.
# What holds a slow multi-rank trial back, in the order tried (trainwatch/diagnose/exchange.py,
# the recorded trial_ranks:trainwatch_trial_exchange_cause:info_rate5m's `cause` label).
EXCHANGE_CAUSES = ("straggler", "loader", "network", "exchange")
EXCHANGE_CAUSE_THRESHOLDS = (
    "network_busy",  # a NIC of the trial's nodes: sent or received bytes/s over its link speed
)
