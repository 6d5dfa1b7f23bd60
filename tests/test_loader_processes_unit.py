"""trial_instrumentation/loader_processes.py in process, over a scripted process tree.

The boundaries are faked where they are: psutil (the ``ps`` a ProcessTree is given), the files
it reads under /proc (schedstat, stat: through the module's ``open``) and the clocks (the
module's ``time``). Each process has CPU seconds, reads, an executable, an environment and a
command line of its own, none round or equal, so a figure counted twice, left out or taken
from the wrong process shows. The few functions that read /proc themselves run against the
real /proc of this process and a child of its own."""

from __future__ import annotations

import io
import logging
import math
import os
import subprocess
import sys
import threading
from collections import namedtuple
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry

from trial_instrumentation import loader_processes, names
from trial_instrumentation.loader_processes import (
    APART,
    TREE,
    WORKER,
    LoaderProcessCollector,
    ProcessTree,
    TreeSample,
    process_tree,
)

CpuTimes = namedtuple("CpuTimes", "user system children_user children_system")
Io = namedtuple("Io", "read_bytes read_chars")
IoBytesOnly = namedtuple("IoBytesOnly", "read_bytes")
Uids = namedtuple("Uids", "real effective saved")

ROOT = 7_000_001  # above any pid_max: no /proc entry of a real process
PYTHON = "/opt/venv/bin/python3.11"
UID = 1234
TICKS = loader_processes.CLOCK_TICKS


class Proc:
    """One scripted process: what psutil would read of it, or the error it would raise."""

    def __init__(self, pid: int, ppid: int, *, cpu: tuple[float, float, float, float],
                 io: tuple[float, ...] | None = None, exe: str = PYTHON,
                 environ: dict[str, str] | None = None, cmdline: str = "python train.py",
                 uid: int = UID, created: float = 0.0) -> None:
        self.pid, self.parent = pid, ppid
        self.cpu, self.io, self._exe = CpuTimes(*cpu), io, exe
        self._environ = environ if environ is not None else {"HOME": "/root"}
        self._cmdline, self.uid, self.created = cmdline, uid, created
        self.fail: dict[str, BaseException] = {}
        self.calls: dict[str, int] = {}
        if io is not None:
            self.io_counters = self._io_counters

    def _answer(self, name: str, value: Any) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.fail:
            raise self.fail[name]
        return value

    def cpu_times(self) -> CpuTimes:
        return self._answer("cpu_times", self.cpu)

    def _io_counters(self) -> Any:
        assert self.io is not None
        return self._answer("io_counters",
                            Io(*self.io) if len(self.io) == 2 else IoBytesOnly(*self.io))

    def exe(self) -> str:
        return self._answer("exe", self._exe)

    def environ(self) -> dict[str, str]:
        return self._answer("environ", self._environ)

    def cmdline(self) -> list[str]:
        return self._answer("cmdline", self._cmdline.split())

    def uids(self) -> Uids:
        return Uids(self.uid, self.uid, self.uid)

    def create_time(self) -> float:
        return self._answer("create_time", self.created)

    def ppid(self) -> int:
        return self._answer("ppid", self.parent)


class Ps:
    """psutil as a ProcessTree uses it, over a table of Procs."""

    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied

    def __init__(self, *procs: Proc) -> None:
        self.table = {p.pid: p for p in procs}
        self.gone_on_lookup: set[int] = set()  # listed by the scan, gone when looked up
        for proc in procs:
            proc.children = self._descendants  # type: ignore[method-assign]

    def Process(self, pid: int) -> Proc:
        if pid in self.gone_on_lookup or pid not in self.table:
            raise psutil.NoSuchProcess(pid)
        return self.table[pid]

    def _descendants(self, recursive: bool = False) -> list[Proc]:
        assert recursive
        found, todo = [], [ROOT]
        while todo:
            parent = todo.pop(0)
            for proc in self.table.values():
                if proc.parent == parent and proc.pid != ROOT:
                    found.append(proc)
                    todo.append(proc.pid)
        return found

    def add(self, proc: Proc) -> Proc:
        self.table[proc.pid] = proc
        proc.children = self._descendants  # type: ignore[method-assign]
        return proc


class Clock:
    """The module's ``time``: boot, wall and monotonic clocks the test moves."""

    CLOCK_BOOTTIME = 7

    def __init__(self) -> None:
        self.boot, self.wall, self.mono = 5000.0, 1.7e9, 300.0

    def clock_gettime(self, clock: int) -> float:
        assert clock == self.CLOCK_BOOTTIME
        return self.boot

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(loader_processes, "time", fake)
    return fake


