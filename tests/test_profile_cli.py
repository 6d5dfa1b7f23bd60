"""`trainwatch profile` against a live Prometheus: a trial on this node is signalled (its own
log shows the request arrived); a rank on another node gets the command printed, never a
signal."""

from __future__ import annotations

import gzip
import json
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
        # The trial's answer, not only "sent": it dropped the request (exit 1), and says why.
        assert done.returncode == 1, done.stderr
        assert f"sent SIGUSR2 to pid {proc.pid}" in done.stdout
        assert "rank 0: profile request (signal SIGUSR2) dropped: cannot write" in done.stdout
        assert "no answer" not in done.stdout
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


def test_the_cli_reports_started_written_and_refused_and_the_trace_appears_whole(
        stack: tuple[Service, Prometheus], tmp_path: Path) -> None:
    """A torch loop (tests/test_trial_profiling.py's): a capture of many steps is answered
    'profiling steps ...' then 'written'; a request while it runs 'refused' (exit 1); the trace
    never shows under its own name empty; kineto's USDT/STAGE lines stay out of its stderr."""
    pytest.importorskip("torch")
    from tests.test_trial_profiling import LOOP
    from trial_instrumentation import profile_ack

    pgw, prom = stack
    stop, traces = tmp_path / "stop", tmp_path / "traces"
    env = {**os.environ, names.ENV_PROFILE_DIR: str(traces), names.ENV_PROFILE_STEPS: "100"}
    env.pop("KINETO_LOG_LEVEL", None)
    # 50 ms steps: a capture of 100 takes over 5 s, so the second request finds it running.
    slow = textwrap.dedent(LOOP).replace("time.sleep(0.002)", "time.sleep(0.05)")
    proc = subprocess.Popen([sys.executable, "-c", slow, pgw.url, str(stop)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def ask(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trainwatch.cli", "profile", "--prometheus",
                               prom.url, "--experiment", "prof", "--trial", "loop", *args],
                              cwd=REPO, text=True, capture_output=True, timeout=120, check=False)

    try:
        wait_until(lambda: prom.query(f'{names.TRIAL_INFO}{{trial="loop",pid="{proc.pid}"}}'),
                   timeout=120, what="the torch loop in Prometheus")
        answer_file = profile_ack.by_pid(proc.pid)
        proc.send_signal(signal.SIGUSR2)
        started = wait_until(lambda: profile_ack.read(answer_file, 0), timeout=60,
                             what="the trial's answer")
        assert started["state"] == profile_ack.STARTED, started
        final = Path(started["path"])
        second = ask("--wait", "30")  # while it records: refused, exit 1
        assert second.returncode == 1, second.stdout
        assert "refused: a capture of steps" in second.stdout and "is running" in second.stdout

        def whole_or_absent() -> bool:
            if final.exists():
                assert final.stat().st_size > 0  # never an empty file under its own name
            answer = profile_ack.read(answer_file, 0)
            return answer is not None and answer["state"] == profile_ack.WRITTEN
        wait_until(whole_or_absent, timeout=120, what="the capture written")
        third = ask("--wait", "60")  # the CLI's own request: started, then written
        assert third.returncode == 0, third.stdout + third.stderr
        assert "rank 0: profiling steps " in third.stdout
        assert "(asked by signal SIGUSR2)" in third.stdout and "written to" in third.stdout
        assert "still recording" not in third.stdout and "no answer" not in third.stdout
        with gzip.open(final, "rt") as file:
            assert json.load(file)["traceEvents"]
        assert not [p for p in final.parent.iterdir() if p.name.endswith(".part.gz")]
        stop.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "profiling steps" in err  # the trial's own log still says it
    assert "USDT" not in err and "profiler_start" not in err and "STAGE:" not in err
