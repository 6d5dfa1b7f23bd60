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

from benchmarks.stack import Service, http_get, start_node_exporter
from exporter.collector import ScrapeCollector
from exporter.host import (
    DISK_DEVICE_EXCLUDE,
    NODENAME_ENV,
    HostCollector,
    cpu_samples,
    disk_samples,
    diskstats_io_seconds,
    link_speed_bytes,
    network_samples,
)
from trial_instrumentation import names as trial_names

# node_exporter 1.5 (Debian's) still lists zram; our default is 1.6+'s, which leaves it out.
NODE_COLLECTORS = ("--collector.disable-defaults", "--collector.cpu", "--collector.meminfo",
                   "--collector.netdev", "--collector.diskstats",
                   f"--collector.diskstats.device-exclude={DISK_DEVICE_EXCLUDE}")
# (trainwatch counter, node_exporter counter), compared per `device`.
DEVICE_COUNTERS = [
    ("trainwatch_network_receive_bytes_total", "node_network_receive_bytes_total"),
    ("trainwatch_network_transmit_bytes_total", "node_network_transmit_bytes_total"),
    ("trainwatch_disk_reads_completed_total", "node_disk_reads_completed_total"),
    ("trainwatch_disk_writes_completed_total", "node_disk_writes_completed_total"),
    ("trainwatch_disk_read_bytes_total", "node_disk_read_bytes_total"),
    ("trainwatch_disk_written_bytes_total", "node_disk_written_bytes_total"),
    ("trainwatch_disk_io_time_seconds_total", "node_disk_io_time_seconds_total"),
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
    # Every mode node_exporter reports, none left out: a dropped mode (iowait, steal) would be
    # counted as busy by the utilization rule, which subtracts idle, iowait and steal.
    assert set(mine) == set(node0)
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
        # Exact but for the last bit of a unit conversion: node_exporter multiplies ms by 0.001
        # (397.34000000000003), the exporter divides by 1000 (397.34).
        slack = 1e-12 * abs(value)
        assert within(value, node0[device], node1[device], slack), (device, value, node0[device])


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


# node_exporter 1.5's diskstats device-exclude, applied by hand to the names it exists for:
# (device, whole disk?). Partitions of every driver's naming (IDE hd, SCSI/SATA sd, virtio vd,
# Xen xvd, NVMe), RAM disks, loop devices and floppies are left out; their I/O is already in
# the whole disk's counters, so counting them doubles disk I/O.
DISK_DEVICES = [
    ("sda", True), ("sda1", False), ("sdb12", False),
    ("hda", True), ("hda1", False),
    ("vda", True), ("vda1", False), ("vdb3", False),
    ("xvda", True), ("xvda1", False), ("xvdf2", False),
    ("nvme0n1", True), ("nvme0n1p2", False), ("nvme10n3p1", False),
    ("loop3", False), ("ram0", False), ("fd0", False), ("zram0", False), ("zram12", False),
    ("dm-0", True), ("md127", True), ("mmcblk0", True), ("sr0", True),
]
DISK_METRICS = ("trainwatch_disk_reads_completed_total", "trainwatch_disk_writes_completed_total",
                "trainwatch_disk_read_bytes_total", "trainwatch_disk_written_bytes_total")


def disk_io(seed: int) -> SimpleNamespace:
    return SimpleNamespace(read_count=seed, write_count=seed + 1, read_bytes=512 * seed,
                           write_bytes=1024 * seed)


def test_disk_counters_are_per_whole_disk_with_node_exporters_default_exclusions() -> None:
    disks = {name: disk_io(i + 1) for i, (name, _) in enumerate(DISK_DEVICES)}
    samples = disk_samples(disks)
    whole = sorted(name for name, kept in DISK_DEVICES if kept)
    for metric in DISK_METRICS:
        got = {labels[0]: value for spec, labels, value in samples if spec.name == metric}
        assert sorted(got) == whole, metric
    values = {(spec.name, labels[0]): value for spec, labels, value in samples}
    for i, (name, kept) in enumerate(DISK_DEVICES):
        if kept:  # each counter from its own psutil field, unconverted (psutil gives bytes)
            seed = i + 1
            assert [values[(metric, name)] for metric in DISK_METRICS] == \
                [seed, seed + 1, 512 * seed, 1024 * seed], name


def test_network_counters_per_device_without_loopback() -> None:
    per_nic = {"lo": SimpleNamespace(bytes_recv=5, bytes_sent=6),
               "eth0": SimpleNamespace(bytes_recv=10, bytes_sent=20),
               "ib0": SimpleNamespace(bytes_recv=300, bytes_sent=4000)}
    got = {(spec.name, labels): value for spec, labels, value in network_samples(per_nic)}
    assert got == {
        ("trainwatch_network_receive_bytes_total", ("eth0",)): 10,
        ("trainwatch_network_transmit_bytes_total", ("eth0",)): 20,
        ("trainwatch_network_receive_bytes_total", ("ib0",)): 300,
        ("trainwatch_network_transmit_bytes_total", ("ib0",)): 4000,
    }


# psutil.cpu_times() on Linux: the eight /proc/stat modes node_exporter reports, plus guest and
# guest_nice, which the kernel already counts inside user and nice.
LINUX_CPU_TIMES = {"user": 1.0, "nice": 2.0, "system": 3.0, "idle": 4.0, "iowait": 5.0,
                   "irq": 6.0, "softirq": 7.0, "steal": 8.0, "guest": 9.0, "guest_nice": 10.0}
NODE_EXPORTER_MODES = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}


