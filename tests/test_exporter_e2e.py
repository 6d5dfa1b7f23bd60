"""End to end: real exporter processes on loopback, scraped by a real Prometheus; promtool check
metrics; a golden /metrics over the fake NVML; TLS and basic auth on the wire."""

from __future__ import annotations

import base64
import gzip
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from benchmarks.stack import (
    REPO,
    Prometheus,
    Service,
    free_port,
    http_get,
    promtool,
    scrape_config,
    start_prometheus,
    start_trainwatch_exporter,
)
from exporter.webauth import hash_password

GOLDEN = Path(__file__).with_name("test_exporter_golden.txt")
CERT = Path(__file__).with_name("test_exporter_tls.crt")
KEY = Path(__file__).with_name("test_exporter_tls.key")
UPDATE_GOLDEN = os.environ.get("TRAINWATCH_UPDATE_GOLDEN") == "1"
JOB = "trainwatch-exporter"


def nvml_answers() -> bool:
    """Whether this machine's NVML initialises (a driver is there), as the real exporter sees."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service,
                                                                      Prometheus]]:
    """The real exporter (no GPU here), the fake-GPU one, and Prometheus scraping both. The
    fake GPUs' processes (pids 4242, 4243) are looked up in a procfs of this test's own: 4242
    in a Kubernetes pod, 4243 not there (an empty attribution), whatever this machine runs."""
    workdir = tmp_path_factory.mktemp("e2e")
    procfs = workdir / "procfs"
    (procfs / "4242").mkdir(parents=True)
    (procfs / "4242" / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4a1b_"
        f"9c2d_0123456789ab.slice/cri-containerd-{'4f6c' * 16}.scope\n")
    with start_trainwatch_exporter(workdir) as real, \
            start_trainwatch_exporter(workdir, "--no-collector.host", "--collector.gpu_process",
                                      f"--path.procfs={procfs}", fake_gpus=2) as fake:
        job = scrape_config(JOB, real.url)
        job["static_configs"][0]["targets"].append(fake.instance)
        prom = start_prometheus(workdir, {"scrape_configs": [job]})
        try:
            yield real, fake, prom
        finally:
            prom.stop()


def test_prometheus_scrapes_both_exporters(stack: tuple[Service, Service, Prometheus]) -> None:
    real, fake, prom = stack
    # The wait is for both to be scraped at all; whether each scrape succeeded is the check.
    prom.wait_for_series(f'count(up{{job="{JOB}"}}) == 2')
    up = {s["metric"]["instance"]: s["value"][1] for s in prom.query(f'up{{job="{JOB}"}}')}
    assert up == {real.instance: "1", fake.instance: "1"}
    targets = {t["labels"]["instance"]: t["health"] for t in prom.targets()}
    assert targets == {real.instance: "up", fake.instance: "up"}


def test_series_are_queryable(stack: tuple[Service, Service, Prometheus]) -> None:
    real, fake, prom = stack
    # Only the real exporter runs the host collector (the fake one has --no-collector.host).
    [idle] = prom.wait_for_series(f'trainwatch_cpu_seconds_total{{mode="idle",job="{JOB}"}}')
    assert idle["metric"]["instance"] == real.instance
    assert float(idle["value"][1]) > 0
    util = prom.wait_for_series("trainwatch_gpu_utilization_ratio")
    assert sorted(float(s["value"][1]) for s in util) == [0.5, 0.51]
    assert {s["metric"]["instance"] for s in util} == {fake.instance}
    gpu_success = 'trainwatch_scrape_collector_success{collector="gpu"}'
    prom.wait_for_series(f"count({gpu_success}) == 2")
    by_instance = {s["metric"]["instance"]: s["value"][1] for s in prom.query(gpu_success)}
    # The real exporter reads this machine's NVML: 1 where the driver answers, 0 where not.
    assert by_instance == {real.instance: "1" if nvml_answers() else "0", fake.instance: "1"}
    # By value against psutil read here: the exporter's figure is this machine's, in bytes and
    # seconds, from the field its name says (available, not free or total; idle, not user).
    [total] = prom.wait_for_series("trainwatch_memory_total_bytes")
    [available] = prom.wait_for_series("trainwatch_memory_available_bytes")
    assert total["metric"]["instance"] == available["metric"]["instance"] == real.instance
    memory = psutil.virtual_memory()
    assert float(total["value"][1]) == memory.total
    # Available moves between the scrape and now; by far less than a tenth of the total.
    assert abs(float(available["value"][1]) - memory.available) < memory.total / 10
    assert float(available["value"][1]) < float(total["value"][1])
    # Idle seconds only grow: at most now's, and not behind it by more than 30 s of every CPU.
    idle_now = psutil.cpu_times().idle
    assert idle_now - 30 * (os.cpu_count() or 1) <= float(idle["value"][1]) <= idle_now + 0.5


@pytest.mark.parametrize("which", ["real", "fake"])
def test_promtool_check_metrics_is_silent(stack: tuple[Service, Service, Prometheus],
                                          which: str) -> None:
    service = stack[0] if which == "real" else stack[1]
    status, body = http_get(service.url + "/metrics")
    assert status == 200
    proc = promtool("check", "metrics", stdin=body.decode())
    assert (proc.stdout, proc.stderr) == ("", "")


def normalise(body: str) -> str:
    """Durations change every scrape; everything else over the fake NVML is deterministic."""
    return re.sub(r"^(trainwatch_scrape_collector_duration_seconds\{[^}]*\}) \S+$",
                  r"\1 <seconds>", body, flags=re.MULTILINE)


def test_golden_metrics_over_fake_nvml(stack: tuple[Service, Service, Prometheus]) -> None:
    fake = stack[1]
    status, body = http_get(fake.url + "/metrics")
    assert status == 200
    text = normalise(body.decode())
    if UPDATE_GOLDEN:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "run with TRAINWATCH_UPDATE_GOLDEN=1 after a deliberate change"
    request = urllib.request.Request(fake.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert normalise(gzip.decompress(resp.read()).decode()) == text


def test_landing_page_and_unknown_paths(stack: tuple[Service, Service, Prometheus]) -> None:
    real, fake, _ = stack
    status, body = http_get(real.url + "/")
    assert status == 200 and b'href="metrics"' in body
    assert http_get(real.url + "/nope")[0] == 404
    # The page names the collectors each one runs: the defaults (gpu, host; gpu_process is off
    # by default), and for the fake one its flags' (host off, gpu_process on), not the table's.
    assert b"Collectors: gpu, host.</p>" in body
    status, body = http_get(fake.url + "/")
    assert status == 200 and b"Collectors: gpu, gpu_process.</p>" in body


class TlsService(Service):
    """A Service whose readiness probe speaks HTTPS, trusting the test certificate."""

    context = ssl.create_default_context(cafile=str(CERT))

    def _ready(self, path: str) -> Callable[[], bool]:
        self.url = self.url.replace("http://", "https://")
        return lambda: fetch(self.url + path) == 200


def fetch(url: str, auth: str | None = None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=TlsService.context) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_tls_and_basic_auth(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(f"""
web:
  tls_cert_file: {CERT}
  tls_key_file: {KEY}
  basic_auth_users:
    prometheus: "{hash_password('s3cret', iterations=1000)}"
