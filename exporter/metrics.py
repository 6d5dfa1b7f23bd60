"""The exporter's part of the metric contract (docs/design.md): every name, its type, labels
and HELP text, once.

Collectors build their families from these specs at scrape time, and the README's metric list
is checked against ``ALL`` by a test, so a name lives in exactly one place.

>>> family = GPU_TEMPERATURE.family()
>>> family.add_metric(["0", "GPU-x"], 41.0)
>>> family.name
'trainwatch_gpu_temperature_celsius'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from exporter.family import Family

NAMESPACE = "trainwatch"
GPU_LABELS = ("gpu", "uuid")


@dataclass(frozen=True, eq=False)  # identity hash: specs are singletons and dict keys per scrape
class MetricSpec:
    """One metric of the contract; ``family()`` returns a fresh, empty family for one scrape."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: Literal["gauge", "counter", "untyped"] = "gauge"

    def __post_init__(self) -> None:
        if not self.name.startswith(NAMESPACE + "_"):
            raise ValueError(f"metric {self.name!r} is outside the {NAMESPACE}_ namespace")
        if (self.kind == "counter") != self.name.endswith("_total"):
            raise ValueError(f"metric {self.name!r}: `_total` belongs on counters and only there")

    def family(self) -> Family:
        return Family(self)


def _gpu(name: str, help_text: str, *extra: str, kind: Literal["gauge", "counter"] = "gauge"
         ) -> MetricSpec:
    return MetricSpec(f"{NAMESPACE}_gpu_{name}", help_text, (*GPU_LABELS, *extra), kind)


GPU_INFO = _gpu("info", "NVIDIA GPU identity; always 1. Join on uuid to trainwatch_trial_gpu_info.",
                "name", "pci_bus_id", "driver_version")
GPU_UTILIZATION = _gpu("utilization_ratio", "Fraction (0-1) of the last sample period (1/6 s to "
                       "1 s, board-dependent) in which at least one kernel was running on the GPU.")
GPU_MEMORY_UTILIZATION = _gpu("memory_utilization_ratio", "Fraction (0-1) of the last sample "
                              "period in which device memory was being read or written.")
GPU_MEMORY_FREE = _gpu("memory_free_bytes", "Device memory available to allocate, in bytes.")
GPU_MEMORY_USED = _gpu("memory_used_bytes", "Device memory allocated by processes, in bytes, "
                       "as nvidia-smi shows it (NVML memory v2 `used`: the driver's reservation "
                       "is not in it).")
GPU_MEMORY_RESERVED = _gpu("memory_reserved_bytes", "Device memory the driver reserves for "
                           "itself, in bytes; neither used nor free (NVML memory v2).")
GPU_MEMORY_TOTAL = _gpu("memory_total_bytes", "Installed device memory, in bytes.")
GPU_POWER = _gpu("power_watts", "Power drawn by the board (GPU, memory, fans), in watts.")
GPU_POWER_LIMIT = _gpu("power_limit_watts", "Power limit the driver currently enforces, in "
                       "watts; clocks are lowered to stay below it.")
GPU_ENERGY = _gpu("energy_joules_total", "Energy consumed since the driver was loaded, in joules.",
                  kind="counter")
GPU_TEMPERATURE = _gpu("temperature_celsius", "GPU die temperature, in degrees Celsius.")
GPU_SM_CLOCK = _gpu("sm_clock_hertz", "Current streaming-multiprocessor clock, in hertz.")
GPU_MEMORY_CLOCK = _gpu("memory_clock_hertz", "Current memory clock, in hertz.")
GPU_PEAK_FLOPS = _gpu("peak_flops", "Dense (no sparsity) peak of the GPU's arithmetic in this "
                      "precision at the boost clock, in FLOP/s, from NVIDIA's datasheet for its "
                      "product name (or --gpu.peak-flops); absent for an unknown product.",
                      "dtype")
GPU_PCIE_TX = _gpu("pcie_transmit_bytes_per_second", "PCIe bytes per second sent by the GPU: "
                   "the average since the previous scrape where GPM works, else sampled by NVML "
                   "over 20 ms at scrape time.")
