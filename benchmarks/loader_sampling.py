"""The loader evidence's cost (issue 26): reading the trial's process tree (CPU of the trial and
its DataLoader workers, their reads) happens when the pusher collects, on its thread. Side by
side: the 1 ms step of ``instrumentation_overhead`` while a thread collects the trial's registry
every ``interval`` (0.05 s: 200x the default push interval of 10 s), alternately without and
with the loader collector, two worker processes alive throughout.

    .venv/bin/python -m benchmarks.loader_sampling
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest

import trial_instrumentation as ti
from benchmarks.instrumentation_overhead import instrumented_loop
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.loader_processes import LoaderProcessCollector, process_tree

INTERVAL_SECONDS = 0.05
DEFAULT_PUSH_INTERVAL_SECONDS = 10.0


class Sampler:
    """Collects ``registry`` every ``interval`` on its own thread, as the pusher does."""

    def __init__(self, registry: CollectorRegistry, interval: float) -> None:
        self.registry, self._interval = registry, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            generate_latest(self.registry)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def collect_seconds(samples: int = 50) -> float:
    """Median seconds of one loader collect (the tree walk and reads), two workers alive."""
    registry = CollectorRegistry()
    registry.register(LoaderProcessCollector(process_tree))
    generate_latest(registry)  # psutil imported, the tree built
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        generate_latest(registry)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def side_by_side(steps: int = 100, rounds: int = 101,
                 interval: float = INTERVAL_SECONDS) -> tuple[float, float, float]:
    """(median round seconds without, with, median of paired with/without ratios - 1)."""
    trial = ti.Trial(experiment="bench", trial="t", pull_port=0)  # enabled, never served
    state = TrialState(ti.DEFAULT_BUCKETS, {"nodename": "n", "pid": "1", "world_size": "1"})
    without, with_tree = CollectorRegistry(), CollectorRegistry()
    for registry in (without, with_tree):
        registry.register(TrialCollector(state))
    with_tree.register(LoaderProcessCollector(process_tree))
    generate_latest(with_tree)
    instrumented_loop(trial, steps)  # warm
    sampler = Sampler(without, interval)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    try:
        for round_ in range(rounds):
            for side in ((False, True) if round_ % 2 else (True, False)):
                sampler.registry = with_tree if side else without
                started = time.perf_counter()
                instrumented_loop(trial, steps)
                seconds[side].append(time.perf_counter() - started)
    finally:
        sampler.close()
    ratios = [on / off for on, off in zip(seconds[True], seconds[False])]
    return (statistics.median(seconds[False]), statistics.median(seconds[True]),
            statistics.median(ratios) - 1)


def report() -> None:
    context = multiprocessing.get_context("fork")  # stand-ins for two DataLoader workers
    workers = [context.Process(target=time.sleep, args=(3600,), daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        collect = collect_seconds()
        off, on, slowdown = side_by_side()
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()
    print(f"loader evidence: one collect of the trial's process tree (2 workers) takes "
          f"{collect * 1e3:.2f} ms on the pusher's thread, {collect / DEFAULT_PUSH_INTERVAL_SECONDS:.4%} "
          f"of a 10 s push interval")
    print(f"100 steps of 1 ms, a collect every {INTERVAL_SECONDS * 1e3:.0f} ms: without the "
          f"loader collector {off * 1e3:.2f} ms, with it {on * 1e3:.2f} ms "
          f"({slowdown:+.2%}, median of 101 paired rounds); at the 10 s push interval that "
          f"is {slowdown * INTERVAL_SECONDS / DEFAULT_PUSH_INTERVAL_SECONDS:+.3%}")


if __name__ == "__main__":
    report()
