"""Grafana provisioning files: parse, and point at what exists."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from benchmarks.stack import REPO

PROVISIONING = REPO / "grafana" / "provisioning"
# Where the dashboards folder is mounted in the container (README's docker run).
MOUNTED_DASHBOARDS = "/var/lib/grafana/dashboards/trainwatch"


def load(kind: str) -> list[dict[str, Any]]:
    files = sorted((PROVISIONING / kind).glob("*.yaml"))
    assert files, f"no provisioning files in grafana/provisioning/{kind}"
    docs = [yaml.safe_load(f.read_text()) for f in files]
    assert all(d["apiVersion"] == 1 for d in docs)
    return docs


def test_datasource_is_one_prometheus_with_a_fixed_uid_and_overridable_url() -> None:
    sources = [s for doc in load("datasources") for s in doc["datasources"]]
    assert len(sources) == 1
    (ds,) = sources
    assert ds["type"] == "prometheus" and ds["access"] == "proxy"
    assert ds["uid"] == "trainwatch-prometheus"
    assert ds["url"] == "${PROMETHEUS_URL}"  # Grafana expands env vars in provisioning


def test_dashboard_provider_reads_the_mounted_dashboards_folder() -> None:
    providers = [p for doc in load("dashboards") for p in doc["providers"]]
    assert len(providers) == 1
    (provider,) = providers
    assert provider["type"] == "file"
    assert provider["options"]["path"] == MOUNTED_DASHBOARDS
    # What is mounted there is grafana/dashboards/: it must hold the three dashboards.
    uids = {json.loads(p.read_text())["uid"] for p in (REPO / "grafana" / "dashboards").glob(
        "*.json")}
    assert uids == {"trainwatch-node-gpu", "trainwatch-trial-profile", "trainwatch-fleet",
                    "trainwatch-gpu-hours"}


def datasource_refs(node: Any) -> Iterator[Any]:
    """Every ``datasource`` value anywhere in a dashboard's JSON."""
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from datasource_refs(value)


def test_dashboards_do_not_hard_code_the_provisioned_datasource() -> None:
    (ds,) = [s for doc in load("datasources") for s in doc["datasources"]]
    for path in (REPO / "grafana" / "dashboards").glob("*.json"):
        assert "trainwatch-prometheus" not in path.read_text(), f"{path.name} names the uid"
        board = json.loads(path.read_text())
        # Every reference is the dashboard's own datasource variable, offering the provisioned
        # source's type: no other uid hard-coded (Grafana's default one, another install's).
        [variable] = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
        assert variable["query"] == ds["type"], path.name
        ref = {"type": ds["type"], "uid": f"${{{variable['name']}}}"}
        assert {json.dumps(r, sort_keys=True) for r in datasource_refs(board)} == \
            {json.dumps(ref, sort_keys=True)}, path.name
        # ... and no panel with queries is left to whatever the default datasource is.
        for panel in board["panels"] + [p for row in board["panels"] for p in row.get("panels", [])]:
            if panel.get("targets"):
                assert panel.get("datasource") == ref, (path.name, panel["title"])


def test_links_between_dashboards_open_a_provisioned_one_with_its_variables() -> None:
    boards = {b["uid"]: b for b in (json.loads(p.read_text()) for p in
                                     (REPO / "grafana" / "dashboards").glob("*.json"))}
    links = [(uid, m) for uid, board in boards.items()
             for m in re.finditer(r"/d/([\w-]+)\?([^\"]*)", json.dumps(board))]
    assert links, "the Fleet's table links each row to its Trial profile"
    for source, link in links:
        target = boards.get(link[1])
        assert target is not None, f"{source} links to {link[1]}, which is not provisioned"
        wanted = set(re.findall(r"var-(\w+)=", link[2]))
        offered = {v["name"] for v in target["templating"]["list"]}
        assert wanted and wanted <= offered, (source, link[1], wanted - offered)
