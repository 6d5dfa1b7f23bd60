"""trainwatch.procs on processes this test starts (shells that sleep, ``sleep`` under a name
with spaces and a parenthesis): a pid record written and read back or refused, a process told
as the stack's by its marks and start time, found by its marks, and stopped (its group when it
leads one, itself when not; SIGKILL after the grace when it ignores SIGTERM), never another."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.frozen import assert_frozen
from trainwatch import procs
from trainwatch.procs import (
    MARK_SERVICE,
    MARK_STACK,
    CorruptRecord,
    ProcRecord,
    _environ,
    argv_of,
    command_line,
    exited,
    is_ours,
    marked,
    spawn,
    start_time,
    stop,
)

SLEEP = shutil.which("sleep") or "/bin/sleep"


def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes a test spawns: killed (their groups) and reaped at its end."""
    found: list[subprocess.Popen[bytes]] = []
    yield found
    for proc in found:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # leads no group of its own
            proc.kill()
        proc.wait()


def launch(started: list[subprocess.Popen[bytes]], tmp_path: Path, script: str,
           service: str = "svc", stack: str | None = None,
           env: dict[str, str] | None = None) -> ProcRecord:
    proc, record = spawn(service, ["sh", "-c", script, "arg0", "two words"],
                         stack or str(tmp_path), tmp_path / "log", tmp_path, env)
    started.append(proc)
    # Until it runs the shell (before, /proc shows the environment of the test's own fork),
    # and, where the shell execs, the program it execs: while an exec is under way /proc reads
    # the environment as empty for a moment, and the process as no one's.
    program = "sleep" if "exec sleep" in script else "sh"
    until(lambda: argv_of(proc.pid)[:1] == (program,)
          and _environ(proc.pid).get(MARK_SERVICE) == service)
    return record


# The pid record


def test_a_record_is_saved_as_one_json_line_and_loaded_back(tmp_path: Path) -> None:
    record = ProcRecord("prometheus", 4242, 987654, ("prom", "--a=b c", ""))
    path = tmp_path / "p.pid"
    record.save(path)
    assert path.read_text() == ('{"service": "prometheus", "pid": 4242, "start_time": 987654, '
                                '"argv": ["prom", "--a=b c", ""]}\n')
    assert not path.with_suffix(".tmp").exists()
    assert ProcRecord.load(path) == record
    assert_frozen(record)


@pytest.mark.parametrize("text, why", [
    ("{", "JSONDecodeError"), ("[]", "TypeError"), ("null", "TypeError"),
    ('{"service": "s", "pid": 5, "start_time": 1}', "KeyError: 'argv'"),
    ('{"service": "s", "pid": "x", "start_time": 1, "argv": []}', "ValueError"),
    ('{"service": "s", "pid": 5, "start_time": 1, "argv": 3}', "TypeError"),
    ('{"pid": 5, "start_time": 1, "argv": []}', "KeyError: 'service'"),
])
def test_a_record_that_is_not_what_save_writes_is_corrupt(
        tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "p.pid"
    path.write_text(text)
    with pytest.raises(CorruptRecord, match=f"^{path} is corrupt \\({why}"):
        ProcRecord.load(path)


def test_a_missing_record_and_a_pid_of_0_or_1_are_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CorruptRecord, match=r"is corrupt \(FileNotFoundError: "):
        ProcRecord.load(tmp_path / "none.pid")
    for pid in (1, 0, -7):
        ProcRecord("s", pid, 1, ()).save(tmp_path / "p.pid")
        with pytest.raises(CorruptRecord) as caught:
            ProcRecord.load(tmp_path / "p.pid")
        assert str(caught.value) == f"{tmp_path / 'p.pid'} is corrupt (pid {pid})"
    ProcRecord("s", 2, 1, ()).save(tmp_path / "p.pid")
    assert ProcRecord.load(tmp_path / "p.pid").pid == 2
    record = ProcRecord.load(_written(tmp_path, '{"service": 5, "pid": "7", "start_time": "3", '
                                                '"argv": [1, "b"]}'))
    assert record == ProcRecord("5", 7, 3, ("1", "b"))


