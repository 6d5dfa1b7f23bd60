"""What each of the stack's processes runs: its command line, how it is known ready, its files.

Every service listens on 127.0.0.1 only and keeps its data under the state directory; the gc
process listens nowhere and says it is working through a status file.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainwatch.cliutil import duration
from trainwatch.layout import REPO, StackError, StateDir, project_file
from trainwatch.lookup import LISTEN_FLAG
from trainwatch.stack import configs
from trainwatch.stack.settings import GC_EVERY, READY_PATHS, StackSettings

GRAFANA_HINT = ("grafana: not started (no grafana-server or grafana on PATH); to get one: "
                "https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/, "
                "then `trainwatch stack up` again")
# Debian package names: `stack` installs nothing, it says what would.
PACKAGES = {"prometheus": "prometheus", "prometheus-pushgateway": "prometheus-pushgateway",
            "prometheus-alertmanager": "prometheus-alertmanager"}


@dataclass(frozen=True)
class ServiceSpec:
    """How to start one service and how to know it is ready."""

    name: str
    argv: tuple[str, ...]
    show_path: str = ""  # appended to the URL printed for people (e.g. the exporter's /metrics)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = REPO
    optional: bool = False
    # A process without a port: ready once it has written this file; ``summary`` is what `up`
    # prints in place of its URL.
    status_file: Path | None = None
    summary: str = ""
    # The configuration file it reloads on POST /-/reload (Prometheus, Alertmanager).
    config: Path | None = None

    @property
    def ready_path(self) -> str:
        return READY_PATHS[self.name]


def require_binaries() -> None:
    """One line naming every missing binary and the packages that bring them."""
    missing = [name for name in PACKAGES if shutil.which(name) is None]
    if missing:
        packages = " ".join(sorted({PACKAGES[name] for name in missing}))
        raise StackError(f"{', '.join(missing)} not installed: run `make tools` or "
                         f"`sudo apt-get install {packages}`, then `trainwatch stack up` again")


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        require_binaries()
    return str(path)


def listen(settings: StackSettings, service: str) -> str:
    return f"{LISTEN_FLAG}127.0.0.1:{settings.ports[service]}"


def external(settings: StackSettings, service: str) -> tuple[str, ...]:
    """Links in alerts and notifications point where the user looks (the default is the
    machine's hostname, which a browser elsewhere may not resolve); the routes stay at /, so
    readiness and the API keep their paths whatever path the URL has."""
    return (f"--web.external-url={settings.external_url(service)}", "--web.route-prefix=/")


def build(name: str, state: StateDir, settings: StackSettings) -> ServiceSpec | None:
    """The spec for ``name``; None for Grafana when no Grafana binary is installed.

    Writes the configuration files the service reads; StackError when a binary is missing."""
    data = state.data(name)
    data.mkdir(parents=True, exist_ok=True)
    argv: tuple[str, ...]
    if name == "exporter":
        # The same interpreter as this command, so the exporter is the checkout's own.
        argv = (sys.executable, "-m", "exporter", listen(settings, name))
        return ServiceSpec(name, argv, "/metrics", env={"PYTHONPATH": str(REPO)})
    if name == "pushgateway":
        argv = (binary("prometheus-pushgateway"), listen(settings, name),
                f"--persistence.file={data / 'metrics.store'}")
        return ServiceSpec(name, argv)
    if name == "alertmanager":
        config = configs.alertmanager_config(state, settings)
        # An empty cluster address: otherwise it opens a gossip port on every interface.
        argv = (binary("prometheus-alertmanager"), f"--config.file={config}",
                f"--storage.path={data / 'data'}", listen(settings, name),
                "--cluster.listen-address=", *external(settings, name))
        return ServiceSpec(name, argv, config=config)
    if name == "prometheus":
        config = configs.prometheus_config(state, settings)
        argv = (binary("prometheus"), f"--config.file={config}",
                f"--storage.tsdb.path={data / 'data'}", listen(settings, name),
                "--web.enable-lifecycle",  # `up` reloads changed rules through /-/reload
                *external(settings, name))
        return ServiceSpec(name, argv, config=config)
    if name == "grafana":
        return _grafana(state, settings)
    if name == "gc":
        return _gc(state, settings)
    if name == "webhook":
        argv = (sys.executable, "-m", "trainwatch.webhook", listen(settings, name),
                f"--record={notifications_file(state)}",
                f"--runbooks={project_file('docs/runbooks.md')}")
        return ServiceSpec(name, argv, env={"PYTHONPATH": str(REPO)})
    raise ValueError(f"unknown service {name!r}")


def notifications_file(state: StateDir) -> Path:
    """What the stack's webhook receiver was delivered: JSON lines (trainwatch/webhook.py)."""
    return state.data("webhook") / "notifications.jsonl"


def gc_status_file(state: StateDir) -> Path:
    return state.data("gc") / "last-pass.json"


def _gc(state: StateDir, settings: StackSettings) -> ServiceSpec:
    """`trainwatch gc` every ``--gc-every`` against the stack's Pushgateway (trainwatch/gc.py
    decides what goes; ``--gc-ended-after``/``--gc-max-age`` pass its flags through)."""
    every = settings.gc_every or GC_EVERY
    given = {"every": every, "ended-after": settings.gc_ended_after,
             "max-age": settings.gc_max_age}
    for flag, value in given.items():
        try:
            if value is not None:
                duration(value)
        except argparse.ArgumentTypeError as err:
            raise StackError(f"--gc-{flag}: {err}") from None
    flags = [f"--pushgateway={settings.url('pushgateway')}"]
    flags += [f"--{flag}={value}" for flag, value in given.items()
              if value is not None and flag != "every"]
    status = gc_status_file(state)
    argv = (sys.executable, "-m", "trainwatch.stack.gc_loop", f"--every={every}",
            f"--status={status}", "--", *flags)
    return ServiceSpec("gc", argv, env={"PYTHONPATH": str(REPO)}, status_file=status,
                       summary=f"`trainwatch gc` every {every}")


def _grafana(state: StateDir, settings: StackSettings) -> ServiceSpec | None:
    exe = shutil.which("grafana-server") or shutil.which("grafana")
    if exe is None:
        return None
    home = _grafana_home(Path(exe))
    data = state.data("grafana")
    argv = (exe, "--homepath", str(home)) if exe.endswith("-server") \
        else (exe, "server", "--homepath", str(home))
    env = {"GF_SERVER_HTTP_ADDR": "127.0.0.1", "GF_SERVER_HTTP_PORT": str(settings.ports["grafana"]),
           "GF_PATHS_DATA": str(data / "data"), "GF_PATHS_LOGS": str(data / "logs"),
           "GF_PATHS_PLUGINS": str(data / "plugins"),
           "GF_PATHS_PROVISIONING": str(grafana_provisioning(data)),
           "GF_AUTH_ANONYMOUS_ENABLED": "true",  # loopback only: look without logging in
           "PROMETHEUS_URL": settings.url("prometheus")}  # read by the datasource file
    return ServiceSpec("grafana", argv, env=env, cwd=home, optional=True)


def _grafana_home(exe: Path) -> Path:
    for home in (exe.resolve().parent.parent, Path("/usr/share/grafana")):
        if (home / "conf" / "defaults.ini").is_file():
            return home
    raise StackError(f"{exe}: no conf/defaults.ini beside it or in /usr/share/grafana; "
                     "reinstall Grafana from its Debian package or tarball")


def grafana_provisioning(data: Path) -> Path:
    """grafana/provisioning with the dashboards folder pointed at this checkout's JSON."""
    out = data / "provisioning"
    source = project_file("grafana/provisioning")
    datasources = (source / "datasources" / "trainwatch.yaml").read_text()
    configs.write_if_changed(out / "datasources" / "trainwatch.yaml", datasources)
    dashboards = yaml.safe_load((source / "dashboards" / "trainwatch.yaml").read_text())
    for provider in dashboards["providers"]:
        provider["options"]["path"] = str(project_file("grafana/dashboards"))
    configs.write_if_changed(out / "dashboards" / "trainwatch.yaml",
                             yaml.safe_dump(dashboards, sort_keys=False))
    return out
