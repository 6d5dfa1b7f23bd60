"""`trainwatch stack up | status | down`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trainwatch.stack import configs, health, inventory, procs, services
from trainwatch.stack.layout import StackError, StateDir
from trainwatch.stack.procs import ProcRecord
from trainwatch.stack.services import ServiceSpec
from trainwatch.stack.settings import (
    DEFAULT_PORTS,
    READY_PATHS,
    SERVICES,
    StackSettings,
    check_ports,
)
from trial_instrumentation import names

# Started in this order: Prometheus last, so its first scrapes and alert sends find the others.
START_ORDER = ("pushgateway", "exporter", "alertmanager", "prometheus", "grafana")
EXIT_OK, EXIT_DOWN, EXIT_USAGE = 0, 1, 2

Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


def _tail(state: StateDir, service: str) -> Callable[[], str]:
    def last_line() -> str:
        path = state.log_file(service)
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return f"{lines[-1][:300] if lines else '(no output)'} (log: {path})"
    return last_line


def up(state: StateDir, asked: StackSettings, say: Say = _say) -> int:
    """Start what is not running, reload what is, print where everything is."""
    state.prepare()
    inv = inventory.take(state)
    for service, note in inv.notes.items():
        say(f"{service}: {note}")
    previous = StackSettings.load(state.settings_file) or StackSettings(dict(DEFAULT_PORTS))
    # Ports stay while anything runs (moving one needs a restart); the rest is what this `up`
    # asks for, so `up` without --for after `up --for 20s` goes back to the committed rules.
    base = previous.ports if inv.alive else DEFAULT_PORTS
    settings = replace(asked, ports={**base, **{k: v for k, v in asked.ports.items() if v}})
    check_ports(settings.ports)
    moved = [s for s in inv.alive if settings.ports[s] != previous.ports[s]]
    if moved:
        raise StackError(f"{moved[0]} already runs on port {previous.ports[moved[0]]} in "
                         f"{state.root}: `trainwatch stack down` first to change ports")
    prometheus_changed = "prometheus" in inv.alive and \
        configs.prometheus_config(state, settings)[1]
    specs = _specs(state, settings)
    _refresh_running(settings, specs, inv, prometheus_changed, say)
    missing = [s for s in START_ORDER if s in specs and s not in inv.alive]
    taken = [s for s in missing if health.port_taken(settings.ports[s])]
    if taken:
        port = settings.ports[taken[0]]
        raise StackError(f"port {port} for {taken[0]} on 127.0.0.1 is taken by another "
                         f"program: stop it, or pass --{taken[0]}-port PORT")
    settings.save(state.settings_file)
    started: list[ProcRecord] = []
    try:
        for service in missing:
            started.append(_start(state, specs[service], settings))
    except BaseException:
        procs.stop(started, inv.stack)  # all or nothing: no half stack left behind
        for record in started:
            state.pid_file(record.service).unlink(missing_ok=True)
        raise
    if "prometheus" in specs:
        health.wait_scraped(settings.url("prometheus"), settings.url("alertmanager"), 30.0)
    for service in START_ORDER:
        if service in specs:
            record = inv.alive.get(service) or next(r for r in started if r.service == service)
            verb = "already running" if service in inv.alive else "started"
            say(f"{service:<13} {_link(settings, specs[service]):<38} pid {record.pid:<8} {verb}")
    if "grafana" not in specs:
        say(services.GRAFANA_HINT)
    say(f"state and logs: {state.root}")
    say("training scripts push here with no flags after:")
    say(f"  export {names.ENV_PUSHGATEWAY}={settings.url('pushgateway')}")
    return status(state, say=lambda _: None)  # exit code only: is everything healthy?


def _specs(state: StateDir, settings: StackSettings) -> dict[str, ServiceSpec]:
    """Every service's spec (Grafana left out when absent); StackError on a missing binary."""
    built = {name: services.build(name, state, settings) for name in START_ORDER}
    return {name: spec for name, spec in built.items() if spec is not None}


def _link(settings: StackSettings, spec: ServiceSpec) -> str:
    return settings.url(spec.name) + spec.show_path


def _refresh_running(settings: StackSettings, specs: dict[str, ServiceSpec],
                     inv: inventory.Inventory, prometheus_changed: bool, say: Say) -> None:
    """Apply new rules and configuration to services already running: reload Prometheus and
    Alertmanager; restart a service whose command line changed (another config file)."""
    for service, record in list(inv.alive.items()):
        if service in specs and record.argv != specs[service].argv:
            say(f"{service}: its command line changed; restarting it")
            procs.stop([record], inv.stack)
            inv.forget(service)
    if prometheus_changed and "prometheus" in inv.alive:
        health.reload("prometheus", settings.url("prometheus"))
        say("prometheus: configuration or rules changed; reloaded")
    if "alertmanager" in inv.alive:
        health.reload("alertmanager", settings.url("alertmanager"))


def _start(state: StateDir, spec: ServiceSpec, settings: StackSettings) -> ProcRecord:
    log = state.log_file(spec.name)
    proc, record = procs.spawn(spec.name, spec.argv, str(state.root), log, spec.cwd, spec.env)
    record.save(state.pid_file(spec.name))
    try:
        health.wait_ready(spec.name, settings.url(spec.name) + spec.ready_path, proc,
                          _tail(state, spec.name))
    except BaseException:
        procs.stop([record], str(state.root))
        state.pid_file(spec.name).unlink(missing_ok=True)
        raise
    return record


def status(state: StateDir, say: Say = _say) -> int:
    """Print each process and Prometheus's view; EXIT_DOWN when anything is not healthy."""
    if not state.exists():
        say(f"no stack in {state.root}: run `trainwatch stack up`")
        return EXIT_DOWN
    inv = inventory.take(state)
    settings = StackSettings.load(state.settings_file)
    if settings is None:
        if inv.alive:
            say(f"{state.settings_file} is missing or corrupt: `trainwatch stack down`, then up")
        else:
            say(f"no stack in {state.root}: run `trainwatch stack up`")
        return EXIT_DOWN
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
        pid = f"pid {record.pid}" if record else ""
        line = f"{service:<13} {settings.url(service):<24} {pid:<10} {state_word}"
        say(line + (f"  ({note})" if note else ""))
    for stray in inv.strays:
        healthy = False
        command = " ".join(stray.argv)[:60] or "?"
        say(f"stray process of this stack: pid {stray.pid} ({command}); "
            "`trainwatch stack down` stops it")
    if "prometheus" in inv.alive:
        healthy &= _prometheus_view(settings, say)
    return EXIT_OK if healthy else EXIT_DOWN


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


def down(state: StateDir, say: Say = _say) -> int:
    """Stop every process of this stack (records and environment marker); touch nothing else."""
    if not state.exists():
        say(f"no stack in {state.root}: nothing to stop")
        return EXIT_OK
    inv = inventory.take(state)
    for service, note in inv.notes.items():
        say(f"{service}: {note}")
    targets = [*inv.alive.values(), *inv.strays]
    stopped = procs.stop(targets, inv.stack)
    left = [r for r in targets if procs.is_ours(r, inv.stack)]
    for record in stopped:
        say(f"stopped {record.service} (pid {record.pid})")
    for service in SERVICES:
        if not any(r.service == service for r in left):
            state.pid_file(service).unlink(missing_ok=True)
    if left:
        say(f"could not stop pid {left[0].pid} ({left[0].service}); stop it yourself")
        return EXIT_DOWN
    if not stopped:
        say(f"no process of the stack in {state.root} was running")
    say(f"data and logs kept in {state.root}")
    return EXIT_OK