@pytest.fixture()
def proc_files(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The /proc files the module opens, by path; any other path is not there."""
    files: dict[str, str] = {}

    def fake_open(path: str, *args: Any, **kwargs: Any) -> io.StringIO:
        if path not in files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return io.StringIO(files[path])

    monkeypatch.setattr(loader_processes, "open", fake_open, raising=False)
    return files


def root(**kwargs: Any) -> Proc:
    settings: dict[str, Any] = {"cpu": (1.25, 0.5, 0.375, 0.0625), "io": (4096.0, 10000.0),
                                "environ": {"LOCAL_RANK": "0", "RANK": "3"}}
    settings.update(kwargs)
    return Proc(ROOT, 1, **settings)


def tree_of(ps: Ps, *, schedstat: bool = False, boot: bool = False) -> ProcessTree:
    made = ProcessTree(ps, ROOT)
    made._schedstat, made._boot_clock = schedstat, boot
    return made


def worker(pid: int, ppid: int = ROOT, **kwargs: Any) -> Proc:
    settings: dict[str, Any] = {"cpu": (0.75, 0.125, 0.0, 0.0), "io": (512.0, 2048.0),
                                "environ": {"LOCAL_RANK": "0", "RANK": "3"}}
    settings.update(kwargs)
    return Proc(pid, ppid, **settings)


# --- what the kernel offers --------------------------------------------------------------

def test_the_kernels_files_and_clock_are_detected_per_process(
        caplog: pytest.LogCaptureFixture) -> None:
    real = ProcessTree(psutil, os.getpid())
    assert (real._task_children, real._schedstat, real._boot_clock, real._io) == (
        True, True, True, True)
    assert os.path.realpath(real._exe) == os.path.realpath(sys.executable)
    with caplog.at_level(logging.WARNING, logger=loader_processes.__name__):
        fake = ProcessTree(Ps(root()), ROOT)
    assert (fake._task_children, fake._schedstat, fake._boot_clock, fake._io) == (
        False, False, False, True)
    assert fake._ranks == {"LOCAL_RANK": "0", "RANK": "3"} and fake._exe == PYTHON
    assert caplog.records == []


def test_no_io_counters_on_the_platform_leaves_reads_out_and_says_so_once(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    ps = Ps(root(io=None), worker(ROOT + 1, io=None))
    with caplog.at_level(logging.WARNING, logger=loader_processes.__name__):
        tree = tree_of(ps)
        first, second = tree.sample(), tree.sample()
    assert (first.read_bytes, first.rchar, second.read_bytes, second.rchar) == (
        None, None, None, None)
    assert first.workers == 1 and first.workers_cpu == 0.4375 + 0.875
    assert [r.getMessage() for r in caplog.records] == [
        ("trainwatch: this platform has no per-process I/O counters; the trial's loader read "
        "series are left out")]


def test_the_trials_own_unreadable_exe_and_environ_turn_those_checks_off() -> None:
    for error in (psutil.AccessDenied(ROOT), psutil.NoSuchProcess(ROOT), PermissionError(13)):
        top = root()
        top.fail = {"exe": error, "environ": error}
        tree = ProcessTree(Ps(top), ROOT)
        assert (tree._exe, tree._ranks) == ("", {"LOCAL_RANK": None, "RANK": None}), error


# --- one reading ---------------------------------------------------------------------------

def test_the_trial_alone_is_main_and_its_reaped_children_are_the_workers(clock: Clock) -> None:
    sample = tree_of(Ps(root())).sample()
    assert sample == TreeSample(main_cpu=1.75, workers_cpu=0.4375, workers=0,
                                read_bytes=4096.0, rchar=10000.0, workers_wait=None,
                                worker_seconds=0.0)


def test_workers_and_what_they_run_count_in_the_workers_cpu_and_reads(clock: Clock) -> None:
    """Two forked workers (python, the trial's rank), one running a decoder (not python: the
    loader's all the same) that has a python child of its own."""
    ps = Ps(root(), worker(ROOT + 1, cpu=(0.75, 0.125, 0.25, 0.03125), io=(512.0, 2048.0)),
            worker(ROOT + 2, cpu=(1.5, 0.25, 0.0, 0.0), io=(256.0, 1024.0)),
            worker(ROOT + 3, ROOT + 2, exe="/usr/bin/ffmpeg", cpu=(2.0, 1.0, 0.0, 0.0),
                   io=(8192.0, 16384.0)),
            worker(ROOT + 4, ROOT + 3, cpu=(0.0078125, 0.0, 0.0, 0.0), io=(1.0, 3.0)))
    sample = tree_of(ps).sample()
    assert sample.main_cpu == 1.75
    assert sample.workers_cpu == 0.4375 + 1.15625 + 1.75 + 3.0 + 0.0078125
    assert sample.workers == 3  # the decoder is no worker; its python child, a grandchild, is
    assert (sample.read_bytes, sample.rchar) == (4096.0 + 512 + 256 + 8192 + 1,
                                                 10000.0 + 2048 + 1024 + 16384 + 3)


def test_read_chars_missing_makes_rchar_nan_for_the_trial_and_a_child(clock: Clock) -> None:
    alone = tree_of(Ps(root(io=(4096.0,)))).sample()
    assert alone.read_bytes == 4096.0 and math.isnan(alone.rchar)  # type: ignore[arg-type]
    child = tree_of(Ps(root(), worker(ROOT + 1, io=(512.0,)))).sample()
    assert child.read_bytes == 4608.0 and math.isnan(child.rchar)  # type: ignore[arg-type]


def test_the_trials_io_refused_is_left_out_for_good_with_one_line(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    for error in (psutil.AccessDenied(ROOT), PermissionError(13, "Permission denied")):
        caplog.clear()
        top, child = root(), worker(ROOT + 1)
        top.fail["io_counters"] = error
        tree = tree_of(Ps(top, child))
        with caplog.at_level(logging.WARNING, logger=loader_processes.__name__):
            first, second = tree.sample(), tree.sample()
        assert (first.read_bytes, first.rchar, second.read_bytes) == (None, None, None)
        assert first.workers == second.workers == 1
        assert top.calls["io_counters"] == 1 and "io_counters" not in child.calls
        assert [r.getMessage() for r in caplog.records] == [
            (f"trainwatch: cannot read the trial's I/O counters ({type(error).__name__}: "
            f"{error}); the loader read series are left out")]


@pytest.mark.parametrize("error", [psutil.NoSuchProcess(ROOT + 1), psutil.AccessDenied(ROOT + 1),
                                   FileNotFoundError(2, "gone")],
                         ids=["gone", "refused", "no-file"])
def test_a_child_that_cannot_be_read_is_passed_over_and_the_next_still_counted(
        clock: Clock, error: BaseException) -> None:
    first, second = worker(ROOT + 1), worker(ROOT + 2, cpu=(0.25, 0.0, 0.0, 0.0))
    first.fail["cpu_times"] = error
    sample = tree_of(Ps(root(), first, second)).sample()
    assert (sample.workers, sample.workers_cpu, sample.read_bytes) == (1, 0.6875, 4608.0)


def test_a_worker_whose_proc_files_vanished_keeps_its_cpu_but_is_not_a_live_worker(
        clock: Clock, proc_files: dict[str, str]) -> None:
    """Read between its exit and its files': what it used is counted, it is not counted live,
    and the next child is read all the same."""
    ps = Ps(root(), worker(ROOT + 1), worker(ROOT + 2, cpu=(0.25, 0.0, 0.0, 0.0)))
    proc_files[f"/proc/{ROOT + 2}/schedstat"] = "1 2000000000 3\n"
    sample = tree_of(ps, schedstat=True).sample()
    assert (sample.workers, sample.workers_cpu, sample.workers_wait) == (
        1, 0.4375 + 0.875 + 0.25, 2.0)


# --- multiprocessing's helpers -------------------------------------------------------------

TRACKER = "python -c from multiprocessing.resource_tracker import main;main(7)"
FORKSERVER = "python -c from multiprocessing.forkserver import main; main(8, 9)"


def test_the_trials_multiprocessing_helpers_are_no_workers_but_their_children_are(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, cmdline=TRACKER, cpu=(0.5, 0.0, 0.0, 0.0)),
            worker(ROOT + 2, cmdline=FORKSERVER, cpu=(0.25, 0.0, 1.0, 0.0)),
            worker(ROOT + 3, ROOT + 2, cmdline=FORKSERVER, cpu=(2.0, 0.0, 0.0, 0.0)),
            worker(ROOT + 4, cmdline="python train.py --forkserver", cpu=(4.0, 0.0, 0.0, 0.0)))
    tree = tree_of(ps)
    sample = tree.sample()
    assert sample.workers == 2  # the forkserver's child and a direct worker
    assert sample.workers_cpu == 0.4375 + 0.5 + 1.25 + 2.0 + 4.0  # helpers' CPU still counted
    assert tree._kinds == {ROOT + 1: TREE, ROOT + 2: TREE, ROOT + 3: WORKER, ROOT + 4: WORKER}
    tree.sample()
    assert [ps.table[ROOT + i].calls.get("cmdline", 0) for i in (1, 2, 3, 4)] == [1, 1, 0, 1]


@pytest.mark.parametrize(("remembered", "forgotten"), [(24, False), (25, True)])
def test_remembered_command_lines_are_forgotten_past_four_per_child_and_sixteen(
        clock: Clock, remembered: int, forgotten: bool) -> None:
    """Two children: up to 4 * 2 + 16 = 24 remembered command lines are kept; more are
    dropped and each read again (here one remembered wrongly as a helper's)."""
    ps = Ps(root(), worker(ROOT + 1), worker(ROOT + 2))
    tree = tree_of(ps)
    tree._helpers = {ROOT + 1: True, **{ROOT + 100 + i: False for i in range(remembered - 1)}}
    sample = tree.sample()
    assert sample.workers == (2 if forgotten else 1)
    assert ps.table[ROOT + 1].calls.get("cmdline", 0) == (1 if forgotten else 0)


# --- another rank, and programs that are not the loader's --------------------------------

@pytest.mark.parametrize(("environ", "kind"), [
    ({"LOCAL_RANK": "0", "RANK": "3"}, WORKER), ({}, WORKER), ({"LOCAL_RANK": "0"}, WORKER),
    ({"LOCAL_RANK": "1", "RANK": "3"}, APART), ({"RANK": "4"}, APART),
    ({"LOCAL_RANK": "0", "RANK": "5"}, APART)])
def test_a_child_with_a_rank_of_its_own_is_apart(clock: Clock, environ: dict[str, str],
                                                 kind: str) -> None:
    tree = tree_of(Ps(root(), worker(ROOT + 1, environ=environ)))
    sample = tree.sample()
    assert tree._kinds == {ROOT + 1: kind}
    assert sample.workers == (kind == WORKER)


def test_a_rank_set_after_the_trial_started_is_its_own_where_it_runs_here(
        monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    """Spawned workers inherit os.environ now (Lightning sets rank 0's LOCAL_RANK after the
    trial started); that counts only for the trial that is this process."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("RANK", raising=False)
    me = os.getpid()
    for pid, kinds in ((me, [WORKER, APART, WORKER]), (ROOT, [APART, APART, WORKER])):
        top = Proc(pid, 1, cpu=(1.0, 0.0, 0.0, 0.0), io=(0.0, 0.0), environ={})
        spawned = [worker(pid + 1, pid, environ={"LOCAL_RANK": "0"}),
                   worker(pid + 2, pid, environ={"LOCAL_RANK": "2"}), worker(pid + 3, pid,
                                                                            environ={})]
        ps = Ps(top, *spawned)
        tree = ProcessTree(ps, pid)
        tree._task_children = tree._schedstat = tree._boot_clock = False
        top.children = lambda recursive=False, s=spawned: list(s)  # type: ignore[attr-defined]
        tree.sample()
        assert [tree._kinds[p.pid] for p in spawned] == kinds, pid


def test_another_ranks_subtree_counts_nowhere_before_or_after_it_is_reaped(
        clock: Clock) -> None:
    """Rank 1 started as the trial's child, with a child of its own (no rank variable): out
    of every series while it runs; once reaped, the kernel adds what they used and read to the
    trial's figures, and what was last read of them is taken back out."""
    ps = Ps(root(), worker(ROOT + 1, cpu=(0.25, 0.0, 0.0, 0.0), io=(100.0, 200.0)))
    rank1 = ps.add(worker(ROOT + 2, environ={"LOCAL_RANK": "1"}, cpu=(3.0, 0.5, 0.0, 0.0),
                          io=(1000.0, 3000.0)))
    below = ps.add(worker(ROOT + 3, ROOT + 2, environ={}, cpu=(6.0, 1.0, 0.0, 0.0),
                          io=(20000.0, 50000.0)))
    tree = tree_of(ps)
    before = tree.sample()
    assert (before.workers, before.workers_cpu, before.read_bytes, before.rchar) == (
        1, 0.4375 + 0.25, 4096.0 + 100, 10000.0 + 200)
    assert tree._apart == {ROOT + 2: (10.5, 21000.0, 53000.0)}
    assert tree._kinds == {ROOT + 1: WORKER, ROOT + 2: APART}  # its child is not looked at
    assert "exe" not in below.calls
    rank1.cpu = CpuTimes(3.5, 0.5, 7.0, 1.0)  # it ran on, and reaped its child
    rank1.io = (21000.0, 53000.0)
    del ps.table[ROOT + 3]
    ended = tree.sample()
    assert tree._apart == {ROOT + 2: (12.0, 21000.0, 53000.0)}
    assert (ended.workers, ended.workers_cpu) == (1, 0.6875)
    del ps.table[ROOT + 2]  # reaped: the kernel adds it to the trial's
    ps.table[ROOT].cpu = CpuTimes(1.25, 0.5, 0.375 + 3.5 + 7.0, 0.0625 + 0.5 + 1.0)
    ps.table[ROOT].io = (4096.0 + 1000 + 20000, 10000.0 + 3000 + 50000)
    reaped = tree.sample()
    assert (reaped.workers, reaped.workers_cpu, reaped.read_bytes, reaped.rchar) == (
        1, 0.6875, 4196.0, 10200.0)
    assert tree._apart == {}
    again = tree.sample()  # taken out for good, not once
    assert (again.workers_cpu, again.read_bytes, again.rchar) == (0.6875, 4196.0, 10200.0)


def test_two_subtrees_apart_reaped_at_different_reads_are_both_taken_out(clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, environ={"RANK": "9"}, cpu=(1.0, 0.0, 0.0, 0.0),
                           io=(10.0, 20.0)),
            worker(ROOT + 2, exe="/usr/bin/nvidia-smi", cpu=(0.5, 0.0, 0.0, 0.0),
                   io=(40.0, 80.0)))
    tree = tree_of(ps)
    assert tree.sample().workers_cpu == 0.4375
    del ps.table[ROOT + 1]
    ps.table[ROOT].cpu = CpuTimes(1.25, 0.5, 1.375, 0.0625)
    ps.table[ROOT].io = (4106.0, 10020.0)
    first = tree.sample()
    del ps.table[ROOT + 2]
    ps.table[ROOT].cpu = CpuTimes(1.25, 0.5, 1.875, 0.0625)
    ps.table[ROOT].io = (4146.0, 10100.0)
    second = tree.sample()
    assert (first.workers_cpu, first.read_bytes, first.rchar) == (0.4375, 4096.0, 10000.0)
    assert (second.workers_cpu, second.read_bytes, second.rchar) == (0.4375, 4096.0, 10000.0)


def test_a_top_apart_unreadable_while_listed_keeps_its_last_figures_and_adds_no_child(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 2, environ={"LOCAL_RANK": "1"}, cpu=(3.0, 0.5, 0.0, 0.0),
                           io=(1000.0, 3000.0)))
    tree = tree_of(ps)
    tree.sample()
    ps.table[ROOT + 2].fail["cpu_times"] = psutil.NoSuchProcess(ROOT + 2)
    child = ps.add(worker(ROOT + 3, ROOT + 2, cpu=(6.0, 1.0, 0.0, 0.0)))
    sample = tree.sample()
    assert tree._apart == {ROOT + 2: (3.5, 1000.0, 3000.0)}
    assert sample.workers == 0 and sample.workers_cpu == 0.4375
    assert "exe" not in child.calls and "cpu_times" not in child.calls  # not looked at
    for error in (psutil.AccessDenied(ROOT + 5), FileNotFoundError(2, "gone")):
        new = Ps(root(), worker(ROOT + 5, environ={"RANK": "1"}))
        new.table[ROOT + 5].fail["cpu_times"] = error
        fresh = tree_of(new)
        fresh.sample()
        assert fresh._apart == {ROOT + 5: (0.0, 0.0, 0.0)}, error


@pytest.mark.parametrize("error", [psutil.AccessDenied(ROOT + 2), PermissionError(13)])
def test_a_process_apart_whose_reads_are_refused_counts_its_cpu_and_no_reads(
        clock: Clock, error: BaseException) -> None:
    ps = Ps(root(), worker(ROOT + 2, exe="/usr/local/bin/wandb-core",
                           cpu=(3.0, 0.5, 0.25, 0.0), io=(1000.0, 3000.0)))
    ps.table[ROOT + 2].fail["io_counters"] = error
    tree = tree_of(ps)
    tree.sample()
    assert tree._apart == {ROOT + 2: (3.75, 0.0, 0.0)}
    no_chars = tree_of(Ps(root(), worker(ROOT + 2, exe="/bin/yes", io=(64.0,))))
    no_chars.sample()
    assert no_chars._apart == {ROOT + 2: (0.875, 64.0, 0.0)}
    no_io = tree_of(Ps(root(), worker(ROOT + 2, exe="/bin/yes", cpu=(2.0, 0.0, 0.0, 0.0))))
    no_io._io = False
    no_io.sample()
    assert no_io._apart == {ROOT + 2: (2.0, 0.0, 0.0)}


def test_a_program_that_is_not_python_is_apart_when_the_trials_and_the_loaders_when_a_workers(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, exe="/usr/bin/nvidia-smi"), worker(ROOT + 2),
            worker(ROOT + 3, ROOT + 2, exe="/usr/bin/ffmpeg"))
    tree = tree_of(ps)
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: WORKER, ROOT + 3: TREE}
    unknown = tree_of(Ps(root(), worker(ROOT + 1, exe="/usr/bin/nvidia-smi")))
    unknown._exe = ""  # the trial's own executable unread: every child may be python
    unknown.sample()
    assert unknown._kinds == {ROOT + 1: WORKER}


