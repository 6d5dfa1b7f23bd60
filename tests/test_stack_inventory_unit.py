"""trainwatch.stack.inventory.take over pid files in tmp_path and a faked process table (procs'
/proc readers and os.getsid): which records it keeps, which it removes and how it explains
them, which marked processes it adopts, skips as children, or reports as strays."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from trainwatch import procs
from trainwatch.layout import StateDir
from trainwatch.procs import ProcRecord
from trainwatch.stack import inventory
from trainwatch.stack.inventory import Inventory, listening_ports, take


@dataclass
class Proc:
    """One process of the fake table."""

    record: ProcRecord
    ours: bool = True  # is_ours of its own record
    leader: bool = True  # its own session's leader
    marked: bool = True  # carries this stack's marker
    command: str = "prometheus --x"


class Table:
    def __init__(self) -> None:
        self.procs: dict[int, Proc] = {}
        self.stacks: list[str] = []

    def add(self, service: str, pid: int, **kw: object) -> ProcRecord:
        record = ProcRecord(service, pid, 1000 + pid, (service, f"--pid={pid}"))
        self.procs[pid] = Proc(record, **kw)  # type: ignore[arg-type]
        return record

    def is_ours(self, record: ProcRecord, stack: str) -> bool:
        self.stacks.append(stack)
        found = self.procs.get(record.pid)
        return found is not None and found.ours and found.record == record

    def start_time(self, pid: int) -> int | None:
        found = self.procs.get(pid)
        return None if found is None else found.record.start_time

    def command_line(self, pid: int) -> str:
        return self.procs[pid].command

    def marked(self, stack: str) -> list[ProcRecord]:
        self.stacks.append(stack)
        return [p.record for p in self.procs.values() if p.marked]

    def getsid(self, pid: int) -> int:
        found = self.procs.get(pid)
        if found is None:
            raise ProcessLookupError(pid)
        if found.leader:
            return int(str(pid))  # equal, not the same object: as the kernel's answer is
        return pid + 10_000 if pid % 2 else 1  # its session's leader: a pid above or below


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Table:
    fake = Table()
    for name in ("is_ours", "start_time", "command_line", "marked"):
        monkeypatch.setattr(procs, name, getattr(fake, name))
    monkeypatch.setattr(inventory.os, "getsid", fake.getsid)
    return fake


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    found = StateDir(tmp_path / "stack")
    found.run_dir.mkdir(parents=True)
    return found


def test_no_pid_files_and_no_marked_process_is_an_empty_inventory(
        state: StateDir, table: Table) -> None:
    inv = take(state)
    assert (inv.alive, inv.notes, inv.strays) == ({}, {}, [])
    assert inv.stack == str(state.root) and table.stacks == [str(state.root)]


def test_a_live_record_of_ours_is_alive_and_kept(state: StateDir, table: Table) -> None:
    record = table.add("prometheus", 501)
    gc = table.add("gc", 502)
    record.save(state.pid_file("prometheus"))
    gc.save(state.pid_file("gc"))
    inv = take(state)
    assert inv.alive == {"prometheus": record, "gc": gc}
    assert inv.notes == {} and inv.strays == []
    assert state.pid_file("prometheus").exists() and state.pid_file("gc").exists()
    assert table.stacks == [str(state.root)] * 3


def test_a_corrupt_record_is_removed_and_explained(state: StateDir, table: Table) -> None:
    state.pid_file("alertmanager").write_text("{not json")
    inv = take(state)
    assert inv.notes["alertmanager"].startswith(f"{state.pid_file('alertmanager')} is corrupt (")
    assert inv.notes["alertmanager"].endswith("); removed it")
    assert not state.pid_file("alertmanager").exists() and inv.alive == {}


def test_a_record_of_an_exited_process_is_removed_naming_its_log(
        state: StateDir, table: Table) -> None:
    ProcRecord("pushgateway", 777, 5, ("pushgateway",)).save(state.pid_file("pushgateway"))
    inv = take(state)
    assert inv.notes == {"pushgateway": f"pid 777 has exited; see {state.log_file('pushgateway')}"}
    assert not state.pid_file("pushgateway").exists() and inv.alive == {}


def test_a_record_whose_pid_is_another_program_is_removed_not_touched(
        state: StateDir, table: Table) -> None:
    table.add("exporter", 610, ours=False, marked=False, command="vim " + "x" * 100)
    table.procs[610].record.save(state.pid_file("exporter"))
    inv = take(state)
    path = state.pid_file("exporter")
    assert inv.notes == {"exporter": f"pid 610 in {path} is now another program "
                                     f"(vim {'x' * 56}); not touched"}
    assert not path.exists() and inv.alive == {} and inv.strays == []


def test_a_marked_process_whose_record_was_lost_is_adopted_and_recorded_again(
        state: StateDir, table: Table) -> None:
    record = table.add("grafana", 820)
    inv = take(state)
    assert inv.alive == {"grafana": record} and inv.strays == []
    assert inv.notes == {"grafana": "found pid 820 by its environment (its pid file was lost); "
                                    "recorded it again"}
    assert ProcRecord.load(state.pid_file("grafana")) == record


def test_an_adopted_process_keeps_the_note_on_its_bad_record(state: StateDir, table: Table) -> None:
    state.pid_file("webhook").write_text("[]")
    record = table.add("webhook", 830)
    inv = take(state)
    assert inv.alive == {"webhook": record}
    earlier, found = inv.notes["webhook"].split("); removed it; ")
    assert earlier.startswith(f"{state.pid_file('webhook')} is corrupt (")
    assert found == "found pid 830 by its environment (its pid file was lost); recorded it again"


def test_an_adopted_process_in_a_state_dir_it_cannot_write_is_still_alive(
        tmp_path: Path, table: Table) -> None:
    state = StateDir(tmp_path / "none")  # no run directory: its record cannot be saved
    record = table.add("prometheus", 840)
    inv = take(state)
    assert inv.alive == {"prometheus": record} and not state.run_dir.exists()


def test_a_marked_process_that_is_no_session_leader_is_not_adopted(
        state: StateDir, table: Table) -> None:
    record = table.add("prometheus", 850, leader=False)
    inv = take(state)
    assert inv.alive == {} and inv.strays == [record] and inv.notes == {}
    assert not state.pid_file("prometheus").exists()


def test_a_child_of_a_live_service_is_skipped_a_second_leader_is_a_stray(
        state: StateDir, table: Table) -> None:
    parent = table.add("alertmanager", 900)
    parent.save(state.pid_file("alertmanager"))
    table.add("alertmanager", 901, leader=False)  # its child: goes down with it
    second = table.add("alertmanager", 902)  # a second leader claiming the same service
    inv = take(state)
    assert inv.alive == {"alertmanager": parent} and inv.strays == [second]
    assert inv.notes == {}


def test_a_marked_process_of_no_service_is_a_stray_leader_or_not(
        state: StateDir, table: Table) -> None:
    alive = table.add("prometheus", 910)
    alive.save(state.pid_file("prometheus"))
    lone = table.add("?", 911)
    child = table.add("?", 912, leader=False)
    other = table.add("exporter", 913, leader=False)  # its service is not alive
    inv = take(state)
    assert inv.alive == {"prometheus": alive}
    assert inv.strays == [lone, child, other]


def test_a_process_that_vanishes_before_getsid_is_no_leader(
        state: StateDir, table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    record = table.add("pushgateway", 920)

    def gone(pid: int) -> int:
        raise ProcessLookupError(pid)

    monkeypatch.setattr(inventory.os, "getsid", gone)
    inv = take(state)
    assert inv.alive == {} and inv.strays == [record]


def test_listening_ports_are_read_from_each_alive_command_line(tmp_path: Path) -> None:
    inv = Inventory(StateDir(tmp_path))
    inv.alive["prometheus"] = ProcRecord("prometheus", 5, 1, (
        "prometheus", "--config.file=p.yml", "--web.listen-address=127.0.0.1:10921"))
    inv.alive["alertmanager"] = ProcRecord("alertmanager", 6, 1, (
        "alertmanager", "--web.listen-address=0.0.0.0:10923"))
    inv.alive["grafana"] = ProcRecord("grafana", 7, 1, ("grafana", "server"))
    assert listening_ports(inv) == {"prometheus": 10921, "alertmanager": 10923}


def test_forget_removes_the_record_and_the_alive_entry(state: StateDir) -> None:
    inv = Inventory(state)
    record = ProcRecord("gc", 5, 1, ("gc",))
    record.save(state.pid_file("gc"))
    record.save(state.pid_file("grafana"))
    inv.alive.update(gc=record, grafana=record)
    inv.forget("gc")
    assert inv.alive == {"grafana": record}
    assert not state.pid_file("gc").exists() and state.pid_file("grafana").exists()
    inv.forget("exporter")  # neither recorded nor alive
    assert inv.alive == {"grafana": record}


def test_every_record_is_judged_whatever_came_before_it(state: StateDir, table: Table) -> None:
    state.pid_file("exporter").write_text("not json")  # corrupt, first of all
    alive = table.add("prometheus", 930)
    alive.save(state.pid_file("prometheus"))
    ProcRecord("pushgateway", 931, 5, ()).save(state.pid_file("pushgateway"))  # exited
    table.add("alertmanager", 932, ours=False, marked=False, command="sshd")
    table.procs[932].record.save(state.pid_file("alertmanager"))  # another program's now
    late = table.add("gc", 933)
    late.save(state.pid_file("gc"))
    inv = take(state)
    assert inv.alive == {"prometheus": alive, "gc": late}
    assert list(inv.notes) == ["exporter", "pushgateway", "alertmanager"]
    assert inv.notes["alertmanager"].endswith("is now another program (sshd); not touched")
    assert sorted(p.name for p in state.run_dir.iterdir()) == ["gc.pid", "prometheus.pid"]
