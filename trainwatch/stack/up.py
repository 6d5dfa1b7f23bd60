"""`trainwatch stack up`: start what is not running, reload what changed, say where it all is."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from trainwatch import procs
from trainwatch.cliutil import EXIT_OK
from trainwatch.layout import ENV_STATE_DIR, StackError, StateDir, path_hint
from trainwatch.lookup import ENV_PROMETHEUS
from trainwatch.procs import ProcRecord
from trainwatch.stack import configs, health, inventory, services
from trainwatch.stack.commands import Say, say_line, status
from trainwatch.stack.services import ServiceSpec
from trainwatch.stack.settings import DEFAULT_PORTS, StackSettings, check
from trial_instrumentation import names

# Started in this order: Prometheus last, so its first scrapes and alert sends find the others.
# gc after the Pushgateway it cleans: its first pass is its readiness.
START_ORDER = ("pushgateway", "exporter", "webhook", "alertmanager", "prometheus", "grafana",
               "gc")
# How long `up` waits for Prometheus's first scrape of every target (seconds): long enough for
# the committed 15 s interval; after it `up` reports what is not healthy yet instead of waiting.
FIRST_SCRAPE_WAIT = 30.0


def _tail(state: StateDir, service: str) -> Callable[[], str]:
    def last_line() -> str:
        path = state.log_file(service)
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return f"{lines[-1][:300] if lines else '(no output)'} (log: {path})"
    return last_line


def up(state: StateDir, asked: StackSettings, say: Say = say_line) -> int:
    """Start what is not running, reload what changed, print where everything is; the exit code is
    `status`'s (0 when every process answers and every target is scraped)."""
    created = not state.exists()
    state.prepare()
    try:
        with state.locked():
            return _up(state, asked, say)
    except BaseException:
        if created:
            _remove_if_unused(state)
        raise


def _remove_if_unused(state: StateDir) -> None:
    """Remove the state directory a failed `up` created, unless a service's log in it explains
    the failure (the error names that log) or a process of it still runs."""
    logs = [p for p in state.logs.glob("*.log") if p.stat().st_size > 0]
    if not logs and not any(procs.marked(str(state.root))):
        shutil.rmtree(state.root, ignore_errors=True)


def _up(state: StateDir, asked: StackSettings, say: Say) -> int:
    inv = inventory.take(state)
    for service, note in inv.notes.items():
        say(f"{service}: {note}")
    settings = _settings(state, inv, asked)
    specs = _specs(state, settings)
    _refresh_running(state, settings, specs, inv, say)
    missing = [s for s in START_ORDER if s in specs and s not in inv.alive]
    taken = [s for s in missing if s in settings.ports and health.port_taken(settings.ports[s])]
    if taken:
        ports = ", ".join(f"{settings.ports[s]} for {s}" for s in taken)
        flags = " ".join(f"--{s}-port PORT" for s in taken)
        them = "them" if len(taken) > 1 else "it"
        raise StackError(f"port{'s' if len(taken) > 1 else ''} {ports} on 127.0.0.1 "
                         f"{'are' if len(taken) > 1 else 'is'} taken by another program: "
                         f"stop {them}, or pass {flags}")
    settings.save(state.settings_file)
    started = _start_all(state, settings, [specs[s] for s in missing], inv.stack, say)
    if "prometheus" in specs:
        health.wait_scraped(settings.url("prometheus"), settings.url("alertmanager"),
                            FIRST_SCRAPE_WAIT, say)
    for service in (s for s in START_ORDER if s in specs):
        record = inv.alive.get(service) or started[service]
        verb = "already running" if service in inv.alive else "started"
        say(f"{service:<13} {_link(settings, specs[service]):<38} pid {record.pid:<8} {verb}")
    if "grafana" not in specs:
        say(services.GRAFANA_HINT)
    say(f"state and logs: {state.root}")
    if pointer := cli_pointer(state, settings.url("prometheus")):
        say("the trainwatch CLI reads another stack in this shell; point it at this one:")
        say(f"  {pointer}")
    say("training scripts push here with no flags after:")
    say(f"  export {names.ENV_PUSHGATEWAY}={settings.url('pushgateway')}")
    hint = path_hint()
    if hint:
        say(hint)
    lines: list[str] = []
    code = status(state, say=lines.append)
    if code != EXIT_OK:  # say what is wrong; when all is well the lines above are enough
        say("not healthy yet (`trainwatch stack status` again to check):")
        for line in lines:
            say("  " + line)
    return code