def test_a_child_that_hides_exe_and_environ_is_judged_by_its_user_and_last_reading(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, exe="/usr/bin/nvidia-smi"), worker(ROOT + 2),
            worker(ROOT + 3, uid=UID + 1))
    tree = tree_of(ps)
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: WORKER, ROOT + 3: WORKER}
    for pid in (ROOT + 1, ROOT + 3):
        ps.table[pid].fail["exe"] = psutil.AccessDenied(pid)
    new = ps.add(worker(ROOT + 4))
    new.fail["environ"] = psutil.AccessDenied(ROOT + 4)
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: WORKER, ROOT + 3: APART,
                           ROOT + 4: WORKER}


def test_a_child_that_ended_unreaped_is_no_worker_and_one_apart_stays_apart(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, environ={"LOCAL_RANK": "1"}), worker(ROOT + 2))
    tree = tree_of(ps)
    tree.sample()
    for pid in (ROOT + 1, ROOT + 2):
        ps.table[pid].fail["exe"] = psutil.NoSuchProcess(pid)
    sample = tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: TREE}
    assert sample.workers == 0 and sample.workers_cpu == 0.4375 + 0.875


def test_an_executable_psutil_cannot_tell_keeps_the_last_kind(clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, exe="/usr/bin/nvidia-smi"), worker(ROOT + 2, exe=""))
    tree = tree_of(ps)
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: WORKER}
    ps.table[ROOT + 1]._exe = ""
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: WORKER}


