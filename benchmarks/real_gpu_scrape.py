"""``exporter_scrape.py --real-gpu``: trainwatch-exporter over the real NVML beside nvidia-smi.

Self-contained on purpose (standard library, the exporter and nvidia-smi): the GPU machines
have no Prometheus binaries and may lack the test dependencies. The exporter runs with every
default collector, scraped as Prometheus does (kept-alive connection, gzip, the scrape-timeout
header); between two scrapes, one ``nvidia-smi --query-gpu`` of the fields trainwatch exports,
which is what nvidia_gpu_exporter runs per scrape.
"""

from __future__ import annotations

import gzip
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu_check import figure

REPO = Path(__file__).resolve().parent.parent
QUERY = ("index,uuid,name,pci.bus_id,driver_version,utilization.gpu,utilization.memory,"
         "memory.total,memory.used,memory.free,power.draw,power.limit,temperature.gpu,"
         "clocks.sm,clocks.mem,ecc.errors.corrected.volatile.total,"
         "ecc.errors.uncorrected.volatile.total")
SCRAPE_HEADERS = {"Accept-Encoding": "gzip", "X-Prometheus-Scrape-Timeout-Seconds": "10"}
GPM_SERIES = b"trainwatch_gpu_sm_active_ratio{"
RATIO_TARGET = 0.4  # of nvidia-smi's median, what nvidia_gpu_exporter pays per scrape
MEDIAN_MS_TARGET = 10.0  # on one H100


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(conn: http.client.HTTPConnection) -> tuple[float, bytes]:
    start = time.perf_counter()
    conn.request("GET", "/metrics", headers=SCRAPE_HEADERS)
    resp = conn.getresponse()
    raw = resp.read()
    took = time.perf_counter() - start
    if resp.status != 200:
        raise RuntimeError(f"trainwatch-exporter answered {resp.status}")
    return took, gzip.decompress(raw) if resp.getheader("Content-Encoding") == "gzip" else raw


def _nvidia_smi(binary: str) -> float:
    start = time.perf_counter()
    subprocess.run([binary, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run(rounds: int, warmup: int) -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise SystemExit("--real-gpu needs nvidia-smi on PATH (an NVIDIA driver)")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "--log.level=warn",
                             f"--web.listen-address=127.0.0.1:{port}"], env=env)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        deadline = time.monotonic() + 30
        while True:  # readiness: the first answered scrape
            try:
                _scrape(conn)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("trainwatch-exporter did not start") from None
                conn.close()
                time.sleep(0.05)
        for _ in range(warmup):
            _scrape(conn)
            _nvidia_smi(smi)
        ours: list[float] = []
        theirs: list[float] = []
        body = b""
        for i in range(rounds):
            if i % 2 == 0:
                took, body = _scrape(conn)
                ours.append(took)
                theirs.append(_nvidia_smi(smi))
            else:
                theirs.append(_nvidia_smi(smi))
                took, body = _scrape(conn)
                ours.append(took)
        _report(rounds, warmup, ours, theirs, body)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _report(rounds: int, warmup: int, ours: list[float], theirs: list[float],
            body: bytes) -> None:
    gpus = body.count(b"trainwatch_gpu_info{")
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    gpu_ok = b'trainwatch_scrape_collector_success{collector="gpu"} 1.0' in body
    print(f"{rounds} alternating runs each (after {warmup} warm-up); {gpus} GPU(s), GPM "
          f"{'present' if GPM_SERIES in body else 'absent'}, gpu collector "
          f"{'ok' if gpu_ok else 'FAILED'}, {series} series")
    print(f"{'what':<44}{'median ms':>10}{'p99 ms':>9}")
    median_ours, median_theirs = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    print(f"{'trainwatch-exporter scrape (defaults)':<44}{median_ours:>10.2f}{_ms(ours, 0.99):>9.2f}")
    print(f"{'nvidia-smi --query-gpu (17 fields)':<44}{median_theirs:>10.2f}"
          f"{_ms(theirs, 0.99):>9.2f}")
    ratio = median_ours / median_theirs
    print(f"ratio median {ratio:.2f}x (target <= {RATIO_TARGET}x); "
          f"median {median_ours:.2f} ms (target <= {MEDIAN_MS_TARGET} ms on one H100)")
    figure("gpu collector success", "ok" if gpu_ok else "FAILED", "ok", gpu_ok)
    figure("GPM activity series (Hopper and newer)", "present" if GPM_SERIES in body else
           "absent", "present on H100/H200", None)
    figure("scrape median ms (real NVML, defaults)", median_ours, f"<= {MEDIAN_MS_TARGET}",
           median_ours <= MEDIAN_MS_TARGET)
    figure("scrape median / nvidia-smi median", ratio, f"<= {RATIO_TARGET}",
           ratio <= RATIO_TARGET)