def _written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.pid"
    path.write_text(text)
    return path


# What /proc says


def test_start_time_is_the_kernels_field_22_and_none_once_gone(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    mine = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert start_time(os.getpid()) == int(mine[mine.rindex(")") + 2:].split()[19])
    # A command name with spaces and a closing parenthesis.
    odd = tmp_path / "a) b c"
    odd.symlink_to(SLEEP)
    proc = subprocess.Popen([str(odd), "60"])
    started.append(proc)
    until(lambda: "a) b c" in Path(f"/proc/{proc.pid}/stat").read_text())
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    assert start_time(proc.pid) == int(stat.split(") b c) ", 1)[1].split()[19]) > 0
    proc.kill()
    proc.wait()
    assert start_time(proc.pid) is None


def test_a_zombie_has_no_start_time(started: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen(["true"])
    started.append(proc)
    until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "Z")
    assert start_time(proc.pid) is None


def test_environ_and_argv_of_a_process_and_of_one_gone(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record = launch(started, tmp_path, "exec sleep 60", env={"EXTRA": "a=b", "E2": ""})
    env = _environ(record.pid)
    assert (env["EXTRA"], env["E2"], env[MARK_STACK], env[MARK_SERVICE]) == (
        "a=b", "", str(tmp_path), "svc")
    until(lambda: argv_of(record.pid) == ("sleep", "60"))
    assert command_line(record.pid) == "sleep 60"
    assert _environ(os.getpid())["PATH"] == os.environ["PATH"]
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert (_environ(gone.pid), argv_of(gone.pid), command_line(gone.pid)) == ({}, (), "?")


def test_environ_skips_entries_without_an_equals_sign(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_bytes

    def fake(self: Path) -> bytes:
        if self == Path("/proc/77/environ"):
            return b"A=1\0junk\0B=x=y\0\0=empty\0C\xff=\xfe\0"
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", fake)
    assert _environ(77) == {"A": "1", "B": "x=y", "": "empty", "C\ufffd": "\ufffd"}


def test_argv_of_keeps_empty_arguments_and_drops_only_the_last_terminator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_bytes

    def fake(self: Path) -> bytes:
        if self == Path("/proc/78/cmdline"):
            return b"prog\0\0x y\xff\0"
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", fake)
    assert argv_of(78) == ("prog", "", "x y\ufffd")


# Ours, and found by the marks


def test_spawn_starts_a_marked_session_leader_writing_to_the_log(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    (tmp_path / "log").write_text("before\n")
    record = launch(started, tmp_path, 'echo "$0|$1|$(pwd)|$EXTRA"; echo err >&2; exec sleep 60',
                    env={"EXTRA": "x"})
    assert record.service == "svc" and record.argv == ("sh", "-c", record.argv[2], "arg0",
                                                       "two words")
    assert record.start_time == start_time(record.pid)
    assert os.getpgid(record.pid) == record.pid == os.getsid(record.pid)
    until(lambda: "err" in (tmp_path / "log").read_text())
    assert (tmp_path / "log").read_text() == f"before\narg0|two words|{tmp_path}|x\nerr\n"
    assert is_ours(record, str(tmp_path))


def test_is_ours_needs_the_start_time_the_stack_and_the_service_all_to_match(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record = launch(started, tmp_path, "exec sleep 60")
    stack = str(tmp_path)
    assert is_ours(record, stack)
    for other_stack in (stack[:-1], stack + "/other"):  # sorting before it and after it
        assert not is_ours(record, other_stack)
    for service in ("other", "sv", "svd", "svc "):
        assert not is_ours(ProcRecord(service, record.pid, record.start_time, ()), stack)
    assert not is_ours(ProcRecord("svc", record.pid, record.start_time + 1, ()), stack)
    mine = ProcRecord("svc", os.getpid(), start_time(os.getpid()) or 0, ())
    assert not is_ours(mine, stack)  # alive, started then, but unmarked


def test_marked_finds_every_live_process_with_the_stacks_marks_children_too(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    parent = launch(started, tmp_path, "sleep 60 & wait", service="webhook")
    (tmp_path / "x").mkdir()
    launch(started, tmp_path / "x", "exec sleep 60", stack=str(tmp_path / "other"))
    until(lambda: len(list(marked(str(tmp_path)))) == 2)
    found = sorted(marked(str(tmp_path)), key=lambda r: r.pid)
    assert found[0] == ProcRecord("webhook", parent.pid, parent.start_time, parent.argv)
    child = found[1]
    assert (child.service, child.argv) == ("webhook", ("sleep", "60"))
    assert child.start_time == start_time(child.pid)
    assert list(marked(str(tmp_path / "nothing"))) == []


# Stopping


def test_stop_terminates_a_leaders_group_and_returns_what_it_signalled(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    leader = launch(started, tmp_path, "sleep 60 & wait")
    until(lambda: len(list(marked(str(tmp_path)))) == 2)
    child = next(r for r in marked(str(tmp_path)) if r.pid != leader.pid)
    other = launch(started, tmp_path, "exec sleep 60", stack=str(tmp_path / "other"))
    begun = time.monotonic()
    assert stop([leader, other], str(tmp_path), grace=5.0) == [leader]
    assert time.monotonic() - begun < 3.0  # it exits on SIGTERM: no wait for the grace
    assert start_time(leader.pid) is None or not is_ours(leader, str(tmp_path))
    assert not is_ours(child, str(tmp_path))  # the group went with it
    assert is_ours(other, str(tmp_path / "other"))  # never another stack's


def test_stop_returns_once_the_leaders_group_is_gone_not_its_leader_alone(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    # The leader exits at once on SIGTERM; its child (in its group) takes 0.4 s to, as a
    # server that closes its listeners before it exits: stop waits for both.
    leader = launch(started, tmp_path,
                    "(trap 'sleep 0.4; exit 0' TERM; while :; do sleep 0.05; done) & wait")
    until(lambda: len(list(marked(str(tmp_path)))) >= 2)
    child = next(r for r in marked(str(tmp_path)) if r.pid != leader.pid)
    assert not procs.group_exited(leader.pid)
    assert stop([leader], str(tmp_path), grace=5.0) == [leader]
    assert start_time(child.pid) != child.start_time  # gone, not dying
    assert procs.group_exited(leader.pid)


def test_a_group_is_gone_only_when_no_live_member_is_left_whatever_vanishes_mid_scan(
        tmp_path: Path, started: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    leader = launch(started, tmp_path, "sleep 60 & wait")
    until(lambda: len(list(marked(str(tmp_path)))) == 2)
    child = next(r for r in marked(str(tmp_path)) if r.pid != leader.pid)
    assert not procs.group_exited(leader.pid) and procs.group_exited(child.pid)  # no group
    # Every process listed before the child gone by the time its stat is read: the child
    # still holds the group.
    real = procs._stat_fields
    monkeypatch.setattr(procs, "_stat_fields",
                        lambda pid: None if pid < child.pid else real(pid))
    assert not procs.group_exited(leader.pid)


def test_stop_waits_for_its_group_not_for_the_rest_of_its_session(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    # The leader's child moves to a group of its own (same session, same parent): stop neither
    # signals it nor waits for it.
    leader = launch(started, tmp_path, f"{sys.executable} -c 'import os, time; "
                    f"os.setpgid(0, 0); time.sleep(4)' & wait")
    until(lambda: any(r.argv[:1] == (sys.executable,) and os.getpgid(r.pid) == r.pid
                      for r in marked(str(tmp_path)) if r.pid != leader.pid))
    child = next(r for r in marked(str(tmp_path)) if r.pid != leader.pid)
    try:
        begun = time.monotonic()
        assert stop([leader], str(tmp_path), grace=3.0) == [leader]
        assert time.monotonic() - begun < 2.0
        assert start_time(child.pid) == child.start_time  # not signalled
    finally:
        os.kill(child.pid, signal.SIGKILL)


def test_stop_signals_a_process_that_leads_no_group_alone(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    leader = launch(started, tmp_path, "sleep 60 & wait; sleep 60")
    until(lambda: len(list(marked(str(tmp_path)))) == 2)
    child = next(r for r in marked(str(tmp_path)) if r.pid != leader.pid)
    assert os.getpgid(child.pid) == leader.pid
    assert stop([child], str(tmp_path), grace=5.0) == [child]
    assert not is_ours(child, str(tmp_path)) and is_ours(leader, str(tmp_path))


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record = launch(started, tmp_path, "trap '' TERM; echo ready; while :; do sleep 0.05; done")
    until(lambda: "ready" in (tmp_path / "log").read_text())
    begun = time.monotonic()
    assert stop([record], str(tmp_path), grace=0.4) == [record]
    took = time.monotonic() - begun
    assert not is_ours(record, str(tmp_path))
    assert 0.35 < took < 3.0, took


@pytest.mark.parametrize(("group", "leads"), [(4000, True), (3999, False), (4001, False)])
def test_only_a_process_leading_its_group_is_signalled_with_the_group(
        monkeypatch: pytest.MonkeyPatch, group: int, leads: bool) -> None:
    """Its group id, not the order of the numbers: after pid wrap-around a member's group may
    have a larger id than the member."""
    sent: list[tuple[str, int, int]] = []
    monkeypatch.setattr(procs.os, "getpgid", lambda pid: {4000: group}[pid])
    monkeypatch.setattr(procs.os, "killpg", lambda pid, sig: sent.append(("group", pid, sig)))
    monkeypatch.setattr(procs.os, "kill", lambda pid, sig: sent.append(("alone", pid, sig)))
    procs._signal(ProcRecord("svc", 4000, 5, ()), signal.SIGTERM)
    assert sent == [("group" if leads else "alone", 4000, signal.SIGTERM)]


def test_a_process_whose_start_time_spawn_cannot_read_is_recorded_with_start_time_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "start_time", lambda pid: None)
    proc, record = spawn("svc", ["true"], str(tmp_path), tmp_path / "log", tmp_path)
    proc.wait()
    assert record == ProcRecord("svc", proc.pid, 0, ("true",))


def test_stop_of_nothing_ours_signals_nothing_and_a_vanished_pid_is_no_error(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record = launch(started, tmp_path, "exec sleep 60")
    assert stop([record], str(tmp_path / "elsewhere"), grace=0.2) == []
    assert is_ours(record, str(tmp_path))
    procs._signal(ProcRecord("x", 2**22 + 12345, 1, ()), signal.SIGTERM)  # no such process


class Clock:
    """procs' ``time``: monotonic time, in whole microseconds, that only sleeping moves (by the
    nap and ``overhead_us`` more, as a real sleep oversleeps); every nap is recorded."""

    def __init__(self, overhead_us: int) -> None:
        self.us, self.overhead_us, self.naps = 1_000_000_000, overhead_us, []  # type: ignore[var-annotated]

    def monotonic(self) -> float:
        return self.us / 1e6

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")  # as time.sleep says
        assert len(self.naps) < 1000, "stop() never stops waiting"
        self.naps.append(seconds)
        self.us += round(seconds * 1e6) + self.overhead_us


# Without overhead the polls land on each deadline exactly (a poll at the deadline is one too
# many); with it they never do (a loop waiting to land on it would never end).
@pytest.mark.parametrize("overhead_us", [0, 1])
@pytest.mark.parametrize("dies_after_kill", [0.3, None])  # None: never (stuck in the kernel)
def test_stop_waits_10_s_for_sigterm_polling_every_50_ms_then_5_s_after_sigkill(
        monkeypatch: pytest.MonkeyPatch, dies_after_kill: float | None, overhead_us: int) -> None:
    clock = Clock(overhead_us)
    signals: list[tuple[int, signal.Signals, int]] = []  # pid, signal, clock.us
    record, bystander = ProcRecord("svc", 4321, 77, ()), ProcRecord("svc", 4322, 78, ())

    def ours(r: ProcRecord, stack: str) -> bool:
        assert stack == "the stack"
        if r is bystander:
            return False
        killed = [t for pid, sig, t in signals if sig == signal.SIGKILL]
        return (dies_after_kill is None or not killed
                or clock.us < killed[0] + round(dies_after_kill * 1e6))

    monkeypatch.setattr(procs, "time", clock)
    monkeypatch.setattr(procs, "is_ours", ours)
    monkeypatch.setattr(procs, "exited", lambda r: not ours(r, "the stack"))
    monkeypatch.setattr(procs, "_signal",
                        lambda r, sig: signals.append((r.pid, sig, clock.us)))
    assert stop([bystander, record], "the stack") == [record]
    assert [(pid, sig) for pid, sig, _ in signals] == [(4321, signal.SIGTERM),
                                                       (4321, signal.SIGKILL)]
    assert signals[0][2] == 1_000_000_000
    assert 1_010_000_000 <= signals[1][2] < 1_010_050_000  # the default grace: 10 s, not a poll more
    assert len(clock.naps) > 200 and all(nap == 0.05 for nap in clock.naps)
    waited = clock.us - signals[1][2]
    if dies_after_kill is None:
        assert 5_000_000 <= waited < 5_050_000  # then it gives up
    else:
        assert 300_000 <= waited < 350_000  # back as soon as it is gone


# A process whose main thread ends first (as a Go server's may on SIGTERM) while another thread
# still holds its listening socket for a while: the leader is a zombie, its environment
# unreadable, so `is_ours` is false, yet the port is still taken. `stop` waits for `exited`.
HOLDER = """
import ctypes, signal, socket, sys, threading, time, os
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen()
go = threading.Event()
def hold():
    go.wait()
    time.sleep(float(sys.argv[1]))
    os._exit(0)
threading.Thread(target=hold).start()
def term(*_):
    go.set()
    ctypes.CDLL(None).pthread_exit(None)
signal.signal(signal.SIGTERM, term)
print(sock.getsockname()[1], flush=True)
while True:
    time.sleep(0.05)
"""


def port_free(port: int) -> bool:
    from trainwatch.stack.health import port_taken  # what `stack up` checks before a start
    return not port_taken(port)


def holder(started: list[subprocess.Popen[bytes]], tmp_path: Path,
           hold: float) -> tuple[ProcRecord, int]:
    import sys
    proc, record = spawn("svc", [sys.executable, "-c", HOLDER, str(hold)], str(tmp_path),
                         tmp_path / "log", tmp_path)
    started.append(proc)
    until(lambda: (tmp_path / "log").read_text().strip().isdigit(), 10.0)
    return record, int((tmp_path / "log").read_text())


def test_a_process_whose_leader_ended_is_not_exited_while_a_thread_holds_its_port(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record, port = holder(started, tmp_path, 30.0)
    assert not exited(record) and not port_free(port)
    os.kill(record.pid, signal.SIGTERM)
    until(lambda: start_time(record.pid) is None)  # the leader is a zombie
    assert not is_ours(record, str(tmp_path))
    assert not exited(record) and not port_free(port)  # its thread holds the socket
    os.kill(record.pid, signal.SIGKILL)
    until(lambda: exited(record))
    assert port_free(port)


def test_stop_returns_once_the_last_thread_let_go_of_the_port(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record, port = holder(started, tmp_path, 0.6)
    begun = time.monotonic()
    assert stop([record], str(tmp_path), grace=5.0) == [record]
    assert 0.5 < time.monotonic() - begun < 4.0
    assert port_free(port)


def test_exited_is_true_for_a_reused_pid_and_a_gone_one_false_for_a_live_one(
        tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    record = launch(started, tmp_path, "exec sleep 60")
    assert not exited(record)
    # Its pid reused: the record is of an older process (the usual case), or, whatever the
    # order of the two, of another one.
    assert exited(ProcRecord("svc", record.pid, record.start_time - 5, ()))
    assert exited(ProcRecord("svc", record.pid, record.start_time + 1, ()))
    assert exited(ProcRecord("svc", 2**22 + 12345, 1, ()))  # no such process