# --- the process tree's shape --------------------------------------------------------------

def test_a_deep_tree_is_read_parents_first_and_the_gone_left_out(clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, environ={"RANK": "1"}, cpu=(1.0, 0.0, 0.0, 0.0)),
            worker(ROOT + 2, ROOT + 1, cpu=(2.0, 0.0, 0.0, 0.0)),
            worker(ROOT + 3, ROOT + 2, cpu=(4.0, 0.0, 0.0, 0.0)),
            worker(ROOT + 4, cpu=(0.25, 0.0, 0.0, 0.0)),
            worker(ROOT + 5, ROOT + 4, cpu=(0.5, 0.0, 0.0, 0.0)))
    ps.table[ROOT + 5].fail["ppid"] = psutil.NoSuchProcess(ROOT + 5)  # gone since the scan
    tree = tree_of(ps)
    pairs = [(child.pid, parent) for child, parent in tree._children()]
    assert sorted(pairs) == [(ROOT + 1, ROOT), (ROOT + 2, ROOT + 1), (ROOT + 3, ROOT + 2),
                             (ROOT + 4, ROOT)]
    order = [pid for pid, _ in pairs]
    assert order.index(ROOT + 1) < order.index(ROOT + 2) < order.index(ROOT + 3)
    sample = tree.sample()
    assert sample.workers == 1 and sample.workers_cpu == 0.4375 + 0.25
    assert tree._apart == {ROOT + 1: (7.0, 1536.0, 6144.0)}
    ps.gone_on_lookup.add(ROOT + 4)  # listed, then gone when looked up
    assert [c.pid for c, _ in tree._children()] == [ROOT + 1, ROOT + 2, ROOT + 3]


