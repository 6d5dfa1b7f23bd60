"""The stack's background processes: start them detached, know them again, stop only them.

A pid alone does not say a process is ours: it may have died and its number gone to another
program. Every process the stack starts carries ``TRAINWATCH_STACK=<state dir>`` and
``TRAINWATCH_STACK_SERVICE=<name>`` in its environment, and its pid file records the kernel's
start time; a process is ours only when both still match (read from /proc). The same marker
finds processes whose pid file was lost or corrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trial_instrumentation import names

MARK_STACK = names.CLI_ENV_STACK
MARK_SERVICE = names.CLI_ENV_STACK_SERVICE


class CorruptRecord(ValueError):
    """A pid file that is not the JSON this module writes."""


@dataclass(frozen=True)
class ProcRecord:
    """What a pid file says about one started process."""

    service: str
    pid: int
    start_time: int  # /proc/PID/stat field 22: clock ticks after boot; changes when a pid is reused
    argv: tuple[str, ...]

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        tmp.replace(path)  # atomic: a crash never leaves half a record

    @classmethod
    def load(cls, path: Path) -> ProcRecord:
        try:
            doc = json.loads(path.read_text())
            record = cls(str(doc["service"]), int(doc["pid"]), int(doc["start_time"]),
                         tuple(map(str, doc["argv"])))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CorruptRecord(f"{path} is corrupt ({type(err).__name__}: {err})") from None
        if record.pid <= 1:
            raise CorruptRecord(f"{path} is corrupt (pid {record.pid})")
        return record


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or None when
    the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and ')'


def start_time(pid: int) -> int | None:
    """The process's start time, or None when it is gone or a zombie (nothing left to stop)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's process: either way not ours
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def argv_of(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1])


def command_line(pid: int) -> str:
    return " ".join(argv_of(pid)) or "?"


def is_ours(record: ProcRecord, stack: str) -> bool:
    """The recorded process still runs and is the one the stack in ``stack`` started."""
    if start_time(record.pid) != record.start_time:
        return False
    env = _environ(record.pid)
    return env.get(MARK_STACK) == stack and env.get(MARK_SERVICE) == record.service


def marked(stack: str) -> Iterator[ProcRecord]:
    """Every live process carrying this stack's marker (children of ours included)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        env = _environ(pid)
        started = start_time(pid)
        if env.get(MARK_STACK) == stack and started is not None:
            yield ProcRecord(env.get(MARK_SERVICE, "?"), pid, started, argv_of(pid))


def spawn(service: str, argv: Sequence[str], stack: str, log: Path, cwd: Path,
          env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], ProcRecord]:
    """Start ``argv`` in its own session (no terminal signals reach it, and it outlives us)."""
    full_env = {**os.environ, **(env or {}), MARK_STACK: stack, MARK_SERVICE: service}
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=cwd, env=full_env,
                                start_new_session=True)
    started = start_time(proc.pid)
    return proc, ProcRecord(service, proc.pid, started or 0, tuple(argv))


def stop(records: Sequence[ProcRecord], stack: str, grace: float = 10.0) -> list[ProcRecord]:
    """SIGTERM each process that is still ours, wait up to ``grace`` s, SIGKILL what is left.

    Identity is checked again before every signal, so a pid that changed hands in the meantime
    is never hit; it returns once each has `exited` (its ports free to bind again) or the waits
    run out. Returns the records that were signalled."""
    live = [r for r in records if is_ours(r, stack)]
    groups = [r.pid for r in live if _leads_group(r.pid)]
    for record in live:
        _signal(record, signal.SIGTERM)

    def done() -> bool:  # the group's other processes too: one may hold what the leader had
        return all(map(exited, live)) and all(map(group_exited, groups))

    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not done():
        time.sleep(0.05)  # polling exit: these are not our children, so there is no wait()
    for record in live:
        if is_ours(record, stack):
            _signal(record, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not done():
        time.sleep(0.05)
    return live


def exited(record: ProcRecord) -> bool:
    """The recorded process has let go of everything, its listening sockets included: gone,
    its pid reused, or a zombie whose every thread has ended. `is_ours` turns false sooner: a
    dying process's leader is a zombie (its environment unreadable) while its other threads
    still hold its descriptors, so a restart that waited only for that found its port taken."""
    started = start_time(record.pid)
    if started is not None:
        return started != record.start_time
    try:
        return len(os.listdir(f"/proc/{record.pid}/task")) <= 1
    except OSError:
        return True


def group_exited(pgid: int) -> bool:
    """No process of the group ``pgid`` is left but zombies (its leader's children outlive it
    for a moment after a signal to the whole group)."""
    for pid in sorted(int(name) for name in os.listdir("/proc") if name.isdigit()):
        fields = _stat_fields(pid)
        if fields is None:  # gone since the listing
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return False
    return True


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False  # gone: it leads nothing


def _signal(record: ProcRecord, sig: signal.Signals) -> None:
    try:
        # A session leader we started leads its own group: the group takes its children too.
        if _leads_group(record.pid):
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)
    except ProcessLookupError:
        pass
