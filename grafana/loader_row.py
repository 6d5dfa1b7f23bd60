"""The Trial profile's "Why is the loader slow" row: the figures `trainwatch diagnose` tells the
loader's causes apart with (trainwatch/diagnose/loader_cause.py), each with its threshold from
thresholds.yaml (`TrainwatchDataloaderBound`'s `causes`) drawn in."""

from __future__ import annotations

from grafana.layout import Layout
from grafana.panels import Query, timeseries
from grafana.promql import TRIAL_LEGEND, Promql, parens
from trainwatch.contract import figures
from trainwatch.contract.alerts import DATALOADER_BOUND
from trainwatch.contract.promql import matchers as written
from trainwatch.contract.promql import number

NODE_LEGEND = "{{instance}} ({{nodename}}) {{device}}"


def add_loader_row(layout: Layout, q: Promql, *matchers: str) -> None:
    causes, window = q.settings.alert(DATALOADER_BOUND).causes, q.settings.rate_window

    def on_trial_nodes(expr: str) -> str:
        return (f"{parens(expr)} * on(instance) group_left(nodename) "
                f"({q.trial_nodes(*matchers)})")

    # The figure the loader's cause is decided on, as recorded and as diagnose reads it
    # (contract.figures.loader_worker_cpu): over the seconds the workers lived.
    wanted = figures.loader_worker_cpu(written(q.settings.selector("trial"), *matchers), window)
    layout.row("Why is the loader slow")
    layout.add(timeseries("CPU wanted per loader worker", "suffix: CPU-s/s", [
        Query(q.with_nodename(wanted), TRIAL_LEGEND),
    ], description="CPU seconds per second one DataLoader worker ran plus waited for on a run "
                   "queue, over the seconds the workers lived in the rate window (with no "
                   "workers, the trial process's own CPU). At or above the line the workers compute: "
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