def test_the_kernels_children_files_list_a_childs_pid_whichever_thread_forked_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from /proc/<pid>/task/<tid>/children of every thread: a child is listed under the
    thread that forked it, while that thread lives. A thread's file gone (it ended) is passed
    over and the next thread's still read."""
    started: list[subprocess.Popen[bytes]] = []
    ready, done = threading.Event(), threading.Event()

    def fork_and_stay() -> None:
        started.append(subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                        stdin=subprocess.PIPE))
        ready.set()
        done.wait(60)

    thread = threading.Thread(target=fork_and_stay)
    thread.start()
    try:
        assert ready.wait(60)
        [child] = started
        me = os.getpid()
        assert child.pid in loader_processes._task_children(me)
        real_open = open

        def main_thread_gone(path: str, *args: Any, **kwargs: Any) -> Any:
            if path == f"/proc/{me}/task/{me}/children":
                raise FileNotFoundError(2, "No such file or directory", path)
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(loader_processes, "open", main_thread_gone, raising=False)
        assert child.pid in loader_processes._task_children(me)
    finally:
        done.set()
        thread.join()
        for child in started:
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
    assert loader_processes._task_children(ROOT) == []


def test_the_kernels_children_files_are_what_a_real_tree_reads() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        tree = process_tree()
        listed = {c.pid: parent for c, parent in tree._children()}
        assert listed[child.pid] == os.getpid()
        scanned = process_tree(os.getpid())
        scanned._task_children = False
        assert {c.pid: p for c, p in scanned._children()}[child.pid] == os.getpid()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


# --- waits and lifetimes -------------------------------------------------------------------

def stat_line(pid: int, start_ticks: int) -> str:
    """/proc/<pid>/stat with a name holding spaces and ")": field 22 is the start time."""
    fields = ["S", "1", "1", "1", "0", "-1", "4194560"] + ["0"] * 12 + [str(start_ticks)]
    return f"{pid} (pt_data worker) 0) {' '.join(fields + ['123456', '789'])}\n"


