"""The chart's values: the schema rejects bad ones by name, defaults are secure, toggles and
GPU options render what they say, and the exporter accepts the flags and config the chart
gives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import __version__
from exporter.cli import parse_settings
from exporter.collectors import COLLECTORS
from exporter.config import SECTIONS
from tests.test_helm import CHART, SCENARIOS, find, helm, one, render, template

WORKLOADS = ("DaemonSet", "Deployment")


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOADS]


@pytest.mark.parametrize(("setting", "named"), [
    ("mode=kube-prometheus", "mode"),
    ("exporter.port=ten", "exporter.port"),
    ("exporter.hostNetwork=maybe", "exporter.hostNetwork"),
    ("exporter.collectors.gpus=true", "exporter.collectors"),
    ("exporter.config.webb.x=1", "exporter.config"),
    ("prometheus.retention=forever", "prometheus.retention"),
    ("pushgateway.image.pullPolicy=Sometimes", "pushgateway.image.pullPolicy"),
    ("exportr.enabled=false", "exportr"),
    ("alertmanager.retention=forever", "alertmanager.retention"),
    ("alertmanager.port=0", "alertmanager.port"),
])
def test_schema_rejects_bad_values_naming_the_key(setting: str, named: str) -> None:
    result = helm("template", "tw", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_schema_knows_the_exporters_collectors_and_config_sections() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    exporter = schema["properties"]["exporter"]["properties"]
    assert set(exporter["collectors"]["propertyNames"]["enum"]) == set(COLLECTORS)
    assert set(exporter["config"]["propertyNames"]["enum"]) == set(SECTIONS)


def test_app_version_and_default_image_are_the_exporters() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    container, = one(render(), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(f"/trainwatch-exporter:{__version__}")


@pytest.mark.parametrize("scenario", [None, *SCENARIOS])
def test_every_container_runs_locked_down(scenario: str | None) -> None:
    docs = render(scenario)
    assert workloads(docs)
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, workload["metadata"]["name"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert not context.get("privileged")
            assert container["livenessProbe"] and container["readinessProbe"]
            if scenario is None:
                assert "resources" not in container  # left to the user
        # Only Prometheus would need the API, and DNS discovery spares it that too.
        assert workload["spec"]["template"]["spec"].get("automountServiceAccountToken") is False


def test_exporter_defaults_see_the_node() -> None:
    pod = one(render(), "DaemonSet")["spec"]["template"]["spec"]
    container, = pod["containers"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["hostPID"] is False
    assert "runtimeClassName" not in pod
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    # The Kubernetes node name, not the pod's hostname, so trials join on nodename.
    assert {"name": "TRAINWATCH_NODENAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # The GPU is watched, never requested: a request would take it from the training pods.
    assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {}))


def test_gpu_node_exporter_gets_flags_and_config_it_accepts(tmp_path: Path) -> None:
    docs = render("gpu-node")
    pod = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    container, = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia" and pod["hostPID"] is True
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    config = one(docs, "Secret", "-exporter")["stringData"]["exporter.yml"]
    mount, = [m for m in container["volumeMounts"] if m["name"] == "config"]
    config_path = f"{mount['mountPath']}/exporter.yml"
    assert f"--config={config_path}" in container["args"]
    (tmp_path / "exporter.yml").write_text(config)
    # The real exporter's parser: every flag and key the chart renders must be one it knows.
    args = [a.replace(config_path, str(tmp_path / "exporter.yml")) for a in container["args"]]
    settings = parse_settings(args)
    assert settings.collectors["gpu_process"] is True
    assert settings.gpu_pcie_throughput is False
    assert settings.log_level == "debug"
    assert settings.web_tls_cert_file == "/etc/trainwatch/tls/tls.crt"
    assert settings.web_listen_address == ":10910"
    prometheus = yaml.safe_load(one(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    assert prometheus["scrape_configs"][0]["scheme"] == "https"


def test_modes_deploy_their_own_pieces() -> None:
    standalone = {(d["kind"], d["metadata"]["name"]) for d in render("standalone")}
    assert {("Deployment", "tw-trainwatch-prometheus"), ("Deployment", "tw-trainwatch-grafana"),
            ("Deployment", "tw-trainwatch-alertmanager"), ("Service", "tw-trainwatch-alertmanager"),
            ("Deployment", "tw-trainwatch-pushgateway"), ("DaemonSet", "tw-trainwatch-exporter"),
            ("PersistentVolumeClaim", "tw-trainwatch-prometheus")} <= standalone
    assert not {kind for kind, _ in standalone} & {"ServiceMonitor", "PrometheusRule"}
    kps = render("kube-prometheus-stack")
    assert not find(kps, "Deployment", "-prometheus") and not find(kps, "Deployment", "-grafana")
    # kube-prometheus-stack brings its own Alertmanager, which its Prometheus sends the
    # PrometheusRules' alerts to.
    assert not [d for d in kps if d["metadata"]["name"].endswith("-alertmanager")]
    labels = one(kps, "ConfigMap", "-dashboards")["metadata"]
    assert labels["labels"]["grafana_dashboard"] == "1"
    assert labels["annotations"] == {"grafana_folder": "trainwatch"}
    assert "grafana_dashboard" not in one(render("standalone"), "ConfigMap", "-dashboards")["metadata"]["labels"]
    minimal = {d["kind"] for d in render("minimal")}
    assert minimal == {"DaemonSet", "Service", "ServiceAccount", "ServiceMonitor"}


def test_every_piece_can_be_switched_off() -> None:
    off = ["exporter.enabled=false", "pushgateway.enabled=false", "prometheus.enabled=false",
           "alertmanager.enabled=false", "grafana.enabled=false"]
    assert list(yaml.safe_load_all(template("--set", ",".join(off)))) == []
    kps_off = ["mode=kube-prometheus-stack", "exporter.enabled=false", "pushgateway.enabled=false",
               "kubePrometheusStack.prometheusRule.enabled=false",
               "kubePrometheusStack.dashboards.enabled=false"]
    assert list(yaml.safe_load_all(template("--set", ",".join(kps_off)))) == []


def test_names_fit_in_63_characters() -> None:
    docs = yaml.safe_load_all(template(release="a-release-name-that-goes-on-and-on-for-far-too-long-x"))
    names = [d["metadata"]["name"] for d in docs if d]
    assert names and all(len(n) <= 63 for n in names), names


@pytest.mark.parametrize("mode", ["standalone", "kube-prometheus-stack"])
def test_notes_render(mode: str, tmp_path: Path) -> None:
    notes = render_notes(tmp_path, "--set", f"mode={mode}")
    assert "tw-trainwatch-pushgateway" in notes
    if mode == "standalone":
        assert "port-forward svc/tw-trainwatch-grafana 3000" in notes
        assert "port-forward svc/tw-trainwatch-alertmanager 9093" in notes
        assert "set alertmanager.config with your receivers" in notes
    else:
        assert '{"release":"kube-prometheus-stack"}' in notes


def test_notes_warn_about_gpu_less_nodes_only_without_a_node_selector(tmp_path: Path) -> None:
    warning = "raises TrainwatchCollectorFailing"
    assert warning in render_notes(tmp_path)
    gpu_only = render_notes(tmp_path, "--set-string",
                            "exporter.nodeSelector.nvidia\\.com/gpu\\.present=true")
    assert warning not in gpu_only and "nvidia.com/gpu.present" in gpu_only


def render_notes(tmp_path: Path, *flags: str) -> str:
    # helm template skips NOTES.txt: render it through a copy of the chart as a ConfigMap.
    import shutil

    chart = tmp_path / "trainwatch"
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((chart / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "notes-probe.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}}\n')
    result = helm("template", "tw", str(chart), *flags,
                  "--show-only", "templates/notes-probe.yaml")
    assert result.returncode == 0, result.stderr
    return str(yaml.safe_load(result.stdout)["data"]["notes"])
