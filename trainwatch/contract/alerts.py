"""The alerts' names: the rule generator renders them, `trainwatch diagnose` reads each one's
threshold, gate and remedy back from Prometheus under the same name, the dashboards and
Alertmanager's routes select on them (docs/design.md lists what each means)."""

# trial: pushed timings and the trial's group
DATALOADER_BOUND = "TrainwatchDataloaderBound"
HOST_TO_DEVICE_BOUND = "TrainwatchHostToDeviceBound"
TRIAL_STALE = "TrainwatchTrialStale"
TRIAL_FAILED = "TrainwatchTrialFailed"
TRIAL_KEY_SHARED = "TrainwatchTrialKeyShared"
TRIAL_PUSH_FAILING = "TrainwatchTrialPushFailing"
RANK_STRAGGLER = "TrainwatchRankStraggler"
SCALING_INEFFICIENT = "TrainwatchScalingInefficient"
SLOWER_THAN_BASELINE = "TrainwatchTrialSlowerThanBaseline"
# gpu
GPU_UNDERUTILIZED = "TrainwatchGPUUnderutilized"
GPU_LAUNCH_BOUND = "TrainwatchGPULaunchBound"
GPU_TENSOR_CORES_IDLE = "TrainwatchGPUTensorCoresIdle"
GPU_MEMORY_NEARLY_FULL = "TrainwatchGPUMemoryNearlyFull"
GPU_THROTTLED = "TrainwatchGPUThrottled"
GPU_ROW_REMAP_PENDING = "TrainwatchGPURowRemapPending"
GPU_ROW_REMAP_FAILED = "TrainwatchGPURowRemapFailed"
# host
CPU_SATURATED = "TrainwatchCPUSaturated"
HOST_MEMORY_LOW = "TrainwatchHostMemoryLow"
# exporter
EXPORTER_DOWN = "TrainwatchExporterDown"
COLLECTOR_FAILING = "TrainwatchCollectorFailing"
