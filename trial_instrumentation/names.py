"""Names fixed by the metric contract in docs/design.md, defined once for the whole package.

Never rename one of these: Prometheus rules, dashboards and alerts select on them.
"""

from __future__ import annotations

# Pushgateway job and grouping key (docs/design.md: job `trainwatch_trial`, key experiment/trial/rank).
JOB = "trainwatch_trial"
GROUPING_LABELS = ("experiment", "trial", "rank")

# Metric families. Counters are named without `_total`: prometheus_client's
# CounterMetricFamily appends it on exposition.
PHASE_SECONDS = "trainwatch_trial_phase_seconds"
STEP_SECONDS = "trainwatch_trial_step_seconds"
STEPS = "trainwatch_trial_steps"
SAMPLES = "trainwatch_trial_samples"
TRIAL_INFO = "trainwatch_trial_info"
# Unix time the trial process started timing (Trial.start()): tells a run from a restart under
# the same key, and dates an ended run's life with its last push (push_time_seconds).
START_TIME = "trainwatch_trial_start_time_seconds"
GPU_INFO = "trainwatch_trial_gpu_info"
# The trial's push interval, seconds, pushed with its group: `trainwatch gc` never retires a
# group younger than two of its own intervals, whatever --max-age says.
PUSH_INTERVAL = "trainwatch_trial_push_interval_seconds"
# The model's training FLOPs per sample, with label precision (trial_instrumentation.flops).
MODEL_FLOPS = "trainwatch_trial_model_flops_per_sample"
PUSH_FAILURES = "trainwatch_trial_push_failures"
# Pushed in the final push only, with label reason: how the process ended.
EXIT = "trainwatch_trial_exit"
EXIT_CLEAN = "clean"  # left the `with` block normally (or sys.exit(0))
EXIT_TERMINATED = "terminated"  # SIGTERM: eviction, preemption, a scheduler's cancel
EXIT_FAILED = "failed"  # an exception (or a non-zero sys.exit)
# torch's intra-op threads (torch.get_num_threads()), read on the training thread: with the
# node's free cores, whether CPU compute fights for them (trainwatch diagnose's note).
COMPUTE_THREADS = "trainwatch_trial_compute_threads"
# Measured ceilings (trial_instrumentation.limits): the loader alone, the step alone.
LOADER_LIMIT = "trainwatch_trial_loader_limit_samples_per_second"
STEP_LIMIT = "trainwatch_trial_step_limit_samples_per_second"
# Why the loader is slow (trial_instrumentation.loader_processes), read at push time: CPU of the
# trial process (process="main") and of its DataLoader workers ("workers"), the live workers,
# and the process tree's reads (/proc/<pid>/io read_bytes: block devices; rchar: any read).
LOADER_CPU_SECONDS = "trainwatch_trial_loader_cpu_seconds"
LOADER_WORKERS = "trainwatch_trial_loader_workers"
# The workers' lifetimes, summed (wall seconds each was alive, from its fork): the CPU one worker
# used is the workers' CPU seconds (and wait) over these, not over their count times a window.
LOADER_WORKER_SECONDS = "trainwatch_trial_loader_worker_seconds"
# Run-queue delay of the workers: CPU they wanted and waited for (a saturated node).
LOADER_CPU_WAIT_SECONDS = "trainwatch_trial_loader_cpu_wait_seconds"
LOADER_READ_BYTES = "trainwatch_trial_loader_read_bytes"
LOADER_RCHAR_BYTES = "trainwatch_trial_loader_rchar_bytes"
PROCESS_MAIN = "main"
PROCESS_WORKERS = "workers"
# The latest on-demand profiler trace (trial_instrumentation.profiling): its file and step range,
# the top operators' self time per step (top-k only), kernels where CUDA was captured, its
# idle/compute/communication split (trace_split) and when it was written.
PROFILE_INFO = "trainwatch_trial_profile_info"
PROFILE_STEPS = "trainwatch_trial_profile_steps"
PROFILE_SELF_SECONDS = "trainwatch_trial_profile_self_seconds"
PROFILE_OP_SELF_SECONDS = "trainwatch_trial_profile_op_self_seconds"
PROFILE_KERNELS_PER_STEP = "trainwatch_trial_profile_kernels_per_step"
PROFILE_KERNEL_SECONDS_MEAN = "trainwatch_trial_profile_kernel_seconds_mean"
PROFILE_TIME_SECONDS = "trainwatch_trial_profile_time_seconds"
PROFILE_END_TIME = "trainwatch_trial_profile_end_time_seconds"

