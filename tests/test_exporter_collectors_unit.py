"""The collector table (exporter/collectors.py): which collectors run by default, that each
gets its settings, and that the GPU collectors share one NVML session tried at startup;
over the fake NVML."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pynvml
import pytest

from benchmarks.fake_nvml import BUSY_GPM, FakeNvml, fake_uuid
from exporter import __version__
from exporter.collectors import COLLECTORS, Sources, build_registry
from exporter.config import merge
from exporter.gpm import PERCENT
from exporter.metrics import GPU_SM_ACTIVE


def _names(registry: Any) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for family in registry.collect():
        for s in family.samples:
            out.setdefault(s.name, []).append(s.labels)
    return out


def _success(registry: Any) -> dict[str, float]:
    return {s.labels["collector"]: s.value for family in registry.collect()
            for s in family.samples if s.name == "trainwatch_scrape_collector_success"}


def test_gpu_and_host_run_by_default_gpu_process_only_when_asked() -> None:
    assert {name: entry.default for name, entry in COLLECTORS.items()} == {
        "gpu": True, "host": True, "gpu_process": False}
    nvml = FakeNvml.with_gpus(2)
    registry = build_registry(merge(file={}, flags={}), nvml)
    assert _success(registry) == {"gpu": 1.0, "host": 1.0}
    names = _names(registry)
    assert [labels["uuid"] for labels in names["trainwatch_gpu_info"]] == [fake_uuid(0),
                                                                           fake_uuid(1)]
    assert "trainwatch_cpu_count" in names
    assert "trainwatch_gpu_process_memory_bytes" not in names
    assert names["trainwatch_exporter_build_info"] == [{"version": __version__}]


def test_each_collector_can_be_turned_off_and_on() -> None:
    nvml = FakeNvml.with_gpus(1)
    registry = build_registry(merge(file={}, flags={"collector.gpu": False,
                                                    "collector.gpu_process": True}), nvml)
    assert _success(registry) == {"host": 1.0, "gpu_process": 1.0}
    names = _names(registry)
    assert "trainwatch_gpu_info" not in names
    assert names["trainwatch_gpu_process_memory_bytes"][0]["pid"] == "4242"
    host_off = build_registry(merge(file={}, flags={"collector.host": False}), nvml)
    assert _success(host_off) == {"gpu": 1.0}


def test_the_gpu_collectors_share_one_session_tried_at_startup() -> None:
    nvml = FakeNvml.with_gpus(1)
    registry = build_registry(merge(file={}, flags={"collector.gpu_process": True}), nvml)
    assert nvml.calls["nvmlInit"] == 1  # at startup, before any scrape, and only once
    assert _success(registry) == {"gpu": 1.0, "host": 1.0, "gpu_process": 1.0}
    assert nvml.calls["nvmlInit"] == 1
    sources = Sources(merge(file={}, flags={}), nvml)
    session = sources.nvml_session()
    assert sources.nvml_session() is session
    assert session.nvml is nvml
    assert nvml.calls["nvmlInit"] == 2


def test_the_nvml_retry_interval_is_the_settings() -> None:
    # gpu_process alone: the gpu collector's background GPM priming would try NVML too.
    only = {"collector.gpu": False, "collector.gpu_process": True}
    quick = FakeNvml.with_gpus(1)
    quick.library_present = False
    registry = build_registry(merge(file={}, flags={**only, "gpu.nvml_retry_seconds": 0.0}),
                              quick)
    assert quick.calls["nvmlInit"] == 1
    _success(registry)
    assert quick.calls["nvmlInit"] == 2  # no wait: tried again at the scrape
    slow = FakeNvml.with_gpus(1)
    slow.library_present = False
    registry = build_registry(merge(file={}, flags=only), slow)
    _success(registry)
    assert slow.calls["nvmlInit"] == 1  # the default minute is not up


def test_the_gpu_collector_gets_its_pcie_and_peak_settings() -> None:
    nvml = FakeNvml.with_gpus(1)
    on = _names(build_registry(merge(file={}, flags={"gpu.peak_flops": "bf16=1.25e15"}),
                               nvml))
    assert "trainwatch_gpu_pcie_receive_bytes_per_second" in on
    off = _names(build_registry(merge(file={}, flags={"gpu.pcie_throughput": False}),
                                FakeNvml.with_gpus(1)))
    assert "trainwatch_gpu_pcie_receive_bytes_per_second" not in off
    registry = build_registry(merge(file={}, flags={"gpu.peak_flops": "bf16=1.25e15"}),
                              FakeNvml.with_gpus(1))
    peaks = {s.labels["dtype"]: s.value for family in registry.collect()
             for s in family.samples if s.name == "trainwatch_gpu_peak_flops"}
    assert peaks["bf16"] == 1.25e15


def test_the_gpu_collector_primes_gpm_so_the_first_scrape_has_activity() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[1].gpm = None  # a board without GPM (an A100): nothing to prime, nothing shown
    registry = build_registry(merge(file={}, flags={}), nvml)
    first = {s.labels["uuid"]: s.value for family in registry.collect()
             for s in family.samples if s.name == GPU_SM_ACTIVE.name}
    assert first == {fake_uuid(0): BUSY_GPM[pynvml.NVML_GPM_METRIC_SM_UTIL] / PERCENT}


def _owner_of_4242(procfs: Path) -> dict[str, str]:
    only = {"collector.gpu": False, "collector.gpu_process": True}
    registry = build_registry(merge(file={}, flags={**only, "path.procfs": str(procfs)}),
                              FakeNvml.with_gpus(1))  # GPU 0 runs pid 4242
    [info] = _names(registry)["trainwatch_gpu_process_info"]
    assert info["pid"] == "4242"
    return {key: info[key] for key in ("pod_uid", "container_id", "slurm_job_id")}


def test_the_gpu_process_collector_reads_owners_under_its_procfs(tmp_path: Path) -> None:
    for root, job in (("one", "81234"), ("two", "90517")):
        (tmp_path / root / "4242").mkdir(parents=True)
        (tmp_path / root / "4242" / "cgroup").write_text(
            f"0::/system.slice/slurmstepd.scope/job_{job}/step_0\n")
    assert _owner_of_4242(tmp_path / "one") == {
        "pod_uid": "", "container_id": "", "slurm_job_id": "81234"}
    assert _owner_of_4242(tmp_path / "two")["slurm_job_id"] == "90517"
    assert _owner_of_4242(tmp_path / "none")["slurm_job_id"] == ""  # no such procfs: nobody


def _disks(flags: dict[str, Any]) -> set[str]:
    registry = build_registry(merge(file={}, flags={"collector.gpu": False, **flags}))
    return {labels["device"] for name, rows in _names(registry).items()
            if name.startswith("trainwatch_disk_") for labels in rows}


def test_the_host_collector_gets_its_disk_exclusion() -> None:
    shown = _disks({})
    if not shown:
        pytest.skip("this machine's /proc/diskstats lists no whole disk")
    assert not _disks({"host.disk_device_exclude": ".*"})
    first = min(shown)
    narrowed = _disks({"host.disk_device_exclude": f"^{first}$"})
    assert first not in narrowed
    assert narrowed >= shown - {first}


def test_without_an_nvml_given_the_real_pynvml_is_used() -> None:
    session = Sources(merge(file={}, flags={})).nvml_session()
    assert session.nvml is pynvml


def test_the_table_rows_cannot_be_changed_in_place() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        COLLECTORS["gpu_process"].default = True  # type: ignore[misc]
    assert COLLECTORS["gpu_process"].default is False
