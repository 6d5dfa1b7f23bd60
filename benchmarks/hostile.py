"""Hostile clients and servers against one checkout, or two side by side (issue 25).

    python -m benchmarks.hostile                          # this checkout
    git worktree add /tmp/before 661e754
    python -m benchmarks.hostile --compare /tmp/before    # that one, then this one, one table

The code measured (exporter, ``trainwatch`` CLI, trial pusher) runs from the checkout under
test in subprocesses; the attackers, scrapers and hostile servers are this file's. Loopback
only; every phase is bounded in time (about 3 minutes per checkout). Phases:

- scrapes from 127.0.0.3 succeeding while 127.0.0.2 holds 1,000 silent connections, then
  2,000 slowloris sockets (both re-opened as the exporter closes them);
- the exporter's RSS before, during and 10 s after ``--tls`` unfinished TLS handshakes from
  40 addresses, and the slowest TLS scrape meanwhile;
- the share of normal scrapes with ``collector="gpu"`` success 1 and PCIe series while two
  clients send ``X-Prometheus-Scrape-Timeout-Seconds: 0.001`` back to back;
- ``trainwatch diagnose`` and ``gc`` (``--timeout 5``) against an endless and a dripping
  server: peak RSS and wall time (killed at 2 GiB or 40 s);
- push failures counted within one push interval (10 s) against a dripping Pushgateway.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from benchmarks.hostile_servers import hostile_server
from benchmarks.http_load import proc_status

REPO = Path(__file__).resolve().parent.parent
CERT, KEY = REPO / "tests" / "test_exporter_tls.crt", REPO / "tests" / "test_exporter_tls.key"
PHASE_SECONDS = 15.0
GPU_OK = re.compile(rb'trainwatch_scrape_collector_success\{collector="gpu"\} 1')
PCIE = b"trainwatch_gpu_pcie_receive_bytes_per_second{"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The checkout's exporter over 8 fake GPUs without GPM, whose PCIe throughput NVML samples for
# 20 ms per direction, as on an A100 (the fake NVML lived in tests/ before it moved).
LAUNCH = """
import sys
try:
    from benchmarks.fake_nvml import FakeGpu, FakeNvml
except ImportError:
    from tests.fake_nvml import FakeGpu, FakeNvml
from exporter.cli import main
nvml = FakeNvml([FakeGpu(index=i, pcie_kbps=(1000 + i, 2000 + i)) for i in range(8)])
for gpu in nvml.gpus:
    gpu.delays["nvmlDeviceGetPcieThroughput"] = 0.02