def test_the_workers_waits_are_summed_and_a_gone_ones_kept(
        clock: Clock, proc_files: dict[str, str]) -> None:
    ps = Ps(root(), worker(ROOT + 1), worker(ROOT + 2),
            worker(ROOT + 3, cmdline=TRACKER))  # a helper: its wait is no worker's
    for pid, ns in ((ROOT + 1, 1_500_000_000), (ROOT + 2, 250_000_000), (ROOT + 3, 8 * 10**9)):
        proc_files[f"/proc/{pid}/schedstat"] = f"99000 {ns} 17\n"
    tree = tree_of(ps, schedstat=True)
    assert tree.sample().workers_wait == 1.75
    proc_files[f"/proc/{ROOT + 2}/schedstat"] = "99000 500000000 17\n"
    del ps.table[ROOT + 1]
    assert tree.sample().workers_wait == 2.0  # 1.5 kept, 0.5 now
    del ps.table[ROOT + 2]
    assert tree.sample().workers_wait == 2.0
    assert tree.sample().workers_wait == 2.0  # a gone one counted once
    no_schedstat = tree_of(Ps(root(), worker(ROOT + 1)))
    sample = no_schedstat.sample()
    assert sample.workers_wait is None and sample.workers == 1


def test_a_workers_age_is_from_its_start_on_the_boot_clock(
        clock: Clock, proc_files: dict[str, str]) -> None:
    ps = Ps(root(), worker(ROOT + 1), worker(ROOT + 2), worker(ROOT + 3, cmdline=TRACKER))
    proc_files[f"/proc/{ROOT + 1}/stat"] = stat_line(ROOT + 1, 4990 * TICKS)
    proc_files[f"/proc/{ROOT + 2}/stat"] = stat_line(ROOT + 2, 4997 * TICKS + TICKS // 4)
    tree = tree_of(ps, boot=True)
    assert tree.sample().worker_seconds == 10.0 + 2.75
    clock.boot += 1.5
    assert tree.sample().worker_seconds == 11.5 + 4.25
    del ps.table[ROOT + 1]
    clock.boot += 2.0
    assert tree.sample().worker_seconds == 11.5 + 6.25  # gone: its age at its last read
    assert tree.sample().worker_seconds == 11.5 + 6.25  # the clock held: counted once
    proc_files[f"/proc/{ROOT + 2}/stat"] = stat_line(ROOT + 2, 5008 * TICKS)  # a pid reused
    clock.boot += 10.0
    assert tree.sample().worker_seconds == 11.5 + 6.25 + 5.5  # the old one's last, the new's
    assert ps.table[ROOT + 2].calls.get("create_time", 0) == 0


def test_without_the_boot_clock_a_workers_age_is_psutils_and_never_negative(
        clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1, created=clock.wall - 7.25),
            worker(ROOT + 2, created=clock.wall + 0.5))  # psutil's boot time rounded
    tree = tree_of(ps)
    assert tree.sample().worker_seconds == 7.25
    clock.wall += 1.0
    assert tree.sample().worker_seconds == 8.25 + 0.5
    del ps.table[ROOT + 2]  # gone at half a second old: that half second stays counted
    clock.wall += 0.25
    assert tree.sample().worker_seconds == 8.5 + 0.5


# --- the collector -------------------------------------------------------------------------

class Scripted:
    """A tree whose samples the test sets; counts its reads."""

    def __init__(self, *samples: TreeSample) -> None:
        self.samples, self.reads = list(samples), 0

    def sample(self) -> TreeSample:
        self.reads += 1
        return self.samples[min(self.reads, len(self.samples)) - 1]


def families(collector: LoaderProcessCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in collector.collect()}


FIRST = TreeSample(main_cpu=2.5, workers_cpu=7.75, workers=3, read_bytes=8192.0,
                   rchar=20480.0, workers_wait=0.375, worker_seconds=45.5)


def test_the_families_their_labels_and_values(clock: Clock) -> None:
    collector = LoaderProcessCollector(lambda: Scripted(FIRST), {"experiment": "e", "rank": "2"})
    labels = {"experiment": "e", "rank": "2"}
    got = families(collector)
    assert list(got) == [names.LOADER_CPU_SECONDS, names.LOADER_WORKERS,
                         names.LOADER_WORKER_SECONDS, names.LOADER_CPU_WAIT_SECONDS,
                         names.LOADER_READ_BYTES, names.LOADER_RCHAR_BYTES]
    assert got[names.LOADER_CPU_SECONDS] == [
        ({**labels, "process": names.PROCESS_MAIN}, 2.5),
        ({**labels, "process": names.PROCESS_WORKERS}, 7.75)]
    assert got[names.LOADER_WORKERS] == [(labels, 3)]
    assert got[names.LOADER_WORKER_SECONDS] == [(labels, 45.5)]
    assert got[names.LOADER_CPU_WAIT_SECONDS] == [(labels, 0.375)]
    assert got[names.LOADER_READ_BYTES] == [(labels, 8192.0)]
    assert got[names.LOADER_RCHAR_BYTES] == [(labels, 20480.0)]
    unlabelled = families(LoaderProcessCollector(lambda: Scripted(FIRST)))
    assert unlabelled[names.LOADER_WORKERS] == [({}, 3)]


def test_what_could_not_be_read_is_left_out_never_zero(clock: Clock) -> None:
    blind = TreeSample(main_cpu=2.5, workers_cpu=7.75, workers=0, read_bytes=None,
                       rchar=math.nan, workers_wait=None)
    got = families(LoaderProcessCollector(lambda: Scripted(blind)))
    assert list(got) == [names.LOADER_CPU_SECONDS, names.LOADER_WORKERS,
                         names.LOADER_WORKER_SECONDS]
    assert got[names.LOADER_WORKER_SECONDS] == [({}, 0.0)]
    rchar_only = TreeSample(2.5, 7.75, 0, math.nan, 3.0)
    assert list(families(LoaderProcessCollector(lambda: Scripted(rchar_only))))[-1] == (
        names.LOADER_RCHAR_BYTES)