""")
    port = free_port()
    argv = [sys.executable, "-m", "exporter", f"--web.listen-address=127.0.0.1:{port}",
            f"--config={config}", "--no-collector.gpu"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with TlsService("tls_exporter", argv, port, tmp_path, ready_path="/healthz", env=env) as svc:
        assert svc.url.startswith("https://")
        assert fetch(svc.url + "/metrics") == 401
        assert fetch(svc.url + "/metrics", "prometheus:wrong") == 401
        assert fetch(svc.url + "/metrics", "nobody:s3cret") == 401
        assert fetch(svc.url + "/metrics", "prometheus:s3cret") == 200
        assert fetch(svc.url + "/", "prometheus:s3cret") == 200
        # Every page but the probe asks for credentials, an unknown one too (no 404 to map
        # the server's pages without them).
        assert fetch(svc.url + "/") == 401
        assert fetch(svc.url + "/nope") == 401
        assert fetch(svc.url + "/nope", "prometheus:s3cret") == 404
        assert fetch(svc.url + "/healthz") == 200  # probes carry no credentials
        with pytest.raises(OSError):  # plain HTTP is not served on the TLS port
            http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        svc.proc.terminate()
        assert svc.proc.wait(timeout=10) == 0, svc.log()  # SIGTERM is a clean stop
