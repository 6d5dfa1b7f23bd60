"""The Helm chart, rendered by the real helm binary and checked by real validators.

``helm lint --strict`` and ``helm template`` for every ``ci/*-values.yaml``; built-in kinds
through ``kubernetes-validate --strict``; the standalone Prometheus config through ``promtool
check config``, the bundled Alertmanager's through ``amtool check-config`` and the
PrometheusRule CRs through ``promtool check rules``; the chart's copies of the rules,
dashboards, Grafana provisioning and Alertmanager config byte for byte against their sources.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, promtool, require_binary
from helm.sync_chart_files import CHART_FILES, drift

HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "trainwatch"
SCENARIOS = sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))
CRD_GROUP = "monitoring.coreos.com/"
Doc = dict[str, Any]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make helm-tools` (make test does it)")
    return run(str(HELM), *args)


def template(*args: str, release: str = "tw") -> str:
    """``helm template`` output; fails the test with helm's message when it does not render."""
    result = helm("template", release, str(CHART), "--namespace", "gpu-monitoring", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@cache
def render(scenario: str | None = None) -> tuple[Doc, ...]:
    """The documents of the chart with ci/<scenario>-values.yaml (None: the defaults)."""
    args = ("-f", str(CHART / "ci" / f"{scenario}-values.yaml")) if scenario else ()
    return tuple(d for d in yaml.safe_load_all(template(*args)) if d)


def find(docs: tuple[Doc, ...], kind: str, suffix: str = "") -> list[Doc]:
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]


