"""A hung NVML never hangs a scrape: the real exporter's HTTP server over a fake NVML whose
utilization call blocks for 60 s, scraped with Prometheus's timeout header."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from exporter.collector import CollectorError, ScrapeCollector
from exporter.collectors import build_registry
from exporter.config import merge
from exporter.deadline import SCRAPE_TIMEOUT_HEADER, scrape_deadline
from exporter.gpu import GpuCollector
from exporter.httpserver import HTTPServer
from exporter.nvml import NvmlSession
from exporter.web import make_server

HUNG_SECONDS = 60.0


@pytest.fixture
def hung() -> Iterator[tuple[FakeNvml, str]]:
    """GPU 0 of 2 hangs in nvmlDeviceGetUtilizationRates; the exporter serves on loopback."""
    nvml = FakeNvml.with_gpus(2)
    settings = merge(file={}, flags={"web.listen_address": "127.0.0.1:0"})
    server: HTTPServer = make_server(settings, build_registry(settings, nvml))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield nvml, f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        nvml.release.set()  # let the stuck lane finish, so no thread outlives the test by long
        server.shutdown()
        server.server_close()


def scrape(url: str, timeout_header: str | None = "2") -> tuple[float, dict[tuple[str, str], float]]:
    headers = {SCRAPE_TIMEOUT_HEADER: timeout_header} if timeout_header else {}
    start = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as resp:
        body = resp.read().decode()
    took = time.monotonic() - start
    values = {(s.name, s.labels.get("collector") or s.labels.get("gpu") or ""): s.value
              for family in text_string_to_metric_families(body) for s in family.samples}
    return took, values


def lane_threads() -> set[int]:
    """The exporter's reader threads (HTTP connection threads come and go; these must not)."""
    return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("trainwatch-")}


def test_a_hung_gpu_costs_one_deadline_then_nothing(hung: tuple[FakeNvml, str]) -> None:
    nvml, url = hung
    scrape(url)  # healthy: lanes and the first GPM samples in place
    nvml.gpus[0].delays["nvmlDeviceGetUtilizationRates"] = HUNG_SECONDS
    took, values = scrape(url)
    # Prometheus's 2 s timeout: served in time, after waiting its budget for the hung GPU, the
    # timeout less the smaller of the two margins (20% = 0.4 s, not 1 s): 1.6 s.
    assert 1.5 <= took < 2.0
    assert values[("trainwatch_scrape_collector_success", "gpu")] == 0
    assert values[("trainwatch_scrape_collector_success", "host")] == 1
    assert values[("trainwatch_scrape_collector_timeouts_total", "gpu")] == 1
    assert values[("trainwatch_scrape_collector_timeouts_total", "host")] == 0
    assert values[("trainwatch_cpu_count", "")] >= 1  # host metrics are there
    assert ("trainwatch_gpu_utilization_ratio", "0") not in values
    assert values[("trainwatch_gpu_utilization_ratio", "1")] == 0.51  # the healthy GPU answered

    process = psutil.Process()
    lanes, rss = lane_threads(), process.memory_info().rss
    for _ in range(20):
        took, values = scrape(url)
        assert took < 0.5  # the stuck read is not waited for again
        assert values[("trainwatch_gpu_utilization_ratio", "1")] == 0.51
    assert values[("trainwatch_scrape_collector_timeouts_total", "gpu")] == 21
    # 2 GPUs healthy, 2 in the hung scrape, then GPU 1 alone: GPU 0 was not asked again.
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 2 + 2 + 20
    assert not lane_threads() - lanes  # no thread per scrape piling up behind the driver
    assert process.memory_info().rss - rss < 4 * 2**20

    nvml.gpus[0].delays.clear()
    nvml.release.set()  # the driver recovers: the next scrape reads GPU 0 again
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        _, values = scrape(url)
        if values[("trainwatch_scrape_collector_success", "gpu")] == 1:
            break
    assert values[("trainwatch_gpu_utilization_ratio", "0")] == 0.5
    assert values[("trainwatch_gpu_info", "0")] == 1
    # Each GPU back under its own identity, not the one that kept answering.
    assert info_uuids(url) == {"0": fake_uuid(0), "1": fake_uuid(1)}


