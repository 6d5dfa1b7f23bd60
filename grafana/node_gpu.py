"""Node & GPU: every GPU's and host's hardware metrics, per instance and GPU."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from grafana.board import dashboard, query_variable
from grafana.layout import Layout
from grafana.panels import Mapping, Query, state_timeline, timeseries
from grafana.promql import GPU_INFO, GPU_LEGEND, HOST_INFO, Promql
from grafana.sections import add_host_panels, gpu_activity, gpu_ratio

UID = "trainwatch-node-gpu"
INSTANCE = 'instance=~"$instance"'
GPU = 'gpu=~"$gpu"'


def build(q: Promql) -> db.Dashboard:
    def gpu(metric: str) -> str:
        return q.with_gpu_name(q.exporter(metric, INSTANCE, GPU))

    layout = Layout()
    layout.row("GPUs")
    def raw(metric: str) -> str:
        return q.exporter(metric, INSTANCE, GPU)

    layout.add(gpu_activity(q, raw("trainwatch_gpu_utilization_ratio"),
                            raw("trainwatch_gpu_sm_active_ratio"),
                            raw("trainwatch_gpu_tensor_active_ratio")), 12, 8)
    layout.add(timeseries("Pipes and memory bandwidth (GPM)", "percentunit", [
        Query(gpu("trainwatch_gpu_dram_active_ratio"), f"{GPU_LEGEND} DRAM bandwidth"),
        Query(gpu("trainwatch_gpu_sm_occupancy_ratio"), f"{GPU_LEGEND} SM occupancy"),
        Query(gpu("trainwatch_gpu_pipe_active_ratio"), f"{GPU_LEGEND} {{{{pipe}}}} pipe"),
    ], description="Share of peak DRAM bandwidth used, resident warps against the maximum, and "
                   "time the non-tensor fp64/fp32/fp16/integer pipes worked (NVML GPM).",
        max_value=1), 12, 8)
    layout.add(gpu_ratio(q, "Memory controller utilization", raw(
        "trainwatch_gpu_memory_utilization_ratio"),
        description="Share of the sample period in which device memory was read or written; "
                    "high with low GPU utilization means memory-bound kernels."), 8, 8)
    layout.add(timeseries("GPU memory", "bytes", [
        Query(gpu("trainwatch_gpu_memory_used_bytes"), f"{GPU_LEGEND} used"),
        Query(gpu("trainwatch_gpu_memory_reserved_bytes"), f"{GPU_LEGEND} driver reserved"),
        Query(gpu("trainwatch_gpu_memory_free_bytes"), f"{GPU_LEGEND} free"),
    ], description="Memory used by processes (as nvidia-smi shows it), reserved by the "
                   "driver, and free."), 8, 8)
    layout.add(timeseries("Power", "watt", [
        Query(gpu("trainwatch_gpu_power_watts"), f"{GPU_LEGEND} draw"),
        Query(gpu("trainwatch_gpu_power_limit_watts"), f"{GPU_LEGEND} limit"),
    ], description="Board power draw against the enforced power limit; at the limit the "
                   "GPU slows its clocks."), 8, 8)
    layout.add(timeseries("Temperature", "celsius", [
        Query(gpu("trainwatch_gpu_temperature_celsius"), GPU_LEGEND),
    ], description="GPU core temperature."), 8, 8)
    layout.add(timeseries("Clocks", "hertz", [
        Query(gpu("trainwatch_gpu_sm_clock_hertz"), f"{GPU_LEGEND} SM"),
        Query(gpu("trainwatch_gpu_memory_clock_hertz"), f"{GPU_LEGEND} memory"),
    ], description="Current SM and memory clocks; a drop under load points at a throttle "
                   "reason."), 8, 8)
    layout.add(state_timeline("Throttle reasons", "bool_on_off", [
        Query(gpu("trainwatch_gpu_clock_event_active"), f"{GPU_LEGEND} {{{{reason}}}}"),
    ], description="NVML clock event reasons: why the clocks are below their maximum.",
        mappings=[Mapping(0, "inactive", "transparent"), Mapping(1, "active", "orange")]),
        8, 8)
    layout.add(timeseries("PCIe throughput", "Bps", [
        Query(gpu("trainwatch_gpu_pcie_receive_bytes_per_second"), f"{GPU_LEGEND} host→GPU"),
        Query(gpu("trainwatch_gpu_pcie_transmit_bytes_per_second"), f"{GPU_LEGEND} GPU→host"),
    ], description="PCIe traffic: averaged since the previous scrape where GPM works, else "
                   "sampled by NVML over 20 ms."), 12, 8)
    layout.add(timeseries("NVLink throughput", "Bps", [
        Query(gpu("trainwatch_gpu_nvlink_receive_bytes_per_second"), f"{GPU_LEGEND} received"),
        Query(gpu("trainwatch_gpu_nvlink_transmit_bytes_per_second"), f"{GPU_LEGEND} sent"),
    ], description="NVLink traffic over all of a GPU's links (NVML GPM; absent without GPM "
                   "or NVLink)."), 12, 8)
    layout.row("Host")
    add_host_panels(layout, q, matchers=[INSTANCE])
    return dashboard(UID, "trainwatch / Node & GPU",
                     "GPU and host hardware of the selected instances and GPUs.", layout, [
                         query_variable("instance", "Instance", f"label_values("
                                        f"{q.exporter(HOST_INFO)}, instance)"),
                         query_variable("gpu", "GPU", f"label_values("
                                        f"{q.exporter(GPU_INFO, INSTANCE)}, gpu)"),
                     ])
