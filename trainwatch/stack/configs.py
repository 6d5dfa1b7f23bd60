"""The configuration files a stack runs with, derived from the project's own files.

Prometheus gets prometheus/prometheus.yml with the stack's loopback ports in its targets and
its ``alerting:`` pointed at the stack's Alertmanager. Its rules are prometheus/rules/ rendered
by prometheus/generate_rules.py into the state directory, with ``--for``/``--rate-window`` if
given and the runbook links pointed at the stack's own: the same generator and thresholds,
never an edited copy. Alertmanager gets prometheus/alertmanager/alertmanager.yml with its
webhooks sent to the stack's own receiver.
"""

from __future__ import annotations

import copy
import glob
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from trainwatch.alertmanager import AlertmanagerConfigError, render_config
from trainwatch.layout import REPO, StackError, StateDir, project_file
from trainwatch.stack.settings import StackSettings

# Which stack port each scrape job of prometheus/prometheus.yml reaches.
JOB_SERVICES = {"trainwatch-exporter": "exporter", "pushgateway": "pushgateway",
                "alertmanager": "alertmanager", "prometheus": "prometheus"}
REQUIRED_JOBS = ("trainwatch-exporter", "pushgateway")
SHIPPED_ALERTMANAGER = "prometheus/alertmanager/alertmanager.yml"
# Used only while the project ships no alertmanager.yml: accept alerts, notify no one.
FALLBACK_ALERTMANAGER = {"route": {"receiver": "none", "group_by": ["alertname"]},
                         "receivers": [{"name": "none"}]}


def write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def loaded_digest(config: Path) -> str:
    """What a reload of ``config`` would read, as one digest: the file and every file its
    ``rule_files`` (Prometheus) or ``templates`` (Alertmanager) globs match, a relative glob
    taken from the file's folder as both do. `up` reloads a running service only when this
    differs from the digest of what it started or last reloaded with: a reload restarts
    Alertmanager's group_wait for every pending notification."""
    text = config.read_bytes()
    digest = hashlib.sha256(str(config).encode() + b"\0" + text)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        doc = None  # the reload says what is wrong with it
    patterns = [p for key in ("rule_files", "templates")
                for p in (doc.get(key) or [] if isinstance(doc, dict) else [])
                if isinstance(p, str)]
    for pattern in patterns:
        for name in sorted(glob.glob(str(config.parent / pattern), include_hidden=True)):
            path = Path(name)
            if path.is_file():
                digest.update(b"\0" + name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def loaded_file(state: StateDir, service: str) -> Path:
    """Where `up` keeps the digest of the configuration ``service`` runs with."""
    return state.data(service) / "loaded-config.sha256"


def rule_files(state: StateDir, settings: StackSettings) -> str:
    """The rule_files glob for Prometheus. Always rendered: their runbook links point at the
    stack's own runbook (or ``--runbook-url``)."""
    out = state.data("prometheus") / "rules"
    for old in out.glob("*.yml"):
        old.unlink()  # a rule file the generator no longer writes must not linger
    root = project_file("prometheus/generate_rules.py").parent.parent
    argv = [sys.executable, "-m", "prometheus.generate_rules", "--out", str(out)]
    argv += ["--for", settings.for_] if settings.for_ else []
    argv += ["--rate-window", settings.rate_window] if settings.rate_window else []
    argv += ["--runbook-url", settings.runbook()]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=root)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise StackError(f"rendering rules with --for/--rate-window/--runbook-url failed: "
                         f"{last[0]}")
    return str(out / "*.yml")


def prometheus_config(state: StateDir, settings: StackSettings) -> Path:
    """Write the stack's prometheus.yml (and its rules); returns its path."""
    source = project_file("prometheus/prometheus.yml")
    try:
        base: dict[str, Any] = yaml.safe_load(source.read_text())
        jobs = {job["job_name"]: job for job in base["scrape_configs"]}
    except (yaml.YAMLError, KeyError, TypeError) as err:
        raise StackError(f"{source}: cannot read its scrape_configs ({err})") from None
    missing = [job for job in REQUIRED_JOBS if job not in jobs]
    if missing:
        raise StackError(f"{source}: scrape job {missing[0]!r} is missing")
    cfg = copy.deepcopy(base)
    for job in cfg["scrape_configs"]:
        service = JOB_SERVICES.get(job["job_name"])
        if service:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{settings.ports[service]}"]}]
    if settings.scrape_interval:
        cfg.setdefault("global", {})["scrape_interval"] = settings.scrape_interval
        cfg["global"]["evaluation_interval"] = settings.scrape_interval
        for job in cfg["scrape_configs"]:  # a job's own interval would outlast a short one
            job.pop("scrape_interval", None)
            job.pop("scrape_timeout", None)
    cfg["rule_files"] = [rule_files(state, settings)]
    cfg["alerting"] = _alerting(cfg.get("alerting"), settings)
    path = state.data("prometheus") / "prometheus.yml"
    header = f"# Written by `trainwatch stack up` from {source}; rewritten at every up.\n"
    write_if_changed(path, header + yaml.safe_dump(cfg, sort_keys=False))
    return path


def _alerting(shipped: Any, settings: StackSettings) -> dict[str, Any]:
    """The project's ``alerting:`` (timeouts, relabelling kept) aimed at the stack's one."""
    target = {"static_configs": [{"targets": [f"127.0.0.1:{settings.ports['alertmanager']}"]}]}
    managers = (shipped or {}).get("alertmanagers") if isinstance(shipped, dict) else None
    if not managers:
        return {"alertmanagers": [target]}
    first = {k: v for k, v in managers[0].items() if not k.endswith("_sd_configs")}
    return {**shipped, "alertmanagers": [{**first, **target}]}


def alertmanager_config(state: StateDir, settings: StackSettings) -> Path:
    """``--alertmanager-config`` as given; else the project's with every webhook sent to the
    stack's own receiver (on whatever port it was given), written into the state directory;
    else a do-nothing one there."""
    if settings.alertmanager_config:
        path = Path(settings.alertmanager_config)
        if not path.is_file():
            raise StackError(f"--alertmanager-config: {path} is not a file")
        return path
    shipped = REPO / SHIPPED_ALERTMANAGER
    if shipped.is_file():
        try:
            config = render_config(shipped, webhook_url=settings.url("webhook") + "/alerts")
        except AlertmanagerConfigError as err:
            raise StackError(str(err)) from None
        path = state.data("alertmanager") / "alertmanager.yml"
        header = f"# Written by `trainwatch stack up` from {shipped}; rewritten at every up.\n"
        write_if_changed(path, header + yaml.safe_dump(config, sort_keys=False))
        return path
    fallback = state.data("alertmanager") / "fallback.yml"
    write_if_changed(fallback, yaml.safe_dump(FALLBACK_ALERTMANAGER, sort_keys=False))
    return fallback
