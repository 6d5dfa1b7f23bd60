"""Why the loader is slow, from the trial's own process tree: CPU seconds of the trial process
and of its DataLoader worker processes, the tree's reads, and how many workers there are.

Read through psutil when the pusher (or a pull scrape) collects, never on the training thread.
Workers come and go (``persistent_workers=False`` starts new ones each epoch), yet the counters
only go up: a worker's CPU time moves into its parent's ``children_user``/``children_system``
when it is reaped, and its I/O into its parent's ``/proc/<pid>/io``, so a dead worker's share
stays counted; a read that races an exit is undercounted for one push, never subtracted.
Where a figure cannot be read (no ``/proc/<pid>/io``, no permission) its series are left out,
never 0, and one line is logged.

Not every descendant is the loader's. Lightning's DDP launcher starts ranks 1.. as children of
rank 0 (the same script run again with its own ``LOCAL_RANK``), and a trial runs programs of its
own (wandb-core, nvidia-smi): such a process and its whole subtree count in none of the series.
Its figures are left out while it runs, and those of its last read are taken back out once it
is reaped (the kernel adds them to its parent's, counted as the workers'): what it did after
that read, at most one push (or scrape) interval's, still lands in the workers' figures, and
all of a program that starts and ends between two reads, never seen.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trial_instrumentation import names

log = logging.getLogger(__name__)
# multiprocessing's helper processes are children too, but they load no data.
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
# A process started with one of these set to a value of its own is another rank's trial.
RANK_VARIABLES = ("LOCAL_RANK", "RANK")
# What a descendant is: a DataLoader worker; part of the loader's tree but no worker (a
# multiprocessing helper, a program a worker runs); or not the loader's at all, with its subtree.
WORKER, TREE, APART = "worker", "tree", "apart"
# The process tree is read at most this often, however often the trial pushes.
MIN_SAMPLE_SECONDS = 1.0
# Clock ticks per second: the unit of a process's start time in /proc/<pid>/stat.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
READ_BYTES_DOC = "Bytes the trial's process tree read from block devices (/proc/<pid>/io read_bytes)."
WAIT_DOC = ("Seconds the DataLoader workers were ready to run but waited for a CPU "
            "(run-queue delay, /proc/<pid>/schedstat): CPU they wanted and did not get.")
WORKER_SECONDS_DOC = ("Wall seconds the DataLoader workers have been alive, summed over the "
                      "workers (from each one's fork): their CPU seconds over these are the "
                      "CPU one worker used, however late they started or often they restart.")
RCHAR_DOC = ("Bytes the trial's process tree read through any read call: page cache and network "
             "file systems too (/proc/<pid>/io rchar).")


@dataclass(frozen=True)
class TreeSample:
    """One reading of the trial's process tree; a figure that could not be read is None."""

    main_cpu: float
    workers_cpu: float
    workers: int
    read_bytes: float | None
    rchar: float | None
    workers_wait: float | None = None  # seconds the workers were runnable, waiting for a CPU
    # Worker-seconds: the wall seconds each DataLoader worker has been alive, summed over the
    # workers, live ones (from their fork to this read) and gone ones (to their last read).
    worker_seconds: float = 0.0


# CPU seconds, read_bytes and rchar of a process or subtree.
Figures = tuple[float, float, float]
ZERO: Figures = (0.0, 0.0, 0.0)


def _cpu(times: Any, *, own: bool = True) -> float:
    reaped = times.children_user + times.children_system
    return reaped + (times.user + times.system if own else 0.0)


