"""The loader evidence read at push time: the trial's and its workers' CPU seconds, the workers,
the process tree's reads; workers that come and go never break a push or move a counter back;
what cannot be read is left out, with one log line; another rank started as the trial's child
(Lightning's DDP) or a program it runs that is not python counts in none of it."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families as text_families

from benchmarks.stack import wait_until
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
REPO = Path(__file__).resolve().parent.parent


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


def in_fresh_process(name: str, *args: Any) -> Any:
    """``name`` (a function of this module) called with ``args`` in a new python process,
    whose JSON answer comes back. A test that bounds what the tree gained from above runs
    there: in a whole suite, this process has other children (the session's live trials)
    whose CPU goes on growing under the tree it reads."""
    call = (f"import json, sys; from tests.test_trial_loader_processes import {name}; "
            f"print(json.dumps({name}(*json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", call, json.dumps(args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


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

    def exe(self) -> str:
        return self._process.exe()

    def environ(self) -> dict[str, str]:
        return self._process.environ()

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


LIVED = "trainwatch_trial_loader_worker_seconds_total"
TICK = 0.02  # a process's start time is read in clock ticks (10 ms)


def worker_lifetimes() -> dict[str, float]:
    """A trial that starts, waits 1 s, forks two workers, reads them 1 s later, stops one and
    reads twice more, 1 s apart: its worker-seconds at each read and the monotonic instants
    that bound each read and each fork (run in a fresh process: no other children)."""
    registry = registry_of(collector_of())
    out: dict[str, float] = {}

    def read(name: str) -> None:
        out[f"{name}_from"] = time.monotonic()
        generate_latest(registry)
        out[f"{name}_to"] = time.monotonic()
        out[name] = registry.get_sample_value(LIVED)

    read("start")
    time.sleep(1.0)  # the trial's start, well before its workers'
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    out["fork_from"] = time.monotonic()
    for worker in workers:
        worker.start()
    out["fork_to"] = time.monotonic()
    time.sleep(1.0)
    read("two")
    workers[0].terminate()
    workers[0].join()
    read("one")
    time.sleep(1.0)
    read("later")
    workers[1].terminate()
    workers[1].join()
    return out


def test_worker_seconds_count_from_each_fork_double_for_two_and_stop_at_an_exit() -> None:
    """What the per-worker CPU figure divides by: the workers' own lifetimes, not their count
    times the trial's age (a worker forked late read a third of its CPU)."""
    got = in_fresh_process("worker_lifetimes")
    assert got["start"] == 0  # no worker yet: counted from the first push, at 0
    # Two workers alive from their fork to the read: twice that, not twice the trial's age.
    assert 2 * (got["two_from"] - got["fork_to"]) - TICK <= got["two"], got
    assert got["two"] <= 2 * (got["two_to"] - got["fork_from"]) + TICK, got
    assert got["two"] < 2 * (got["two_from"] - got["start_to"]) - 1.5, got
    # One stopped: the other alone counts on, 1 s a second; the gone one keeps what it had.
    assert got["one"] >= got["two"]
    lived = got["later"] - got["one"]
    assert got["later_from"] - got["one_to"] - TICK <= lived, got
    assert lived <= got["later_to"] - got["one_from"] + TICK, got


def test_the_tree_is_read_at_most_once_a_second_however_often_the_trial_pushes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[float] = []

    class Counting(ProcessTree):
        def sample(self) -> Any:
            reads.append(time.monotonic())
            return super().sample()

    registry = registry_of(LoaderProcessCollector(lambda: Counting(psutil, os.getpid())))
    for _ in range(20):
        figures(registry)  # five reads of the registry each, a hundred in all
    assert len(reads) == 1 or reads[1] - reads[0] >= loader_processes.MIN_SAMPLE_SECONDS
    # Over many intervals (shortened here): read again once each has passed, never sooner.
    least = 0.05
    monkeypatch.setattr(loader_processes, "MIN_SAMPLE_SECONDS", least)
    reads.clear()
    start = time.monotonic()
    while time.monotonic() < start + 8 * least:
        figures(registry)
    stop = time.monotonic()
    # At most one read an interval (each read's own clock is a moment after the collector's,
    # so counted rather than timed), at least a few: not only the first.
    gaps = [later - earlier for earlier, later in itertools.pairwise(reads)]
    assert 3 <= len(reads) <= (stop - start) / least + 1, gaps


class Indices:
    """A map-style dataset of a few numbers, importable by spawned workers."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize(("method", "local_rank"), [("fork", "0"), ("spawn", "0"),
                                                    ("forkserver", None)])
def test_a_real_dataloader_in_iteration_reports_its_workers(
        method: str, local_rank: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the start method: forked workers show the environment the trial was exec'd
    with, spawned ones the os.environ it has now, to which Lightning adds rank 0's LOCAL_RANK
    after it starts. (Not for the forkserver: it outlives the test, started with its env.)"""
    torch_data = pytest.importorskip("torch.utils.data")
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    base = process_tree().sample().workers  # pytest's own children, in the full suite
    loader = torch_data.DataLoader(Indices(), batch_size=2, num_workers=2,
                                   multiprocessing_context=method)
    seen = [process_tree().sample().workers for _batch in loader]
    assert seen and seen[0] == base + 2, seen  # every worker is up once a batch is in


# A process that burns CPU and reads a file, and (level 1) has a child of its own doing the
# same, started without the rank variables; each says "ready" once done, and stays until its
# stdin closes (the test's end, or its process's).
TREE_SCRIPT = '''\
import os, subprocess, sys, time

level, seconds, data = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
below = None
if level:
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK")}
    below = subprocess.Popen([sys.executable, __file__, str(level - 1), *sys.argv[2:]],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert below.stdout.readline() == b"ready\\n"
with open(data, "rb") as file:
    file.read()
end = time.process_time() + seconds
while time.process_time() < end:
    pass
print("ready", flush=True)
sys.stdin.read()
if below is not None:
    below.stdin.close()
    below.wait()
'''
TREE_BURN = 0.4  # CPU seconds per process of the tree
TREE_READ = 4 << 20  # bytes each process of the tree reads


@contextlib.contextmanager
def python_tree(tmp_path: Any, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """Two python processes (a child of the test's and its own child), each TREE_BURN CPU
    seconds and TREE_READ bytes in, alive until the child's stdin closes; reaped once done."""
    script, data = tmp_path / "tree.py", tmp_path / "data.bin"
    script.write_text(TREE_SCRIPT)
    data.write_bytes(os.urandom(TREE_READ))
    top = subprocess.Popen([sys.executable, str(script), "1", str(TREE_BURN), str(data)],
                           env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert top.stdin is not None and top.stdout is not None
    try:
        assert top.stdout.readline() == b"ready\n"
        yield top
    finally:
        top.stdin.close()
        top.stdout.close()
        try:
            top.wait(timeout=60)
        except subprocess.TimeoutExpired:
            top.kill()
            top.wait()
            raise


def rank_env(name: str | None) -> dict[str, str]:
    """This process's environment with no rank variable, or with ``name`` set to a rank that
    is not this process's."""
    env = {k: v for k, v in os.environ.items() if k not in loader_processes.RANK_VARIABLES}
    if name is not None:
        env[name] = str(int(os.environ.get(name, "0")) + 1)
    return env


@pytest.mark.parametrize(("rank", "scan"), [
    (None, False), ("LOCAL_RANK", False), ("RANK", False), (None, True), ("LOCAL_RANK", True)],
    ids=["same-rank", "local-rank", "rank", "same-rank-scanned", "local-rank-scanned"])
def test_a_child_started_as_another_rank_is_not_a_worker_nor_is_its_subtree(
        rank: str | None, scan: bool, tmp_path: Any) -> None:
    """Lightning's DDP launcher starts rank 1 as rank 0's child. That child and its own child
    (started without the rank variables: in its subtree all the same) count in no loader
    series: not while they run, nor once the child has ended (a zombie, its own child reaped),
    nor once it is reaped (the kernel then adds their time to ours). The same tree started
    with this process's rank counts in every one, but as workers only while it runs.
    ``scan``: psutil's scan of every process, where the kernel has no
    /proc/<pid>/task/<tid>/children."""

    delta = in_fresh_process("rank_tree_deltas", rank, scan, str(tmp_path))
    # A fresh process that never had a child: no worker CPU at all, not the trial's own.
    assert delta.pop("before") == {"workers": 0, "workers_cpu": 0}, delta
    assert delta["during"]["workers"] == (2 if rank is None else 0), delta
    for when in ("ended", "reaped"):
        assert delta[when]["workers"] == 0, delta
    for when in delta:
        # The tree's CPU, reaped or not, is never the trial's own (main: reading /proc only).
        assert delta[when]["main"] < TREE_BURN / 2, delta
        if rank is None:
            assert delta[when]["workers_cpu"] >= 2 * TREE_BURN * 0.95, delta
            assert delta[when]["rchar"] >= 2 * TREE_READ, delta
        else:  # what this process did meanwhile (reading /proc, the pipe) is far less
            assert delta[when]["workers_cpu"] < TREE_BURN / 2, delta
            assert delta[when]["rchar"] < TREE_READ / 2, delta


def rank_tree_deltas(rank: str | None, scan: bool, tmp: str) -> dict[str, dict[str, Any]]:
    """What the loader series gained from python_tree started with ``rank``, while it runs,
    once it ended and once it is reaped, and the workers' figures before (run
    in_fresh_process)."""

    def tree() -> ProcessTree:
        made = process_tree()
        made._task_children = not scan
        return made

    registry = registry_of(collector_of(tree))
    before = figures(registry)
    with python_tree(Path(tmp), rank_env(rank)) as top:
        readings = {"during": figures(registry)}
        assert top.stdin is not None
        top.stdin.close()  # it ends, its child first, and stays unreaped
        wait_until(lambda: psutil.Process(top.pid).status() == psutil.STATUS_ZOMBIE,
                   what="the tree ended, unreaped")
        readings["ended"] = figures(registry)
    readings["reaped"] = figures(registry)
    return {"before": {"workers": before["workers"], "workers_cpu": before["workers_cpu"]},
            **{when: {key: (reading[key] or 0.0) - (before[key] or 0.0)
                      for key in ("main", "workers", "workers_cpu", "rchar")}
               for when, reading in readings.items()}}


class HiddenProcess:
    """psutil.Process where exe and environ are refused (a setuid program's, or a /proc that
    hides them): the test runs as root, so a real process can't be made unreadable."""

    def __init__(self, pid: int, uid: int) -> None:
        self._process = psutil.Process(pid)
        self.pid, self._uid = pid, uid

    def __getattr__(self, name: str) -> Any:
        return getattr(self._process, name)

    def exe(self) -> str:
        raise psutil.AccessDenied(self.pid)

    environ = exe

    def uids(self) -> Any:
        return self._process.uids()._replace(effective=self._uid)


@pytest.mark.parametrize(("uid", "counted"), [(os.geteuid(), True), (os.geteuid() + 1, False)],
                         ids=["ours", "another-users"])
def test_a_child_whose_executable_and_environment_are_refused_never_breaks_a_read(
        uid: int, counted: bool) -> None:
    """Another user's process is no worker; one of ours that cannot be read counts, as all
    did before ranks were told apart."""
    me = os.getpid()
    fake = SimpleNamespace(
        Process=lambda pid: psutil.Process(pid) if pid == me else HiddenProcess(pid, uid),
        NoSuchProcess=psutil.NoSuchProcess, AccessDenied=psutil.AccessDenied)
    tree = ProcessTree(fake, me)
    base = tree.sample()
    worker = multiprocessing.get_context("fork").Process(target=burn, args=(BURN,))
    worker.start()
    try:
        during = tree.sample()
    finally:
        worker.join()
    assert during.workers == base.workers + counted, (base, during)


TOOL_BURN = 0.3  # CPU seconds


def test_a_program_the_trial_runs_that_is_not_python_is_not_a_worker() -> None:
    """wandb-core, nvidia-smi: here ``timeout 60 yes``, a tree of two processes that are not
    python. Neither is a worker, and their CPU is not the workers', before or after they are
    reaped (``timeout`` reaps ``yes``, then this process ``timeout``: the kernel adds their
    time to ours). ``yes`` is stopped before the read, so that it burns nothing after it."""
    found = in_fresh_process("tool_readings")
    before, during, after = found["before"], found["during"], found["after"]
    # timeout reaped yes: it passes on the SIGKILL (GNU raises it on itself, others exit 137)
    assert found["returncode"] in (-signal.SIGKILL, 128 + signal.SIGKILL), found["returncode"]
    assert during["workers"] == before["workers"] == after["workers"], (before, during)
    for reading in (during, after):
        assert reading["workers_cpu"] - before["workers_cpu"] < TOOL_BURN / 3, (before, reading)


def tool_readings() -> dict[str, Any]:
    """The loader series before, while and after ``timeout 60 yes`` burnt TOOL_BURN CPU
    seconds (run in_fresh_process)."""
    registry = registry_of(collector_of())
    before = figures(registry)
    tool = subprocess.Popen(["timeout", "60", "yes"], stdout=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group, to clean up

    def burned() -> psutil.Process | None:
        return next((p for p in psutil.Process(tool.pid).children()
                     if sum(p.cpu_times()[:2]) >= TOOL_BURN), None)

    try:
        yes = wait_until(burned, timeout=60, what=f"yes burning {TOOL_BURN} CPU seconds")
        yes.suspend()
        wait_until(lambda: yes.status() == psutil.STATUS_STOPPED, what="yes stopped")
        during = figures(registry)
        yes.kill()  # timeout reaps it and ends
        tool.wait(timeout=60)
    finally:
        if tool.poll() is None:
            os.killpg(tool.pid, signal.SIGKILL)
            tool.wait()
    return {"before": before, "during": during, "after": figures(registry),
            "returncode": tool.returncode}


DDP_SCRIPT = '''\
import json, sys

import lightning.pytorch as pl
import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trial_instrumentation import names
from trial_instrumentation.lightning import TrainwatchCallback

STEPS = 6


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Probe(pl.Callback):
    """Rank 0 mid-fit (rank 1 alive: the next step's allreduce needs it): what it reports."""

    def __init__(self, trainwatch):
        self.trainwatch = trainwatch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_rank != 0 or batch_idx != STEPS // 2:
            return
        key = {"experiment": "ddp", "trial": "t", "rank": "0"}
        registry = self.trainwatch.trial.registry
        children = [{"local_rank": p.environ().get("LOCAL_RANK"), "cpu": sum(p.cpu_times()[:2])}
                    for p in psutil.Process().children()]
        workers_cpu = registry.get_sample_value(names.LOADER_CPU_SECONDS + "_total",
                                                {**key, "process": names.PROCESS_WORKERS})
        with open(sys.argv[1], "w") as file:
            json.dump({"children": children, "workers_cpu": workers_cpu,
                       "workers": registry.get_sample_value(names.LOADER_WORKERS, key)}, file)


if __name__ == "__main__":
    data = TensorDataset(torch.randn(STEPS * 8, 4), torch.randn(STEPS * 8, 1))
    trainwatch = TrainwatchCallback(experiment="ddp", trial="t", pull_port=0)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1,
                         callbacks=[trainwatch, Probe(trainwatch)], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(Model(), DataLoader(data, batch_size=4, num_workers=0))
'''


def test_lightning_ddp_rank_0_counts_no_worker_for_rank_1_its_child(tmp_path: Any) -> None:
    """A real 2-rank DDP fit on CPU with the callback and num_workers=0: rank 1 is rank 0's
    child (LOCAL_RANK=1), and rank 0 reports no worker and none of rank 1's CPU."""
    pytest.importorskip("lightning.pytorch")
    script, out = tmp_path / "ddp_fit.py", tmp_path / "rank0.json"
    script.write_text(DDP_SCRIPT)
    env = {**rank_env(None), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(out.read_text())
    [rank_1] = [child for child in seen["children"] if child["local_rank"] == "1"]
    assert seen["workers"] == 0, seen
    assert seen["workers_cpu"] < rank_1["cpu"] / 4, seen  # rank 1 had imported torch by then
