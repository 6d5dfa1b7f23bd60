"""Scrape cost of trainwatch-exporter against node_exporter, measured side by side.

Starts node_exporter 1.5 (its default collectors, the reference the targets are set against)
and the real trainwatch-exporter (host collector, plus the gpu collector over a fake NVML of 8
GPUs), and beside it a second trainwatch-exporter over a fake NVML of no GPU, then scrapes them
in turn, the way Prometheus does: one kept-alive connection per target, ``Accept-Encoding:
gzip``. Prints each one's median and p99 scrape latency, CPU time per scrape (the process's
user + system time over the measured rounds), series, bytes per response (on the wire and
decompressed) and resident memory after the run, plus the ratios; and what one GPU adds to a
scrape (the two trainwatch exporters' difference over the GPU count, in median latency and in
CPU), less what the fake NVML itself spends on one GPU's calls (the GPU calls of one scrape,
recorded once and replayed in this process between the measured scrapes): the exporter's own
cost per GPU. ``--compare DIR`` adds the same pair from another checkout (a ``git worktree``
of an earlier commit), in the same run.

    .venv/bin/python -m benchmarks.exporter_scrape [--rounds 500] [--gpus 8] [--compare DIR]
    .venv/bin/python -m benchmarks.exporter_scrape --load 20 [--seconds 10]   # concurrent load

Targets (this machine, 2 cores): median scrape <= 0.3x node_exporter's and p99 <= 0.5x with 8
GPUs, RSS <= 1.5x, the exporter's own cost <= 0.1 ms per GPU.

``--real-gpu`` (on a machine with NVIDIA GPUs): the real exporter with every default
collector over the real NVML, beside ``nvidia-smi --query-gpu`` (what nvidia_gpu_exporter runs
per scrape), alternately, in one run. Needs only the exporter's own dependencies and
nvidia-smi. Target on one H100: median scrape <= 10 ms and <= 0.4x the nvidia-smi query.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    cpu_start: float = 0.0  # the process's CPU seconds when the measured rounds began

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

    def cpu_seconds(self) -> float:
        """User and system CPU time of the process so far (/proc/PID/stat, in clock ticks)."""
        stat = Path(f"/proc/{self.service.proc.pid}/stat").read_text()
        utime, stime = stat.rsplit(")", 1)[1].split()[11:13]
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")

    def cpu_ms_per_scrape(self) -> float:
        return (self.cpu_seconds() - self.cpu_start) * 1000 / len(self.latencies)

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
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="also the exporter of another checkout (a git worktree of an "
                             "earlier commit), in the same run")
    args = parser.parse_args()
    if args.real_gpu:
        from benchmarks.real_gpu_scrape import run

        run(args.rounds, args.warmup)
        return
    from benchmarks.stack import start_node_exporter, start_trainwatch_exporter

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        def exporter(name: str, gpus: int, repo: Path = REPO) -> Target:
            workdir = Path(tempfile.mkdtemp(dir=tmp))  # a log of its own
            return Target(name, stack.enter_context(start_trainwatch_exporter(
                workdir, "--log.level=warn", fake_gpus=gpus, repo=repo)))

        node = Target("node_exporter", stack.enter_context(start_node_exporter(Path(tmp))))
        ours = exporter("trainwatch-exporter", args.gpus)
        if args.load:
            from benchmarks.exporter_load import run as load

            load({"trainwatch-exporter": ours.service, "node_exporter": node.service},
                 args.load, args.seconds)
            return
        # (with GPUs, without: what the GPUs add, in the same run), this tree's and --compare's
        pairs = [(ours, exporter("trainwatch, no GPU", 0) if args.gpus else None)]
        if args.compare:
            pairs.append((exporter("before: trainwatch", args.gpus, args.compare),
                          exporter("before: no GPU", 0, args.compare) if args.gpus else None))
        targets = [node] + [t for pair in pairs for t in pair if t is not None]
        replay = FakeNvmlReplay(args.gpus) if args.gpus else None
        for _ in range(args.warmup):
            for target in targets:
                target.scrape()
        for target in targets:
            target.latencies.clear()
            target.cpu_start = target.cpu_seconds()
        for i in range(args.rounds):
            # Rotate who goes first, so none always scrapes a CPU another just warmed.
            for target in targets[i % len(targets):] + targets[:i % len(targets)]:
                target.scrape()
            if replay is not None:
                replay.once()
        report(node, pairs, targets, args, replay.ms_per_gpu() if replay else 0.0)


def report(node: Target, pairs: list[tuple[Target, Target | None]], targets: list[Target],
           args: argparse.Namespace, fake: float) -> None:
    print(f"{args.rounds} scrapes each in turn (after {args.warmup} warm-up), keep-alive, "
          f"gzip; trainwatch: host + gpu over a fake NVML of {args.gpus} GPUs")
    print(f"{'exporter':<22}{'median ms':>10}{'p99 ms':>9}{'CPU ms':>8}{'series':>8}"
          f"{'wire B':>9}{'body B':>9}{'RSS MiB':>9}")
    for t in targets:
        print(f"{t.name:<22}{statistics.median(t.latencies) * 1000:>10.2f}{t.p(0.99):>9.2f}"
              f"{t.cpu_ms_per_scrape():>8.2f}{t.series:>8}{t.wire_bytes:>9}{t.body_bytes:>9}"
              f"{t.rss_mib():>9.1f}")
    for ours, bare in pairs:
        latency = statistics.median(ours.latencies) / statistics.median(node.latencies)
        memory = ours.rss_mib() / node.rss_mib()
        print(f"{ours.name}: ratio median scrape {latency:.2f}x (target <= 0.3x), "
              f"p99 {ours.p(0.99) / node.p(0.99):.2f}x (target <= 0.5x), "
              f"RSS {memory:.2f}x (target <= 1.5x)")
        if bare is not None:
            added = (statistics.median(ours.latencies)
                     - statistics.median(bare.latencies)) * 1000 / args.gpus
            cpu = (ours.cpu_ms_per_scrape() - bare.cpu_ms_per_scrape()) / args.gpus
            print(f"{ours.name}: per GPU {added:.3f} ms of the median scrape, {cpu:.3f} ms of "
                  f"CPU, of which the fake NVML {fake:.3f} ms: the exporter's own "
                  f"{added - fake:.3f} ms, {cpu - fake:.3f} ms of CPU (target <= 0.1 ms)")


class _Recorder:
    """The fake NVML, noting each call (function, arguments) while ``on``."""

    def __init__(self, nvml: Any) -> None:
        self._nvml, self.on = nvml, False
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(target)):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.on:
                self.calls.append((target, args, kwargs))
            return target(*args, **kwargs)
        return call


class FakeNvmlReplay:
    """What the fake NVML itself spends on the GPUs' calls of one scrape: the calls of a
    steady scrape (identities read, GPM primed) of ``gpus`` GPUs by the gpu collector, recorded
    once, then replayed against the fake alone (``once``) between the measured scrapes, so that
    it runs as cold as inside the exporters."""

    def __init__(self, gpus: int) -> None:
        from benchmarks.fake_nvml import FakeNvml
        from exporter.collectors import build_registry
        from exporter.config import merge

        recorder = _Recorder(FakeNvml.with_gpus(gpus))
        registry = build_registry(merge(file={}, flags={"collector.host": False}), recorder)
        for _ in range(3):
            list(registry.collect())
        recorder.on = True
        list(registry.collect())
        recorder.on = False
        # The count is once a scrape, whatever the GPUs; everything else is some GPU's.
        self.calls = [c for c in recorder.calls if c[0].__name__ != "nvmlDeviceGetCount"]
        self.gpus, self.took = gpus, list[float]()

    def once(self) -> None:
        start = time.perf_counter()
        for function, call_args, kwargs in self.calls:
            function(*call_args, **kwargs)
        self.took.append(time.perf_counter() - start)

    def ms_per_gpu(self) -> float:
        """The median replay (a machine shared with other work stalls some), per GPU."""
        return statistics.median(self.took) * 1000 / self.gpus


if __name__ == "__main__":
    main()
