"""Start the real components the tests and benchmarks use, on loopback, in temp dirs.

Every start polls a readiness endpoint; nothing here sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
S = TypeVar("S", bound="Service")
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port free now. Under pytest-xdist (`make test`), worker N of M takes only ports
    whose half is N modulo M (Linux hands out odd ports to bind(0), so the half, not the port):
    two workers never hand out the same one to services they start at once."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") or 1)
    index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else 0
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port // 2 % count == index % count:
            return port


class GiveUp(Exception):
    """Raised by a ``wait_until`` probe when waiting longer cannot help (the process died)."""


def wait_until(probe: Callable[[], T | None], timeout: float = 20.0, what: str = "condition",
               interval: float = 0.05) -> T:
    """Poll ``probe`` until it returns something truthy; raise TimeoutError naming ``what``.

    Any exception from ``probe`` counts as "not yet", except ``GiveUp``, which ends the wait."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except GiveUp:
            raise
        except Exception as exc:  # noqa: BLE001 - a probe may fail until the thing is up
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed: run `make tools` (make test does it)")
    return path


def promtool(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real promtool; the test fails, showing its output, unless it exits 0."""
    proc = subprocess.run([require_binary("promtool"), *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, \
        f"promtool {' '.join(map(str, args))} failed:\n{proc.stdout}{proc.stderr}"
    return proc


class Service:
    """A real process listening on 127.0.0.1:port; stopped (and its log kept) on ``stop()``."""

    def __init__(self, name: str, argv: Sequence[str], port: int, workdir: Path,
                 ready_path: str = "/", env: dict[str, str] | None = None,
                 timeout: float = 20.0) -> None:
        self.name = name
        self.port = port
        self.instance = f"127.0.0.1:{port}"  # Prometheus's target address and instance label
        self.url = f"http://{self.instance}"
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(list(argv), stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=workdir, env=env, start_new_session=True)
        ready = self._ready(ready_path)

        def running_and_ready() -> bool:
            if self.proc.poll() is not None:
                raise GiveUp(f"exited with {self.proc.returncode}")
            return ready()

        try:
            wait_until(running_and_ready, timeout=timeout, what=f"{name} on {self.url}")
        except (TimeoutError, GiveUp) as err:
            self.stop()
            reason = str(err) if isinstance(err, GiveUp) else "did not become ready"
            raise RuntimeError(f"{name} {reason}; log:\n{self.log()}") from None

    def _ready(self, path: str) -> Callable[[], bool]:
        """A probe true once ``path`` answers 200; subclasses change how it is asked."""
        return lambda: http_get(self.url + path, timeout=1.0)[0] == 200

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self: S) -> S:  # noqa: PYI019
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_pushgateway(workdir: Path) -> Service:
    port = free_port()
    # An empty persistence file: Debian's default persists, and runs would leak into each other.
    argv = [require_binary("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}",
            "--persistence.file="]
    return Service("pushgateway", argv, port, workdir, ready_path="/-/ready")


def start_node_exporter(workdir: Path, *extra: str) -> Service:
    port = free_port()
    argv = [require_binary("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}",
            *extra]
    return Service("node_exporter", argv, port, workdir, ready_path="/metrics")


def start_trainwatch_exporter(workdir: Path, *extra: str, fake_gpus: int | None = None,
                              idle_gpus: Sequence[int] = (), repo: Path = REPO) -> Service:
    """The real exporter; with ``fake_gpus`` it runs over benchmarks/fake_nvml.py's fake NVML, the
    GPUs in ``idle_gpus`` reading as idle (benchmarks/fake_nvml_exporter.py). ``repo`` is the
    checkout whose code runs (another one: a ``git worktree`` of an earlier commit)."""
    port = free_port()
    module = "exporter" if fake_gpus is None else "benchmarks.fake_nvml_exporter"
    argv = [sys.executable, "-m", module, f"--web.listen-address=127.0.0.1:{port}", *extra]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    if fake_gpus is not None:
        # Here, not at the top: it loads the exporter and pynvml, which most tests never need.
        from benchmarks.fake_nvml_exporter import FAKE_GPUS_ENV, IDLE_GPUS_ENV

        env[FAKE_GPUS_ENV] = str(fake_gpus)
        env[IDLE_GPUS_ENV] = ",".join(map(str, idle_gpus))
    name = "trainwatch_exporter" if fake_gpus is None else "fake_gpu_exporter"
    return Service(name, argv, port, workdir, ready_path="/healthz", env=env)


class Prometheus(Service):
    """A real Prometheus server with a helper for the HTTP API."""

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        status, body = http_get(f"{self.url}/api/v1/{path}?{query}")
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params} failed ({status}): {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (list of {metric, value})."""
        data = self.api("query", query=expr)
        return list(data["result"])

    def wait_for_series(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        return wait_until(lambda: self.query(expr), timeout=timeout, what=f"series for {expr!r}",
                          interval=0.2)

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])


def _config_and_data(workdir: Path, name: str, config: dict[str, Any],
                     data_dir: str) -> tuple[Path, Path]:
    """``config`` written as YAML to ``workdir/name``, and a data directory beside it."""
    path = workdir / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    data = workdir / data_dir
    data.mkdir(exist_ok=True)
    return path, data


def start_prometheus(workdir: Path, config: dict[str, Any], *extra: str) -> Prometheus:
    """Start Prometheus with ``config`` (a prometheus.yml as a dict), written into ``workdir``;
    ``extra`` flags go on its command line (e.g. --web.enable-remote-write-receiver)."""
    port = free_port()
    cfg_path, data = _config_and_data(workdir, "prometheus.yml", config, "tsdb")
    argv = [require_binary("prometheus"), f"--config.file={cfg_path}",
            f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle", "--log.level=warn", *extra]
    return Prometheus("prometheus", argv, port, workdir, ready_path="/-/ready")


def scrape_config(job: str, target_url: str, interval: str = "1s",
                  honor_labels: bool = False) -> dict[str, Any]:
    """One static scrape job for ``start_prometheus`` configs."""
    hostport = target_url.split("://", 1)[1]
    job_cfg: dict[str, Any] = {"job_name": job, "scrape_interval": interval,
                               "scrape_timeout": interval, "static_configs": [{"targets": [hostport]}]}
    if honor_labels:
        job_cfg["honor_labels"] = True
    return job_cfg


def start_alertmanager(workdir: Path, config: dict[str, Any]) -> Service:
    """Start Alertmanager with ``config`` (an alertmanager.yml as a dict), written into
    ``workdir``; no cluster port (it would open a gossip port on every interface)."""
    port = free_port()
    cfg_path, data = _config_and_data(workdir, "alertmanager.yml", config, "alertmanager-data")
    argv = [require_binary("prometheus-alertmanager"), f"--config.file={cfg_path}",
            f"--storage.path={data}", f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=", "--log.level=warn"]
    return Service("alertmanager", argv, port, workdir, ready_path="/-/ready")


def alerting_config(alertmanager: Service) -> dict[str, Any]:
    """The ``alerting:`` section of a Prometheus config sending to ``alertmanager``."""
    return {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.instance]}]}]}