def cli_pointer(state: StateDir, prometheus: str,
                env: Mapping[str, str] | None = None) -> str | None:
    """The line that points the CLI at this stack, where without it `trials`, `diagnose` and
    `report` would read another (a state directory of its own, or $TRAINWATCH_PROMETHEUS set
    elsewhere); None where they find it already.

    >>> cli_pointer(StateDir.resolve("/tmp/my stack"), "http://127.0.0.1:19090", {})
    "export TRAINWATCH_STATE_DIR='/tmp/my stack' TRAINWATCH_PROMETHEUS=http://127.0.0.1:19090"
    >>> cli_pointer(StateDir.resolve("/tmp/s"), "http://127.0.0.1:19090",
    ...             {"TRAINWATCH_STATE_DIR": "/tmp/s"}) is None
    True
    """
    env = os.environ if env is None else env
    if (StateDir.resolve(None, env).root == state.root
            and env.get(ENV_PROMETHEUS, prometheus) == prometheus):
        return None
    return (f"export {ENV_STATE_DIR}={shlex.quote(str(state.root))} "
            f"{ENV_PROMETHEUS}={prometheus}")


def _settings(state: StateDir, inv: inventory.Inventory, asked: StackSettings) -> StackSettings:
    """Ports stay what running services listen on (moving one needs `down`); everything else
    is what this `up` asks for, so `up` after `up --for 20s` goes back to the committed rules."""
    saved = StackSettings.load(state.settings_file)
    running = {**(saved.ports if saved and inv.alive else DEFAULT_PORTS),
               **inventory.listening_ports(inv)}
    settings = replace(asked, ports={**running, **{k: v for k, v in asked.ports.items() if v}})
    check(settings)
    for service in inv.alive:
        if service in settings.ports and settings.ports[service] != running[service]:
            raise StackError(f"{service} already runs on port {running[service]} in "
                             f"{state.root}: `trainwatch stack down` first to change ports")
    return settings


def _start_all(state: StateDir, settings: StackSettings, specs: list[ServiceSpec],
               stack: str, say: Say) -> dict[str, ProcRecord]:
    """Start each in turn, waiting until it is ready (a line as each answers: `make run`'s
    progress); on any failure stop those started here, so a failed `up` leaves no half stack
    behind."""
    started: dict[str, ProcRecord] = {}
    try:
        for spec in specs:
            began = time.monotonic()
            started[spec.name] = _start(state, spec, settings)
            say(f"starting: {spec.name} answers ({time.monotonic() - began:.1f} s)")
    except BaseException:
        procs.stop(list(started.values()), stack)
        for service in started:
            state.forget(service)
        raise
    return started


def _specs(state: StateDir, settings: StackSettings) -> dict[str, ServiceSpec]:
    """Every service's spec (Grafana left out when absent); StackError on a missing binary."""
    services.require_binaries()
    built = {name: services.build(name, state, settings) for name in START_ORDER}
    return {name: spec for name, spec in built.items() if spec is not None}


def _link(settings: StackSettings, spec: ServiceSpec) -> str:
    if spec.status_file is not None:
        return spec.summary
    return settings.url(spec.name) + spec.show_path


def _refresh_running(state: StateDir, settings: StackSettings, specs: dict[str, ServiceSpec],
                     inv: inventory.Inventory, say: Say) -> None:
    """Apply new rules and configuration to services already running: restart a service whose
    command line changed (another config file); reload Prometheus or Alertmanager only when
    what it would load differs from what it runs with (a reload restarts Alertmanager's
    group_wait, delaying every pending notification, so an unchanged `up` must not)."""
    for service, record in list(inv.alive.items()):
        if service in specs and record.argv != specs[service].argv:
            say(f"{service}: its command line changed; restarting it")
            procs.stop([record], inv.stack)
            inv.forget(service)
    for service in ("prometheus", "alertmanager"):
        config = specs[service].config if service in specs else None
        if service not in inv.alive or config is None:
            continue
        digest = configs.loaded_digest(config)
        stamp = configs.loaded_file(state, service)
        if stamp.exists() and stamp.read_text().strip() == digest:
            continue
        health.reload(service, settings.url(service))
        stamp.write_text(digest + "\n")
        what = "configuration or rules" if service == "prometheus" else "configuration"
        say(f"{service}: {what} changed; reloaded")


def _start(state: StateDir, spec: ServiceSpec, settings: StackSettings) -> ProcRecord:
    log = state.log_file(spec.name)
    status_file = spec.status_file
    where = str(status_file) if status_file else settings.url(spec.name) + spec.ready_path
    if status_file is not None:
        status_file.unlink(missing_ok=True)  # a previous run's: ready means this one wrote it

    def ready() -> bool:
        return status_file.exists() if status_file else health.http_status(where) == 200

    digest = configs.loaded_digest(spec.config) if spec.config else None
    proc, record = procs.spawn(spec.name, spec.argv, str(state.root), log, spec.cwd, spec.env)
    record.save(state.pid_file(spec.name))
    try:
        health.wait_ready(spec.name, ready, where, proc, _tail(state, spec.name))
    except BaseException:
        procs.stop([record], str(state.root))
        state.forget(spec.name)
        raise
    if digest is not None:  # what it started with: `up` reloads it only when that changes
        configs.loaded_file(state, spec.name).write_text(digest + "\n")
    return record


