"""Slurm, live: a real one-node Slurm (tests/slurm_cluster.py) runs two tasks of examples/ddp_gloo.py
under `srun -n2` (CPU torch, gloo, a few steps), with nothing named but the job and the
Pushgateway. Prometheus, scraping the Pushgateway as prometheus/prometheus-slurm.yml does, shows
ranks 0 and 1 of one trial: experiment the job's name, trial its id, world_size 2, slurm_job_id
Slurm's own id for the job. And docs/slurm.md's file_sd line turns this cluster's node list
into a targets file promtool accepts."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.stack import REPO, Service, free_port, promtool, start_prometheus
from exporter.config import DEFAULT_LISTEN_ADDRESS, parse_listen_address
from tests.slurm_cluster import Slurm, SlurmUnavailable, start_slurm

pytest.importorskip("torch")

JOB = "slurm-live"
STEPS = 12
DOC = REPO / "docs" / "slurm.md"
# Where the exporter listens unless told otherwise: where the file_sd line must point.
EXPORTER_PORT = parse_listen_address(DEFAULT_LISTEN_ADDRESS)[1]
CONFIG = REPO / "prometheus" / "prometheus-slurm.yml"
# What the job's environment must not carry in: the test's own names, ranks or rendezvous.
NOT_INHERITED = ("TRAINWATCH_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "SLURM_",
                 "TORCHELASTIC_")


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    try:
        with start_slurm() as cluster:
            yield cluster
    except SlurmUnavailable as why:
        pytest.skip(f"no Slurm here: {why}")


def pushgateway_job(gateway: Service) -> dict[str, object]:
    """prometheus-slurm.yml's Pushgateway job, pointed at the test's Pushgateway."""
    config = yaml.safe_load(CONFIG.read_text())
    [job] = [j for j in config["scrape_configs"] if j.get("honor_labels")]
    return {**job, "scrape_interval": "1s", "static_configs": [{"targets": [gateway.instance]}]}


def test_two_srun_tasks_push_as_ranks_0_and_1_of_one_trial_named_from_the_job(
        slurm: Slurm, pushgateway: Service, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_INHERITED)}
    env.update(TRAINWATCH_PUSHGATEWAY=pushgateway.url, TRAINWATCH_PUSH_INTERVAL="1s",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    with start_prometheus(tmp_path, {"scrape_configs": [pushgateway_job(pushgateway)]}) as prom:
        done = slurm.run(["srun", "-n2", f"--job-name={JOB}", "--time=2", sys.executable,
                          str(REPO / "examples" / "ddp_gloo.py"), "--steps", str(STEPS),
                          "--workers", "0", "--batch-size", "8"], env=env, timeout=90)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{slurm.log()}"
        [job_id] = slurm.job_ids(JOB)
        key = f'experiment="{JOB}", trial="{job_id}"'
        found = prom.wait_for_series(f'count(trainwatch_trial_info{{{key}}}) == 2')
        assert found
        infos = {s["metric"]["rank"]: s["metric"]
                 for s in prom.query(f"trainwatch_trial_info{{{key}}}")}
        assert sorted(infos) == ["0", "1"]
        for info in infos.values():
            assert info["job"] == "trainwatch_trial"
            assert (info["world_size"], info["slurm_job_id"]) == ("2", job_id)
            assert info["slurm_job_user"] == pwd.getpwuid(os.geteuid()).pw_name
            assert info["nodename"] == os.uname().nodename
        # Both ranks trained every step and ended clean; no other trial was pushed.
        steps = prom.wait_for_series(f'trainwatch_trial_steps_total{{{key}}} == {STEPS}')
        assert sorted(s["metric"]["rank"] for s in steps) == ["0", "1"]
        ended = prom.wait_for_series(f'trainwatch_trial_exit{{{key}, reason="clean"}} == 1')
        assert len(ended) == 2
        assert {s["metric"]["trial"] for s in prom.query("trainwatch_trial_info")} == {job_id}


def file_sd_line() -> str:
    """docs/slurm.md's one line that writes the file_sd targets file from Slurm's node list."""
    [line] = [line for line in DOC.read_text().splitlines()
              if "sinfo" in line and "slurm-nodes.yml" in line]
    return line.strip()


def test_the_documented_file_sd_line_lists_this_clusters_node(slurm: Slurm,
                                                               tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path)
    shutil.copytree(REPO / "prometheus" / "rules", tmp_path / "rules")
    line = file_sd_line().replace("/etc/prometheus/", f"{tmp_path}/")
    assert str(tmp_path) in line
    done = slurm.run(["bash", "-c", line])
    assert done.returncode == 0, done.stderr
    targets = tmp_path / "slurm-nodes.yml"
    assert yaml.safe_load(targets.read_text()) == [{"targets": [f"{slurm.node}:{EXPORTER_PORT}"]}]
    assert not list(tmp_path.glob("*.new"))  # renamed over, never left half-written
    promtool("check", "config", tmp_path / CONFIG.name)
    # Where sinfo does not answer (here: there is none), the line fails and the old file stays.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sort", "awk", "mv"):
        (tools / tool).symlink_to(shutil.which(tool) or tool)
    bash = shutil.which("bash") or "/bin/bash"
    broken = subprocess.run([bash, "-c", line], env={"PATH": str(tools)}, capture_output=True,
                            text=True, timeout=30, check=False)
    assert broken.returncode != 0
    assert yaml.safe_load(targets.read_text()) == [{"targets": [f"{slurm.node}:{EXPORTER_PORT}"]}]
