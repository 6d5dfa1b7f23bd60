"""The chart's pull-mode trial job (standalone mode, trialPull.enabled) on a live Prometheus:
its pod-annotation relabelling finds a real pull-mode PyTorch trial (TRAINWATCH_PULL_PORT, no
Pushgateway), keeps the trial's experiment/trial/rank under the job the rules select, skips an
unannotated pod, and the trial alerts (gated on freshness) fire as they do for a pushed trial;
once the trial stops answering (SIGSTOP: its target stays, its scrapes fail), TrainwatchTrialStale
fires for it as for a pushed trial that stopped pushing.

No Kubernetes API here: the job's kubernetes_sd_configs is replaced by static targets that carry
the same __meta_kubernetes_* labels pod discovery would, so the chart's relabel rules run as
they are rendered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, free_port, start_prometheus, wait_until
from tests.live_stack import EXAMPLE, generate_rules
from tests.test_helm import one, render

pytest.importorskip("torch")

TRIAL_JOB = "trainwatch_trial"
STALE_AFTER = 5  # seconds: TrainwatchTrialStale's threshold here (1 s scrapes)
TRIALS: list[subprocess.Popen[bytes]] = []  # the fixture's trial, for the stale test


def pod(name: str, port: int, scrape: str) -> dict[str, Any]:
    """A static target labelled as kubernetes_sd_configs (role: pod) labels a pod."""
    return {"targets": [f"127.0.0.1:{port}"], "labels": {
        "__meta_kubernetes_pod_ip": "127.0.0.1", "__meta_kubernetes_namespace": "training",
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_annotation_trainwatch_io_scrape": scrape,
        "__meta_kubernetes_pod_annotation_trainwatch_io_port": str(port)}}


@pytest.fixture(scope="module")
def pulled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    workdir = tmp_path_factory.mktemp("trial_pull")
    rendered = yaml.safe_load(one(render("trial-pull"), "ConfigMap", "-prometheus")
                              ["data"]["prometheus.yml"])
    job = next(j for j in rendered["scrape_configs"] if j["job_name"] == TRIAL_JOB)
    port = free_port()
    del job["kubernetes_sd_configs"]
    job["static_configs"] = [pod("trial-0", port, "true"), pod("other-0", port, "false")]
    job["scrape_interval"] = "1s"
    rules = workdir / "rules"
    generate_rules.write_rules(rules, for_="3s", rate_window="10s", stale_after=STALE_AFTER)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(rules / "*.yml")], "scrape_configs": [job]}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "TRAINWATCH_PULL_PORT": str(port), "RANK": "0"}
    env.pop("TRAINWATCH_PUSHGATEWAY", None)
    with open(workdir / "trial.log", "wb") as log:
        trial = subprocess.Popen([sys.executable, str(EXAMPLE), "--experiment", "pull",
                                  "--trial", "t", "--steps", "3000", "--loader-delay", "0.05",
                                  "--batch-size", "8", "--workers", "0"], stdout=log,
                                 stderr=subprocess.STDOUT, env=env, cwd=workdir)
    TRIALS[:] = [trial]
    try:
        with start_prometheus(workdir, config) as prom:
            prom.wait_for_series('ALERTS{alertname="TrainwatchDataloaderBound", '
                                 'alertstate="firing", experiment="pull"}', 90)
            assert trial.poll() is None, (workdir / "trial.log").read_text()
            yield prom
    finally:
        trial.send_signal(signal.SIGCONT)  # the stale test stops it
        trial.terminate()
        trial.wait(timeout=20)


def test_annotation_job_scrapes_only_the_annotated_pod_under_the_rules_job(pulled: Any) -> None:
    targets = wait_until(lambda: pulled.targets(), what="targets")
    assert [(t["labels"]["job"], t["labels"]["pod"], t["health"]) for t in targets] == \
        [(TRIAL_JOB, "trial-0", "up")]
    [info] = pulled.query(f'trainwatch_trial_info{{job="{TRIAL_JOB}"}}')
    labels = info["metric"]
    assert (labels["experiment"], labels["trial"], labels["rank"]) == ("pull", "t", "0")
    assert labels["nodename"] == os.uname().nodename


def test_trial_alerts_fire_for_a_pulled_trial(pulled: Any) -> None:
    [alert] = [a for a in pulled.alerts() if a["labels"]["alertname"] ==
               "TrainwatchDataloaderBound" and a["state"] == "firing"]
    assert (alert["labels"]["experiment"], alert["labels"]["trial"]) == ("pull", "t")
    # No Pushgateway: the stale-trial alert has nothing to say about a trial that is scraped.
    assert not [a for a in pulled.alerts() if a["labels"]["alertname"] == "TrainwatchTrialStale"]



def test_stale_fires_for_a_pulled_trial_whose_scrapes_fail(pulled: Any) -> None:
    # Last in this module: it stops the trial. Its target stays, so its scrapes fail (up 0).
    [trial] = TRIALS
    trial.send_signal(signal.SIGSTOP)
    try:
        def stale() -> list[dict[str, Any]]:
            return [a for a in pulled.alerts() if a["labels"]["alertname"] ==
                    "TrainwatchTrialStale" and a["state"] == "firing"]

        [alert] = wait_until(stale, timeout=40, what="TrainwatchTrialStale firing", interval=0.5)
        assert pulled.query(f'up{{job="{TRIAL_JOB}"}} == 0')
    finally:
        trial.send_signal(signal.SIGCONT)
    labels = alert["labels"]
    assert (labels["experiment"], labels["trial"], labels["rank"]) == ("pull", "t", "0")
    assert labels["instance"] == pulled.targets()[0]["labels"]["instance"]
    assert float(alert["value"]) > STALE_AFTER
    # The pulled branch of the description: the target it was scraped from, this threshold.
    description = alert["annotations"]["description"]
    assert f"was last scraped from {labels['instance']} " in description, description
    assert f"(threshold {STALE_AFTER}s) and its target still fails" in description, description
    assert "last pushed" not in description, description
