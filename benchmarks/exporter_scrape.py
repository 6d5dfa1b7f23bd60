"""Scrape cost of trainwatch-exporter against node_exporter, measured side by side.

Starts node_exporter 1.5 (its default collectors, the reference the targets are set against)
and the real trainwatch-exporter (host collector, plus the gpu collector over a fake NVML of 8
GPUs), then scrapes them alternately, the way Prometheus does: one kept-alive connection per
target, ``Accept-Encoding: gzip``. Prints median and p99 scrape latency, bytes per response
(on the wire and decompressed), series, and resident memory after the run, plus the ratios.

    .venv/bin/python -m benchmarks.exporter_scrape [--rounds 500] [--gpus 8]
    .venv/bin/python -m benchmarks.exporter_scrape --load 20 [--seconds 10]   # concurrent load

Targets (this machine, 2 cores): median scrape <= 0.5x node_exporter's, RSS <= 1.5x.

``--real-gpu`` (on a machine with NVIDIA GPUs): the real exporter with every default
collector over the real NVML, beside ``nvidia-smi --query-gpu`` (what nvidia_gpu_exporter runs
per scrape), alternately, in one run. Needs only the exporter's own dependencies and
nvidia-smi. Target on one H100: median scrape <= 10 ms and <= 0.4x the nvidia-smi query.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent

if TYPE_CHECKING:
    from benchmarks.stack import Service


@dataclass
class Target:
    name: str
    service: Service
    latencies: list[float] = field(default_factory=list)
    wire_bytes: int = 0
    body_bytes: int = 0
    series: int = 0

    def __post_init__(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.service.port, timeout=10)

    def scrape(self) -> None:
        start = time.perf_counter()
        self.conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        resp = self.conn.getresponse()
        raw = resp.read()
        self.latencies.append(time.perf_counter() - start)
        if resp.status != 200:
            raise RuntimeError(f"{self.name} answered {resp.status}")
        body = gzip.decompress(raw) if resp.getheader("Content-Encoding") == "gzip" else raw
        self.wire_bytes, self.body_bytes = len(raw), len(body)
        self.series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.service.proc.pid}/status").read_text()
        kib = next(int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("VmRSS:"))
        return kib / 1024

    def p(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--real-gpu", action="store_true",
                        help="real NVML and GPUs, against nvidia-smi --query-gpu")
    parser.add_argument("--load", type=int, metavar="N",
                        help="load mode: N concurrent scrapers (benchmarks/exporter_load.py)")
    parser.add_argument("--seconds", type=float, default=10.0, help="load mode: per run")
    args = parser.parse_args()
    if args.real_gpu:
        from benchmarks.real_gpu_scrape import run

        run(args.rounds, args.warmup)
        return
    from benchmarks.stack import start_node_exporter, start_trainwatch_exporter

    with tempfile.TemporaryDirectory() as tmp, \
            start_node_exporter(Path(tmp)) as node, \
            start_trainwatch_exporter(Path(tmp), "--log.level=warn",
                                      fake_gpus=args.gpus) as ours:
        if args.load:
            from benchmarks.exporter_load import run as load

            load({"trainwatch-exporter": ours, "node_exporter": node}, args.load, args.seconds)
            return
        targets = [Target("trainwatch-exporter", ours), Target("node_exporter", node)]
        for _ in range(args.warmup):
            for target in targets:
                target.scrape()
        for target in targets:
            target.latencies.clear()
        for i in range(args.rounds):
            # Alternate who goes first, so neither always scrapes a CPU the other just warmed.
            for target in targets if i % 2 == 0 else targets[::-1]:
                target.scrape()
        report(targets, args)


def report(targets: list[Target], args: argparse.Namespace) -> None:
    print(f"{args.rounds} alternating scrapes each (after {args.warmup} warm-up), keep-alive, "
          f"gzip; trainwatch: host + gpu over a fake NVML of {args.gpus} GPUs")
    print(f"{'exporter':<22}{'median ms':>10}{'p99 ms':>9}{'series':>8}{'wire B':>9}"
          f"{'body B':>9}{'RSS MiB':>9}")
    for t in targets:
        print(f"{t.name:<22}{statistics.median(t.latencies) * 1000:>10.2f}{t.p(0.99):>9.2f}"
              f"{t.series:>8}{t.wire_bytes:>9}{t.body_bytes:>9}{t.rss_mib():>9.1f}")
    ours, node = targets
    latency = statistics.median(ours.latencies) / statistics.median(node.latencies)
    memory = ours.rss_mib() / node.rss_mib()
    print(f"ratio median scrape {latency:.2f}x (target <= 0.5x), "
          f"p99 {ours.p(0.99) / node.p(0.99):.2f}x, RSS {memory:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
