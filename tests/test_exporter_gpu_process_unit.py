"""exporter.gpu_process' reads called directly over the fake NVML: memory over both process
lists, the newest utilization sample, the order and labels of the series, and the window the
collector asks NVML for."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from benchmarks.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from exporter import gpu_process
from exporter import metrics as m
from exporter.cgroup import NOBODY, Attribution
from exporter.collector import ScrapeCollector
from exporter.deadline import MIN_READ_SECONDS, scrape_deadline
from exporter.gpu_process import GpuProcessCollector, read_processes
from exporter.nvml import GpuIdentity, NvmlSession

IDENTITY = GpuIdentity(index=2, uuid="GPU-x", name="NVIDIA H100 PCIe", pci_bus_id="0:3B:0")


class Owners:
    """An AttributionCache stand-in: a fixed owner per pid, the pids it was told to keep."""

    def __init__(self, known: dict[int, Attribution] | None = None) -> None:
        self.known = known or {}
        self.kept: list[set[int]] = []

    def of(self, pid: int) -> Attribution:
        return self.known.get(pid, NOBODY)

    def keep(self, pids: Any) -> None:
        self.kept.append(set(pids))


def board(**values: Any) -> tuple[FakeNvml, FakeGpu]:
    gpu = FakeGpu(index=0, **values)
    return FakeNvml([gpu]), gpu


def test_memory_is_the_larger_of_a_pids_compute_and_graphics_use() -> None:
    nvml, gpu = board(processes=((7, 3000), (9, None), (11, 500)))
    nvml.nvmlDeviceGetGraphicsRunningProcesses = lambda h: [  # type: ignore[method-assign]
        SimpleNamespace(pid=7, usedGpuMemory=1000), SimpleNamespace(pid=11, usedGpuMemory=800),
        SimpleNamespace(pid=13, usedGpuMemory=0)]
    assert gpu_process._running_processes(nvml, gpu) == {7: 3000.0, 11: 800.0, 13: 0.0}


def test_memory_the_driver_cannot_tell_is_left_out() -> None:
    nvml, gpu = board(processes=((9, None),))
    assert gpu_process._running_processes(nvml, gpu) == {}


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED,
                                  pynvml.NVML_ERROR_NO_PERMISSION,
                                  pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_a_process_list_the_driver_cannot_give_is_skipped(code: int) -> None:
    nvml, gpu = board(processes=((7, 3000),))

    def refuse(handle: Any) -> list[Any]:
        raise pynvml.NVMLError(code)

    nvml.nvmlDeviceGetGraphicsRunningProcesses = refuse  # type: ignore[method-assign]
    assert gpu_process._running_processes(nvml, gpu) == {7: 3000.0}
    nvml.nvmlDeviceGetComputeRunningProcesses = refuse  # type: ignore[method-assign]
    nvml.nvmlDeviceGetGraphicsRunningProcesses = lambda h: [  # type: ignore[method-assign]
        SimpleNamespace(pid=5, usedGpuMemory=64)]
    assert gpu_process._running_processes(nvml, gpu) == {5: 64.0}


def test_a_failing_gpu_fails_the_process_read() -> None:
    nvml, gpu = board(processes=((7, 3000),))
    gpu.lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        gpu_process._running_processes(nvml, gpu)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        gpu_process._utilization(nvml, gpu, 0)


def test_utilization_is_each_pids_newest_sample_since_the_window() -> None:
    nvml, gpu = board(process_util=((7, 10, 500), (7, 45, 900), (7, 99, 700), (8, 30, 100),
                                    (9, 5, 650)))
    assert gpu_process._utilization(nvml, gpu, 200) == {7: 0.45, 9: 0.05}
    assert gpu_process._utilization(nvml, gpu, 99) == {7: 0.45, 8: 0.30, 9: 0.05}


def test_samples_with_the_same_time_keep_the_first() -> None:
    nvml, gpu = board(process_util=((7, 10, 500), (7, 45, 500)))
    assert gpu_process._utilization(nvml, gpu, 0) == {7: 0.10}


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_no_sample_in_the_window_is_no_utilization(code: int) -> None:
    nvml, gpu = board()

    def refuse(handle: Any, since: int) -> list[Any]:
        raise pynvml.NVMLError(code)

    nvml.nvmlDeviceGetProcessUtilization = refuse  # type: ignore[method-assign]
    assert gpu_process._utilization(nvml, gpu, 0) == {}


def test_the_series_of_one_gpu_in_pid_order() -> None:
    nvml, gpu = board(processes=((30, 2048), (4, 1024)), process_util=((30, 50, 9), (12, 25, 9)))
    pod = Attribution("uid-1", "cid-1", "")
    samples = read_processes(nvml, IDENTITY, gpu, 0, Owners({30: pod}))  # type: ignore[arg-type]
    assert samples == [
        (m.GPU_PROCESS_MEMORY, ("2", "GPU-x", "4"), 1024.0),
        (m.GPU_PROCESS_MEMORY, ("2", "GPU-x", "30"), 2048.0),
        (m.GPU_PROCESS_UTILIZATION, ("2", "GPU-x", "12"), 0.25),
        (m.GPU_PROCESS_UTILIZATION, ("2", "GPU-x", "30"), 0.5),
        (m.GPU_PROCESS_INFO, ("2", "GPU-x", "4", "", "", ""), 1.0),
        (m.GPU_PROCESS_INFO, ("2", "GPU-x", "12", "", "", ""), 1.0),
        (m.GPU_PROCESS_INFO, ("2", "GPU-x", "30", "uid-1", "cid-1", ""), 1.0)]


def test_the_collector_asks_for_the_last_five_seconds_and_keeps_the_listed_owners() -> None:
    nvml = FakeNvml([FakeGpu(index=0, processes=((7, 100),)),
                     FakeGpu(index=1, processes=((8, 200),), process_util=((9, 40, 2**62),))])
    asked: list[int] = []
    real = nvml.nvmlDeviceGetProcessUtilization

    def recorded(handle: Any, since_us: int) -> list[Any]:
        asked.append(since_us)
        return real(handle, since_us)

    nvml.nvmlDeviceGetProcessUtilization = recorded  # type: ignore[method-assign]
    owners = Owners()
    collector = GpuProcessCollector(NvmlSession(nvml, retry_seconds=60),
                                    wall_clock=lambda: 1_000.25, owners=owners)  # type: ignore[arg-type]
    families = {f.name: f for f in collector.collect()}
    assert asked == [995_250_000, 995_250_000]
    assert gpu_process.UTILIZATION_LOOKBACK_SECONDS == 5.0
    assert owners.kept == [{7, 8, 9}]
    info = families["trainwatch_gpu_process_info"]
    assert sorted((s.labels["uuid"], s.labels["pid"]) for s in info.samples) == [
        (fake_uuid(0), "7"), (fake_uuid(1), "8"), (fake_uuid(1), "9")]


def test_by_default_the_window_is_on_the_wall_clock_nvml_stamps_its_samples_with() -> None:
    now_us = int(time.time() * 1e6)  # NVML's timeStamp: microseconds since the epoch
    lookback_us = int(gpu_process.UTILIZATION_LOOKBACK_SECONDS * 1e6)
    nvml, _ = board(process_util=((31, 47, now_us - lookback_us // 5),  # inside the window
                                  (53, 89, now_us - 3 * lookback_us)))  # long before it
    collector = GpuProcessCollector(NvmlSession(nvml, retry_seconds=60),
                                    owners=Owners())  # type: ignore[arg-type]
    busy = {s.labels["pid"]: s.value for f in collector.collect()
            if f.name == m.GPU_PROCESS_UTILIZATION.name for s in f.samples}
    assert busy == {"31": 0.47}


def test_a_hung_gpu_is_a_timeout_of_the_collector_and_the_other_gpus_are_served() -> None:
    nvml = FakeNvml.with_gpus(2)  # GPU i runs pid 4242 + i
    nvml.gpus[0].delays["nvmlDeviceGetComputeRunningProcesses"] = 60.0  # a hung driver
    session = NvmlSession(nvml, retry_seconds=60)
    session.require()
    owners: Any = Owners()
    scrape = ScrapeCollector({"gpu_process": GpuProcessCollector(session, owners=owners)},
                             version="v")
    # A scrape timeout below the floor: the reads get MIN_READ_SECONDS, of which all but the
    # last 0.2 s have passed.
    started = time.monotonic() - MIN_READ_SECONDS + 0.2
    try:
        with scrape_deadline("0.001", clock=lambda: started):
            got = {(s.name, s.labels.get("gpu", ""), s.labels.get("collector", "")): s.value
                   for family in scrape.collect() for s in family.samples}
    finally:
        nvml.release.set()
    assert got[(m.SCRAPE_SUCCESS.name, "", "gpu_process")] == 0
    assert got[(m.SCRAPE_TIMEOUTS.name, "", "gpu_process")] == 1
    assert got[(m.GPU_PROCESS_MEMORY.name, "1", "")] == 2 * 2**30
    assert (m.GPU_PROCESS_MEMORY.name, "0", "") not in got


def test_the_collector_makes_its_own_owner_cache(tmp_path: Any) -> None:
    collector = GpuProcessCollector(NvmlSession(FakeNvml([]), retry_seconds=60))
    assert collector._owners is not None and len(collector._owners) == 0
