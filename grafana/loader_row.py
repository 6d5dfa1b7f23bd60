"""The Trial profile's "Why is the loader slow" row: the figures `trainwatch diagnose` tells the
loader's causes apart with (trainwatch/diagnose/loader_cause.py), each with its threshold from
thresholds.yaml (`TrainwatchDataloaderBound`'s `causes`) drawn in."""

from __future__ import annotations

from grafana.layout import Layout
from grafana.panels import Query, timeseries
from grafana.promql import TRIAL_LEGEND, Promql, parens
from trainwatch.contract.alerts import DATALOADER_BOUND
from trainwatch.contract.promql import BY_TRIAL, TRIAL_LABELS, number, on
from trial_instrumentation import names

NODE_LEGEND = "{{instance}} ({{nodename}}) {{device}}"
WORKERS_PROCESS = f'process="{names.PROCESS_WORKERS}"'


def add_loader_row(layout: Layout, q: Promql, *matchers: str) -> None:
    causes, window = q.settings.alert(DATALOADER_BOUND).causes, q.settings.rate_window

    def rate(metric: str, *extra: str) -> str:
        return f"sum {BY_TRIAL} (rate({q.trial(metric + '_total', *matchers, *extra)}[{window}]))"

    def on_trial_nodes(expr: str) -> str:
        return (f"{parens(expr)} * on(instance) group_left(nodename) "
                f"({q.trial_nodes(*matchers)})")

    workers = f"sum {BY_TRIAL} ({q.trial(names.LOADER_WORKERS, *matchers)} > 0)"
    ran = rate(names.LOADER_CPU_SECONDS, WORKERS_PROCESS)
    wanted = f"({ran} + {rate(names.LOADER_CPU_WAIT_SECONDS)}) / {on(*TRIAL_LABELS)} {workers}"
    layout.row("Why is the loader slow")
    layout.add(timeseries("CPU wanted per loader worker", "suffix: CPU-s/s", [
        Query(q.with_nodename(wanted), TRIAL_LEGEND),
    ], description="CPU seconds per second one DataLoader worker ran plus waited for on a run "
                   "queue, over the rate window. At or above the line the workers compute: "
                   "too few workers where the node has idle cores, decode-bound where it has "
                   f"none; below it they wait (threshold {number(causes['worker_busy'])}, "
                   "thresholds.yaml)."), 8, 8)
    disk = f"rate({q.exporter('trainwatch_disk_io_time_seconds_total')}[{window}])"
    layout.add(timeseries("Disk busy (the trial's nodes)", "percentunit", [
        Query(on_trial_nodes(disk), NODE_LEGEND),
    ], description="Fraction of time each block device of the trial's nodes had I/O in flight. "
                   "Workers that wait while a disk the trial reads from is busy above the line: "
                   "storage-bound.", max_value=1, threshold=(causes["disk_busy"], "red")), 8, 8)
    nic = (f"rate({q.exporter('trainwatch_network_receive_bytes_total')}[{window}]) "
           f"/ {q.exporter('trainwatch_network_speed_bytes')}")
    layout.add(timeseries("NIC receive / link speed (the trial's nodes)", "percentunit", [
        Query(on_trial_nodes(nic), NODE_LEGEND),
    ], description="Bytes received over the link speed, per NIC of the trial's nodes (absent "
                   "where the kernel reports no speed). Workers that wait, disks idle, the "
                   "trial's reads (rchar) far above its block-device reads and a NIC above the "
                   "line: remote storage.", max_value=1,
        threshold=(causes["network_busy"], "red")), 8, 8)