class ProcessTree:
    """Reads the trial process (``pid``) and its descendants through ``ps`` (psutil)."""

    def __init__(self, ps: Any, pid: int) -> None:
        self._ps = ps
        self._root = ps.Process(pid)
        self._io = hasattr(self._root, "io_counters")  # absent on macOS
        self._task_children = os.path.exists(f"/proc/{pid}/task/{pid}/children")
        self._helpers: dict[int, bool] = {}
        # Run-queue delay per live worker (/proc/<pid>/schedstat, not passed on to the parent
        # when a worker is reaped), and that of workers gone: the counter keeps their last.
        self._schedstat = os.path.exists(f"/proc/{pid}/schedstat")
        self._waits: dict[int, float] = {}
        self._waits_gone = 0.0
        # Each live worker's age at the last read, and the ages of those gone at theirs: a
        # worker's lifetime counts from its fork, never from the trial's start.
        self._lived: dict[int, float] = {}
        self._lived_gone = 0.0
        self._boot_clock = (os.path.exists(f"/proc/{pid}/stat")
                            and hasattr(time, "CLOCK_BOOTTIME"))
        # What is python, and the trial's rank as it was exec'd: forked workers show that
        # environment in /proc, not the os.environ the trial has now.
        self._exe = self._own(self._root.exe, "")
        environ = self._own(self._root.environ, {})
        self._ranks = {name: environ.get(name) for name in RANK_VARIABLES}
        self._kinds: dict[int, str] = {}  # each listed descendant's, as last read
        # Each subtree apart from the loader's, by its top process: CPU seconds, read_bytes and
        # rchar at the last read; and those of the ones reaped, taken out of the trial's.
        self._apart: dict[int, Figures] = {}
        self._apart_gone = ZERO
        if not self._io:
            log.warning("trainwatch: this platform has no per-process I/O counters; the trial's "
                        "loader read series are left out")

    def sample(self) -> TreeSample:
        """Raises psutil's errors or OSError only where the trial process itself is unreadable."""
        root = self._root.cpu_times()
        io = self._read_io(self._root)
        workers_cpu, workers, waits, lived = _cpu(root, own=False), 0, {}, {}
        now = self._now()
        children = self._children()
        if len(self._helpers) > 4 * len(children) + 16:  # forget processes long gone
            self._helpers = {}
        kinds: dict[int, str] = {}
        tops: dict[int, int | None] = {}  # each process apart, to the top of its subtree
        apart: dict[int, Figures] = {}
        for child, parent in children:
            try:
                if parent in tops:  # in a subtree apart: another rank's workers are its own
                    top = tops[child.pid] = tops[parent]
                    if top is not None:
                        apart[top] = _plus(apart[top], self._figures(child))
                    continue
                kind = kinds[child.pid] = self._kind(child, parent == self._root.pid)
                if kind == APART:
                    tops[child.pid] = self._read_apart(child, apart)
                    continue
                workers_cpu += _cpu(child.cpu_times())
                if io is not None:
                    io = self._add_io(io, child)
                if kind == WORKER:
                    waits[child.pid] = self._wait(child.pid)
                    lived[child.pid] = self._age(child, now)
                    workers += 1
            except (self._ps.NoSuchProcess, self._ps.AccessDenied, FileNotFoundError):
                continue  # gone since listed (its figures are in its parent's now), or not ours
        self._kinds = kinds
        self._waits_gone += sum(v for pid, v in self._waits.items() if pid not in waits)
        self._waits = waits
        wait = self._waits_gone + sum(waits.values()) if self._schedstat else None
        worker_seconds = self._worker_seconds(lived)
        gone = self._reaped_apart(apart, {child.pid for child, _ in children})
        workers_cpu -= gone[0]
        if io is not None:
            io = (io[0] - gone[1], io[1] - gone[2])
        return TreeSample(root.user + root.system, workers_cpu, workers,
                          None if io is None else io[0], None if io is None else io[1], wait,
                          worker_seconds)

    def _worker_seconds(self, lived: dict[int, float]) -> float:
        """The workers' lifetimes so far: each live one's age, plus each gone one's age at its
        last read (what it lived after that read, at most one read interval, is not seen; nor
        is a worker that starts and ends between two reads). A pid read younger than before
        is a new process under a reused pid: the old one is gone."""
        for pid, age in self._lived.items():
            if lived.get(pid, -1.0) < age:
                self._lived_gone += age
        self._lived = lived
        return self._lived_gone + sum(lived.values())

    def _now(self) -> float:
        """Now on the clock :meth:`_age` reads start times on."""
        return time.clock_gettime(time.CLOCK_BOOTTIME) if self._boot_clock else time.time()

    def _age(self, child: Any, now: float) -> float:
        """Wall seconds since ``child`` was forked: its start in clock ticks since boot
        (/proc/<pid>/stat's 22nd field) against the boot clock where the kernel has both
        (psutil's create_time adds a boot time rounded to the second), else psutil's."""
        if self._boot_clock:
            with open(f"/proc/{child.pid}/stat") as file:  # the name may hold spaces, ")"
                fields = file.read().rsplit(")", 1)[1].split()
            started = int(fields[19]) / CLOCK_TICKS  # field 22; fields[0] is field 3
        else:
            started = child.create_time()
        return max(0.0, now - started)

    def _reaped_apart(self, apart: dict[int, Figures], listed: set[int]) -> Figures:
        """The figures of every subtree apart that has been reaped, its top no longer listed:
        the kernel added them to its parent's, counted as the workers'. A top that was listed
        yet unreadable this time (it exited meanwhile) keeps its last figures until then. Where
        a top's own children outlive it (reparented, never reaped into the tree), more is taken
        out than came in: the counters then hold still for that long, never go back."""
        for pid, figures in self._apart.items():
            if pid not in listed:
                self._apart_gone = _plus(self._apart_gone, figures)
        self._apart = apart
        return self._apart_gone

    def _read_apart(self, top: Any, apart: dict[int, Figures]) -> int | None:
        """Reads the top of a subtree apart into ``apart``, its pid; None where it cannot be
        read (it exited since listed): it keeps its last figures, its subtree adds none."""
        try:
            apart[top.pid] = self._figures(top)
            return top.pid
        except (self._ps.NoSuchProcess, self._ps.AccessDenied, FileNotFoundError):
            apart[top.pid] = self._apart.get(top.pid, ZERO)
            return None

    def _kind(self, child: Any, direct: bool) -> str:
        """WORKER, TREE or APART (another rank, a program the trial runs that is not python, a
        process of another user's), from its executable and the environment it was exec'd
        with."""
        try:
            exe, environ = child.exe(), child.environ()
        except self._ps.AccessDenied:  # a setuid program's, or a /proc that hides them
            if child.uids().effective != self._root.uids().effective:
                return APART  # no worker of the trial's
            return self._kinds.get(child.pid, WORKER)  # cannot tell: as it was, or counted
        except self._ps.NoSuchProcess:  # it has ended (a zombie, not yet reaped): no live worker
            return APART if self._kinds.get(child.pid) == APART else TREE
        if not exe:  # psutil could not tell, for no reason it names
            return self._kinds.get(child.pid, WORKER)
        if self._another_rank(environ):
            return APART
        python = not self._exe or exe == self._exe
        if not python:
            # The trial's own: a tool (wandb-core). A worker's: what it decodes with (ffmpeg),
            # the loader's CPU, though no worker process.
            return APART if direct else TREE
        return TREE if self._is_helper(child, direct) else WORKER

    def _another_rank(self, environ: Mapping[str, str]) -> bool:
        """A rank variable set to neither the trial's value at exec time (what forked workers
        show) nor its os.environ's now (what spawned workers inherit; Lightning sets rank 0's
        LOCAL_RANK after it starts)."""
        now = os.environ if self._root.pid == os.getpid() else {}
        return any(environ.get(name) is not None
                   and environ[name] not in (self._ranks[name], now.get(name))
                   for name in RANK_VARIABLES)

    def _own(self, read: Callable[[], Any], unread: Any) -> Any:
        """The trial process's own figure; ``unread`` where it cannot be read: no executable
        turns the python check off, no environment leaves the rank check to os.environ."""
        try:
            return read()
        except (self._ps.NoSuchProcess, self._ps.AccessDenied, OSError):
            return unread

    def _figures(self, process: Any) -> Figures:
        """CPU seconds, read_bytes and rchar of one process, its reaped children included."""
        cpu = _cpu(process.cpu_times())
        if self._io:
            try:
                counters = process.io_counters()
            except (self._ps.AccessDenied, OSError):
                return (cpu, 0.0, 0.0)  # another user's: its reads cannot be known
            return (cpu, float(counters.read_bytes), float(getattr(counters, "read_chars", 0)))
        return (cpu, 0.0, 0.0)

    def _wait(self, pid: int) -> float:
        """Seconds ``pid`` spent runnable on a run queue, waiting for a CPU (schedstat's 2nd
        field, nanoseconds); 0 where the kernel keeps no schedstat."""
        if not self._schedstat:
            return 0.0
        with open(f"/proc/{pid}/schedstat") as file:
            return int(file.read().split()[1]) / 1e9

    def _children(self) -> list[tuple[Any, int]]:
        """The descendants, each with its parent's pid, every parent before its children: from
        /proc/<pid>/task/<tid>/children (microseconds) where the kernel has it, else psutil's
        scan of every process (tens of milliseconds)."""
        children_of = _task_children if self._task_children else self._scanned()
        found, todo = [], [self._root.pid]
        while todo:
            parent = todo.pop()
            for pid in children_of(parent):
                found.append((pid, parent))
                todo.append(pid)
        processes = []
        for pid, parent in found:
            try:
                processes.append((self._ps.Process(pid), parent))
            except self._ps.NoSuchProcess:
                continue
        return processes

    def _scanned(self) -> Callable[[int], list[int]]:
        """Each process's children, from one psutil scan of the trial's descendants."""
        children: dict[int, list[int]] = {}
        for child in self._root.children(recursive=True):
            try:
                children.setdefault(child.ppid(), []).append(child.pid)
            except self._ps.NoSuchProcess:
                continue  # gone since the scan
        return lambda pid: children.get(pid, [])

    def _is_helper(self, child: Any, direct: bool) -> bool:
        """A multiprocessing helper is the trial's own child; the forkserver's children share
        its command line, but they are the workers. Its CPU stays counted: the forkserver's
        includes that of the workers it has reaped."""
        if not direct:
            return False
        if child.pid not in self._helpers:  # a process's command line is read once
            command = " ".join(child.cmdline())
            self._helpers[child.pid] = any(helper in command for helper in HELPERS)
        return self._helpers[child.pid]

    def _read_io(self, process: Any) -> tuple[float, float] | None:
        if not self._io:
            return None
        try:
            counters = process.io_counters()
        except (self._ps.AccessDenied, OSError) as err:
            self._io = False
            log.warning("trainwatch: cannot read the trial's I/O counters (%s: %s); the loader "
                        "read series are left out", type(err).__name__, err)
            return None
        return float(counters.read_bytes), float(getattr(counters, "read_chars", "nan"))

    def _add_io(self, io: tuple[float, float], child: Any) -> tuple[float, float]:
        counters = child.io_counters()
        return io[0] + counters.read_bytes, io[1] + getattr(counters, "read_chars", float("nan"))