def one(docs: tuple[Doc, ...], kind: str, suffix: str = "") -> Doc:
    found = find(docs, kind, suffix)
    assert len(found) == 1, f"expected one {kind} *{suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def source_bytes(folder: str, pattern: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((REPO / folder).glob(pattern))}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(scenario: str) -> None:
    result = helm("lint", "--strict", str(CHART), "-f", str(CHART / "ci" / f"{scenario}-values.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_builtin_kinds_pass_kubernetes_validate(tmp_path: Path) -> None:
    files = []
    for scenario in [None, *SCENARIOS]:
        builtin = [d for d in render(scenario) if not d["apiVersion"].startswith(CRD_GROUP)]
        path = tmp_path / f"{scenario or 'default'}.yaml"
        path.write_text(yaml.safe_dump_all(builtin))
        files.append(str(path))
    validator = shutil.which("kubernetes-validate", path=str(REPO / ".venv" / "bin")) or \
        require_binary("kubernetes-validate")
    result = run(validator, "--strict", "-k", "1.31.0", *files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s in ("standalone", "gpu-node")])
def test_standalone_prometheus_config_passes_promtool(scenario: str, tmp_path: Path) -> None:
    docs = render(scenario)
    (tmp_path / "prometheus.yml").write_text(one(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    (tmp_path / "rules").mkdir()
    for name, text in one(docs, "ConfigMap", "-rules")["data"].items():
        (tmp_path / "rules" / name).write_text(text)
    # The config's password_file, where the scenario's extra volume would put it.
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        if "basic_auth" in job:
            job["basic_auth"]["password_file"] = str(tmp_path / "pass")
            (tmp_path / "pass").write_text("secret\n")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", tmp_path / "prometheus.yml")
    assert f"{len(source_bytes('prometheus/rules', '*.yml'))} rule files found" in result.stdout


def mounted_alertmanager_config(docs: tuple[Doc, ...], into: Path) -> Path:
    """The bundled Alertmanager's files laid out as its pod sees them (the Deployment's volume
    items), so a `templates:` path that misses the mounted templates fails amtool."""
    data = one(docs, "ConfigMap", "-alertmanager")["data"]
    pod = one(docs, "Deployment", "-alertmanager")["spec"]["template"]["spec"]
    container, = pod["containers"]
    mount, = [m for m in container["volumeMounts"] if m["name"] == "config"]
    volume, = [v for v in pod["volumes"] if v["name"] == "config"]
    for item in volume["configMap"]["items"]:
        (into / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (into / item["path"]).write_text(data[item["key"]])
    assert f"--config.file={mount['mountPath']}/alertmanager.yml" in container["args"]
    return into / "alertmanager.yml"


@pytest.mark.parametrize("scenario", [None, "alerting"])
def test_bundled_alertmanager_config_passes_amtool(scenario: str | None, tmp_path: Path) -> None:
    config = mounted_alertmanager_config(render(scenario), tmp_path)
    result = run(require_binary("amtool"), "check-config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " - 1 templates" in result.stdout and "SUCCESS" in result.stdout
    # The templates the receivers name are defined in the mounted template files.
    used = set(re.findall(r'template "([\w.]+)"', config.read_text()))
    defined = set(re.findall(r'define "([\w.]+)"', "".join(
        p.read_text() for p in (tmp_path / "templates").glob("*.tmpl"))))
    assert used <= defined, used - defined


def test_prometheus_sends_to_the_bundled_alertmanager() -> None:
    docs = render("standalone")
    config = yaml.safe_load(one(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    service = one(docs, "Service", "-alertmanager")
    port = service["spec"]["ports"][0]["port"]
    [targets] = config["alerting"]["alertmanagers"]
    # The chart's own first, then the ones the values add.
    assert targets["static_configs"] == [{"targets": [
        f"tw-trainwatch-alertmanager.gpu-monitoring.svc.cluster.local:{port}",
        "alertmanager.monitoring:9093"]}]
    pod = one(docs, "Deployment", "-alertmanager")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container, = pod["spec"]["containers"]
    assert container["ports"][0]["containerPort"] == port
    assert "--cluster.listen-address=" in container["args"]  # one replica, no gossip port
    # Without the bundled one and without others, Prometheus has no alerting section.
    alone = yaml.safe_load(yaml.safe_load(template(
        "--set", "alertmanager.enabled=false", "--show-only",
        "templates/prometheus-configmap.yaml"))["data"]["prometheus.yml"])
    assert "alerting" not in alone


def test_scrape_jobs_are_the_ones_the_rules_select() -> None:
    thresholds = yaml.safe_load((REPO / "prometheus" / "thresholds.yaml").read_text())
    exporter_job = thresholds["selectors"]["exporter"].split('"')[1]
    config = yaml.safe_load(one(render("standalone"), "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert exporter_job in jobs
    assert jobs["pushgateway"]["honor_labels"] is True
    assert config["rule_files"] == ["rules/*.yml"]
    # Every exporter pod is a target: the headless Service's A records, unready pods included.
    service = one(render("standalone"), "Service", "-exporter")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert jobs[exporter_job]["dns_sd_configs"] == [{
        "names": ["tw-trainwatch-exporter.gpu-monitoring.svc.cluster.local"], "type": "A",
        "port": service["spec"]["ports"][0]["port"]}]
    assert jobs["pushgateway"]["static_configs"] == [
        {"targets": ["tw-trainwatch-pushgateway.gpu-monitoring.svc.cluster.local:9091"]}]
    # kube-prometheus-stack mode: the job label comes from the Services' jobLabel label.
    docs = render("kube-prometheus-stack")
    for component, job in (("exporter", exporter_job), ("pushgateway", "pushgateway")):
        monitor = one(docs, "ServiceMonitor", f"-{component}")
        service = one(docs, "Service", f"-{component}")
        assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == job


def test_servicemonitors_select_their_services() -> None:
    docs = render("kube-prometheus-stack")
    for component, honor in (("exporter", False), ("pushgateway", True)):
        monitor = one(docs, "ServiceMonitor", f"-{component}")
        service = one(docs, "Service", f"-{component}")
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "monitoring"
        assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-monitoring"]}
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        endpoint, = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["honorLabels"] is honor
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "honorLabels",
                                 "relabelings", "scheme", "tlsConfig", "basicAuth"}


def test_prometheusrules_carry_the_rule_files_and_pass_promtool(tmp_path: Path) -> None:
    sources = source_bytes("prometheus/rules", "*.yml")
    rules = find(render("kube-prometheus-stack"), "PrometheusRule")
    assert sorted(r["metadata"]["name"] for r in rules) == \
        sorted(f"tw-trainwatch-{name.removesuffix('.yml')}" for name in sources)
    for rule in rules:
        assert rule["metadata"]["labels"]["release"] == "monitoring"
        name = rule["metadata"]["name"].removeprefix("tw-trainwatch-") + ".yml"
        assert rule["spec"] == yaml.safe_load(sources[name])
        (tmp_path / name).write_text(yaml.safe_dump(rule["spec"]))
    promtool("check", "rules", *sorted(tmp_path.iterdir()))


def test_chart_files_are_the_sources_byte_for_byte() -> None:
    assert drift() == [], "run `python3 helm/sync_chart_files.py` and commit helm/trainwatch/files"


def test_drift_check_catches_a_changed_missing_or_stale_file(tmp_path: Path) -> None:
    copy = tmp_path / "files"
    shutil.copytree(CHART_FILES, copy)
    (copy / "rules" / "gpu.yml").write_text((copy / "rules" / "gpu.yml").read_text() + "# edit\n")
    (copy / "dashboards" / "fleet.json").unlink()
    (copy / "rules" / "old.yml").write_text("groups: []\n")
    assert drift(copy) == ["dashboards/fleet.json: missing in the chart",
                           "rules/gpu.yml: differs from its source",
                           "rules/old.yml: no source any more"]


def test_rendered_configmaps_carry_the_same_bytes() -> None:
    standalone = render("standalone")
    assert one(standalone, "ConfigMap", "-rules")["data"] == source_bytes("prometheus/rules", "*.yml")
    dashboards = source_bytes("grafana/dashboards", "*.json")
    assert one(standalone, "ConfigMap", "-dashboards")["data"] == dashboards
    assert one(render("kube-prometheus-stack"), "ConfigMap", "-dashboards")["data"] == dashboards
    provisioning = one(standalone, "ConfigMap", "-grafana-provisioning")["data"]
    volume, = [v for v in one(standalone, "Deployment", "-grafana")["spec"]["template"]["spec"]["volumes"]
               if v["name"] == "provisioning"]
    for item in volume["configMap"]["items"]:
        source = REPO / "grafana" / "provisioning" / item["path"]
        assert provisioning[item["key"]] == source.read_text()
    assert len(volume["configMap"]["items"]) == len(list((REPO / "grafana" / "provisioning").glob("*/*.yaml")))
    alertmanager = one(standalone, "ConfigMap", "-alertmanager")["data"]
    assert alertmanager == {**source_bytes("prometheus/alertmanager", "alertmanager.yml"),
                            **source_bytes("prometheus/alertmanager/templates", "*.tmpl")}


CRD_TOOLS = REPO / ".tools" / "crd"
CRD_VALIDATOR = REPO / "tests" / "validate_crds.mjs"


def validate_crds(docs: list[Doc]) -> list[Doc]:
    """The prometheus-operator CRD schemas' verdict on each doc (tests/validate_crds.mjs)."""
    if not (CRD_TOOLS / "node_modules").is_dir():
        pytest.fail("the CRD schemas are missing: run `make helm-tools`")
    done = subprocess.run([require_binary("node"), str(CRD_VALIDATOR), str(CRD_TOOLS)],
                          input=json.dumps(docs), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_custom_resources_pass_the_prometheus_operator_crd_schemas() -> None:
    docs = [d for d in render("kube-prometheus-stack") if d["apiVersion"].startswith(CRD_GROUP)]
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["PodMonitor", "PrometheusRule", "ServiceMonitor"]
    results = validate_crds(docs)
    assert len(results) == len(docs) >= 8
    assert [r for r in results if r["error"] is not None] == []


def test_crd_schemas_reject_a_broken_podmonitor_and_servicemonitor() -> None:
    # Copies: render() is cached for the other tests.
    podmonitor = copy.deepcopy(one(render("kube-prometheus-stack"), "PodMonitor", "-trials"))
    podmonitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] = "yes"
    monitor = copy.deepcopy(one(render("kube-prometheus-stack"), "ServiceMonitor", "-exporter"))
    monitor["spec"]["endpoints"][0]["port"] = 9400
    errors = [r["error"] for r in validate_crds([podmonitor, monitor])]
    assert "honorLabels must be boolean" in errors[0] and "port must be string" in errors[1]


def test_pull_mode_trials_get_a_podmonitor_or_an_annotation_job_with_the_rules_job() -> None:
    thresholds = yaml.safe_load((REPO / "prometheus" / "thresholds.yaml").read_text())
    trial_job = thresholds["selectors"]["trial"].split('"')[1]
    monitor = one(render("kube-prometheus-stack"), "PodMonitor", "-trials")
    endpoint, = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True and endpoint["port"] == "trainwatch"
    assert {"targetLabel": "job", "replacement": trial_job} in endpoint["relabelings"]
    assert monitor["metadata"]["labels"]["release"] == "monitoring"
    docs = render("trial-pull")
    config = yaml.safe_load(one(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs[trial_job]["honor_labels"] is True
    assert jobs[trial_job]["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": ["training", "research"]}}]
    # The chart's Prometheus may list pods in exactly those namespaces, nowhere else.
    assert sorted(r["metadata"]["namespace"] for r in find(docs, "Role")) == \
        ["research", "training"]
    pod = one(docs, "Deployment", "-prometheus")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "tw-trainwatch-prometheus"
    assert pod["automountServiceAccountToken"] is True
    # Off by default: no discovery, no API access.
    default = render("standalone")
    assert not find(default, "Role") and not find(default, "PodMonitor")
    assert one(default, "Deployment", "-prometheus")["spec"]["template"]["spec"][
        "automountServiceAccountToken"] is False


def test_runbook_url_is_one_value_that_every_alert_links_to() -> None:
    wiki = "https://wiki.example/ml/runbooks.md"
    for extra, kind in ((), "ConfigMap"), (("-f", str(CHART / "ci" /
                                                  "kube-prometheus-stack-values.yaml")),
                                           "PrometheusRule"):
        docs = tuple(d for d in yaml.safe_load_all(template(*extra, "--set",
                                                            f"runbookUrl={wiki}")) if d)
        if kind == "ConfigMap":
            files = [yaml.safe_load(t) for t in one(docs, kind, "-rules")["data"].values()]
        else:
            files = [d["spec"] for d in find(docs, kind)]
        links = [r["annotations"]["runbook_url"] for f in files for g in f["groups"]
                 for r in g["rules"] if "alert" in r]
        assert links and all(link.startswith(wiki + "#") for link in links), links
    bad = helm("template", "tw", str(CHART), "--set", "runbookUrl=wiki.example#x")
    assert bad.returncode != 0 and "runbookUrl" in bad.stderr
