"""Panels that several dashboards show, written once and scoped by the caller."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from grafana.layout import Layout
from grafana.panels import Panel, Query, timeseries
from grafana.promql import GPU_LEGEND, Promql
from trainwatch.contract.promql import select


def gpu_ratio(q: Promql, title: str, expr: str, *, description: str,
              legend: str = GPU_LEGEND) -> Panel:
    """A 0–1 ratio per GPU, its legend naming host, index and model (the gpu_info join)."""
    return timeseries(title, "percentunit", [Query(q.with_gpu_name(expr), legend)],
                      description=description, max_value=1)


BUSY_DESCRIPTION = (
    "GPU busy, as the alerts and trainwatch diagnose read it (gpu:trainwatch_gpu_busy:ratio): "
    "SM activity where the GPU reports it (source sm_active, NVML GPM), else NVML utilization "
    "(source utilization, the share of time any kernel ran).")
MFU_DESCRIPTION = (
    "MFU (model FLOPs utilization): samples/s x the model's FLOPs per sample (the trial's "
    "trainwatch_trial_model_flops_per_sample) over the dense peak of its GPUs in the precision "
    "it declared (trainwatch_gpu_peak_flops: datasheet, boost clock, no sparsity). Empty where "
    "the trial gave no FLOPs figure or a GPU's peak is unknown; 40-60% is good for large "
    "transformers, under 20% leaves most of the hardware idle.")
ACTIVITY_DESCRIPTION = (
    "NVML utilization is the share of time *any* kernel ran; SM activity is the share of SMs "
    "busy and tensor activity the share of time tensor cores worked (NVML GPM, Hopper and "
    "newer, averaged since the previous scrape). 99% utilization beside 20% SM activity means "
    "small or launch-bound kernels.")


def gpu_activity(q: Promql, utilization: str, sm_active: str, tensor_active: str, *,
                 legend: str = GPU_LEGEND) -> Panel:
    """NVML utilization beside GPM SM and tensor activity, per GPU, on one axis."""
    return timeseries("Utilization vs. SM and tensor activity", "percentunit", [
        Query(q.with_gpu_name(utilization), f"{legend} utilization"),
        Query(q.with_gpu_name(sm_active), f"{legend} SM active"),
        Query(q.with_gpu_name(tensor_active), f"{legend} tensor active"),
    ], description=ACTIVITY_DESCRIPTION, max_value=1)


def add_host_panels(layout: Layout, q: Promql, matchers: Sequence[str] = (),
                    restrict: Callable[[str], str] = lambda expr: expr) -> None:
    """CPU, memory, network and disk of the hosts picked by ``matchers`` and ``restrict``.

    ``matchers`` go inside every selector (Node & GPU's ``instance=~"$instance"``);
    ``restrict`` wraps every expression (Trial profile's join to the trial's nodes).
    """
    def rule(name: str) -> str:
        return restrict(select(name, *matchers))

    def device(stem: str) -> str:
        return rule(q.names.device_rate(stem))

    def raw(metric: str) -> str:
        return restrict(q.exporter(metric, *matchers))

    layout.add(timeseries("CPU utilization", "percentunit", [
        Query(rule(q.names.cpu_utilization), "{{instance}}"),
    ], description="Share of CPU time not idle, all cores.", max_value=1), 8, 8)
    layout.add(timeseries("Memory", "bytes", [
        Query(raw("trainwatch_memory_available_bytes"), "{{instance}} available"),
        Query(raw("trainwatch_memory_total_bytes"), "{{instance}} total"),
    ], description="Memory available to new processes without swapping, against the total."),
        8, 8)
    layout.add(timeseries("Network throughput", "Bps", [
        Query(device("network_receive_bytes"), "{{instance}} {{device}} received"),
        Query(device("network_transmit_bytes"), "{{instance}} {{device}} sent"),
    ], description="Bytes per second received and sent, per network device."), 8, 8)
    layout.add(timeseries("Disk IOPS", "iops", [
        Query(device("disk_reads_completed"), "{{instance}} {{device}} reads"),
        Query(device("disk_writes_completed"), "{{instance}} {{device}} writes"),
    ], description="Completed reads and writes per second, per block device."), 12, 8)
    layout.add(timeseries("Disk throughput", "Bps", [
        Query(device("disk_read_bytes"), "{{instance}} {{device}} read"),
        Query(device("disk_written_bytes"), "{{instance}} {{device}} written"),
    ], description="Bytes per second read and written, per block device."), 12, 8)
