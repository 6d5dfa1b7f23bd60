"""What the rendered chart wires together, for the defaults and every ci/*-values.yaml (issue 36):
each object's kind and name; its labels and selectors; each workload's security context and
containers with their ports, environment variable names, mounts, probes' ports and security
contexts; each Service's ports and selector; each monitor's selector and endpoints; each
NetworkPolicy; each ConfigMap's and Secret's keys.
The expectations are tests/helm_wiring.yaml, a reviewed statement of the chart's wiring: an
object that must be there and is not, or one that must not be and is (a negated `if`), a port
moved, a selector label dropped, an env var lost, all show as a difference.

Beside it, the wiring is checked for what it must hold whatever the values: every Service
selects the pods of one workload of its component, every Service's targetPort is a port its
pods declare, every workload's selector is a subset of its pod labels, and every monitor
selects a Service or pod the chart renders.

After an intended change to the chart: `python -m tests.test_helm_wiring` rewrites the YAML;
review its diff as the statement of what changed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_helm import SCENARIOS, render

EXPECTED = Path(__file__).with_name("helm_wiring.yaml")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "CronJob")
# Labels that change with every release of the chart (its version), not its wiring.
VOLATILE = ("helm.sh/chart", "app.kubernetes.io/version")


def _labels(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if k not in VOLATILE}


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]


def _probe_port(probe: dict[str, Any] | None) -> Any:
    if not probe:
        return None
    for kind in ("httpGet", "tcpSocket", "grpc"):
        if kind in probe:
            return f"{kind} {probe[kind].get('port')} {probe[kind].get('path', '')}".strip()
    return "exec"


def _container(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "ports": sorted(f"{p.get('name', '')}:{p['containerPort']}/{p.get('protocol', 'TCP')}"
                        for p in c.get("ports", [])),
        "env": sorted(e["name"] for e in c.get("env", [])),
        "args": c.get("args", []),
        "mounts": sorted(f"{m['name']}:{m['mountPath']}" + (f":{m['subPath']}" if "subPath" in m else "")
                         for m in c.get("volumeMounts", [])),
        "probes": {k: _probe_port(c.get(k)) for k in ("livenessProbe", "readinessProbe",
                                                       "startupProbe") if c.get(k)},
        "securityContext": c.get("securityContext"),
    }


def wiring(doc: dict[str, Any]) -> dict[str, Any]:
    kind, out = doc["kind"], {"labels": _labels(doc["metadata"].get("labels"))}
    spec = doc.get("spec", {})
    if kind in WORKLOADS:
        pod = _pod(doc)
        if kind != "CronJob":
            out["selector"] = spec["selector"].get("matchLabels")
        out["pod_labels"] = _labels(pod["metadata"].get("labels"))
        out["containers"] = {c["name"]: _container(c) for c in
                             pod["spec"].get("initContainers", []) + pod["spec"]["containers"]}
        out["volumes"] = sorted(v["name"] for v in pod["spec"].get("volumes", []))
        out["serviceAccount"] = pod["spec"].get("serviceAccountName")
        out["hostNetwork"] = pod["spec"].get("hostNetwork", False)
        # the user and group the pod runs and owns its volumes as (the image's, 65534)
        out["securityContext"] = pod["spec"].get("securityContext")
    elif kind == "Service":
        out["ports"] = sorted(f"{p.get('name', '')}:{p['port']}->{p.get('targetPort', p['port'])}"
                              for p in spec.get("ports", []))
        out["selector"] = spec.get("selector")
        out["clusterIP"] = spec.get("clusterIP")
    elif kind in ("ServiceMonitor", "PodMonitor"):
        out["selector"] = spec.get("selector")
        out["namespaceSelector"] = spec.get("namespaceSelector")
        out["endpoints"] = [{k: e.get(k) for k in ("port", "path", "interval", "scheme",
                                                    "honorLabels") if k in e}
                            for e in spec.get("endpoints", spec.get("podMetricsEndpoints", []))]
        out["jobLabel"] = spec.get("jobLabel")
    elif kind == "NetworkPolicy":
        out["spec"] = spec
    elif kind in ("ConfigMap", "Secret"):
        out["keys"] = sorted({**doc.get("data", {}), **doc.get("stringData", {})})
    elif kind in ("Role", "ClusterRole"):
        out["rules"] = doc.get("rules")
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        out["roleRef"] = doc.get("roleRef")
        out["subjects"] = doc.get("subjects")
    elif kind == "PersistentVolumeClaim":
        out["spec"] = spec
    return out


def described() -> dict[str, Any]:
    return {scenario or "defaults": {f"{d['kind']}/{d['metadata']['name']}": wiring(d)
                                     for d in render(scenario)}
            for scenario in [None, *SCENARIOS]}


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return yaml.safe_load(EXPECTED.read_text())


@pytest.mark.parametrize("scenario", ["defaults", *SCENARIOS])
def test_the_rendered_chart_wires_what_it_must_and_nothing_else(
        scenario: str, expected: dict[str, Any]) -> None:
    want = expected[scenario]
    got = {f"{d['kind']}/{d['metadata']['name']}": wiring(d)
           for d in render(None if scenario == "defaults" else scenario)}
    assert sorted(got) == sorted(want), "objects added or missing"
    for name, wired in want.items():
        for key, value in wired.items():
            assert got[name].get(key) == value, (name, key)
        assert sorted(got[name]) == sorted(wired), name


@pytest.mark.parametrize("scenario", [None, *SCENARIOS])
def test_every_service_and_monitor_reaches_pods_the_chart_renders(scenario: str | None) -> None:
    docs = render(scenario)
    pods = [(d, _pod(d)) for d in docs if d["kind"] in WORKLOADS]
    for doc, pod in pods:
        if doc["kind"] != "CronJob":
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= pod["metadata"]["labels"].items(), doc["metadata"]["name"]
            assert "app.kubernetes.io/component" in selector, doc["metadata"]["name"]
        # Each probe asks a port its container declares (a probe on another or a misspelt
        # name never succeeds: the pod is never ready, or is restarted for ever).
        for c in pod["spec"]["containers"]:
            ports = {p.get("name") for p in c.get("ports", [])} | \
                {p["containerPort"] for p in c.get("ports", [])}
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                action = next((c[kind][a] for a in ("httpGet", "tcpSocket", "grpc")
                               if a in c.get(kind, {})), None)
                if action is not None:
                    assert action["port"] in ports, (doc["metadata"]["name"], kind, action, ports)
    for svc in (d for d in docs if d["kind"] == "Service"):
        selected = [(d, p) for d, p in pods if d["kind"] != "CronJob"
                    and svc["spec"]["selector"].items() <= p["metadata"]["labels"].items()]
        assert len(selected) >= 1, svc["metadata"]["name"]
        # one component's pods only
        assert len({d["metadata"]["labels"]["app.kubernetes.io/component"]
                    for d, _ in selected}) == 1, svc["metadata"]["name"]
        declared = {(p.get("name"), p["containerPort"]) for _, pod in selected
                    for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert any(target in (name, number) for name, number in declared), \
                (svc["metadata"]["name"], port, declared)
    services = [d for d in docs if d["kind"] == "Service"]
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        labels = monitor["spec"]["selector"]["matchLabels"]
        targets = [s for s in services if labels.items() <= s["metadata"]["labels"].items()]
        assert targets, monitor["metadata"]["name"]
        ports = {p.get("name") for s in targets for p in s["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports, (monitor["metadata"]["name"], endpoint)


@pytest.mark.parametrize("scenario", [None, *SCENARIOS])
def test_every_network_policy_guards_one_workload_and_admits_the_charts_prometheus(
        scenario: str | None) -> None:
    docs = render(scenario)
    pods = [(d, _pod(d)) for d in docs if d["kind"] in WORKLOADS]

    def selected(labels: dict[str, str]) -> list[dict[str, Any]]:
        return [d for d, p in pods if labels.items() <= p["metadata"]["labels"].items()]

    # Each Prometheus's scrape config (its ConfigMap of its own name), as text.
    configs = {d["metadata"]["name"]: d["data"]["prometheus.yml"] for d in docs
               if d["kind"] == "ConfigMap" and "prometheus.yml" in d.get("data", {})}
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        name = policy["metadata"]["name"]
        guarded = selected(policy["spec"]["podSelector"]["matchLabels"])
        assert len(guarded) == 1, (name, [d["metadata"]["name"] for d in guarded])
        declared = {p["containerPort"] for c in _pod(guarded[0])["spec"]["containers"]
                    for p in c.get("ports", [])}
        admitted: set[str] = set()
        for rule in policy["spec"]["ingress"]:
            # A policy's port is the pod's (not a Service's): one the guarded pod listens on.
            assert {p["port"] for p in rule["ports"]} <= declared, (name, rule["ports"], declared)
            for peer in rule["from"]:
                labels = peer.get("podSelector", {}).get("matchLabels", {})
                if "namespaceSelector" in peer or "app.kubernetes.io/instance" not in labels:
                    continue  # a peer of the values' (the trials' namespace, another stack)
                peers = selected(labels)
                assert peers, (name, "admits none of the chart's pods", labels)
                admitted |= {d["metadata"]["name"] for d in peers}
        # Every Prometheus of the chart that scrapes the guarded one (its Service's name) may.
        scrapers = {d["metadata"]["name"] for d, _ in pods
                    if f"{guarded[0]['metadata']['name']}." in configs.get(d["metadata"]["name"], "")}
        assert scrapers <= admitted, (name, sorted(scrapers - admitted))
        assert scrapers or not configs, (name, "scraped by none of the chart's Prometheus")


if __name__ == "__main__":
    EXPECTED.write_text(
        "# What the rendered chart wires together, per scenario (tests/test_helm_wiring.py).\n"
        "# Rewritten by `python -m tests.test_helm_wiring` after an intended change: review the\n"
        "# diff.\n" + yaml.safe_dump(described(), sort_keys=True, width=100))
    sys.exit(0)
