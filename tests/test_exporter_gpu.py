"""The gpu and gpu_process collectors over a fake NVML (real pynvml exception classes), read back
from a fresh CollectorRegistry; plus checks against real NVML where there is one (basics, GPM
and memory v2; tests/test_exporter_gpm.py has the fake-NVML GPM tests)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pynvml
import pytest
from prometheus_client import CollectorRegistry

from benchmarks.fake_nvml import POWER_FIELDS, FakeGpu, FakeNvml, fake_uuid
from exporter.collector import Collector, ScrapeCollector
from exporter.deadline import MIN_READ_SECONDS, scrape_deadline
from exporter.gpu import CLOCK_EVENT_REASONS, GpuCollector
from exporter.gpu_process import GpuProcessCollector
from exporter.metrics import GPU_PEAK_FLOPS
from exporter.nvml import NvmlSession
from exporter.peak_flops import PEAK_FLOPS


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def registry_for(nvml: Any, *, processes: bool = False, pcie: bool = True,
                 clock: FakeClock | None = None) -> CollectorRegistry:
    session = NvmlSession(nvml, retry_seconds=60, clock=clock or FakeClock())
    collectors: dict[str, Collector] = {"gpu": GpuCollector(session, pcie_throughput=pcie)}
    if processes:
        collectors["gpu_process"] = GpuProcessCollector(session)
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(collectors, version="test"))
    return registry


def gpu(index: int) -> dict[str, str]:
    return {"gpu": str(index), "uuid": fake_uuid(index)}


def series_of(registry: CollectorRegistry, index: int) -> list[str]:
    return [s.name for family in registry.collect() for s in family.samples
            if s.labels.get("gpu") == str(index)]


def success(registry: CollectorRegistry, collector: str = "gpu") -> float | None:
    return registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": collector})


def test_every_gpu_metric_in_base_units() -> None:
    nvml = FakeNvml([FakeGpu(index=0), FakeGpu(
        index=1, gpu_util=87, mem_util=33, memory_total=80 * 2**30, memory_used=30 * 2**30,
        power_mw=412_345, power_limit_mw=700_000, energy_mj=123_456_789, temperature=71,
        sm_clock_mhz=1755, mem_clock_mhz=2619, ecc=(5, 1), pcie_kbps=(300, 700),
        clock_event_mask=(pynvml.nvmlClocksEventReasonSwPowerCap
                          | pynvml.nvmlClocksEventReasonHwThermalSlowdown))])
    r = registry_for(nvml)
    value = r.get_sample_value
    assert value("trainwatch_gpu_utilization_ratio", gpu(1)) == pytest.approx(0.87)
    assert value("trainwatch_gpu_memory_utilization_ratio", gpu(1)) == pytest.approx(0.33)
    assert value("trainwatch_gpu_memory_used_bytes", gpu(1)) == 30 * 2**30
    assert value("trainwatch_gpu_memory_free_bytes", gpu(1)) == 50 * 2**30
    assert value("trainwatch_gpu_memory_total_bytes", gpu(1)) == 80 * 2**30
    assert value("trainwatch_gpu_power_watts", gpu(1)) == pytest.approx(412.345)
    assert value("trainwatch_gpu_power_limit_watts", gpu(1)) == pytest.approx(700.0)
    assert value("trainwatch_gpu_energy_joules_total", gpu(1)) == pytest.approx(123_456.789)
    assert value("trainwatch_gpu_temperature_celsius", gpu(1)) == 71
    assert value("trainwatch_gpu_sm_clock_hertz", gpu(1)) == 1755e6
    assert value("trainwatch_gpu_memory_clock_hertz", gpu(1)) == 2619e6
    assert value("trainwatch_gpu_pcie_transmit_bytes_per_second", gpu(1)) == 300 * 1024
    assert value("trainwatch_gpu_pcie_receive_bytes_per_second", gpu(1)) == 700 * 1024
    assert value("trainwatch_gpu_ecc_errors_total", {**gpu(1), "error": "corrected"}) == 5
    assert value("trainwatch_gpu_ecc_errors_total", {**gpu(1), "error": "uncorrected"}) == 1
    active = {reason for _, reason in CLOCK_EVENT_REASONS
              if value("trainwatch_gpu_clock_event_active", {**gpu(1), "reason": reason}) == 1}
    assert active == {"sw_power_cap", "hw_thermal_slowdown"}
    assert value("trainwatch_gpu_clock_event_active", {**gpu(1), "reason": "gpu_idle"}) == 0
    assert value("trainwatch_gpu_info", {**gpu(1), "name": "NVIDIA H100 80GB HBM3",
                                         "pci_bus_id": "00000000:18:00.0",
                                         "driver_version": "550.54.15"}) == 1
    assert value("trainwatch_gpu_utilization_ratio", gpu(0)) == 0  # an idle GPU is 0, not absent
    assert success(r) == 1


def test_a_gpu_lost_mid_run_drops_only_its_series() -> None:
    nvml = FakeNvml.with_gpus(3)
    r = registry_for(nvml)
    assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(1)) == 61
    nvml.gpus[1].lost = True
    for index in (0, 2):
        assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(index)) == 60 + index
    assert series_of(r, 1) == []
    assert success(r) == 0  # visible, while the healthy GPUs keep reporting
    nvml.gpus[1].lost = False
    assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(1)) == 61
    assert success(r) == 1


def test_gpus_are_counted_anew_each_scrape_as_they_come_and_go() -> None:
    """A scrape reads the GPUs the previous one counted while it counts them again; its own
    count decides: a GPU that appeared is read at once, one that is gone is left out."""
    nvml = FakeNvml.with_gpus(2)
    r = registry_for(nvml)
    assert series_of(r, 1) != [] and series_of(r, 2) == []
    nvml.gpus.append(FakeGpu.deterministic(2))
    assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(2)) == 62
    del nvml.gpus[1:]
    assert series_of(r, 1) == [] and series_of(r, 2) == []
    assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(0)) == 60
    assert success(r) == 1


def test_a_gpu_lost_before_its_identity_is_read_is_skipped() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[0].lost = True
    r = registry_for(nvml)
    assert series_of(r, 0) == []
    assert "trainwatch_gpu_info" in series_of(r, 1)
    assert r.get_sample_value("trainwatch_gpu_power_watts", gpu(1)) == 301


def test_unsupported_fields_are_omitted_not_zero() -> None:
    board = FakeGpu.deterministic(0)
    board.unsupported = frozenset({*POWER_FIELDS, "nvmlDeviceGetTotalEccErrors",
                                   "nvmlDeviceGetPcieThroughput"})
    r = registry_for(FakeNvml([board]))
    names = {s.name for family in r.collect() for s in family.samples}
    for absent in ("trainwatch_gpu_power_watts", "trainwatch_gpu_power_limit_watts",
                   "trainwatch_gpu_energy_joules_total", "trainwatch_gpu_ecc_errors_total",
                   "trainwatch_gpu_pcie_transmit_bytes_per_second",
                   "trainwatch_gpu_pcie_receive_bytes_per_second"):
        assert absent not in names
    assert r.get_sample_value("trainwatch_gpu_temperature_celsius", gpu(0)) == 60
    assert success(r) == 1  # an unsupported field is the board's nature, not a failure


def test_clock_reasons_fall_back_to_the_old_throttle_name() -> None:
    board = FakeGpu.deterministic(0)
    board.unsupported = frozenset()
    nvml = FakeNvml([board])

    def too_old(handle: FakeGpu) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    nvml.nvmlDeviceGetCurrentClocksEventReasons = too_old  # type: ignore[method-assign,assignment]
    r = registry_for(nvml)
    assert r.get_sample_value("trainwatch_gpu_clock_event_active",
                              {**gpu(0), "reason": "sw_power_cap"}) == 1
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_both_pcie_directions_of_every_gpu_are_sampled_at_once() -> None:
    # No GPM: NVML samples each direction for 20 ms, so the four samples must overlap.
    nvml = FakeNvml([FakeGpu(index=i, pcie_kbps=(300 + i, 700 + i)) for i in range(2)])
    together = threading.Barrier(4, timeout=5)  # each sample waits until all four have begun
    real = nvml.nvmlDeviceGetPcieThroughput

    def sampled(handle: Any, counter: int) -> int:
        together.wait()
        return real(handle, counter)

    nvml.nvmlDeviceGetPcieThroughput = sampled  # type: ignore[method-assign,assignment]
    r = registry_for(nvml)
    got = {(s.name, s.labels.get("gpu")): s.value for family in r.collect()
           for s in family.samples if "pcie" in s.name}
    assert got == {("trainwatch_gpu_pcie_transmit_bytes_per_second", "0"): 300 * 1024,
                   ("trainwatch_gpu_pcie_receive_bytes_per_second", "0"): 700 * 1024,
                   ("trainwatch_gpu_pcie_transmit_bytes_per_second", "1"): 301 * 1024,
                   ("trainwatch_gpu_pcie_receive_bytes_per_second", "1"): 701 * 1024}


def test_a_hung_gpu_is_a_timeout_and_the_other_gpu_is_served() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[0].delays["nvmlDeviceGetUtilizationRates"] = 60.0  # a hung driver
    session = NvmlSession(nvml, retry_seconds=60)
    session.require()
    scrape = ScrapeCollector({"gpu": GpuCollector(session, pcie_throughput=False)}, version="v")
    # A scrape timeout below the floor: the reads get MIN_READ_SECONDS, of which all but the
    # last 0.2 s have passed.
    started = time.monotonic() - MIN_READ_SECONDS + 0.2
    try:
        with scrape_deadline("0.001", clock=lambda: started):
            got = {(s.name, s.labels.get("gpu", "")): s.value
                   for family in scrape.collect() for s in family.samples}
    finally:
        nvml.release.set()
    assert got[("trainwatch_scrape_collector_success", "")] == 0
    assert got[("trainwatch_scrape_collector_timeouts_total", "")] == 1
    assert got[("trainwatch_gpu_utilization_ratio", "1")] == 0.51
    assert ("trainwatch_gpu_utilization_ratio", "0") not in got
    assert ("trainwatch_gpu_info", "0") not in got


def test_pcie_throughput_can_be_switched_off() -> None:
    nvml = FakeNvml.with_gpus(2)
    r = registry_for(nvml, pcie=False)
    assert r.get_sample_value("trainwatch_gpu_pcie_receive_bytes_per_second", gpu(0)) is None
    assert r.get_sample_value("trainwatch_gpu_power_watts", gpu(0)) == 300
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_no_nvml_is_success_0_and_init_is_retried_cheaply() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.library_present = False
    clock = FakeClock()
    r = registry_for(nvml, clock=clock)
    for _ in range(3):
        assert success(r) == 0
    assert r.get_sample_value("trainwatch_gpu_nvml_absent") == 1
    assert nvml.calls["nvmlInit"] == 1  # not once per scrape
    nvml.library_present = True  # the driver is loaded later
    clock.now += 61
    assert success(r) == 1
    assert r.get_sample_value("trainwatch_gpu_utilization_ratio", gpu(0)) == 0.5
    assert r.get_sample_value("trainwatch_gpu_nvml_absent") == 0  # the node has NVML now
    assert nvml.calls["nvmlInit"] == 2


@pytest.mark.parametrize(("error", "absent"), [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, 1.0),  # no NVIDIA library: a CPU-only node
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, 1.0),  # a library but no driver
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, 0.0),  # NVML is there and fails: a fault
])
def test_no_nvml_is_a_state_of_its_own_a_failing_nvml_is_not(error: int, absent: float) -> None:
    nvml = FakeNvml.with_gpus(1)

    def init() -> None:
        raise pynvml.NVMLError(error)

    nvml.nvmlInit = init  # type: ignore[method-assign]
    r = registry_for(nvml)
    assert success(r) == 0  # as node_exporter reports a collector without data
    assert r.get_sample_value("trainwatch_gpu_nvml_absent") == absent
    ok = registry_for(FakeNvml.with_gpus(1))
    assert ok.get_sample_value("trainwatch_gpu_nvml_absent") == 0 and success(ok) == 1


def test_gpu_process_memory_and_utilization() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpus[0].processes = ((10, 3 * 2**30), (11, None))  # 11: the driver cannot say
    nvml.gpus[0].process_util = ((10, 20, 1), (10, 75, 2**62))  # newest sample wins
    nvml.gpus[1].process_util = ((4243, 90, 1),)  # too old: no recent sample, no series
    r = registry_for(nvml, processes=True)
    assert r.get_sample_value("trainwatch_gpu_process_memory_bytes",
                              {**gpu(0), "pid": "10"}) == 3 * 2**30
    assert r.get_sample_value("trainwatch_gpu_process_memory_bytes",
                              {**gpu(0), "pid": "11"}) is None
    assert r.get_sample_value("trainwatch_gpu_process_utilization_ratio",
                              {**gpu(0), "pid": "10"}) == 0.75
    assert r.get_sample_value("trainwatch_gpu_process_utilization_ratio",
                              {**gpu(1), "pid": "4243"}) is None
    assert r.get_sample_value("trainwatch_gpu_process_memory_bytes",
                              {**gpu(1), "pid": "4243"}) == 2 * 2**30
    assert success(r, "gpu_process") == 1


def _real_nvml_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _real_nvml_present(), reason="no NVML (no NVIDIA driver) on this machine")
def test_real_nvml() -> None:
    r = registry_for(pynvml, pcie=True)
    assert success(r) == 1
    count = pynvml.nvmlDeviceGetCount()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    labels = {"gpu": "0", "uuid": uuid if isinstance(uuid, str) else uuid.decode()}
    total = r.get_sample_value("trainwatch_gpu_memory_total_bytes", labels)
    assert total is not None and total > 2**30  # bytes, not MiB
    utilization = r.get_sample_value("trainwatch_gpu_utilization_ratio", labels)
    assert utilization is not None and 0 <= utilization <= 1
    infos = [s for family in r.collect() for s in family.samples
             if s.name == "trainwatch_gpu_info"]
    assert len(infos) == count


@pytest.mark.gpu
@pytest.mark.skipif(not _real_nvml_present(), reason="no NVML (no NVIDIA driver) on this machine")
def test_real_gpm_and_memory_v2() -> None:
    """On a GPU machine: memory v2 as nvidia-smi shows it; GPM values in range on Hopper and
    newer, and absent (never 0) elsewhere."""
    collector = GpuCollector(NvmlSession(pynvml), pcie_throughput=True)
    collector.prime()
    r = CollectorRegistry()
    r.register(ScrapeCollector({"gpu": collector}, version="test"))
    time.sleep(0.5)  # GPM needs an interval between its two samples
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    labels = {"gpu": "0", "uuid": uuid if isinstance(uuid, str) else uuid.decode()}
    families = list(r.collect())
    values = {s.name: s.value for f in families for s in f.samples
              if s.labels.get("gpu") == "0" and "pipe" not in s.labels}
    assert values["trainwatch_gpu_info"] == 1
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert values["trainwatch_gpu_memory_reserved_bytes"] == memory.reserved
    assert abs(values["trainwatch_gpu_memory_used_bytes"] - memory.used) < 2**30
    supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    for name in ("trainwatch_gpu_sm_active_ratio", "trainwatch_gpu_tensor_active_ratio",
                 "trainwatch_gpu_dram_active_ratio", "trainwatch_gpu_sm_occupancy_ratio"):
        if supported:
            assert 0 <= values[name] <= 1, (name, values[name])
        else:
            assert name not in values
    pcie = values.get("trainwatch_gpu_pcie_receive_bytes_per_second")
    assert pcie is not None and pcie >= 0
    success = r.get_sample_value("trainwatch_scrape_collector_success", {"collector": "gpu"})
    assert success == 1
    assert labels["uuid"].startswith("GPU-")


def _gpu_values(r: CollectorRegistry) -> dict[str, float]:
    return {s.name: s.value for f in r.collect() for s in f.samples
            if s.labels.get("gpu") == "0" and "pipe" not in s.labels}


@pytest.mark.gpu
@pytest.mark.skipif(not _real_nvml_present(), reason="no NVML (no NVIDIA driver) on this machine")
def test_real_gpm_follows_a_matmul_load_and_lists_this_process() -> None:
    """"GPU busy" is SM activity where GPM reports it: near 0 over an idle second, high over
    two seconds of back-to-back bf16 matmuls (tensor activity with it), while NVML's coarse
    utilization reads 100% for either a full or a barely busy GPU. The process collector lists
    this process (its PID as the host sees it, outside a container) with its memory."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from benchmarks.gpu_check import figure

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
        pytest.skip("no GPM on this board (before Hopper)")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)  # the context, up front
    torch.cuda.synchronize()
    session = NvmlSession(pynvml)
    collector = GpuCollector(session, pcie_throughput=False)
    r = CollectorRegistry()
    r.register(ScrapeCollector({"gpu": collector, "gpu_process": GpuProcessCollector(session)},
                               version="test"))
    collector.prime()
    time.sleep(1.0)  # the idle interval GPM measures (not a synchronisation)
    idle = _gpu_values(r)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        for _ in range(8):
            a = (a @ a) / 90.5  # keeps the values finite
        torch.cuda.synchronize()
    loaded = _gpu_values(r)
    for name, target, ok in (
            ("trainwatch_gpu_sm_active_ratio idle", "< 0.1", idle[
                "trainwatch_gpu_sm_active_ratio"] < 0.1),
            ("trainwatch_gpu_sm_active_ratio under bf16 matmuls", "> 0.6", loaded[
                "trainwatch_gpu_sm_active_ratio"] > 0.6),
            ("trainwatch_gpu_tensor_active_ratio under bf16 matmuls", "> 0.3", loaded[
                "trainwatch_gpu_tensor_active_ratio"] > 0.3)):
        which = idle if name.endswith("idle") else loaded
        figure(name, which[name.split()[0]], target, ok)
    figure("trainwatch_gpu_utilization_ratio under bf16 matmuls",
           loaded["trainwatch_gpu_utilization_ratio"], "-", None)
    assert idle["trainwatch_gpu_sm_active_ratio"] < 0.1
    assert loaded["trainwatch_gpu_sm_active_ratio"] > 0.6  # an H200 read 0.79-0.81
    assert loaded["trainwatch_gpu_tensor_active_ratio"] > max(
        0.3, idle["trainwatch_gpu_tensor_active_ratio"] + 0.2)
    pids = {s.labels["pid"]: s.value for f in r.collect() for s in f.samples
            if s.name == "trainwatch_gpu_process_memory_bytes"}
    figure("process collector lists this process", "yes" if str(os.getpid()) in pids else
           f"no: {sorted(pids)}", "yes", str(os.getpid()) in pids)
    assert pids.get(str(os.getpid()), 0) >= a.numel() * a.element_size()


