"""A stack's settings: its ports and rule overrides, chosen at `up` and kept in stack.json so
that `status`, `down` and `diagnose` find the same stack again."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from trainwatch.layout import StackError
from trial_instrumentation.durations import is_prometheus_duration

# Outside 9090-9100 so that a user's own Prometheus, Pushgateway or Alertmanager keeps its port;
# 10910 is the exporter's own default; 10919 the webhook receiver's (trainwatch/webhook.py).
DEFAULT_PORTS = {"exporter": 10910, "prometheus": 10911, "pushgateway": 10912,
                 "alertmanager": 10913, "grafana": 10914, "webhook": 10919}
# The services that listen on a port; PROCESSES adds those that do not (`trainwatch gc`'s loop).
SERVICES = tuple(DEFAULT_PORTS)
PROCESSES = (*SERVICES, "gc")
# How often the stack's gc process retires trial groups, unless `up --gc-every` says otherwise.
GC_EVERY = "30s"
# A positive Prometheus duration (model.ParseDuration): units largest first, e.g. 1m30s.
# What answers 200 once each service is ready to serve.
READY_PATHS = {"exporter": "/healthz", "prometheus": "/-/ready", "pushgateway": "/-/ready",
               "alertmanager": "/-/ready", "grafana": "/api/health", "webhook": "/-/ready"}


@dataclass(frozen=True)
class StackSettings:
    """Everything `up` was asked for; ``None`` means "the project's file says"."""

    ports: dict[str, int]
    for_: str | None = None
    rate_window: str | None = None
    scrape_interval: str | None = None
    alertmanager_config: str | None = None
    runbook_url: str | None = None  # None: the runbook the stack's webhook process serves
    prometheus_external_url: str | None = None  # None: the URL the stack prints
    alertmanager_external_url: str | None = None
    gc_every: str | None = None
    gc_ended_after: str | None = None
    gc_max_age: str | None = None

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def runbook(self) -> str:
        """Where the stack's alerts link for their runbook: ``--runbook-url``, else the
        checkout's docs/runbooks.md as the stack's webhook process serves it."""
        return self.runbook_url or f"{self.url('webhook')}/runbooks"

    def external_url(self, service: str) -> str:
        """Where links in alerts and notifications point (Prometheus's "Graph" link,
        Alertmanager's silence links): the address `up` prints, unless one was given."""
        given = {"prometheus": self.prometheus_external_url,
                 "alertmanager": self.alertmanager_external_url}.get(service)
        return given or self.url(service)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> StackSettings | None:
        """The saved settings; None when there are none or they cannot be read (a stack that
        cannot be described is treated as not running, and `up` writes them again)."""
        try:
            doc: dict[str, Any] = json.loads(path.read_text())
            # A service added since the file was written gets its default port.
            ports = {name: int(doc["ports"].get(name, port))
                     for name, port in DEFAULT_PORTS.items()}
            known = {f.name for f in fields(cls)} - {"ports"}
            return cls(ports=ports, **{k: v for k, v in doc.items() if k in known})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # "ports": 5
            return None


def check(settings: StackSettings) -> None:
    """StackError naming the flag when a setting cannot work (rather than a service that exits
    at start with the reason in its log)."""
    check_ports(settings.ports)
    for service in ("prometheus", "alertmanager"):
        url = settings.external_url(service)
        if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url):  # no "\n" after it
            raise StackError(f"--{service}-external-url: {url!r} is not an http(s) URL like "
                             "http://host:port/")
    for flag, value in (("--scrape-interval", settings.scrape_interval),
                        ("--for", settings.for_), ("--rate-window", settings.rate_window)):
        if value is not None and not is_prometheus_duration(value):
            raise StackError(f"{flag}: {value!r} is not a Prometheus duration above 0 (e.g. "
                             f"{flag} 30s, 1m, 1m30s)")


def check_ports(ports: dict[str, int]) -> None:
    for name, port in ports.items():
        if not 0 < port < 65536:
            raise StackError(f"--{name}-port: {port} is not a TCP port (1-65535)")
    taken: dict[int, str] = {}
    for name, port in ports.items():
        if port in taken:
            raise StackError(f"--{name}-port and --{taken[port]}-port are both {port}: "
                             "give each service its own port")
        taken[port] = name