def test_counters_never_go_back_while_the_workers_gauge_does(clock: Clock) -> None:
    lower = TreeSample(main_cpu=2.25, workers_cpu=7.5, workers=1, read_bytes=8000.0,
                       rchar=20000.0, workers_wait=0.25, worker_seconds=45.0)
    higher = TreeSample(main_cpu=3.0, workers_cpu=9.0, workers=2, read_bytes=9000.0,
                        rchar=30000.0, workers_wait=0.5, worker_seconds=50.0)
    collector = LoaderProcessCollector(lambda: Scripted(FIRST, lower, higher), min_interval=0.0)
    families(collector)
    second, third = families(collector), families(collector)
    assert [v for _, v in second[names.LOADER_CPU_SECONDS]] == [2.5, 7.75]
    assert second[names.LOADER_WORKERS] == [({}, 1)]
    for name, value in ((names.LOADER_WORKER_SECONDS, 45.5),
                        (names.LOADER_CPU_WAIT_SECONDS, 0.375),
                        (names.LOADER_READ_BYTES, 8192.0), (names.LOADER_RCHAR_BYTES, 20480.0)):
        assert second[name] == [({}, value)], name
    assert [v for _, v in third[names.LOADER_CPU_SECONDS]] == [3.0, 9.0]
    assert [third[n][0][1] for n in (names.LOADER_WORKERS, names.LOADER_WORKER_SECONDS,
                                     names.LOADER_CPU_WAIT_SECONDS, names.LOADER_READ_BYTES,
                                     names.LOADER_RCHAR_BYTES)] == [2, 50.0, 0.5, 9000.0, 30000.0]


def test_the_tree_is_read_at_most_once_per_interval_and_again_at_its_end(
        clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Scripted] = []

    def make() -> Scripted:
        made.append(Scripted(FIRST, TreeSample(3.0, 9.0, 2, None, None)))
        return made[-1]

    collector = LoaderProcessCollector(make)
    assert made == []  # built at the first collect, not before
    first = families(collector)
    clock.mono += loader_processes.MIN_SAMPLE_SECONDS * 0.75
    cached = families(collector)
    assert cached == first and made[0].reads == 1
    clock.mono += loader_processes.MIN_SAMPLE_SECONDS * 0.25  # the interval's end: read again
    assert families(collector)[names.LOADER_WORKERS] == [({}, 2)] and made[0].reads == 2
    assert len(made) == 1
    monkeypatch.setattr(loader_processes, "MIN_SAMPLE_SECONDS", 4.0)  # read at each collect
    clock.mono += 3.5
    families(collector)
    assert made[0].reads == 2
    quick = LoaderProcessCollector(lambda: made[0], min_interval=0.25)
    families(quick)
    clock.mono += 0.25
    families(quick)
    clock.mono += 0.125
    families(quick)
    assert made[0].reads == 4


def test_the_minimum_interval_is_a_second(clock: Clock) -> None:
    tree = Scripted(FIRST)
    collector = LoaderProcessCollector(lambda: tree)
    families(collector)
    clock.mono += 0.5
    families(collector)
    assert tree.reads == 1
    clock.mono += 0.5
    families(collector)
    assert tree.reads == 2


@pytest.mark.parametrize("where", ["make", "sample"])
def test_a_tree_that_cannot_be_read_leaves_every_series_out_for_good_with_one_line(
        clock: Clock, caplog: pytest.LogCaptureFixture, where: str) -> None:
    tries: list[str] = []

    class Broken:
        def sample(self) -> TreeSample:
            tries.append("sample")
            raise psutil.AccessDenied(ROOT)

    def make() -> Broken:
        tries.append("make")
        if where == "make":
            raise FileNotFoundError(2, "No such file or directory", "/proc/self/stat")
        return Broken()

    collector = LoaderProcessCollector(make, min_interval=0.0)
    registry = CollectorRegistry()
    registry.register(collector)
    with caplog.at_level(logging.WARNING, logger=loader_processes.__name__):
        for _ in range(3):
            assert families(collector) == {}
            clock.mono += 5.0
    assert tries == (["make"] if where == "make" else ["make", "sample"])
    error = ("FileNotFoundError: [Errno 2] No such file or directory: '/proc/self/stat'"
             if where == "make" else f"AccessDenied: (pid={ROOT})")
    assert [r.getMessage() for r in caplog.records] == [
        (f"trainwatch: cannot read the trial's process tree ({error}); the loader CPU, worker "
        "and read series are left out")]


def test_process_tree_is_this_process_unless_told() -> None:
    here = process_tree()
    assert here._root.pid == os.getpid()
    parent = process_tree(os.getppid())
    assert parent._root.pid == os.getppid()


def test_the_collector_reads_a_real_tree() -> None:
    """The real psutil and /proc of this process: the families are there, their values sane."""
    got = families(LoaderProcessCollector(process_tree))
    cpu = {labels["process"]: v for labels, v in got[names.LOADER_CPU_SECONDS]}
    assert cpu[names.PROCESS_MAIN] > 0 and cpu[names.PROCESS_WORKERS] >= 0
    assert got[names.LOADER_READ_BYTES][0][1] >= 0 and got[names.LOADER_RCHAR_BYTES][0][1] > 0


def test_a_sample_is_frozen_and_its_worker_seconds_default_to_none_lived() -> None:
    sample = TreeSample(1.5, 2.5, 1, None, None)
    assert sample.worker_seconds == 0.0 and sample.workers_wait is None
    with pytest.raises(AttributeError):
        sample.workers = 2  # type: ignore[misc]


def test_pids_and_executables_compare_by_value_not_identity(clock: Clock) -> None:
    """psutil makes new int and str objects at each read: equal, never the same object."""
    top = root()
    top.pid = int(str(ROOT))  # the same number, another object
    assert top.pid is not ROOT
    ps = Ps(top, worker(ROOT + 1, cmdline=TRACKER), worker(ROOT + 2, exe="".join(PYTHON)))
    ps.table = {ROOT: top, ROOT + 1: ps.table[ROOT + 1], ROOT + 2: ps.table[ROOT + 2]}
    tree = tree_of(ps)
    tree.sample()
    assert tree._kinds == {ROOT + 1: TREE, ROOT + 2: WORKER}


