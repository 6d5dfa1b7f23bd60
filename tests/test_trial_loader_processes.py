"""The loader evidence read at push time: the trial's and its workers' CPU seconds, the workers,
the process tree's reads; workers that come and go never break a push or move a counter back;
what cannot be read is left out, with one log line."""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families as text_families

from trial_instrumentation import loader_processes
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.loader_processes import (
    LoaderProcessCollector,
    ProcessTree,
    process_tree,
)

CPU = "trainwatch_trial_loader_cpu_seconds_total"
WORKERS = "trainwatch_trial_loader_workers"
READ = "trainwatch_trial_loader_read_bytes_total"
RCHAR = "trainwatch_trial_loader_rchar_bytes_total"
BURN = 0.15  # CPU seconds per worker


def collector_of(tree: Any = process_tree) -> LoaderProcessCollector:
    """Read at every collect: these tests compare reads a moment apart."""
    return LoaderProcessCollector(tree, min_interval=0.0)


def registry_of(collector: LoaderProcessCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TrialCollector(TrialState((1.0,), {"nodename": "n"})))
    registry.register(collector)
    return registry


def figures(registry: CollectorRegistry) -> dict[str, float | None]:
    generate_latest(registry)  # what a push does: must not raise
    return {"main": registry.get_sample_value(CPU, {"process": "main"}),
            "workers_cpu": registry.get_sample_value(CPU, {"process": "workers"}),
            "workers": registry.get_sample_value(WORKERS),
            "read": registry.get_sample_value(READ), "rchar": registry.get_sample_value(RCHAR)}


