"""The pull-mode fleet split the way the chart splits it (``prometheus.shards=N`` with
``trialPull.enabled``), for ``fleet_pull --shards N``: each shard's pull job is the chart's as
rendered by helm (its pod relabelling and its ``hashmod`` keep on the trial's
``trainwatch.io/experiment``/``trainwatch.io/trial`` annotations), with the Kubernetes pod
discovery replaced by a file_sd file whose target groups carry the ``__meta_kubernetes_*``
labels a pod would; and its remote_write to the central Prometheus (the keep list and the
``prometheus_shard`` label as rendered).

    jobs, writes = shard_scrape(3, sd_file, central_url, interval=10.0)
    shard_of("fleet", "t12", 3)  # the shard Prometheus's hashmod puts trial t12 on
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from benchmarks.sharding import chart_shard_configs
from trial_instrumentation import names

ANNOTATION = "__meta_kubernetes_pod_annotation_trainwatch_io_"


def shard_of(experiment: str, trial: str, shards: int) -> int:
    """The shard of a trial: Prometheus's ``hashmod`` of the chart's source value
    ``<experiment>;<trial>`` (the last 8 bytes of its MD5, big-endian, modulo the shards)."""
    digest = hashlib.md5(f"{experiment};{trial}".encode()).digest()
    return int.from_bytes(digest[8:], "big") % shards


def pod_labels(experiment: str, trial: str, pod: str, port: int) -> dict[str, str]:
    """The discovery labels of a trial pod annotated for the chart's pull job (on loopback)."""
    return {f"{ANNOTATION}scrape": "true", f"{ANNOTATION}port": str(port),
            f"{ANNOTATION}experiment": experiment, f"{ANNOTATION}trial": trial,
            "__meta_kubernetes_pod_ip": "127.0.0.1", "__meta_kubernetes_namespace": experiment,
            "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_controller_kind": "Job",
            "__meta_kubernetes_pod_controller_name": trial}


def shard_scrape(shards: int, sd_file: Path, central_url: str,
                 interval: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each shard's pull job (the chart's, discovering from ``sd_file``, scraped every
    ``interval`` seconds) and remote_write (to ``central_url``'s receiver)."""
    jobs, writes = [], []
    for config in chart_shard_configs(shards, "trialPull.enabled=true"):
        job = next(j for j in config["scrape_configs"] if j["job_name"] == names.JOB)
        job.pop("kubernetes_sd_configs")
        jobs.append({**job, "scrape_interval": f"{interval:g}s",
                     "scrape_timeout": f"{interval:g}s",
                     "file_sd_configs": [{"files": [str(sd_file)]}]})
        write, = config["remote_write"]
        writes.append({**write, "url": f"{central_url}/api/v1/write"})
    return jobs, writes
