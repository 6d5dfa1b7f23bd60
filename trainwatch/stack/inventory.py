"""What runs of a stack right now, read from its pid files and checked against /proc."""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass, field

from trainwatch import procs
from trainwatch.layout import StateDir
from trainwatch.lookup import listen_port
from trainwatch.procs import CorruptRecord, ProcRecord
from trainwatch.stack.settings import PROCESSES


@dataclass
class Inventory:
    """Per service: the live process of ours, if any; plus what the records got wrong."""

    state: StateDir
    alive: dict[str, ProcRecord] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # service -> why it is not alive
    strays: list[ProcRecord] = field(default_factory=list)  # marked, no service claims them

    @property
    def stack(self) -> str:
        return str(self.state.root)

    def forget(self, service: str) -> None:
        self.state.forget(service)
        self.alive.pop(service, None)


def listening_ports(inv: Inventory) -> dict[str, int]:
    """The port each running service was started with, read from its command line: the truth
    even when stack.json was lost. (Grafana takes its port from the environment: not here.)"""
    ports = {service: listen_port(record) for service, record in inv.alive.items()}
    return {service: port for service, port in ports.items() if port is not None}


def _session_leader(record: ProcRecord) -> bool:
    try:
        return os.getsid(record.pid) == record.pid
    except OSError:
        return False


def take(state: StateDir) -> Inventory:
    """Read every pid file. A record naming a process that is not ours (exited, or its pid now
    another program's) is removed and explained; a process of ours whose record was lost or
    corrupt is found by its environment marker and recorded again."""
    inv = Inventory(state)
    for service in PROCESSES:
        path = state.pid_file(service)
        if not path.exists():
            continue
        try:
            record = ProcRecord.load(path)
        except CorruptRecord as err:
            inv.notes[service] = f"{err}; removed it"
            state.forget(service)
            continue
        if procs.is_ours(record, inv.stack):
            inv.alive[service] = record
            continue
        if procs.start_time(record.pid) is None:
            inv.notes[service] = (f"pid {record.pid} has exited; see "
                                  f"{state.log_file(service)}")
        else:
            inv.notes[service] = (f"pid {record.pid} in {path} is now another program "
                                  f"({procs.command_line(record.pid)[:60]}); not touched")
        state.forget(service)
    known = {r.pid for r in inv.alive.values()}
    for found in procs.marked(inv.stack):
        if found.pid in known:
            continue
        if found.service in PROCESSES and found.service not in inv.alive \
                and _session_leader(found):
            inv.alive[found.service] = found
            found_note = (f"found pid {found.pid} by its environment (its pid file was lost); "
                          "recorded it again")
            earlier = inv.notes.get(found.service)
            inv.notes[found.service] = f"{earlier}; {found_note}" if earlier else found_note
            with suppress(OSError):  # a read-only state dir: found again next time
                found.save(state.pid_file(found.service))
        elif not _session_leader(found) and found.service in inv.alive:
            continue  # a child of one of ours (its group goes down with it)
        else:
            inv.strays.append(found)
    return inv
