"""Prometheus sharded by trial in the chart (prometheus.shards, kubePrometheusStack.shards):
rendered by the real helm, each shard's config checked by promtool, the custom resources by the
prometheus-operator CRD schemas; what the relabelling does is run by real Prometheus servers in
tests/test_sharding_live.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, promtool
from tests.test_helm import CHART, Doc, find, helm, one, render, template, validate_crds

RULE_NAMES = sorted({rule.get("record") or "" for path in (REPO / "prometheus" / "rules").glob("*.yml")
                     for group in yaml.safe_load(path.read_text())["groups"]
                     for rule in group["rules"]} - {""})


def docs_of(*args: str) -> tuple[Doc, ...]:
    return tuple(d for d in yaml.safe_load_all(template(*args)) if d)


def config(docs: tuple[Doc, ...], suffix: str) -> dict[str, Any]:
    return dict(yaml.safe_load(one(docs, "ConfigMap", suffix)["data"]["prometheus.yml"]))


def without_password(text: str) -> str:
    return re.sub(r"admin-password: \S+", "", text)


def test_one_shard_renders_what_the_chart_always_did() -> None:
    assert without_password(template("--set", "prometheus.shards=1")) == without_password(template())
    docs = render()
    assert [d["metadata"]["name"] for d in find(docs, "Deployment", "-prometheus")] == \
        ["tw-trainwatch-prometheus"]
    assert not [d for d in docs if "-shard-" in d["metadata"]["name"]]
    assert "remote_write" not in config(docs, "-prometheus")
    kps = render("kube-prometheus-stack")
    assert "__tmp" not in yaml.safe_dump_all(find(kps, "ServiceMonitor") + find(kps, "PodMonitor"))


def test_two_shards_and_a_central_one_pass_promtool(tmp_path: Path) -> None:
    docs = render("sharded")
    rules = one(docs, "ConfigMap", "-rules")["data"]
    (tmp_path / "rules").mkdir()
    for name, text in rules.items():
        (tmp_path / "rules" / name).write_text(text)
    for shard in (0, 1):
        path = tmp_path / f"shard-{shard}.yml"
        path.write_text(yaml.safe_dump(config(docs, f"-prometheus-shard-{shard}")))
        result = promtool("check", "config", path)
        assert f"{len(rules)} rule files found" in result.stdout
    (tmp_path / "central.yml").write_text(yaml.safe_dump(config(docs, "-prometheus")))
    promtool("check", "config", tmp_path / "central.yml")


def test_each_shard_keeps_its_share_of_trials_and_writes_the_records_centrally() -> None:
    docs = render("sharded")
    central = "http://tw-trainwatch-prometheus.gpu-monitoring.svc.cluster.local:9090/api/v1/write"
    for shard in (0, 1):
        cfg = config(docs, f"-prometheus-shard-{shard}")
        jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
        hashmod, keep, drop = jobs["pushgateway"]["metric_relabel_configs"]
        assert hashmod == {"source_labels": ["experiment", "trial"], "modulus": 2,
                           "target_label": "__tmp_trainwatch_shard", "action": "hashmod"}
        assert keep == {"source_labels": ["__tmp_trainwatch_shard"], "regex": str(shard),
                        "action": "keep"}
        assert drop["action"] == "labeldrop"
        # exporters: all (the default): every shard scrapes every node, for the joins.
        assert "relabel_configs" not in jobs["trainwatch-exporter"]
        assert cfg["rule_files"] == ["rules/*.yml"] and cfg["alerting"]["alertmanagers"]
        write, = cfg["remote_write"]
        assert write["url"] == central
        assert write["write_relabel_configs"][-1] == {"target_label": "prometheus_shard",
                                                      "replacement": str(shard)}
    # Every record of the rules, ALERTS and the identity series go to the global view; the
    # raw histograms and counters stay on the shard.
    write, = config(docs, "-prometheus-shard-0")["remote_write"]
    keep = re.compile(write["write_relabel_configs"][0]["regex"])
    assert RULE_NAMES and all(keep.fullmatch(name) for name in RULE_NAMES)
    for name in ("ALERTS", "trainwatch_trial_info", "push_time_seconds", "trainwatch_host_info"):
        assert keep.fullmatch(name)
    for name in ("trainwatch_trial_phase_seconds_bucket", "trainwatch_trial_steps_total",
                 "trainwatch_gpu_utilization_ratio", "up"):
        assert not keep.fullmatch(name)
    # Shard 0 alone sends the series without a trial (every shard has the same nodes').
    shard1, = config(docs, "-prometheus-shard-1")["remote_write"]
    assert {"source_labels": ["trial", "__tmp_trainwatch_alert"], "regex": ";",
            "action": "drop"} in shard1["write_relabel_configs"]
    assert len(write["write_relabel_configs"]) == 2


def test_shards_are_deployments_of_their_own_and_the_central_one_receives() -> None:
    docs = render("sharded")
    for shard in (0, 1):
        name = f"tw-trainwatch-prometheus-shard-{shard}"
        pod = one(docs, "Deployment", f"-prometheus-shard-{shard}")["spec"]["template"]
        service = one(docs, "Service", f"-prometheus-shard-{shard}")
        # Each Service selects its own shard's pod only.
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == f"prometheus-shard-{shard}"
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": name}}
        sources = volumes["config"]["projected"]["sources"]
        assert sources[0]["configMap"]["name"] == name and sources[1]["configMap"]["name"] == \
            "tw-trainwatch-rules"
        assert one(docs, "PersistentVolumeClaim", f"-prometheus-shard-{shard}")["spec"][
            "resources"]["requests"]["storage"] == "50Gi"
    central = one(docs, "Deployment", "-prometheus")["spec"]["template"]["spec"]
    container, = central["containers"]
    assert "--web.enable-remote-write-receiver" in container["args"]
    assert "--storage.tsdb.retention.time=90d" in container["args"]
    assert {"name": "config", "configMap": {"name": "tw-trainwatch-prometheus"}} in central["volumes"]
    assert "rule_files" not in config(docs, "-prometheus")
    # Grafana reads the global view; the Pushgateway and exporters accept both shards.
    grafana, = one(docs, "Deployment", "-grafana")["spec"]["template"]["spec"]["containers"]
    assert {"name": "PROMETHEUS_URL", "value": "http://tw-trainwatch-prometheus:9090"} in grafana["env"]
    peers = one(docs, "NetworkPolicy", "-exporter")["spec"]["ingress"][0]["from"]
    assert [p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in peers] == \
        ["prometheus-shard-0", "prometheus-shard-1"]


def test_pull_mode_trials_and_nodes_are_sharded_on_target_labels() -> None:
    docs = docs_of("--set", "prometheus.shards=3,trialPull.enabled=true,"
                   "prometheus.sharding.exporters=byNode")
    cfg = config(docs, "-prometheus-shard-2")
    jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
    relabel = jobs["trainwatch_trial"]["relabel_configs"]
    # The trial's annotations, else its controller, hashed; this shard's share kept.
    assert relabel[-4]["source_labels"] == ["__meta_kubernetes_pod_annotation_trainwatch_io_experiment",
                                            "__meta_kubernetes_pod_annotation_trainwatch_io_trial"]
    assert relabel[-3:-1] == [
        {"source_labels": ["__tmp_trainwatch_trial"], "modulus": 3,
         "target_label": "__tmp_trainwatch_shard", "action": "hashmod"},
        {"source_labels": ["__tmp_trainwatch_shard"], "regex": "2", "action": "keep"}]
    assert jobs["trainwatch-exporter"]["relabel_configs"][0]["source_labels"] == ["__address__"]
    write, = cfg["remote_write"]
    assert len(write["write_relabel_configs"]) == 2  # each shard sends its own nodes' series
    # Every shard lists pods with the one ServiceAccount.
    for shard in range(3):
        pod = one(docs, "Deployment", f"-prometheus-shard-{shard}")["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "tw-trainwatch-prometheus"
    # For each sharded job, the 3 shards hash modulo 3 and keep one residue each: together
    # every node and every trial once, none twice (a shard keeping another's share).
    kept: dict[str, list[str]] = {}
    for shard in range(3):
        jobs = {job["job_name"]: job for job in config(docs, f"-prometheus-shard-{shard}")[
            "scrape_configs"]}
        for job, key in (("trainwatch-exporter", "relabel_configs"),
                         ("pushgateway", "metric_relabel_configs"),
                         ("trainwatch_trial", "relabel_configs")):
            rules = jobs[job][key]
            [hashmod] = [r for r in rules if r.get("action") == "hashmod"
                         and r["target_label"] == "__tmp_trainwatch_shard"]
            [keep] = [r for r in rules if r.get("action") == "keep"
                      and r.get("source_labels") == ["__tmp_trainwatch_shard"]]
            assert hashmod["modulus"] == 3, (shard, job)
            kept.setdefault(job, []).append(keep["regex"])
    assert kept == {job: ["0", "1", "2"] for job in kept} and len(kept) == 3


def test_a_remote_write_url_of_the_users_replaces_the_central_one() -> None:
    url = "https://mimir.example/api/v1/push"
    docs = docs_of("--set", f"prometheus.shards=2,prometheus.sharding.remoteWriteUrl={url},"
                   "grafana.prometheusUrl=https://mimir.example/prometheus,"
                   "prometheus.sharding.remoteWriteConfig.headers.X-Scope-OrgID=ml")
    assert not find(docs, "Deployment", "-prometheus")
    write, = config(docs, "-prometheus-shard-1")["remote_write"]
    assert write["url"] == url and write["headers"] == {"X-Scope-OrgID": "ml"}
    # Grafana reads that store, not the central Prometheus the chart no longer runs.
    grafana, = one(docs, "Deployment", "-grafana")["spec"]["template"]["spec"]["containers"]
    assert {"name": "PROMETHEUS_URL", "value": "https://mimir.example/prometheus"} in grafana["env"]
    missing = helm("template", "tw", str(CHART), "--set",
                   f"prometheus.shards=2,prometheus.sharding.remoteWriteUrl={url}")
    assert missing.returncode != 0 and "grafana.prometheusUrl" in missing.stderr


@pytest.mark.parametrize(("setting", "named"), [
    ("prometheus.shards=0", "prometheus.shards"),
    ("prometheus.shards=two", "prometheus.shards"),
    ("prometheus.shards=1.5", "prometheus.shards"),
    ("prometheus.shards=65", "prometheus.shards"),
    ("prometheus.sharding.exporters=some", "prometheus.sharding.exporters"),
    ("prometheus.sharding.remoteWriteUrl=mimir:9009", "prometheus.sharding.remoteWriteUrl"),
    ("prometheus.sharding.remoteWriteConfig.url=http://x", "prometheus.sharding.remoteWriteConfig"),
    ("prometheus.sharding.central.retention=forever", "prometheus.sharding.central.retention"),
    ("prometheus.sharding.shards=2", "prometheus.sharding"),
    ("kubePrometheusStack.shards=0", "kubePrometheusStack.shards"),
    ("kubePrometheusStack.shardExporters=none", "kubePrometheusStack.shardExporters"),
])
def test_schema_refuses_bad_shard_values(setting: str, named: str) -> None:
    result = helm("template", "tw", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_kube_prometheus_stack_shards_split_trials_not_addresses() -> None:
    docs = render("kube-prometheus-stack-sharded")
    pushgateway, = one(docs, "ServiceMonitor", "-pushgateway")["spec"]["endpoints"]
    # Every shard scrapes the one Pushgateway and keeps the trials the operator's $(SHARD) owns.
    assert pushgateway["relabelings"] == [{"targetLabel": "__tmp_disable_sharding",
                                           "replacement": "true"}]
    hashmod, keep, _ = pushgateway["metricRelabelings"]
    assert hashmod["modulus"] == 3 and hashmod["sourceLabels"] == ["experiment", "trial"]
    assert keep == {"sourceLabels": ["__tmp_trainwatch_shard"], "regex": "$(SHARD)",
                    "action": "keep"}
    exporter, = one(docs, "ServiceMonitor", "-exporter")["spec"]["endpoints"]
    assert exporter["relabelings"] == [{"targetLabel": "__tmp_disable_sharding",
                                        "replacement": "true"}]
    trials, = one(docs, "PodMonitor", "-trials")["spec"]["podMetricsEndpoints"]
    assert [r["targetLabel"] for r in trials["relabelings"]] == ["job", "__tmp_hash", "__tmp_hash"]
    by_node = docs_of("-f", str(CHART / "ci" / "kube-prometheus-stack-sharded-values.yaml"),
                      "--set", "kubePrometheusStack.shardExporters=byNode")
    assert "relabelings" not in one(by_node, "ServiceMonitor", "-exporter")["spec"]["endpoints"][0]
    crs = [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    assert [r["error"] for r in validate_crds(crs)] == [None] * len(crs)


def test_the_readmes_remote_write_for_the_operator_is_the_charts_and_a_valid_prometheus() -> None:
    readme = (REPO / "helm" / "README.md").read_text()
    snippet = readme.split("# kube-prometheus-stack values\n", 1)[1].split("```", 1)[0]
    spec = yaml.safe_load(snippet)["prometheus"]["prometheusSpec"]
    keep, shard, *drop_unsharded = spec["remoteWrite"][0]["writeRelabelConfigs"]
    write, = config(render("sharded"), "-prometheus-shard-1")["remote_write"]
    chart = write["write_relabel_configs"]
    assert keep == {"sourceLabels": ["__name__"], "regex": chart[0]["regex"], "action": "keep"}
    assert shard == {"targetLabel": "prometheus_shard", "replacement": "$(SHARD)"}
    assert [r.get("regex") for r in drop_unsharded] == ["ALERTS", ";;[1-9][0-9]*",
                                                        "__tmp_trainwatch_alert"]
    prometheus = {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
                  "metadata": {"name": "kps"}, "spec": spec}
    assert [r["error"] for r in validate_crds([prometheus])] == [None]


def test_shard_names_stay_apart_when_cut_to_63_characters() -> None:
    docs = tuple(d for d in yaml.safe_load_all(template(
        "--set", "prometheus.shards=12",
        release="a-release-name-that-goes-on-and-on-for-far-too-long-x")) if d)
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"
             and d["metadata"]["labels"]["app.kubernetes.io/component"].startswith("prometheus-shard")]
    assert len(names) == len(set(names)) == 12 and all(len(n) <= 63 for n in names), names
    assert names[11].endswith("-11")


def test_notes_say_where_the_shards_and_the_global_view_are(tmp_path: Path) -> None:
    from tests.test_helm_values import render_notes

    notes = render_notes(tmp_path, "--set", "prometheus.shards=2")
    assert "port-forward svc/tw-trainwatch-prometheus-shard-0 9090" in notes
    assert "The global view" in notes and "port-forward svc/tw-trainwatch-prometheus 9090" in notes
    assert "--prometheus URL, repeated" in notes


def test_the_users_own_relabelling_follows_the_shards() -> None:
    mine = {"regex": "instance", "action": "labeldrop"}
    docs = docs_of("--set", "prometheus.shards=2",
                   "--set", "prometheus.pushgatewayScrapeConfig.metric_relabel_configs[0].regex=instance",
                   "--set", "prometheus.pushgatewayScrapeConfig.metric_relabel_configs[0].action=labeldrop")
    jobs = {j["job_name"]: j for j in config(docs, "-prometheus-shard-0")["scrape_configs"]}
    relabel = jobs["pushgateway"]["metric_relabel_configs"]
    assert relabel[1]["action"] == "keep" and relabel[-1] == mine and len(relabel) == 4
    kps = docs_of("-f", str(CHART / "ci" / "kube-prometheus-stack-sharded-values.yaml"),
                  "--set", "kubePrometheusStack.serviceMonitor.exporterEndpoint.scheme=https",
                  "--set", "kubePrometheusStack.serviceMonitor.exporterEndpoint.relabelings[0].targetLabel=cluster",
                  "--set", "kubePrometheusStack.serviceMonitor.exporterEndpoint.relabelings[0].replacement=a")
    endpoint, = one(kps, "ServiceMonitor", "-exporter")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["relabelings"] == [{"targetLabel": "__tmp_disable_sharding", "replacement": "true"},
                                       {"targetLabel": "cluster", "replacement": "a"}]