# The six standard timings (Determined's names); any other phase name is allowed too.
DATALOADER_NEXT = "dataloader_next"
TO_DEVICE = "to_device"
TRAIN_BATCH = "train_batch"
STEP_LR_SCHEDULERS = "step_lr_schedulers"
FROM_DEVICE = "from_device"
REDUCE_METRICS = "reduce_metrics"
STANDARD_PHASES = (DATALOADER_NEXT, TO_DEVICE, TRAIN_BATCH, STEP_LR_SCHEDULERS, FROM_DEVICE,
                   REDUCE_METRICS)
# Not a standard timing: the time a rank of a multi-rank trial waits for the others (a
# dist.barrier() timed before the step's collective). TrainwatchRankStraggler subtracts it, as
# ranks in lockstep all take the slowest rank's step time (thresholds.yaml rank_wait_phases).
WAIT_FOR_RANKS = "wait_for_ranks"

# Phase names always timed, whatever else a trial times: the standard ones and wait_for_ranks.
ALWAYS_TIMED_PHASES = frozenset((*STANDARD_PHASES, WAIT_FOR_RANKS))

# Bounds on what one trial creates (docs/instrumentation.md, "What one trial can create"); each is refused or
# dropped with one line that names it, so no script can grow the trial's memory, its pushes or
# the Pushgateway without end.
# Phase names a trial times besides ALWAYS_TIMED_PHASES: a new name past them is not timed
# (its timer is a no-op), logged once. Each name is a histogram of ~20 series in every push.
MAX_PHASES = 64
# Characters in a label value the trial pushes: experiment, trial, rank, a phase name, the
# node name, a GPU UUID. Every Kubernetes object name and DNS name (253) fits; the grouping key
# stays far below the request-line limits of servers (8 KiB) that push and `trainwatch gc`'s
# DELETE go through.
MAX_LABEL_LENGTH = 256
# The shortest push interval, in seconds: every push collects and sends the whole group.
MIN_PUSH_INTERVAL = 0.1

# Exponential buckets sized for training: 0.5 ms doubling up to ~65 s (18 bounds + +Inf).
# Web-latency buckets (prometheus_client's default tops out at 10 s) would put every slow
# step in +Inf.
DEFAULT_BUCKETS: tuple[float, ...] = tuple(0.0005 * 2**k for k in range(18))

# Timing modes (see docs/instrumentation.md for what each one measures).
WALL = "wall"
CUDA_SYNC = "cuda_sync"
CUDA_EVENTS = "cuda_events"
TIMING_MODES = (WALL, CUDA_SYNC, CUDA_EVENTS)