sys.exit(main(sys.argv[1:], nvml=nvml))
"""


@contextmanager
def exporter(tree: Path, tls: bool = False,
             log: Path | None = None) -> Iterator[tuple[int, int]]:
    """The checkout's exporter over 8 fake GPUs, logging warnings to ``log`` if given;
    yields (port, pid)."""
    port = free_port()
    flags = [f"--web.tls-cert-file={CERT}", f"--web.tls-key-file={KEY}"] if tls else []
    level = "warn" if log else "error"
    stderr = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, f"--web.listen-address=127.0.0.1:{port}",
                             f"--log.level={level}", *flags], cwd=tree,
                            env={**os.environ, "PYTHONPATH": str(tree)},
                            stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 20
        while scrape(port, "/healthz", tls=tls)[0] != 200:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"exporter from {tree} did not start")
            time.sleep(0.1)  # readiness poll
        yield port, proc.pid
    finally:
        proc.kill()
        proc.wait()


def scrape(port: int, path: str = "/metrics", source: str = "127.0.0.3", tls: bool = False,
           headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        if tls:
            context = ssl._create_unverified_context()  # the test certificate
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=timeout, context=context, source_address=(source, 0))
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                              source_address=(source, 0))
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return 0, b""


class Attacker:
    """``count`` connections from ``source``, each re-opened when the exporter closes it;
    ``opening`` is sent once, ``every`` second ``dribble`` (None: nothing)."""

    def __init__(self, port: int, count: int, source: str, opening: bytes = b"",
                 dribble: bytes | None = None) -> None:
        self.port, self.count, self.source = port, count, source
        self.opening, self.dribble = opening, dribble
        self.socks: list[socket.socket | None] = [None] * count
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2,
                                            source_address=(self.source, 0))
            sock.setblocking(False)
            if self.opening:
                sock.send(self.opening)
            return sock
        except OSError:
            return None

    def _alive(self, sock: socket.socket | None) -> bool:
        if sock is None:
            return False
        try:
            if sock.recv(1024) == b"":
                sock.close()
                return False
        except BlockingIOError:
            pass
        except OSError:
            sock.close()
            return False
        if self.dribble:
            try:
                sock.send(self.dribble)
            except OSError:
                pass
        return True

    def _run(self) -> None:
        while not self.stop.is_set():
            for i, sock in enumerate(self.socks):
                if self.stop.is_set():
                    break
                if not self._alive(sock):
                    self.socks[i] = self._open()
            self.stop.wait(1.0)

    def __enter__(self) -> Self:
        self.socks = [self._open() for _ in range(self.count)]
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        for sock in self.socks:
            if sock is not None:
                sock.close()


def scrapes_during(port: int, attack: Attacker) -> str:
    ok = total = 0
    with attack:
        deadline = time.monotonic() + PHASE_SECONDS
        while time.monotonic() < deadline:
            total += 1
            ok += scrape(port)[0] == 200
    return f"{ok}/{total}"


def tls_flood(tree: Path, count: int) -> dict[str, str]:
    hello = b"\x16\x03\x01\x00\xa0\x01"  # a ClientHello's first bytes, never the rest
    with exporter(tree, tls=True) as (port, pid):
        scrape(port, tls=True)
        before = proc_status(pid, "VmRSS") // 1024
        socks, slowest, peak = [], 0.0, before
        for n in range(count):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2,
                                                source_address=(f"127.0.4.{n % 40 + 1}", 0))
                sock.send(hello)
                socks.append(sock)
            except OSError:
                pass
        for _ in range(5):
            start = time.monotonic()
            status, _ = scrape(port, tls=True, timeout=15)
            slowest = max(slowest, time.monotonic() - start if status == 200 else float("inf"))
            peak = max(peak, proc_status(pid, "VmRSS") // 1024)
        for sock in socks:
            sock.close()
        time.sleep(10)  # the figure asked for: RSS 10 s after the flood
        after = proc_status(pid, "VmRSS") // 1024
    return {f"TLS x{count}: RSS before/during/after (MiB)": f"{before}/{peak}/{after}",
            f"TLS x{count}: slowest of 5 TLS scrapes (s)": f"{slowest:.2f}"}


def gpu_ratio(port: int) -> str:
    stop = threading.Event()

    def impatient(source: str) -> None:
        while not stop.is_set():
            scrape(port, source=source, headers={"X-Prometheus-Scrape-Timeout-Seconds": "0.001"})

    threads = [threading.Thread(target=impatient, args=(f"127.0.0.{n}",), daemon=True)
               for n in (5, 6)]
    for thread in threads:
        thread.start()
    ok = total = 0
    deadline = time.monotonic() + PHASE_SECONDS
    while time.monotonic() < deadline:
        status, body = scrape(port, headers={"X-Prometheus-Scrape-Timeout-Seconds": "10"})
        total += 1
        ok += status == 200 and bool(GPU_OK.search(body)) and PCIE in body
    stop.set()
    for thread in threads:
        thread.join(30)
    return f"{ok}/{total}"


def run_capped(argv: list[str], tree: Path, wall: float = 40.0,
               rss_cap_kib: int = 2 * 2**20) -> tuple[float, int, str]:
    """(wall seconds, peak RSS MiB, how it ended) of a command, killed at ``wall`` or the cap."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ended = ""
    while True:  # wait4, not poll(): poll() would reap the child and lose its rusage
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            rss = proc_status(proc.pid, "VmRSS")
        except (OSError, KeyError):
            rss = 0
        if not ended and (rss > rss_cap_kib or time.monotonic() - start > wall):
            ended = f"killed at {rss // 1024} MiB" if rss > rss_cap_kib else f"killed at {wall:g} s"
            proc.send_signal(signal.SIGKILL)
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - start
    error = (proc.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1][:60] \
        if proc.stderr else ""
    return took, int(usage.ru_maxrss // 1024), ended or f"exit {os.waitstatus_to_exitcode(status)}: {error}"


def cli(tree: Path) -> dict[str, str]:
    figures = {}
    launcher = [sys.executable, "-c", "import sys; from trainwatch.cli import main; sys.exit(main())"]
    for kind in ("endless", "drip"):
        with hostile_server(kind, cap=64 * 2**30, every=1.0, seconds=120) as url:
            for name, args in (("diagnose", ["diagnose", "--prometheus", url, "--experiment", "e"]),
                               ("gc", ["gc", "--pushgateway", url])):
                took, peak, ended = run_capped([*launcher, *args, "--timeout", "5"], tree)
                figures[f"{name} vs {kind}: peak RSS MiB, wall s"] = f"{peak}, {took:.1f} ({ended})"
    return figures


PUSH_PROBE = """
import sys, time, os
from prometheus_client import CollectorRegistry
from trial_instrumentation.collector import TrialState
from trial_instrumentation.config import resolve
from trial_instrumentation.pusher import Pusher
config = resolve(pushgateway=sys.argv[1], experiment="e", trial="t", push_interval=10, env={})
state = TrialState(config.buckets, {})
Pusher(config, CollectorRegistry(), state).start()
start, first = time.monotonic(), None
while time.monotonic() - start < config.push_interval:
    if state.push_failures and first is None:
        first = time.monotonic() - start
    time.sleep(0.1)
print(state.push_failures, "none" if first is None else f"{first:.1f}", flush=True)
os._exit(0)
"""


def push(tree: Path) -> dict[str, str]:
    with hostile_server("drip", every=1.0, seconds=60) as url:
        done = subprocess.run([sys.executable, "-c", PUSH_PROBE, url], cwd=tree, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                              text=True, check=False)
    failures, first = (done.stdout.split() + ["?", "?"])[:2]
    return {"dripping gateway: failures in 10 s (first at s)": f"{failures} ({first})"}


def measure(tree: Path, tls_count: int, phases: set[str],
            log: Callable[[str], None]) -> dict[str, str]:
    figures: dict[str, str] = {}
    if "silent" in phases:
        log("silent connections")
        with exporter(tree) as (port, _):
            figures["scrapes OK, 1,000 silent conns from one address"] = scrapes_during(
                port, Attacker(port, 1000, "127.0.0.2"))
    if "slowloris" in phases:
        log("slowloris")
        with exporter(tree) as (port, _):
            figures["scrapes OK, 2,000 slowloris sockets"] = scrapes_during(
                port, Attacker(port, 2000, "127.0.0.2", b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
                               b"X-Slow: 1\r\n"))
    if "timeout" in phases:
        log("1 ms timeouts")
        with tempfile.TemporaryDirectory() as tmp:
            lines = Path(tmp) / "exporter.log"
            with exporter(tree, log=lines) as (port, _):
                figures["GPU success + PCIe, 2 clients at 1 ms"] = gpu_ratio(port)
            text = lines.read_bytes()
            count = text.count(b"\n")
            figures["  exporter log meanwhile: lines, KiB"] = f"{count}, {len(text) // 1024}"
    if "tls" in phases:
        log("TLS handshakes")
        figures.update(tls_flood(tree, tls_count))
    if "cli" in phases:
        log("CLI against hostile servers")
        figures.update(cli(tree))
    if "push" in phases:
        log("dripping gateway")
        figures.update(push(tree))
    return figures


PHASES = ("silent", "slowloris", "timeout", "tls", "cli", "push")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, metavar="CHECKOUT",
                        help="measure this checkout first (before), then this one (after)")
    parser.add_argument("--tls", type=int, default=4000, help="unfinished TLS handshakes")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of "
                        + ", ".join(PHASES))
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the exporter inherits it too
    trees = [("before", args.compare.resolve()), ("after", REPO)] if args.compare else [
        ("this", REPO)]
    results = {}
    for label, tree in trees:
        def log(phase: str, label: str = label) -> None:
            print(f"[{label}] {phase}", file=sys.stderr, flush=True)
        results[label] = measure(tree, args.tls, set(args.phases.split(",")), log)
    keys = list(results[trees[0][0]])
    width = max(map(len, keys))
    print(f"{'':{width}}  " + " | ".join(label for label, _ in trees))
    for key in keys:
        print(f"{key:{width}}  " + " | ".join(results[label].get(key, "-") for label, _ in trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
