"""The host collector on this machine agrees with the real node_exporter, scraped around it."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from exporter.host import NODENAME_ENV, HostCollector, cpu_samples, disk_samples, network_samples
from tests.stack import Service, http_get, start_node_exporter
from trial_instrumentation import names as trial_names

NODE_COLLECTORS = ("--collector.disable-defaults", "--collector.cpu", "--collector.meminfo",
                   "--collector.netdev", "--collector.diskstats")
# (trainwatch counter, node_exporter counter), compared per `device`.
DEVICE_COUNTERS = [
    ("trainwatch_network_receive_bytes_total", "node_network_receive_bytes_total"),
    ("trainwatch_network_transmit_bytes_total", "node_network_transmit_bytes_total"),
    ("trainwatch_disk_reads_completed_total", "node_disk_reads_completed_total"),
    ("trainwatch_disk_writes_completed_total", "node_disk_writes_completed_total"),
    ("trainwatch_disk_read_bytes_total", "node_disk_read_bytes_total"),
    ("trainwatch_disk_written_bytes_total", "node_disk_written_bytes_total"),
]
# /proc/stat is in 1/100 s, and iowait may step back a little on tickless kernels; a unit
# error (ticks, ms) is off by 100x or more.
CPU_SLACK_SECONDS = 0.5
# MemFree differs from MemAvailable by the page cache (hundreds of MiB here); KiB by 1024x.
MEMORY_SLACK_BYTES = 64 * 2**20

Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


def parse(text: str) -> Samples:
    out: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name][frozenset(s.labels.items())] = s.value
    return out


def by(samples: Samples, name: str, label: str) -> dict[str, float]:
    """Sum ``name`` by one label (node_exporter's CPU counters are per cpu, ours are not)."""
    totals: dict[str, float] = defaultdict(float)
    for labels, value in samples[name].items():
        totals[dict(labels)[label]] += value
    return dict(totals)


def scrape_node(node: Service) -> Samples:
    status, body = http_get(node.url + "/metrics")
    assert status == 200
    return parse(body.decode())


def scrape_collector(collector: Collector) -> Samples:
    registry = CollectorRegistry()
    registry.register(collector)
    return parse(generate_latest(registry).decode())


@pytest.fixture(scope="module")
def bracketed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Samples, Samples,
                                                                          Samples]]:
    """node_exporter before, trainwatch's host collector, node_exporter after."""
    workdir: Path = tmp_path_factory.mktemp("node")
    with start_node_exporter(workdir, *NODE_COLLECTORS) as node:
        collector = HostCollector(psutil)
        scrape_collector(collector)  # warm psutil's wrap-around cache and imports
        before = scrape_node(node)
        ours = scrape_collector(collector)
        after = scrape_node(node)
        yield before, ours, after


def within(value: float, before: float, after: float, slack: float) -> bool:
    return min(before, after) - slack <= value <= max(before, after) + slack


def test_cpu_seconds_by_mode_match_node_exporter(bracketed: tuple[Samples, ...]) -> None:
    before, ours, after = bracketed
    node0 = by(before, "node_cpu_seconds_total", "mode")
    node1 = by(after, "node_cpu_seconds_total", "mode")
    mine = by(ours, "trainwatch_cpu_seconds_total", "mode")
    assert {"user", "system", "idle"} <= set(mine) <= set(node0)
    assert mine["idle"] > 1 and mine["user"] > 1  # big enough that a unit error shows
    for mode, seconds in mine.items():
        assert within(seconds, node0[mode], node1[mode], CPU_SLACK_SECONDS), (
            mode, seconds, node0[mode], node1[mode])
    cpus = {dict(labels)["cpu"] for labels in before["node_cpu_seconds_total"]}
    assert ours["trainwatch_cpu_count"][frozenset()] == len(cpus)


def test_memory_matches_node_exporter(bracketed: tuple[Samples, ...]) -> None:
    before, ours, after = bracketed
    available = ours["trainwatch_memory_available_bytes"][frozenset()]
    assert within(available, before["node_memory_MemAvailable_bytes"][frozenset()],
                  after["node_memory_MemAvailable_bytes"][frozenset()], MEMORY_SLACK_BYTES)
    assert (ours["trainwatch_memory_total_bytes"][frozenset()]
            == before["node_memory_MemTotal_bytes"][frozenset()])


@pytest.mark.parametrize(("mine", "theirs"), DEVICE_COUNTERS)
def test_device_counters_match_node_exporter(bracketed: tuple[Samples, ...], mine: str,
                                             theirs: str) -> None:
    before, ours, after = bracketed
    node0, node1 = by(before, theirs, "device"), by(after, theirs, "device")
    values = by(ours, mine, "device")
    assert values and set(values) == set(node0), "same devices, same exclusions"
    assert any(v > 0 for v in values.values()), "an all-zero comparison proves no unit"
    for device, value in values.items():
        assert within(value, node0[device], node1[device], 0), (device, value, node0[device])


def test_host_info_names_the_node(bracketed: tuple[Samples, ...]) -> None:
    _, ours, _ = bracketed
    (labels,) = ours["trainwatch_host_info"]
    assert dict(labels) == {"nodename": os.uname().nodename}


def test_nodename_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    # On Kubernetes the DaemonSet passes spec.nodeName; the trial reads the same variable.
    assert NODENAME_ENV == trial_names.ENV_NODENAME, "both sides of the join read one variable"
    monkeypatch.setenv(NODENAME_ENV, "gpu-node-7")
    registry = CollectorRegistry()
    registry.register(HostCollector(psutil))
    assert registry.get_sample_value("trainwatch_host_info", {"nodename": "gpu-node-7"}) == 1


def test_partitions_loop_and_loopback_are_left_out() -> None:
    io = SimpleNamespace(read_count=1, write_count=2, read_bytes=512, write_bytes=1024)
    disks = {name: io for name in ("sda", "sda1", "nvme0n1", "nvme0n1p2", "loop3", "ram0",
                                   "dm-0", "md127")}
    assert {labels[0] for _, labels, _ in disk_samples(disks)} == {"sda", "nvme0n1", "dm-0",
                                                                   "md127"}
    nic = SimpleNamespace(bytes_recv=10, bytes_sent=20)
    assert {labels[0] for _, labels, _ in network_samples({"lo": nic, "eth0": nic})} == {"eth0"}


def test_guest_time_is_not_counted_twice() -> None:
    times = psutil.cpu_times()
    modes = {labels[0] for spec, labels, _ in cpu_samples(times, 2)
             if spec.name == "trainwatch_cpu_seconds_total"}
    assert "guest" not in modes and "guest_nice" not in modes
    assert {"user", "system", "idle"} <= modes