GPU_PCIE_RX = _gpu("pcie_receive_bytes_per_second", "PCIe bytes per second received by the GPU: "
                   "the average since the previous scrape where GPM works, else sampled by NVML "
                   "over 20 ms at scrape time.")
# NVML GPU Performance Monitoring (Hopper and newer): averages over the time since the
# previous scrape, and left out where GPM is not supported (never exported as 0).
GPU_SM_ACTIVE = _gpu("sm_active_ratio", "Fraction (0-1) of SMs busy, averaged over the time "
                     "since the previous scrape (GPM). Unlike utilization_ratio (any kernel "
                     "running), low here means the kernels leave most SMs idle.")
GPU_SM_OCCUPANCY = _gpu("sm_occupancy_ratio", "Resident warps as a fraction (0-1) of the SMs' "
                        "maximum, averaged over the time since the previous scrape (GPM).")
GPU_TENSOR_ACTIVE = _gpu("tensor_active_ratio", "Fraction (0-1) of time the SMs' tensor cores "
                         "were busy (any precision), averaged over the time since the previous "
                         "scrape (GPM).")
GPU_DRAM_ACTIVE = _gpu("dram_active_ratio", "Device-memory bandwidth used, as a fraction (0-1) of "
                       "the maximum, averaged over the time since the previous scrape (GPM).")
GPU_PIPE_ACTIVE = _gpu("pipe_active_ratio", "Fraction (0-1) of time the SMs ran non-tensor math "
                       "of this kind (fp64, fp32, fp16, integer), averaged over the time since "
                       "the previous scrape (GPM).", "pipe")
GPU_NVLINK_TX = _gpu("nvlink_transmit_bytes_per_second", "NVLink bytes per second sent by the "
                     "GPU over all links, averaged over the time since the previous scrape (GPM).")
GPU_NVLINK_RX = _gpu("nvlink_receive_bytes_per_second", "NVLink bytes per second received by "
                     "the GPU over all links, averaged over the time since the previous scrape "
                     "(GPM).")
GPU_CLOCK_EVENT = _gpu("clock_event_active", "1 if this reason is currently holding the GPU's "
                       "clocks down (throttling), else 0.", "reason")
GPU_ECC_ERRORS = _gpu("ecc_errors_total", "ECC memory errors since the driver was loaded, by "
                      "kind (corrected or uncorrected).", "error", kind="counter")
GPU_REMAPPED_ROWS = _gpu("remapped_rows", "Memory rows remapped to spares after ECC errors, by "
                         "kind (correctable or uncorrectable).", "kind")
GPU_ROW_REMAP_PENDING = _gpu("row_remap_pending", "1 if a row remap waits for the GPU to be "
                             "reset (until then the bad row stays in use), else 0.")
GPU_ROW_REMAP_FAILURE = _gpu("row_remap_failure", "1 if a row could not be remapped (no spare "
                             "rows left): the GPU needs service, else 0.")

GPU_PROCESS_MEMORY = _gpu("process_memory_bytes", "Device memory used by a process, in bytes.",
                          "pid")
GPU_PROCESS_UTILIZATION = _gpu("process_utilization_ratio", "Fraction (0-1) of the latest sample "
                               "period in which a kernel of this process was running.", "pid")
GPU_PROCESS_INFO = _gpu("process_info", "A process on the GPU and whom it works for, from its "
                        "/proc/<pid>/cgroup: Kubernetes pod UID and container id, or Slurm job "
                        "id (empty where none); always 1. Join on uuid and pid.", "pid",
                        "pod_uid", "container_id", "slurm_job_id")

HOST_INFO = MetricSpec(f"{NAMESPACE}_host_info", "Host identity; always 1. Join on nodename to "
                       "trainwatch_trial_info.", ("nodename",))
CPU_SECONDS = MetricSpec(f"{NAMESPACE}_cpu_seconds_total", "CPU time spent in each mode, summed "
                         "over all CPUs, in seconds (user and nice include guest time).",
                         ("mode",), "counter")