def test_nvml_failing_to_count_gpus_is_success_0_not_a_failed_scrape() -> None:
    nvml = FakeNvml.with_gpus(2)
    r = registry_for(nvml)
    assert success(r) == 1

    def broken() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvml.nvmlDeviceGetCount = broken  # type: ignore[method-assign,assignment]
    assert success(r) == 0
    assert series_of(r, 0) == []


def test_the_first_samples_are_taken_on_the_scrapes_own_nvml_lane(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """prime() counts the GPUs on the lane a scrape counts them on: a count stuck in the
    driver at start-up holds that one lane, and the first scrape says so by its name, rather
    than a second count racing the first."""
    import threading

    from exporter.collector import CollectorTimeout
    from exporter.deadline import scrape_deadline
    nvml = FakeNvml.with_gpus(2)
    entered, go = threading.Event(), threading.Event()
    real = nvml.nvmlDeviceGetCount

    def count() -> int:
        if not entered.is_set():  # the first count (the prime's) hangs until let go
            entered.set()
            go.wait(5)
        return real()

    monkeypatch.setattr(nvml, "nvmlDeviceGetCount", count)
    collector = GpuCollector(NvmlSession(nvml))
    collector.prime()
    assert entered.wait(5)
    try:
        with scrape_deadline("0.3"), pytest.raises(CollectorTimeout) as err:
            list(collector.collect())
    finally:
        go.set()
    assert str(err.value) == "gpu-nvml: no answer by the scrape's deadline"


def test_every_gpu_serves_its_own_products_peaks_under_its_own_labels() -> None:
    # Two boards of one product and one of another: each GPU's peak series carry its own gpu
    # and uuid and its own product's figures, scrape after scrape (bug bash: peaks cached by
    # product served the first H100's labels for the second, and none under gpu="2").
    products = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
    r = registry_for(FakeNvml([FakeGpu(index=i, name=name) for i, name in enumerate(products)]),
                     pcie=False)
    for _ in range(2):
        found: dict[tuple[str, str], dict[str, float]] = {}
        for family in r.collect():
            for s in family.samples:
                if s.name == GPU_PEAK_FLOPS.name:
                    by_dtype = found.setdefault((s.labels["gpu"], s.labels["uuid"]), {})
                    assert s.labels["dtype"] not in by_dtype  # one series per GPU and dtype
                    by_dtype[s.labels["dtype"]] = s.value
        assert found == {(str(i), fake_uuid(i)): PEAK_FLOPS[name]
                         for i, name in enumerate(products)}
        assert PEAK_FLOPS[products[0]] != PEAK_FLOPS[products[1]]