def burn(cpu_seconds: float) -> None:
    """Burn this much CPU time, however long the loaded machine makes it take."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


def test_workers_that_come_and_go_keep_their_cpu_counted_and_never_break_a_push(
        tmp_path: Any) -> None:
    registry = registry_of(collector_of())
    before = figures(registry)
    # Relative to what this process has already: in the full suite pytest has children of its
    # own (other tests' servers and trials), which the tree counts too.
    base = before["workers"]
    assert base is not None and before["main"] is not None and before["main"] > 0
    context = multiprocessing.get_context("fork")
    for epoch in range(2):  # persistent_workers=False: new workers each epoch
        workers = [context.Process(target=burn, args=(BURN,)) for _ in range(2)]
        for worker in workers:
            worker.start()
        during = figures(registry)
        assert during["workers"] == base + 2, (epoch, during)
        for worker in workers:
            worker.join()
        after = figures(registry)
        assert after["workers"] == base
        for key in ("main", "workers_cpu", "read", "rchar"):
            assert after[key] >= during[key] >= before[key], (key, before, during, after)
        before = after
    # Four workers burned BURN CPU seconds each; reaped, their time is in ours.
    assert after["workers_cpu"] >= 4 * BURN * 0.95, after


def test_a_file_read_by_a_worker_is_counted_in_rchar(tmp_path: Any) -> None:
    data = tmp_path / "shard.bin"
    data.write_bytes(os.urandom(4 << 20))
    registry = registry_of(collector_of())
    before = figures(registry)
    worker = multiprocessing.get_context("fork").Process(target=data.read_bytes)
    worker.start()
    worker.join()
    after = figures(registry)
    # rchar counts the page cache too (the file was just written): read_bytes need not move.
    assert after["rchar"] - before["rchar"] >= 4 << 20, (before, after)


class NoIoProcess:
    """psutil.Process where /proc/<pid>/io is unreadable (another user's, hardened kernels)."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.pid = pid

    def cpu_times(self) -> Any:
        return self._process.cpu_times()

    def children(self, recursive: bool = False) -> list[Any]:
        return []

    def cmdline(self) -> list[str]:
        return self._process.cmdline()

    def io_counters(self) -> Any:
        raise psutil.AccessDenied(self.pid)


def test_no_permission_for_io_leaves_the_read_series_out_with_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = SimpleNamespace(Process=NoIoProcess, NoSuchProcess=psutil.NoSuchProcess,
                           AccessDenied=psutil.AccessDenied)
    registry = registry_of(collector_of(lambda: ProcessTree(fake, os.getpid())))
    with caplog.at_level(logging.WARNING):
        first, second = figures(registry), figures(registry)
    assert first["read"] is None and first["rchar"] is None and second["read"] is None
    # CPU still measured; the workers are pytest's own children here, if any.
    assert first["main"] is not None and first["workers"] == process_tree().sample().workers
    assert registry.get_sample_value("trainwatch_trial_steps_total") == 0  # the rest unchanged
    assert [r.message for r in caplog.records if "I/O" in r.message] == [
        (f"trainwatch: cannot read the trial's I/O counters (AccessDenied: (pid={os.getpid()})); "
         "the loader read series are left out")]


def test_no_proc_at_all_leaves_every_loader_series_out_with_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    def no_proc() -> ProcessTree:
        raise FileNotFoundError(2, "No such file or directory", "/proc/self/stat")

    registry = registry_of(collector_of(no_proc))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert set(figures(registry).values()) == {None}
    assert registry.get_sample_value("trainwatch_trial_steps_total") == 0
    assert len([r for r in caplog.records if "process tree" in r.message]) == 1


def test_multiprocessing_helpers_are_not_workers() -> None:
    base = process_tree().sample().workers  # pytest's own children, in the full suite
    context = multiprocessing.get_context("forkserver")
    worker = context.Process(target=time.sleep, args=(2,))
    worker.start()  # starts the forkserver (a child), which forks the worker (a grandchild)
    try:
        sample = process_tree().sample()
    finally:
        worker.terminate()
        worker.join()
    assert sample.workers == base + 1, sample


def test_a_real_dataloader_across_epochs_in_a_served_trial(
        monkeypatch: pytest.MonkeyPatch) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    import trial_instrumentation as ti
    from benchmarks.stack import http_get

    class Burning(torch_data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> int:
            burn(0.01)
            return index

    monkeypatch.setattr(loader_processes, "MIN_SAMPLE_SECONDS", 0.0)  # every scrape reads
    base = process_tree().sample().workers  # pytest's own children, in the full suite
    loader = torch_data.DataLoader(Burning(), batch_size=2, num_workers=2,
                                   persistent_workers=False)
    seen: list[dict[str, float]] = []
    with ti.Trial(experiment="e", trial="t", pull_port=0) as trial:
        url = f"http://127.0.0.1:{trial.pull_port}/metrics"
        for _epoch in range(2):  # new worker processes every epoch
            for _batch in trial.loader(loader):
                status, body = http_get(url)
                assert status == 200
                seen.append({s.name + str(s.labels.get("process", "")): s.value
                             for f in text_families(body.decode()) for s in f.samples})
    assert max(s[WORKERS] for s in seen) == base + 2
    cpu = [s[CPU + "workers"] for s in seen]
    assert cpu == sorted(cpu) and cpu[-1] > 0, cpu  # never back, though workers came and went


def test_the_cpu_a_worker_waited_for_is_counted_and_kept_after_it_exits() -> None:
    registry = registry_of(collector_of())
    wait = "trainwatch_trial_loader_cpu_wait_seconds_total"
    generate_latest(registry)
    before = registry.get_sample_value(wait)
    assert before is not None  # Linux keeps schedstat
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=burn, args=(BURN,)) for _ in range(3)]  # 3 on 2 cores
    for worker in workers:
        worker.start()
    time.sleep(0.2)
    generate_latest(registry)
    during = registry.get_sample_value(wait)
    for worker in workers:
        worker.join()
    generate_latest(registry)
    after = registry.get_sample_value(wait)
    # Three CPU-bound workers on two cores: at least one waits for a CPU at any moment.
    assert after >= during > before, (before, during, after)


def test_the_tree_is_read_at_most_once_a_second_however_often_the_trial_pushes() -> None:
    reads: list[float] = []

    class Counting(ProcessTree):
        def sample(self) -> Any:
            reads.append(time.monotonic())
            return super().sample()

    registry = registry_of(LoaderProcessCollector(lambda: Counting(psutil, os.getpid())))
    for _ in range(20):
        figures(registry)  # five reads of the registry each, a hundred in all
    assert len(reads) == 1 or reads[1] - reads[0] >= loader_processes.MIN_SAMPLE_SECONDS