# Untyped, not gauge: the contract's name ends in `_count`, which promtool's linter reserves
# for histograms and summaries unless the type is left open.
CPU_COUNT = MetricSpec(f"{NAMESPACE}_cpu_count", "Logical CPUs of the host.", kind="untyped")
MEMORY_AVAILABLE = MetricSpec(f"{NAMESPACE}_memory_available_bytes", "Memory available to start "
                              "new programs without swapping (MemAvailable), in bytes.")
MEMORY_TOTAL = MetricSpec(f"{NAMESPACE}_memory_total_bytes", "Usable physical memory, in bytes.")
NETWORK_RECEIVE = MetricSpec(f"{NAMESPACE}_network_receive_bytes_total", "Bytes received by a "
                             "network device.", ("device",), "counter")
NETWORK_TRANSMIT = MetricSpec(f"{NAMESPACE}_network_transmit_bytes_total", "Bytes sent by a "
                              "network device.", ("device",), "counter")
DISK_READS = MetricSpec(f"{NAMESPACE}_disk_reads_completed_total", "Reads completed by a block "
                        "device (rate() gives read IOPS).", ("device",), "counter")
DISK_WRITES = MetricSpec(f"{NAMESPACE}_disk_writes_completed_total", "Writes completed by a block "
                         "device (rate() gives write IOPS).", ("device",), "counter")
DISK_READ_BYTES = MetricSpec(f"{NAMESPACE}_disk_read_bytes_total", "Bytes read from a block "
                             "device.", ("device",), "counter")
DISK_WRITTEN_BYTES = MetricSpec(f"{NAMESPACE}_disk_written_bytes_total", "Bytes written to a "
                                "block device.", ("device",), "counter")
# node_exporter's node_disk_io_time_seconds_total: rate() is the fraction of time the device
# had I/O in flight (its utilisation, as iostat's %util).
DISK_IO_TIME = MetricSpec(f"{NAMESPACE}_disk_io_time_seconds_total", "Time a block device had "
                          "I/O in flight, in seconds (rate() gives its busy fraction, 0-1).",
                          ("device",), "counter")
# node_exporter's node_network_speed_bytes; left out where the kernel reports no speed.
NETWORK_SPEED = MetricSpec(f"{NAMESPACE}_network_speed_bytes", "Link speed of a network device, "
                           "in bytes per second (absent where the kernel reports none).",
                           ("device",))

GPU_NVML_ABSENT = MetricSpec(f"{NAMESPACE}_gpu_nvml_absent", "1 when the node has no NVML "
                             "library or no NVIDIA driver loaded (a CPU-only node: no GPU to read, "
                             "a state, not a failure), else 0.")

SCRAPE_SUCCESS = MetricSpec(f"{NAMESPACE}_scrape_collector_success", "1 if the collector read "
                            "everything it looks after in this scrape, 0 if anything failed.",
                            ("collector",))
SCRAPE_DURATION = MetricSpec(f"{NAMESPACE}_scrape_collector_duration_seconds", "Time the "
                             "collector took in this scrape, in seconds.", ("collector",))
SCRAPE_TIMEOUTS = MetricSpec(f"{NAMESPACE}_scrape_collector_timeouts_total", "Scrapes in which "
                             "the collector gave up on a read that missed the scrape's deadline "
                             "(a hung driver), serving what answered.", ("collector",), "counter")
SCRAPE_WARNINGS_SUPPRESSED = MetricSpec(
    f"{NAMESPACE}_scrape_collector_warnings_suppressed_total", "Collector failures logged at "
    "debug level instead of as a warning: each collector writes at most one warning a minute.",
    ("collector",), "counter")
BUILD_INFO = MetricSpec(f"{NAMESPACE}_exporter_build_info", "trainwatch-exporter version; "
                        "always 1.", ("version",))

ALL: tuple[MetricSpec, ...] = tuple(v for v in globals().values() if isinstance(v, MetricSpec))
