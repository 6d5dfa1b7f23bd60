"""`trainwatch profile` against a live Prometheus: a trial on this node is signalled (its own
log shows the request arrived); a rank on another node gets the command printed, never a
signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from benchmarks.stack import (
    REPO,
    Prometheus,
    Service,
    scrape_config,
    start_prometheus,
    start_pushgateway,
    wait_until,
)
from trainwatch.profile import Rank
from trial_instrumentation import names

# A trial without torch work whose profile directory cannot be written: a request shows as one
# warning in its log, and no torch import is needed to see it arrive.
TRIAL = """
import sys, time
import trial_instrumentation as ti
trial = ti.Trial(experiment="prof-cli", trial="local", pushgateway=sys.argv[1],
                 push_interval=0.2).start()
for _ in trial.loader(iter(int, 1)):
    time.sleep(0.005)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Prometheus]]:
    workdir = tmp_path_factory.mktemp("profile-cli")
    with start_pushgateway(workdir) as pgw, start_prometheus(workdir, {"scrape_configs": [
            scrape_config("pushgateway", pgw.url, "1s", honor_labels=True)]}) as prom:
        yield pgw, prom


def cli(prom: Prometheus, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainwatch.cli", "profile", "--prometheus",
                           prom.url, "--experiment", "prof-cli", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=60, check=False)


def test_a_trial_on_this_node_is_signalled(stack: tuple[Service, Prometheus],
                                           tmp_path: Path) -> None:
    pgw, prom = stack
    (tmp_path / "a-file").touch()
    env = {**os.environ, names.ENV_PROFILE_DIR: str(tmp_path / "a-file" / "traces")}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TRIAL), pgw.url], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: prom.query(f'{names.TRIAL_INFO}{{trial="local",pid="{proc.pid}"}}'),
                   timeout=60, what="the local trial in Prometheus")
        done = cli(prom, "--trial", "local")
        assert done.returncode == 0, done.stderr
        assert f"sent SIGUSR2 to pid {proc.pid}" in done.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "profile request (signal SIGUSR2) dropped: cannot write" in err, err


def test_a_rank_on_another_node_gets_the_command_printed_and_no_signal(
        stack: tuple[Service, Prometheus]) -> None:
    pgw, prom = stack
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        registry = CollectorRegistry()
        Gauge(names.TRIAL_INFO, "info", ["nodename", "pid", "world_size"],
              registry=registry).labels("gpu-node-7", str(bystander.pid), "1").set(1)
        push_to_gateway(pgw.url, names.JOB, registry,
                        grouping_key={"experiment": "prof-cli", "trial": "remote", "rank": "0"})
        wait_until(lambda: prom.query(f'{names.TRIAL_INFO}{{trial="remote"}}'), timeout=60,
                   what="the remote trial in Prometheus")
        done = cli(prom, "--trial", "remote")
        assert done.returncode == 1, done.stderr
        assert f"ssh gpu-node-7 kill -USR2 {bystander.pid}" in done.stdout
        assert bystander.poll() is None  # SIGUSR2's default action would have killed it
    finally:
        bystander.kill()
        bystander.wait()


def test_a_pod_gets_kubectl_exec_and_an_unknown_trial_is_exit_2(
        stack: tuple[Service, Prometheus]) -> None:
    rank = Rank("0", "node-a", 42, pod="train-0", namespace="ml")
    assert rank.remote_command(signal.SIGUSR2) == "kubectl exec -n ml train-0 -- kill -USR2 42"
    done = cli(stack[1], "--trial", "never-ran")
    assert done.returncode == 2 and "no running trial" in done.stderr