def info_uuids(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = resp.read().decode()
    return {s.labels["gpu"]: s.labels["uuid"] for family in text_string_to_metric_families(body)
            for s in family.samples if s.name == "trainwatch_gpu_info"}


def test_without_the_header_the_default_budget_applies(hung: tuple[FakeNvml, str]) -> None:
    nvml, url = hung
    # Slow, not hung: past the least budget (0.5 s) and a 1 s margin, well within Prometheus's
    # default 10 s less its margin (9 s): waited for.
    nvml.gpus[1].delays["nvmlDeviceGetTemperature"] = 1.2
    took, values = scrape(url, timeout_header=None)
    assert 1.2 <= took < 5
    assert values[("trainwatch_scrape_collector_success", "gpu")] == 1
    assert values[("trainwatch_gpu_temperature_celsius", "1")] == 61


def test_a_gpu_whose_main_read_hangs_is_left_out_whole() -> None:
    """Its PCIe lanes answer, but a GPU without its identity and main readings is not served
    piecemeal; the other GPU is served whole."""
    nvml = FakeNvml([FakeGpu(index=i, pcie_kbps=(1, 2)) for i in range(2)])  # no GPM
    nvml.gpus[0].delays["nvmlDeviceGetTemperature"] = HUNG_SECONDS
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu": GpuCollector(NvmlSession(nvml))}, version="t"))
    try:
        with scrape_deadline("0.5"):
            samples = [s for family in registry.collect() for s in family.samples]
    finally:
        nvml.release.set()
    assert not [s for s in samples if s.labels.get("gpu") == "0"]
    served = {s.name for s in samples if s.labels.get("gpu") == "1"}
    assert {"trainwatch_gpu_info", "trainwatch_gpu_pcie_receive_bytes_per_second"} <= served
    timeouts = [s.value for s in samples if s.name == "trainwatch_scrape_collector_timeouts_total"]
    assert timeouts == [1]


def test_two_clients_asking_for_1_ms_cut_only_their_own_answers() -> None:
    """Issue 25: two clients sending a 1 ms timeout made 59 of 60 normal scrapes lose the GPUs
    (their abandoned reads marked the lanes stuck for everyone)."""
    nvml = FakeNvml([FakeGpu(index=i, pcie_kbps=(1, 2)) for i in range(2)])  # PCIe sampled
    for gpu in nvml.gpus:
        gpu.delays["nvmlDeviceGetPcieThroughput"] = 0.02  # NVML samples 20 ms per direction
    settings = merge(file={}, flags={"web.listen_address": "127.0.0.1:0"})
    server = make_server(settings, build_registry(settings, nvml))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    stop = threading.Event()

    def impatient() -> None:
        while not stop.is_set():
            try:
                scrape(url, timeout_header="0.001")
            except OSError:
                pass

    clients = [threading.Thread(target=impatient, daemon=True) for _ in range(2)]
    try:
        for client in clients:
            client.start()
        results = [scrape(url, timeout_header="10")[1] for _ in range(20)]
    finally:
        stop.set()
        for client in clients:
            client.join(10)
        server.shutdown()
        server.server_close()
    ok = [values[("trainwatch_scrape_collector_success", "gpu")] for values in results]
    assert ok == [1.0] * 20
    assert all(("trainwatch_gpu_pcie_receive_bytes_per_second", "1") in v for v in results)


def test_a_flapping_collector_writes_one_warning_a_minute_and_counts_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    class Flapping:
        calls = 0

        def collect(self) -> Iterator[Any]:
            Flapping.calls += 1
            if Flapping.calls % 2:
                raise CollectorError(f"GPU 0: no answer ({Flapping.calls})")
            yield from ()

    now = [0.0]
    collector = ScrapeCollector({"gpu": Flapping()}, version="t", clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="exporter.collector"):
        for _ in range(100):
            families = list(collector.collect())
            now[0] += 0.1
    # 50 failures in 10 s, each with new words: one warning, one "recovered", 49 counted.
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    suppressed = [s.value for f in families for s in f.samples
                  if s.name == "trainwatch_scrape_collector_warnings_suppressed_total"]
    assert suppressed == [49]
    # Both sides of the minute since the first warning (at 0 s): a failure at 59.9 s is
    # counted, not written; one at 60 s is written.
    with caplog.at_level(logging.INFO, logger="exporter.collector"):
        now[0] = 59.9
        families = list(collector.collect())  # fails (call 101)
        list(collector.collect())  # recovers
        assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
        assert [s.value for f in families for s in f.samples
                if s.name == "trainwatch_scrape_collector_warnings_suppressed_total"] == [50]
        now[0] = 60.0
        list(collector.collect())  # fails (call 103)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
