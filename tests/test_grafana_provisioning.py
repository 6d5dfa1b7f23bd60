"""Grafana provisioning files: parse, and point at what exists."""

from __future__ import annotations

import json
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


def test_dashboards_do_not_hard_code_the_provisioned_datasource() -> None:
    for path in (REPO / "grafana" / "dashboards").glob("*.json"):
        assert "trainwatch-prometheus" not in path.read_text(), f"{path.name} names the uid"
