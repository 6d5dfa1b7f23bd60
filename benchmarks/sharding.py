"""The chart's Prometheus sharded by trial, as configs a local run can start: each shard's
prometheus.yml exactly as `helm template --set prometheus.shards=N` renders it, with only the
targets and URLs pointed at local services. tests/test_sharding_live.py runs them; a benchmark
can too, so neither drifts from the chart.

    configs = chart_shard_configs(2)
    config = local_shard_config(configs[0], rules=rules_dir, pushgateway_url=pgw.url,
                                remote_write_url=f"{central.url}/api/v1/write")
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from benchmarks.stack import REPO, scrape_config

HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "helm" / "trainwatch"


def chart_shard_configs(shards: int, *values: str) -> list[dict[str, Any]]:
    """Each shard's prometheus.yml as the chart renders it with ``prometheus.shards`` (and
    ``values``, more ``--set`` settings)."""
    if not HELM.exists():
        raise RuntimeError(f"{HELM} is missing: run `make helm-tools`")
    sets = [arg for value in (f"prometheus.shards={shards}", *values) for arg in ("--set", value)]
    done = subprocess.run([str(HELM), "template", "tw", str(CHART), *sets, "--show-only",
                           "templates/prometheus-configmap.yaml"],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm template failed: {done.stderr}")
    maps = {d["metadata"]["name"]: d for d in yaml.safe_load_all(done.stdout) if d}
    return [yaml.safe_load(maps[f"tw-trainwatch-prometheus-shard-{k}"]["data"]["prometheus.yml"])
            for k in range(shards)]


def local_shard_config(chart: dict[str, Any], *, rules: Path, pushgateway_url: str,
                       remote_write_url: str, alertmanager: str | None = None,
                       interval: str = "1s", flush: str = "1s") -> dict[str, Any]:
    """One shard's chart config run locally: its Pushgateway job (honor_labels and the shard's
    relabelling as rendered) scraping ``pushgateway_url`` every ``interval``, the rule files in
    ``rules`` evaluated as often, its remote_write (the keep list and shard label as rendered)
    sent to ``remote_write_url`` at least every ``flush``, its alerts to ``alertmanager``
    (host:port)."""
    jobs = {job["job_name"]: job for job in chart["scrape_configs"]}
    write, = chart["remote_write"]
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules / "*.yml")],
        "scrape_configs": [{**jobs["pushgateway"], **scrape_config(
            "pushgateway", pushgateway_url, interval=interval, honor_labels=True)}],
        "remote_write": [{**write, "url": remote_write_url,
                          "queue_config": {"batch_send_deadline": flush}}],
    }
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config
