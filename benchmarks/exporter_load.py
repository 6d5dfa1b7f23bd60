"""Load mode of exporter_scrape.py: N concurrent scrapers for a bounded time, on each exporter.

Each exporter gets the same load in turn (never both at once, so they do not share the CPU):
N threads scraping /metrics back to back, first each with a new connection per scrape (what
a burst of Prometheus servers restarting looks like, and what a listen backlog of 5 stalled),
then each on one kept-alive connection (Prometheus's normal way). Prints served scrapes,
errors, p50/p99/max latency and RSS before and after, for trainwatch-exporter and
node_exporter side by side.

Targets: p99 within 2x node_exporter's, no errors, RSS growth under 10%.
"""

from __future__ import annotations

from benchmarks.http_load import Scrapes, proc_status, scrapers
from benchmarks.stack import Service


def run(services: dict[str, Service], clients: int, seconds: float) -> None:
    print(f"load: {clients} concurrent scrapers, {seconds:g} s per mode and exporter")
    print(f"{'exporter':<22}{'mode':<11}{'served':>8}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'max ms':>9}{'RSS MiB':>16}")
    p99: dict[tuple[str, str], float] = {}
    for mode, keep_alive in (("new conn", False), ("keep-alive", True)):
        for name, service in services.items():
            for _ in range(3):  # warm: first scrapes load code and NVML
                scrapers(service.port, 1, 0.2, keep_alive)
            before = proc_status(service.proc.pid, "VmRSS") / 1024
            result: Scrapes = scrapers(service.port, clients, seconds, keep_alive,
                                       headers={"Accept-Encoding": "gzip"})
            after = proc_status(service.proc.pid, "VmRSS") / 1024
            p99[(name, mode)] = result.quantile(0.99)
            print(f"{name:<22}{mode:<11}{len(result.latencies):>8}{len(result.errors):>8}"
                  f"{result.median * 1e3:>9.1f}{result.quantile(0.99) * 1e3:>9.1f}"
                  f"{max(result.latencies, default=0) * 1e3:>9.1f}"
                  f"{before:>7.1f} -> {after:>5.1f}")
    ours, theirs = list(services)
    for mode in ("new conn", "keep-alive"):
        print(f"p99 ratio {mode}: {p99[(ours, mode)] / p99[(theirs, mode)]:.2f}x (target <= 2x)")