def test_cpu_seconds_for_each_kernel_mode_and_guest_not_twice() -> None:
    samples = cpu_samples(SimpleNamespace(**LINUX_CPU_TIMES), 4)
    seconds = {labels[0]: value for spec, labels, value in samples
               if spec.name == "trainwatch_cpu_seconds_total"}
    assert seconds == {mode: LINUX_CPU_TIMES[mode] for mode in NODE_EXPORTER_MODES}
    count = [value for spec, _, value in samples if spec.name == "trainwatch_cpu_count"]
    assert count == [4]


def test_modes_a_platform_lacks_are_left_out_and_an_unknown_cpu_count_too() -> None:
    # macOS: user, nice, system, idle only; psutil.cpu_count() may answer None.
    samples = cpu_samples(SimpleNamespace(user=1.0, nice=0.5, system=2.0, idle=3.0), None)
    assert {labels[0]: value for _, labels, value in samples} == \
        {"user": 1.0, "nice": 0.5, "system": 2.0, "idle": 3.0}


def test_guest_time_is_not_counted_twice() -> None:
    times = psutil.cpu_times()
    modes = {labels[0] for spec, labels, _ in cpu_samples(times, 2)
             if spec.name == "trainwatch_cpu_seconds_total"}
    assert "guest" not in modes and "guest_nice" not in modes
    assert {"user", "system", "idle"} <= modes


def test_the_disk_exclude_pattern_is_a_setting() -> None:
    disks = {name: disk_io(1) for name in ("vda", "vda1", "zram0", "dm-0", "loop0")}
    kept = sorted({labels[0] for _, labels, _ in disk_samples(disks)})
    assert kept == ["dm-0", "vda"]  # zram (swap in RAM) and loop left out by default
    kept = sorted({labels[0] for _, labels, _ in disk_samples(disks, r"^dm-")})
    assert kept == ["loop0", "vda", "vda1", "zram0"]
    fake_psutil = SimpleNamespace(
        cpu_times=lambda: SimpleNamespace(user=1.0), cpu_count=lambda: 1,
        virtual_memory=lambda: SimpleNamespace(available=1, total=2),
        net_io_counters=lambda **_: {}, disk_io_counters=lambda **_: disks, Error=RuntimeError)
    registry = CollectorRegistry()
    registry.register(HostCollector(fake_psutil, "n", disk_exclude="^(vd|dm)"))
    assert registry.get_sample_value("trainwatch_disk_reads_completed_total",
                                     {"device": "zram0"}) == 1
    assert registry.get_sample_value("trainwatch_disk_reads_completed_total",
                                     {"device": "vda"}) is None