def _plus(a: Figures, b: Figures) -> Figures:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _task_children(pid: int) -> list[int]:
    """The children of every thread of ``pid``; none once it has gone."""
    found: list[int] = []
    try:
        tasks = list(os.scandir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            with open(f"{task.path}/children") as file:
                found.extend(int(child) for child in file.read().split())
        except FileNotFoundError:
            continue  # the thread ended
    return found


class LoaderProcessCollector(Collector):
    """Yields the loader families from a :class:`ProcessTree` read at collect time.

    ``const_labels`` as in :class:`~trial_instrumentation.collector.TrialCollector`.

    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> registry.register(LoaderProcessCollector(process_tree))
    >>> registry.get_sample_value("trainwatch_trial_loader_workers") >= 0
    True
    """

    def __init__(self, tree: Callable[[], ProcessTree],
                 const_labels: Mapping[str, str] | None = None,
                 min_interval: float | None = None) -> None:
        self._make_tree = tree  # built on the first collect: psutil is imported off the hot path
        self._tree: ProcessTree | None = None
        self._broken = False
        self._keys = list(const_labels or {})
        self._values = list((const_labels or {}).values())
        self._high: dict[str, float] = {}  # counters never go down, whatever a race read
        self._last: tuple[float, TreeSample] | None = None  # (monotonic time, sample)
        self._min_interval = min_interval  # None: MIN_SAMPLE_SECONDS, read at each collect

    def collect(self) -> Iterator[Metric]:
        sample = self._sample()
        if sample is None:
            return
        cpu = CounterMetricFamily(names.LOADER_CPU_SECONDS, "CPU seconds of the trial process "
                                  "(main) and its DataLoader worker processes (workers).",
                                  labels=[*self._keys, "process"])
        cpu.add_metric([*self._values, names.PROCESS_MAIN], self._up("main", sample.main_cpu))
        cpu.add_metric([*self._values, names.PROCESS_WORKERS],
                       self._up("workers", sample.workers_cpu))
        yield cpu
        workers = GaugeMetricFamily(names.LOADER_WORKERS, "Live DataLoader worker processes "
                                    "(the trial process's python descendants; not another "
                                    "rank started as one).", labels=self._keys)
        workers.add_metric(self._values, sample.workers)
        yield workers
        lived = CounterMetricFamily(names.LOADER_WORKER_SECONDS, WORKER_SECONDS_DOC,
                                    labels=self._keys)
        lived.add_metric(self._values, self._up("lived", sample.worker_seconds))
        yield lived
        if sample.workers_wait is not None:
            wait = CounterMetricFamily(names.LOADER_CPU_WAIT_SECONDS, WAIT_DOC, labels=self._keys)
            wait.add_metric(self._values, self._up("wait", sample.workers_wait))
            yield wait
        for name, doc, value in ((names.LOADER_READ_BYTES, READ_BYTES_DOC, sample.read_bytes),
                                 (names.LOADER_RCHAR_BYTES, RCHAR_DOC, sample.rchar)):
            if value is not None and not math.isnan(value):  # NaN: no such field here
                counter = CounterMetricFamily(name, doc, labels=self._keys)
                counter.add_metric(self._values, self._up(name, value))
                yield counter

    def _sample(self) -> TreeSample | None:
        """The process tree's figures, read at most once per ``MIN_SAMPLE_SECONDS``: a trial
        pushing every few milliseconds (tests, a misconfiguration) would otherwise walk /proc
        for every thread at each push."""
        if self._broken:
            return None
        now = time.monotonic()
        least = MIN_SAMPLE_SECONDS if self._min_interval is None else self._min_interval
        if self._last is not None and now - self._last[0] < least:
            return self._last[1]
        try:
            if self._tree is None:
                self._tree = self._make_tree()
            sample = self._tree.sample()
            self._last = (now, sample)
            return sample
        # Broad on purpose: an exception out of collect() would fail the whole push.
        except Exception as err:  # noqa: BLE001 - psutil's errors, no /proc, anything else
            self._broken = True
            log.warning("trainwatch: cannot read the trial's process tree (%s: %s); the loader "
                        "CPU, worker and read series are left out", type(err).__name__, err)
            return None

    def _up(self, key: str, value: float) -> float:
        self._high[key] = max(self._high.get(key, 0.0), value)
        return self._high[key]


def process_tree(pid: int | None = None) -> ProcessTree:
    """The trial's tree through psutil, imported here, on the collecting thread."""
    import psutil

    return ProcessTree(psutil, os.getpid() if pid is None else pid)
