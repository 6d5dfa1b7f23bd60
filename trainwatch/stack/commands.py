"""`trainwatch stack status`, `down` and `notifications` (`up` is in up.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from trainwatch import procs
from trainwatch.cliutil import EXIT_FOUND, EXIT_OK, printable
from trainwatch.layout import StateDir, project_file
from trainwatch.procs import ProcRecord
from trainwatch.stack import health, inventory
from trainwatch.stack.gc_loop import Pass
from trainwatch.stack.services import gc_status_file, notifications_file
from trainwatch.stack.settings import (
    DEFAULT_PORTS,
    PROCESSES,
    READY_PATHS,
    SERVICES,
    StackSettings,
)
from trainwatch.webhook import notification_text, recorded

Say = Callable[[str], None]


def say_line(line: str) -> None:
    print(line, flush=True)


def status(state: StateDir, say: Say = say_line) -> int:
    """Print each process and Prometheus's view; EXIT_FOUND when anything is not healthy."""
    if not state.exists():
        say(f"no stack in {state.root}: run `trainwatch stack up`")
        return EXIT_FOUND
    inv = inventory.take(state)
    saved = StackSettings.load(state.settings_file)
    if saved is None and not inv.alive:
        say(f"no stack in {state.root}: run `trainwatch stack up`")
        return EXIT_FOUND
    # The ports running services were started with win over stack.json (which may be lost).
    ports = {**(saved.ports if saved else DEFAULT_PORTS), **inventory.listening_ports(inv)}
    settings = StackSettings(ports)
    healthy = True
    for service in SERVICES:
        record = inv.alive.get(service)
        note = inv.notes.get(service, "")
        if record is None and service == "grafana" and not note:
            say(f"{service:<13} not running (optional)")
            continue
        answers = record is not None and \
            health.http_status(settings.url(service) + READY_PATHS[service]) == 200
        healthy &= answers
        state_word = "DOWN" if record is None else "alive" if answers else "alive, NOT READY"
        if answers and service == "exporter" and health.no_nvml(settings.url(service)):
            state_word += " (no GPU: no NVML on this machine, host metrics only)"
        pid = f"pid {record.pid}" if record else ""
        line = f"{service:<13} {settings.url(service):<24} {pid:<10} {state_word}"
        say(line + (f"  ({note})" if note else ""))
    healthy &= _gc_view(state, inv.alive.get("gc"), inv.notes.get("gc", ""), say)
    for stray in inv.strays:
        healthy = False
        command = " ".join(stray.argv)[:60] or "?"
        say(f"stray process of this stack: pid {stray.pid} ({command}); "
            "`trainwatch stack down` stops it")
    if "prometheus" in inv.alive:
        healthy &= _prometheus_view(settings, say)
    return EXIT_OK if healthy else EXIT_FOUND


def _gc_view(state: StateDir, record: ProcRecord | None, note: str, say: Say) -> bool:
    """The gc process: alive, and its last pass recent and successful."""
    last = Pass.load(gc_status_file(state)) if record else None
    if record is None or last is None:
        word, ok = ("DOWN" if record is None else "alive, NO PASS YET"), False
    else:
        age = time.time() - last.at
        ok = last.exit == 0 and age < 3 * last.every + 10
        # Exit 1: the pass went through but left groups (one it cannot delete, one without a
        # push time, the rest of a spent budget), named in its log.
        trouble = "LEFT GROUPS" if last.exit == EXIT_FOUND and age < 3 * last.every + 10 \
            else "FAILING"
        word = (f"{'alive' if ok else f'alive, {trouble}'}: last pass {age:.0f} s ago, "
                f"exit {last.exit}")
    every = f"every {last.every:g} s" if last else ""
    pid = f"pid {record.pid}" if record else ""
    line = f"{'gc':<13} {every:<24} {pid:<10} {word}"
    say(line + (f"  ({note})" if note else "")
        + ("" if ok or record is None else f"; see {state.log_file('gc')}"))
    return ok


def _prometheus_view(settings: StackSettings, say: Say) -> bool:
    prometheus = settings.url("prometheus")
    found = health.targets(prometheus)
    managers = health.alertmanagers(prometheus)
    if found is None or managers is None:
        say(f"prometheus at {prometheus} does not answer its API")
        return False
    ok = bool(found)
    for target in found:
        ok &= target.health == "up"
        error = f" ({target.error})" if target.error else ""
        say(f"scrape {target.job:<20} {target.url:<40} {target.health}{error}")
    ours = settings.url("alertmanager")
    reached = any(m.startswith(ours) for m in managers)
    say(f"alerts  -> alertmanager {ours}: "
        + ("reached" if reached else f"NOT reached (Prometheus knows {managers or 'none'})"))
    return ok and reached


def down(state: StateDir, say: Say = say_line) -> int:
    """Stop every process of this stack (records and environment marker); touch nothing else."""
    if not state.exists():
        say(f"no stack in {state.root}: nothing to stop")
        return EXIT_OK
    with state.locked():
        return _down(state, say)


def _down(state: StateDir, say: Say) -> int:
    inv = inventory.take(state)
    for service, note in inv.notes.items():
        say(f"{service}: {note}")
    targets = [*inv.alive.values(), *inv.strays]
    stopped = procs.stop(targets, inv.stack)
    left = [r for r in targets if procs.is_ours(r, inv.stack)]
    for record in stopped:
        say(f"stopped {record.service} (pid {record.pid})")
    for service in PROCESSES:
        if not any(r.service == service for r in left):
            state.forget(service)
    if left:
        say(f"could not stop pid {left[0].pid} ({left[0].service}); stop it yourself")
        return EXIT_FOUND
    if not stopped:
        say(f"no process of the stack in {state.root} was running")
    say(f"data and logs kept in {state.root}")
    return EXIT_OK


def notifications(state: StateDir, say: Say = say_line) -> int:
    """Every notification the stack's webhook receiver was delivered, oldest first, each with
    the time it arrived and its text as the shipped templates render it."""
    path = notifications_file(state)
    templates = project_file("prometheus/alertmanager/templates")
    count = 0
    for count, (received, note) in enumerate(recorded(path), start=1):
        say(printable(f"--- {received} via receiver {note.get('receiver', '?')}"))
        for line in notification_text(note, templates).splitlines():
            say(line)
    if not count:
        say(f"no notification delivered yet to the stack's receiver ({path})")
    return EXIT_OK