class FakePsutil:
    """psutil's functions as the collector calls them, recording the arguments they get."""

    Error = type("Error", (Exception,), {})

    def __init__(self, disks: dict[str, SimpleNamespace] | None, broken: str = "") -> None:
        self.calls: dict[str, dict[str, object]] = {}
        self._disks, self._broken = disks, broken

    def _call(self, name: str, value: object, **kwargs: object) -> object:
        self.calls[name] = kwargs
        if name == self._broken:
            raise OSError(f"cannot read {name}")
        return value

    def cpu_times(self) -> object:
        return self._call("cpu_times", SimpleNamespace(user=1.0, system=2.0, idle=3.0))

    def cpu_count(self) -> object:
        return self._call("cpu_count", 8)

    def virtual_memory(self) -> object:
        return self._call("virtual_memory", SimpleNamespace(available=1024.0, total=4096.0))

    def net_io_counters(self, **kwargs: object) -> object:
        return self._call("net_io_counters", {"eth0": SimpleNamespace(bytes_recv=5, bytes_sent=6)},
                          **kwargs)

    def disk_io_counters(self, **kwargs: object) -> object:
        return self._call("disk_io_counters", self._disks, **kwargs)


def scrape_host(ps: FakePsutil) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"host": HostCollector(ps, nodename="n1")}, version="t"))
    return registry


def test_per_device_counters_are_asked_for_without_wraparound() -> None:
    ps = FakePsutil({"vda": disk_io(3)})
    registry = scrape_host(ps)
    assert registry.get_sample_value("trainwatch_disk_read_bytes_total", {"device": "vda"}) == 1536
    # Per device, and nowrap: psutil then hides 32-bit counter wrap-around, which a counter
    # going backwards would turn into a huge rate.
    assert ps.calls["net_io_counters"] == {"pernic": True, "nowrap": True}
    assert ps.calls["disk_io_counters"] == {"perdisk": True, "nowrap": True}
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "host"}) == 1


def test_a_machine_without_disks_reports_the_rest() -> None:
    registry = scrape_host(FakePsutil(None))  # psutil answers None where there is no disk
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "host"}) == 1
    assert registry.get_sample_value("trainwatch_cpu_count") == 8


@pytest.mark.parametrize(("broken", "missing", "present"), [
    ("net_io_counters", "trainwatch_network_receive_bytes_total", "trainwatch_cpu_count"),
    ("cpu_times", "trainwatch_cpu_count", "trainwatch_memory_total_bytes"),
    ("virtual_memory", "trainwatch_memory_total_bytes", "trainwatch_cpu_count"),
])
def test_a_failing_section_leaves_the_others_and_reports_failure(
        broken: str, missing: str, present: str) -> None:
    registry = scrape_host(FakePsutil({"vda": disk_io(3)}, broken=broken))
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "host"}) == 0
    assert registry.get_sample_value(missing, {"device": "eth0"} if "network" in missing
                                     else {}) is None
    assert registry.get_sample_value(present) is not None
    assert registry.get_sample_value("trainwatch_host_info", {"nodename": "n1"}) == 1


# /proc/diskstats lines: a kernel 4.18+ line (field 10, io_ticks, is 4321 ms), one of
# kernel 2.6 (11 fields), a line cut right after field 10 (read), and lines cut before it
# (skipped).
DISKSTATS = """\
 252       0 vda 100 0 800 50 200 0 1600 70 0 4321 120 0 0 0 0
   8       0 sda 10 0 80 5 20 0 160 7 0 250 12
   8       2 sdc 10 0 80 5 20 0 160 7 0 375
   8       3 sdd 10 0 80 5 20 0 160 7 0
   8       1 sda1 10 0
"""