def test_a_child_first_seen_ended_is_part_of_the_tree(clock: Clock) -> None:
    ps = Ps(root(), worker(ROOT + 1))
    ps.table[ROOT + 1].fail["exe"] = psutil.NoSuchProcess(ROOT + 1)
    tree = tree_of(ps)
    assert tree.sample().workers == 0
    assert tree._kinds == {ROOT + 1: TREE}


def test_the_interval_is_measured_from_the_last_read_early_on_the_clock(clock: Clock) -> None:
    clock.mono = 0.5
    tree = Scripted(FIRST)
    collector = LoaderProcessCollector(lambda: tree)
    families(collector)
    clock.mono = 1.5  # a second later: read again (a remainder of 0.0 would not)
    families(collector)
    assert tree.reads == 2


def test_a_figure_read_below_zero_is_reported_as_zero(clock: Clock) -> None:
    """More taken out than came in (an apart subtree's children outliving it): held at 0."""
    below = TreeSample(main_cpu=2.5, workers_cpu=-0.5, workers=0, read_bytes=-64.0, rchar=None)
    got = families(LoaderProcessCollector(lambda: Scripted(below)))
    assert [v for _, v in got[names.LOADER_CPU_SECONDS]] == [2.5, 0.0]
    assert got[names.LOADER_READ_BYTES] == [({}, 0.0)]


def test_another_users_child_is_apart_whether_its_uid_is_above_or_below(clock: Clock) -> None:
    """uids are compared by value (psutil makes new ints at each read), either way round."""
    ps = Ps(root(), worker(ROOT + 1, uid=UID - 1), worker(ROOT + 2, uid=UID + 1),
            worker(ROOT + 3, uid=int(str(UID))))
    for pid in (ROOT + 1, ROOT + 2, ROOT + 3):
        ps.table[pid].fail["exe"] = psutil.AccessDenied(pid)
    tree = tree_of(ps)
    tree.sample()
    assert tree._kinds == {ROOT + 1: APART, ROOT + 2: APART, ROOT + 3: WORKER}


def test_a_read_long_after_the_interval_reads_the_tree_again(clock: Clock) -> None:
    """Not only at the interval's end: any later collect reads anew (the cache is for less)."""
    tree = Scripted(FIRST, TreeSample(3.0, 9.0, 2, None, None), TreeSample(4.0, 9.5, 5, None, None))
    collector = LoaderProcessCollector(lambda: tree)
    families(collector)
    clock.mono += loader_processes.MIN_SAMPLE_SECONDS * 2.5
    assert families(collector)[names.LOADER_WORKERS] == [({}, 2)] and tree.reads == 2
    clock.mono += loader_processes.MIN_SAMPLE_SECONDS * 7.25
    assert families(collector)[names.LOADER_WORKERS] == [({}, 5)] and tree.reads == 3


# --- the helper cache, pid wrap-around, the trial's own environment ------------------------

@pytest.mark.parametrize(("others", "kept"), [(17, True), (28, True), (29, False), (40, False)])
def test_the_helper_cache_is_forgotten_only_past_four_per_process_listed_and_16(
        clock: Clock, others: int, kept: bool) -> None:
    """Four live workers and ``others`` direct children that end: a command line is read once
    while the cache holds at most 4 × 4 + 16 = 32 entries, and again once it held more."""
    live = [worker(ROOT + n) for n in range(1, 5)]
    gone = [worker(ROOT + 100 + n) for n in range(others)]
    ps = Ps(root(), *live, *gone)
    tree = tree_of(ps)
    assert tree.sample().workers == 4 + others
    for proc in gone:
        del ps.table[proc.pid]
    assert tree.sample().workers == 4
    assert [p.calls["cmdline"] for p in live] == [1 if kept else 2] * 4
    assert tree.sample().workers == 4  # cleared or not, the cache now holds the live four
    assert [p.calls["cmdline"] for p in live] == [1 if kept else 2] * 4


def test_after_pid_wrap_around_a_workers_decoder_is_still_the_loaders(clock: Clock) -> None:
    """A worker forked after the pid numbers wrapped has a pid below the trial's: its own
    children are not the trial's direct ones, so its decoder counts as the loader's CPU."""
    ps = Ps(root(), worker(300, cpu=(0.75, 0.125, 0.0, 0.0)),
            worker(301, 300, exe="/usr/bin/ffmpeg", cpu=(2.0, 1.0, 0.0, 0.0)))
    sample = tree_of(ps).sample()
    assert sample.workers == 1
    assert sample.workers_cpu == 0.4375 + 0.875 + 3.0


def test_os_environ_counts_as_the_trials_own_only_in_the_trials_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank set in os.environ after exec (Lightning's LOCAL_RANK) is this process's; for a
    trial read from another process, whatever its pid's order, it is nobody's."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    spawned = {"LOCAL_RANK": "1", "RANK": "3"}
    for pid in (2, os.getpid() + 1, ROOT):  # below and above this process's pid
        top = Proc(pid, 1, cpu=(1.25, 0.5, 0.0, 0.0), environ={"LOCAL_RANK": "0", "RANK": "3"})
        assert ProcessTree(Ps(top), pid)._another_rank(spawned), pid
    own = Proc(os.getpid(), 1, cpu=(1.25, 0.5, 0.0, 0.0),
               environ={"LOCAL_RANK": "0", "RANK": "3"})
    assert not ProcessTree(Ps(own), os.getpid())._another_rank(spawned)
    assert ProcessTree(Ps(own), os.getpid())._another_rank({"LOCAL_RANK": "2"})
