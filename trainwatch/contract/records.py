"""The recording rules' names, shared by the rule generator and `trainwatch diagnose`.

Names follow level:metric:operations; the rate window is part of every rate-derived name
(``..._rate5m``), so a changed window shows in the name. The generator renders the rules under
these names; the CLI finds the window a Prometheus was deployed with from the names it loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Quantiles recorded for step and phase durations (label quantile="0.5" | "0.95").
QUANTILES = ("0.5", "0.95")
# The ``source`` label of the GPU-busy records -> what it measured, in words.
BUSY_SOURCES = {"sm_active": "SM activity (NVML GPM)",
                "utilization": "NVML utilization (any kernel running)"}
_SHARE_PREFIX = "trial_phase:trainwatch_trial_phase_seconds:share_rate"
# The GPU-seconds records' fixed evaluation interval as shipped: each of their samples is the
# GPU-seconds of one interval, so sum_over_time over any range is that range's GPU-seconds.
# Rules rendered with a shorter rate window (a live test, `trainwatch stack up --rate-window
# 30s`) record them at that window instead (rulegen Settings.usage_interval).
USAGE_INTERVAL = "1m"
# The ``cause`` label of trial:trainwatch_trial_gpu_idle:seconds_1m (a live rank's idle
# GPU-seconds, held less busy, split by the phase shares of that minute) -> the phases it is
# their share of, and the words `trainwatch usage` says it with (the verdict's own, where one
# exists: contract.checks CHECKS' titles). Bounded: these five values, no other.
IDLE_CAUSES = {
    "data": "waiting on data",  # dataloader_next (verdict "Data loader")
    "host_to_device": "host↔device copies",  # to_device + from_device ("Host↔device copies")
    "exchange": "the exchange between ranks",  # wait_for_ranks, no straggler named
    "straggler": "a straggler",  # wait_for_ranks while the trial's exchange cause is one
    "other": "other",  # the rest: compute phases, time outside the step, no timings at all
}
# `trainwatch usage --by` -> the label its groups are told apart by: trainwatch_trial_info's,
# which the usage rollups (RecordNames.rolled) carry, so grouping is a plain ``sum by``.
USAGE_GROUPS = {"experiment": "experiment", "namespace": "k8s_namespace", "job": "slurm_job_id",
                "user": "user", "node": "nodename"}
# The rollups' labels: a trial on one node, with the trial's placement (one series where a
# per-rank record has one per rank: 8 ranks a node, 8 times fewer series over a week).
ROLLUP_LABELS = ("experiment", "trial", *(label for label in USAGE_GROUPS.values()
                                          if label != "experiment"))
# The per-GPU owner labels of gpu:trainwatch_gpu_uninstrumented:seconds_1m: whom the GPU's
# processes work for (trainwatch_gpu_process_info's) and its node (trainwatch_host_info's).
OWNER_LABELS = ("pod_uid", "slurm_job_id", "nodename")
_ROLLUP_LEVEL = "trial_node"


@dataclass(frozen=True)
class RecordNames:
    """The recorded series' names for one rate window.

    Example:
        >>> RecordNames("5m").phase_share
        'trial_phase:trainwatch_trial_phase_seconds:share_rate5m'
        >>> RecordNames.discover(["up", "trial_phase:trainwatch_trial_phase_seconds:share_rate10s"])
        RecordNames(window='10s')
    """

    window: str

    @property
    def phase_share(self) -> str:
        return f"{_SHARE_PREFIX}{self.window}"

    # The raw series' rates, recorded first in the trial group so each raw series is read once
    # per evaluation; the shares, own step times and step quantiles read these.
    @property
    def run_age(self) -> str:
        """Per rank whose run started less than one window ago: seconds from its start to its
        counters' latest reading (its last push, or scrape when pulled). The rates of such a
        rank are over that time, not diluted over the part of the window before it began."""
        return f"trial:trainwatch_trial_run_age:seconds_rate{self.window}"

    @property
    def phase_sum_rate(self) -> str:
        """Per rank and phase: seconds per second spent in the phase."""
        return f"trial_phase:trainwatch_trial_phase_seconds_sum:rate{self.window}"

    @property
    def step_sum_rate(self) -> str:
        """Per rank: step seconds per second."""
        return f"trial:trainwatch_trial_step_seconds_sum:rate{self.window}"

    @property
    def step_count_rate(self) -> str:
        """Per rank: step observations per second."""
        return f"trial:trainwatch_trial_step_seconds_count:rate{self.window}"

    @property
    def phase_quantile(self) -> str:
        return f"trial_phase:trainwatch_trial_phase_seconds:quantile_rate{self.window}"

    @property
    def step_quantile(self) -> str:
        return f"trial:trainwatch_trial_step_seconds:quantile_rate{self.window}"

    @property
    def rank_step_mean(self) -> str:
        """Per rank: mean step time minus the time it waited for the other ranks."""
        return f"trial:trainwatch_trial_step_seconds:own_mean_rate{self.window}"

    @property
    def rank_spread(self) -> str:
        """Per trial (no rank label): slowest rank's rank_step_mean over the median rank's."""
        return f"trial_ranks:trainwatch_trial_step_seconds:spread_rate{self.window}"

    @property
    def scaling_efficiency(self) -> str:
        """Per trial: samples/s over (ranks x the single-rank step limit the trial measured)."""
        return f"trial_ranks:trainwatch_trial_scaling_efficiency:ratio_rate{self.window}"

    @property
    def loader_worker_cpu(self) -> str:
        """Per rank: CPU one DataLoader worker wants (ran + waited for), s/s."""
        return f"trial:trainwatch_trial_loader_worker_cpu:rate{self.window}"

    @property
    def loader_read_bytes(self) -> str:
        """Per rank: bytes/s its process tree made the block devices read."""
        return f"trial:trainwatch_trial_loader_read_bytes:rate{self.window}"

    @property
    def loader_rchar_bytes(self) -> str:
        """Per rank: bytes/s its process tree read through any read call."""
        return f"trial:trainwatch_trial_loader_rchar_bytes:rate{self.window}"

    @property
    def loader_cause(self) -> str:
        """Per data-loader-bound rank: why its loader is slow, in the ``cause`` label (1)."""
        return f"trial:trainwatch_trial_loader_cause:info_rate{self.window}"

    @property
    def exchange_cause(self) -> str:
        """Per multi-rank trial under the scaling threshold: what holds it back (``cause``)."""
        return f"trial_ranks:trainwatch_trial_exchange_cause:info_rate{self.window}"

    @property
    def mfu(self) -> str:
        """Per rank: model FLOPs utilization, samples/s x FLOPs per sample / its GPUs' peak."""
        return f"trial:trainwatch_trial_mfu:ratio_rate{self.window}"

    @property
    def trial_mfu(self) -> str:
        """Per trial (no rank label): the ranks' model FLOPs over their GPUs' peak."""
        return f"trial_ranks:trainwatch_trial_mfu:ratio_rate{self.window}"

    @property
    def steps_rate(self) -> str:
        return f"trial:trainwatch_trial_steps:rate{self.window}"

    @property
    def samples_rate(self) -> str:
        return f"trial:trainwatch_trial_samples:rate{self.window}"

    # The baseline (docs/design.md, "The run that got slower"): no rate window in these.
    @property
    def run_throughput(self) -> str:
        """Per rank of a run that ended clean, while its group is scraped: samples/s (steps/s,
        ``unit``) over its life, with its run's pid, nodename and world_size."""
        return "run:trainwatch_trial_throughput:rate_life"

    @property
    def run_clean_end(self) -> str:
        """Per rank of a run that ended clean: when (Unix seconds) its final push was."""
        return "run:trainwatch_trial_clean_end:timestamp_seconds"

    @property
    def run_phase_per_step(self) -> str:
        """Per rank and phase of a run that ended clean: seconds per step over its life."""
        return "run_phase:trainwatch_trial_phase_seconds:per_step_life"

    @property
    def baseline_phase(self) -> str:
        """Per experiment, world size and phase: the median run_phase_per_step of the runs the
        baseline's median is over (what the alert's ``cause`` compares a rank's phases with)."""
        return "experiment_phase:trainwatch_trial_phase_seconds:baseline_per_step"

    @property
    def baseline(self) -> str:
        """Per experiment, world size and unit: the median run_throughput of rank 0 of the last
        runs that ended clean (figures.BASELINE_RUNS), where at least BASELINE_MIN_RUNS."""
        return "experiment:trainwatch_trial_throughput:baseline_median"

    @property
    def baseline_low(self) -> str:
        """Per experiment, world size and unit: the slowest of those runs' run_throughput, the
        low edge of the baseline's own spread (a run above it is "no change", as `check`
        judges)."""
        return "experiment:trainwatch_trial_throughput:baseline_min"

    # "GPU busy", defined once: SM activity (GPM) where the GPU reports it, else NVML
    # utilization; the ``source`` label (BUSY_SOURCES) says which. Per GPU and per trial GPU.
    gpu_busy = "gpu:trainwatch_gpu_busy:ratio"
    trial_gpu_busy = "trial_gpu:trainwatch_gpu_busy:ratio"
    trial_gpu_utilization = "trial_gpu:trainwatch_gpu_utilization:ratio"
    trial_gpu_sm_active = "trial_gpu:trainwatch_gpu_sm_active:ratio"
    trial_gpu_tensor_active = "trial_gpu:trainwatch_gpu_tensor_active:ratio"
    trial_gpu_memory_used = "trial_gpu:trainwatch_gpu_memory_used:ratio"
    gpu_memory_used = "gpu:trainwatch_gpu_memory_used:ratio"
    # Per rank: the dense peak FLOP/s of its GPUs summed, in the precision the rank declared.
    trial_peak_flops = "trial:trainwatch_gpu_peak_flops:sum"
    # Pulled trials: when each was last scraped, kept while its target's scrapes fail.
    pulled_last_scrape = "trial:trainwatch_trial_last_scrape:timestamp_seconds"
    # Per live rank, each USAGE_INTERVAL: GPU-seconds its GPUs were held, and busy (GPU busy).
    gpu_seconds_held = "trial:trainwatch_trial_gpu_held:seconds_1m"
    gpu_seconds_busy = "trial:trainwatch_trial_gpu_busy:seconds_1m"
    # Per live rank and IDLE_CAUSES ``cause``: held less busy GPU-seconds of that interval,
    # split by the phase shares (the causes of one rank add up to its idle GPU-seconds).
    gpu_seconds_idle = "trial:trainwatch_trial_gpu_idle:seconds_1m"
    # Per live rank with a recorded MFU under TrainwatchGPUUnderutilized's mfu_low: its busy
    # GPU-seconds ("GPU busy, MFU low", the verdict's words).
    gpu_seconds_low_mfu = "trial:trainwatch_trial_gpu_busy_low_mfu:seconds_1m"
    # Per live rank with a recorded MFU: its held GPU-seconds, and those x its MFU (the GPU-
    # seconds at peak its model's FLOPs took); their sums' ratio is a group's MFU.
    gpu_seconds_held_mfu = "trial:trainwatch_trial_gpu_held_mfu_known:seconds_1m"
    gpu_seconds_model = "trial:trainwatch_trial_gpu_model:seconds_1m"
    # Per GPU the exporter reports (instance, gpu, uuid) that no live rank holds, each
    # USAGE_INTERVAL: 60 where processes run on it (the opt-in process collector's
    # trainwatch_gpu_process_info: uninstrumented use), split evenly over the pods and Slurm
    # jobs they work for (OWNER_LABELS); 60 where none does (held by nothing).
    gpu_seconds_uninstrumented = "gpu:trainwatch_gpu_uninstrumented:seconds_1m"
    gpu_seconds_unused = "gpu:trainwatch_gpu_unused:seconds_1m"
    # The same owners' shares of those GPU-seconds times the GPU-busy rule: busy, uninstrumented.
    gpu_seconds_uninstrumented_busy = "gpu:trainwatch_gpu_uninstrumented_busy:seconds_1m"

    @property
    def gpu_seconds_per_rank(self) -> tuple[str, ...]:
        """The per-rank GPU-seconds records, each rolled up (``rolled``) for `usage`."""
        return (self.gpu_seconds_held, self.gpu_seconds_busy, self.gpu_seconds_idle,
                self.gpu_seconds_low_mfu, self.gpu_seconds_held_mfu, self.gpu_seconds_model)

    @staticmethod
    def rolled(record: str) -> str:
        """A per-rank GPU-seconds record summed per trial and node, with ROLLUP_LABELS (and
        ``cause``, the idle one): what `trainwatch usage`, its page and the GPU-hours dashboard
        read.

        >>> RecordNames.rolled("trial:trainwatch_trial_gpu_held:seconds_1m")
        'trial_node:trainwatch_trial_gpu_held:seconds_1m'
        """
        level, rest = record.split(":", 1)
        if level != "trial":
            raise ValueError(f"{record} is not a per-rank record")
        return f"{_ROLLUP_LEVEL}:{rest}"

    @staticmethod
    def fleet(record: str) -> str:
        """A per-rank GPU-seconds record summed over the whole fleet (by ``cause``, the idle
        one): a few series a week, what `trainwatch report --usage` plots over time.

        >>> RecordNames.fleet("trial:trainwatch_trial_gpu_idle:seconds_1m")
        'fleet:trainwatch_trial_gpu_idle:seconds_1m'
        """
        return f"fleet:{RecordNames.rolled(record).split(':', 1)[1]}"

    @property
    def cpu_utilization(self) -> str:
        return f"instance:trainwatch_cpu_utilization:ratio_rate{self.window}"

    def device_rate(self, stem: str) -> str:
        return f"instance_device:trainwatch_{stem}:rate{self.window}"

    @classmethod
    def discover(cls, rule_names: Iterable[str]) -> RecordNames | None:
        """The names of the window a set of loaded recording rules uses; None when no phase
        share rule is among them (the trainwatch rules are not loaded)."""
        windows = sorted({n[len(_SHARE_PREFIX):] for n in rule_names
                          if n.startswith(_SHARE_PREFIX) and len(n) > len(_SHARE_PREFIX)})
        return cls(windows[0]) if windows else None