def test_disk_busy_time_is_psutils_busy_time_in_seconds_else_diskstats_field_10(
        tmp_path: Path) -> None:
    diskstats = tmp_path / "diskstats"
    diskstats.write_text(DISKSTATS)
    assert diskstats_io_seconds(diskstats) == {"vda": 4.321, "sda": 0.25, "sdc": 0.375}
    assert diskstats_io_seconds(tmp_path / "absent") == {}  # not Linux: nothing, no failure
    with_busy = SimpleNamespace(**vars(disk_io(1)), busy_time=1500)
    reads: list[int] = []

    def io_seconds() -> dict[str, float]:
        reads.append(1)
        return diskstats_io_seconds(diskstats)

    samples = disk_samples({"vda": disk_io(1), "nvme0n1": with_busy, "sdb": disk_io(2),
                            "sdc": disk_io(3)}, io_seconds=io_seconds)
    busy = {labels[0]: value for spec, labels, value in samples
            if spec.name == "trainwatch_disk_io_time_seconds_total"}
    # psutil's busy_time (ms) wins; the fallback is read once, each device its own line (two
    # of them here: one device's field 10 for every disk passed); a device it lacks is left out.
    assert busy == {"nvme0n1": 1.5, "vda": 4.321, "sdc": 0.375}
    assert reads == [1]


def test_link_speed_in_bytes_per_second_and_absent_where_the_kernel_reports_none(
        tmp_path: Path) -> None:
    for device, speed in {"eth0": "25000\n", "eth1": "-1\n", "eth2": "0\n",
                          "ib0": "not a number\n", "slow0": "1\n"}.items():
        (tmp_path / device).mkdir()
        (tmp_path / device / "speed").write_text(speed)
    (tmp_path / "lo").mkdir()  # loopback: reading its speed fails with EINVAL; no file here
    assert link_speed_bytes(tmp_path, "eth0") == 25000 * 125_000  # 25 Gbit/s = 3.125 GB/s
    assert link_speed_bytes(tmp_path, "slow0") == 125_000  # the slowest a kernel says: 1 Mbit/s
    for device in ("eth1", "eth2", "ib0", "lo", "missing"):
        assert link_speed_bytes(tmp_path, device) is None, device
    per_nic = {name: SimpleNamespace(bytes_recv=1, bytes_sent=2) for name in ("eth0", "eth1")}
    registry = CollectorRegistry()
    ps = FakePsutil({"vda": disk_io(3)})
    ps.net_io_counters = lambda **_: per_nic  # type: ignore[method-assign]
    registry.register(ScrapeCollector({"host": HostCollector(ps, "n1", sysfs_net=tmp_path)},
                                      version="t"))
    assert registry.get_sample_value("trainwatch_network_speed_bytes",
                                     {"device": "eth0"}) == 3.125e9
    assert registry.get_sample_value("trainwatch_network_speed_bytes", {"device": "eth1"}) is None
    assert registry.get_sample_value("trainwatch_network_receive_bytes_total",
                                     {"device": "eth1"}) == 1
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "host"}) == 1


def test_this_machines_nics_report_a_speed_only_where_sysfs_has_a_positive_one() -> None:
    registry = CollectorRegistry()
    registry.register(HostCollector(psutil))
    for device in psutil.net_io_counters(pernic=True):
        if device == "lo":
            continue
        expected = link_speed_bytes(Path("/sys/class/net"), device)
        assert registry.get_sample_value("trainwatch_network_speed_bytes",
                                         {"device": device}) == expected, device


@pytest.mark.parametrize(("broken", "section"), [
    ("cpu_times", "cpu"), ("virtual_memory", "memory"), ("net_io_counters", "network"),
    ("disk_io_counters", "disk"),
])
def test_the_error_names_the_section_that_failed_and_no_other(broken: str, section: str) -> None:
    from exporter.collector import CollectorError
    collector = HostCollector(FakePsutil({"vda": disk_io(3)}, broken=broken), nodename="n1")
    with pytest.raises(CollectorError) as err:
        list(collector.collect())
    assert str(err.value) == f"{section}: OSError('cannot read {broken}')"