# Environment variables read when the matching argument is not given (the settings that read
# them, with their defaults and parsers, are declared in trial_instrumentation/config.py).
ENV_PUSHGATEWAY = "TRAINWATCH_PUSHGATEWAY"
ENV_EXPERIMENT = "TRAINWATCH_EXPERIMENT"
ENV_TRIAL = "TRAINWATCH_TRIAL"
ENV_PUSH_INTERVAL = "TRAINWATCH_PUSH_INTERVAL"
# Removed settings, still recognised so that setting one says why it does nothing.
ENV_DELETE_ON_EXIT = "TRAINWATCH_DELETE_ON_EXIT"
REMOVED_ENV = {
    ENV_DELETE_ON_EXIT: "the trial never deletes its Pushgateway group (so its final push is "
                        "scraped and no process deletes another's live group); `trainwatch gc` "
                        "retires ended groups",
}
# The phase histograms' bucket bounds: "none" pushes their sums and counts only (+Inf), the
# fleet-scale setting; a comma list of bounds; unset: the step histogram's buckets.
ENV_PHASE_BUCKETS = "TRAINWATCH_PHASE_BUCKETS"
PHASE_BUCKETS_NONE = "none"
ENV_PULL_PORT = "TRAINWATCH_PULL_PORT"
ENV_TIMING_MODE = "TRAINWATCH_TIMING_MODE"
ENV_USERNAME = "TRAINWATCH_PUSHGATEWAY_USERNAME"
ENV_PASSWORD = "TRAINWATCH_PUSHGATEWAY_PASSWORD"
# The host the trial runs on, for the join to trainwatch_host_info{nodename}. On Kubernetes set
# it from the downward API (spec.nodeName): a pod's own hostname is the pod name.
ENV_NODENAME = "TRAINWATCH_NODENAME"
# The GPUs the trial uses, as NVML UUIDs, comma-separated; replaces detection through torch.
# For other frameworks (JAX, TensorFlow) or a scheduler that knows the allocation.
ENV_GPU_UUIDS = "TRAINWATCH_GPU_UUIDS"
# The model's training FLOPs per sample and the precision it trains in (trial_instrumentation
# .flops): set in a job's spec where the script does not pass flops_per_sample=/precision=.
ENV_FLOPS_PER_SAMPLE = "TRAINWATCH_FLOPS_PER_SAMPLE"
ENV_PRECISION = "TRAINWATCH_PRECISION"
# On-demand profiler traces (trial_instrumentation.profiling): where they go, what asks for one
# besides `trainwatch profile` (a file whose change is a request; a signal, "none" for none), how
# many steps one records and the size its compressed file is cut to.
ENV_PROFILE_DIR = "TRAINWATCH_PROFILE_DIR"
ENV_PROFILE_TRIGGER = "TRAINWATCH_PROFILE_TRIGGER"
ENV_PROFILE_SIGNAL = "TRAINWATCH_PROFILE_SIGNAL"
ENV_PROFILE_STEPS = "TRAINWATCH_PROFILE_STEPS"
ENV_PROFILE_MAX_MB = "TRAINWATCH_PROFILE_MAX_MB"
# Where the trial runs, for trainwatch_trial_info (trial_instrumentation/placement.py): the
# Kubernetes namespace and pod from the downward API (helm/README.md has the pod spec's env
# snippet), and Slurm's job id and user, which every task of a job has.
ENV_K8S_NAMESPACE = "TRAINWATCH_K8S_NAMESPACE"
ENV_K8S_POD = "TRAINWATCH_K8S_POD"
ENV_SLURM_JOB_ID = "SLURM_JOB_ID"
ENV_SLURM_JOB_USER = "SLURM_JOB_USER"
# Slurm's job name: the experiment where TRAINWATCH_EXPERIMENT is unset (as SLURM_JOB_ID is the
# trial where TRAINWATCH_TRIAL is), so every task of one job pushes under one trial.
ENV_SLURM_JOB_NAME = "SLURM_JOB_NAME"
# Automatic instrumentation of an unmodified script (trial_instrumentation/auto/, `trainwatch
# run`): set (not 0) with trial_instrumentation/auto/site on PYTHONPATH, it times the process.
AUTO_ENV = "TRAINWATCH_AUTO"
# TRAINWATCH_* variables that other parts of trainwatch read (the operator CLI and the stack it
# starts): not the library's, but not a typo either. Defined here, read there.
CLI_ENV_PROMETHEUS = "TRAINWATCH_PROMETHEUS"  # trainwatch/lookup.py: the Prometheus to ask
CLI_ENV_STATE_DIR = "TRAINWATCH_STATE_DIR"  # trainwatch/layout.py: the local stack's folder
CLI_ENV_STACK = "TRAINWATCH_STACK"  # trainwatch/procs.py: marks the stack's processes
CLI_ENV_STACK_SERVICE = "TRAINWATCH_STACK_SERVICE"  # ... and which service each one is
CLI_ENV_DEMO_STATE_DIR = "TRAINWATCH_DEMO_STATE_DIR"  # an older `make demo`'s: read by none now
OTHER_ENV = (CLI_ENV_PROMETHEUS, CLI_ENV_STATE_DIR, CLI_ENV_STACK, CLI_ENV_STACK_SERVICE,
             CLI_ENV_DEMO_STATE_DIR, AUTO_ENV)
# torchrun's variables. LOCAL_RANK picks the GPU a rank reports when nothing better is known
# (see torch_devices.training_devices).
ENV_RANK = "RANK"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_LOCAL_RANK = "LOCAL_RANK"
# Slurm's, read for the three above when torchrun's are absent (a task started by `srun`).
ENV_SLURM_RANK = "SLURM_PROCID"
ENV_SLURM_WORLD_SIZE = "SLURM_NTASKS"
ENV_SLURM_LOCAL_RANK = "SLURM_LOCALID"
# Every TRAINWATCH_* variable this library reads (the ENV_* names above, less the removed ones;
# each is a setting's in trial_instrumentation/config.py); any other one in a trial's
# environment is reported as unknown (with the closest of these), so a typo is not a silent
# no-op.
TRIAL_ENV = tuple(value for key, value in list(globals().items())
                  if key.startswith("ENV_") and value.startswith("TRAINWATCH_")
                  and value not in REMOVED_ENV)
