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
from trial_instrumentation import names as ti_names

WORKLOADS = ("DaemonSet", "Deployment", "CronJob")


def workloads(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in WORKLOADS]


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    if workload["kind"] == "CronJob":
        return dict(workload["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(workload["spec"]["template"]["spec"])


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
    # Values the exporter refused at start on every node (issue 11); the schema is generated
    # from the exporter's settings by helm/exporter_schema.py.
    ("exporter.config.web.basic_auth_users.u=plaintext", "exporter.config.web.basic_auth_users.u"),
    ("exporter.config.web.basic_auth_users.u=pbkdf2_sha256$999999999999$s$AAAA",
     "exporter.config.web.basic_auth_users.u"),
    ("exporter.config.web.listen_addres=:1", "listen_addres"),
    ("exporter.config.gpu.nvml_retry_seconds=-5", "exporter.config.gpu.nvml_retry_seconds"),
    ("exporter.config.log.level=loud", "exporter.config.log.level"),
    ("exporter.extraArgs={--bogus}", "exporter.extraArgs.0"),
    ("exporter.securityContext.privileged=true", "exporter.securityContext.privileged"),
    ("pushgateway.securityContext.capabilities.add={NET_ADMIN}",
     "pushgateway.securityContext.capabilities.add"),
    ("grafana.securityContext.allowPrivilegeEscalation=true",
     "grafana.securityContext.allowPrivilegeEscalation"),
    # Values that rendered and then broke the pod or the deployment (issue 25).
    ("exporter.resources.limits.memory=1Ki", "exporter.resources.limits.memory"),
    ("prometheus.resources.limits.memory=1", "prometheus.resources.limits.memory"),
    ("exporter.podSecurityContext.runAsUser=0", "exporter.podSecurityContext.runAsUser"),
    ("gc.securityContext.runAsUser=0,gc.securityContext.runAsNonRoot=true",
     "gc.securityContext.runAsUser"),
    ("pushgateway.image.tag=", "pushgateway.image.tag"),
    ("pushgateway.image.repository=UPPER case!!", "pushgateway.image.repository"),
    ("pushgateway.webConfig.basic_auth_users.u=$apr1$salt$hash",
     "pushgateway.webConfig.basic_auth_users.u"),
    ("gc.maxAge=0s", "gc.maxAge"),
    ("gc.schedule=99 * * * *", "gc.schedule"),
    ("prometheus.scrapeInterval=0s", "prometheus.scrapeInterval"),
    ("prometheus.evaluationInterval=0m", "prometheus.evaluationInterval"),
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


def test_the_exporters_schema_entries_are_generated_from_its_settings() -> None:
    import helm.exporter_schema as generator

    current = (CHART / "values.schema.json").read_text()
    assert generator.rendered(current) == current, "run `make chart-files`"


@pytest.mark.parametrize("setting", [
    "exporter.config.web.basic_auth_users.u=pbkdf2_sha256$600000$salt$yGtEcFEpgO2oVptOX6VUUwspdXC0X/FA9rxaNASFGIs=",
    "exporter.config.web.listen_address=[::1]:10910",
    "exporter.config.gpu.nvml_retry_seconds=0",
    "exporter.resources.limits.memory=64Mi",
    "exporter.resources.limits.memory=100000000",
    "prometheus.resources.limits.memory=1.5Gi",
    "exporter.podSecurityContext.runAsNonRoot=false",
    "pushgateway.image.repository=registry.example.com:5000/mirror/prometheus/pushgateway",
    ("pushgateway.webConfig.basic_auth_users.u="
     "$2y$10$3OeVp7bvhfSSfmKOgpI6.eVV6G9dWnbWnxb6yZqlkgDgbfJyXJ/1W"),
    "gc.maxAge=90m",
    "gc.schedule=*/15 * * * *",
    "gc.schedule=0 3-5 1 jan-mar mon-fri",
    "gc.schedule=@hourly",
    "prometheus.scrapeInterval=1m30s",
    "exporter.extraArgs={--log.level=debug,--no-gpu.pcie-throughput,--log.format,json}",
])
def test_schema_accepts_what_the_exporter_accepts(setting: str) -> None:
    result = helm("template", "tw", str(CHART), "--set", setting)
    assert result.returncode == 0, result.stderr


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
        pod = pod_of(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, workload["metadata"]["name"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert not context.get("privileged")
            if workload["kind"] != "CronJob":
                assert container["livenessProbe"] and container["readinessProbe"]
            # Requests and limits by default (measured: see values.yaml), for CPU and memory.
            resources = container["resources"]
            assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
        # Only Prometheus would need the API, and DNS discovery spares it that too, unless it
        # discovers pull-mode trial pods (trialPull.enabled: a Role limited to listing pods).
        pulls = workload["metadata"]["name"].endswith("-prometheus") and scenario == "trial-pull"
        assert pod.get("automountServiceAccountToken") is pulls


def test_gc_cronjob_runs_trainwatch_gc_against_the_charts_pushgateway() -> None:
    docs = render()
    cronjob = one(docs, "CronJob", "-gc")
    container, = pod_of(cronjob)["containers"]
    service = one(docs, "Service", "-pushgateway")["metadata"]["name"]
    assert container["command"] == ["trainwatch", "gc"]
    assert container["args"] == [
        f"--pushgateway=http://{service}.gpu-monitoring.svc.cluster.local:9091", "--max-age=1h",
        "--ended-after=2m"]
    # Often enough that an ended trial's group is gone within minutes of its final push.
    assert cronjob["spec"]["schedule"] == "*/2 * * * *"
    assert container["image"] == f"ghcr.io/trainwatch/trainwatch:{__version__}"
    assert find(render("hardened"), "CronJob") != []
    assert find(docs_without_pushgateway(), "CronJob") == []


def test_gc_cronjob_follows_its_values_and_trainwatch_gc_takes_them() -> None:
    from trainwatch import gc
    from trainwatch.cli import _parser

    cronjob = one(tuple(d for d in yaml.safe_load_all(template(
        "--set", "gc.maxAge=37m,gc.endedAfter=3m", "--set-string", "gc.schedule=*/5 * * * *"))
        if d), "CronJob", "-gc")
    container, = pod_of(cronjob)["containers"]
    assert cronjob["spec"]["schedule"] == "*/5 * * * *"
    # The real command line parser: 37 minutes and 3, each under its own flag.
    args = _parser().parse_args([*container["command"][1:], *container["args"]])
    assert (args.max_age, args.ended_after) == (37 * 60, 3 * 60)
    assert gc._refused(args) is None


def docs_without_pushgateway() -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(template("--set", "pushgateway.enabled=false")) if d)


def test_pushgateway_keeps_its_groups_across_restarts() -> None:
    pod = pod_of(one(render(), "Deployment", "-pushgateway"))
    container, = pod["containers"]
    assert "--persistence.file=/data/pushgateway.data" in container["args"]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert {"name": "data", "emptyDir": {}} in pod["volumes"]
    hardened = render("hardened")
    claim = one(hardened, "PersistentVolumeClaim", "-pushgateway")
    pod = pod_of(one(hardened, "Deployment", "-pushgateway"))
    assert {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} \
        in pod["volumes"]


def test_pushgateway_basic_auth_and_network_policies() -> None:
    docs = render("hardened")
    pod = pod_of(one(docs, "Deployment", "-pushgateway"))
    container, = pod["containers"]
    assert "--web.config.file=/etc/pushgateway/web-config.yml" in container["args"]
    web = yaml.safe_load(one(docs, "Secret", "-pushgateway-web")["stringData"]["web-config.yml"])
    assert set(web["basic_auth_users"]) == {"trainer"}
    assert "tcpSocket" in container["readinessProbe"]  # every HTTP path asks for a password
    prometheus = yaml.safe_load(one(docs, "ConfigMap", "-prometheus")["data"]["prometheus.yml"])
    job, = [j for j in prometheus["scrape_configs"] if j["job_name"] == "pushgateway"]
    assert job["basic_auth"]["username"] == "trainer"
    # The password Prometheus sends is the file its job names, in its container's mount of a
    # Secret; gc logs in as the same user with that Secret's same key (trainwatch gc's variables).
    prom_pod = pod_of(one(docs, "Deployment", "-prometheus"))
    prom, = prom_pod["containers"]
    folder, key = job["basic_auth"]["password_file"].rsplit("/", 1)
    [mounted] = [m["name"] for m in prom["volumeMounts"] if m["mountPath"] == folder]
    [secret] = [v["secret"]["secretName"] for v in prom_pod["volumes"] if v["name"] == mounted]
    gc, = pod_of(one(docs, "CronJob", "-gc"))["containers"]
    env = {e["name"]: e for e in gc["env"]}
    assert env[ti_names.ENV_USERNAME]["value"] == job["basic_auth"]["username"]
    assert env[ti_names.ENV_PASSWORD]["valueFrom"] == {"secretKeyRef": {"name": secret, "key": key}}
    policies = {p["metadata"]["name"].rsplit("-", 1)[1]: p["spec"]
                for p in find(docs, "NetworkPolicy")}
    assert set(policies) == {"pushgateway", "exporter"}
    peers = policies["pushgateway"]["ingress"][0]["from"]
    components = {p.get("podSelector", {}).get("matchLabels", {}).get(
        "app.kubernetes.io/component") for p in peers}
    assert components == {"gc", "prometheus", None}
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "training"}}} \
        in peers
    exporter_peers = policies["exporter"]["ingress"][0]["from"]
    assert [p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            for p in exporter_peers] == ["prometheus"]
    assert find(render(), "NetworkPolicy") == []  # opt-in


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


def test_names_fit_in_63_characters_and_keep_apart() -> None:
    docs = [d for d in yaml.safe_load_all(template(
        release="a-release-name-that-goes-on-and-on-for-far-too-long-x")) if d]
    names = [d["metadata"]["name"] for d in docs]
    assert names and all(len(n) <= 63 for n in names), names
    # The fullname is cut, not the component: no two resources of a kind share a name (a cut
    # component made the Prometheus, Grafana, Alertmanager... Deployments one name).
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(kinds) == len(set(kinds)), sorted(kinds)
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    assert "a-release-name-that-goes-on-and-on-for-far-too-long-x-t-grafana" in deployments


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
        # The stack's own Grafana, Prometheus and Alertmanager: nothing of the chart's to
        # port-forward to (it deploys none of them in this mode).
        assert "port-forward" not in notes


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
