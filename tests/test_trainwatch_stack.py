"""`trainwatch stack up | status | down` with the real binaries, through the real CLI.

One stack is started for the module (free loopback ports, a temp state directory); the tests
share it in file order, the last one takes it down. Bad-input cases use state directories of
their own and must neither start nor signal anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from benchmarks.stack import REPO, free_port, http_get, require_binary, wait_until
from trainwatch import procs
from trainwatch.lookup import prometheus_url
from trainwatch.stack.services import grafana_provisioning
from trainwatch.stack.settings import SERVICES
from trial_instrumentation import names

CORE = ("exporter", "prometheus", "pushgateway", "alertmanager", "webhook")
# Every process `up` starts here (no Grafana installed): the services and `trainwatch gc`.
STARTED = (*CORE, "gc")


def trainwatch(*args: str, state: Path | None = None, path: str | None = None,
               extra_env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real `trainwatch` command in a child interpreter, as a user runs it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRAINWATCH_STATE_DIR", "TRAINWATCH_PROMETHEUS")}
    env["PYTHONPATH"] = str(REPO)
    if state is not None:
        env["TRAINWATCH_STATE_DIR"] = str(state)
    if path is not None:
        env["PATH"] = path
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-m", "trainwatch.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO, check=False)


def one_clear_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exit 2 and one line on stderr, no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def marked(state: Path) -> list[int]:
    return [r.pid for r in procs.marked(str(state.absolute()))]


def pid_of(state: Path, service: str) -> int:
    return int(json.loads((state / "run" / f"{service}.pid").read_text())["pid"])


@dataclass
class Stack:
    state: Path
    ports: dict[str, int]
    up: subprocess.CompletedProcess[str]

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def pids(self) -> dict[str, int]:
        return {s: pid_of(self.state, s) for s in CORE}

    def api(self, path: str) -> dict:
        status, body = http_get(f"{self.url('prometheus')}/api/v1/{path}")
        assert status == 200, body
        return json.loads(body)["data"]


def free_ports(n: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def port_flags(ports: dict[str, int]) -> list[str]:
    return [f"--{name}-port={port}" for name, port in ports.items()]


DELIVERED = {"alertname": "TrainwatchStackDelivery", "severity": "warning",
             "experiment": "stack-test", "trial": "t1"}


def post_alert(alertmanager: str, labels: dict[str, str], started: datetime) -> None:
    body = json.dumps([{"labels": labels, "annotations": {"summary": "delivered"},
                        "startsAt": started.isoformat()}]).encode()
    request = urllib.request.Request(alertmanager + "/api/v2/alerts", data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for binary in ("prometheus", "prometheus-pushgateway", "prometheus-alertmanager"):
        require_binary(binary)
    state = tmp_path_factory.mktemp("stack") / "state"
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    up = trainwatch("stack", "up", "--scrape-interval=1s", *port_flags(ports), state=state)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield Stack(state, ports, up)
    finally:
        trainwatch("stack", "down", state=state)
        for pid in marked(state):  # only if `down` itself failed: leave nothing behind
            os.kill(pid, signal.SIGKILL)


def test_up_starts_every_service_and_prints_the_urls_and_the_export_line(stack: Stack) -> None:
    for service, path in [("exporter", "/healthz"), ("prometheus", "/-/ready"),
                          ("pushgateway", "/-/ready"), ("alertmanager", "/-/ready")]:
        assert http_get(stack.url(service) + path)[0] == 200, service
        assert stack.url(service) in stack.up.stdout
    assert f"export TRAINWATCH_PUSHGATEWAY={stack.url('pushgateway')}\n" in stack.up.stdout
    # Run with $TRAINWATCH_STATE_DIR set: the CLI finds it, so no line to point it there.
    assert "export TRAINWATCH_STATE_DIR" not in stack.up.stdout
    assert "grafana: not started" in stack.up.stdout  # none installed here; it says how to get one
    # Data and logs under the state directory, the Pushgateway persisting there.
    for service in CORE:
        assert (stack.state / "logs" / f"{service}.log").is_file()
    pgw_argv = json.loads((stack.state / "run" / "pushgateway.pid").read_text())["argv"]
    assert f"--persistence.file={stack.state / 'pushgateway' / 'metrics.store'}" in pgw_argv


def test_prometheus_scrapes_the_exporter_and_the_pushgateway(stack: Stack) -> None:
    targets = stack.api("targets?state=active")["activeTargets"]
    by_job = {t["labels"]["job"]: t for t in targets}
    assert by_job["trainwatch-exporter"]["scrapeUrl"] == stack.url("exporter") + "/metrics"
    assert by_job["pushgateway"]["scrapeUrl"] == stack.url("pushgateway") + "/metrics"
    assert {t["health"] for t in targets} == {"up"}
    # The project's rules are loaded: the committed files but for their runbook links, which
    # open the checkout's runbook, served by the stack's webhook process.
    groups = stack.api("rules")["groups"]
    rendered = stack.state / "prometheus" / "rules"
    assert {g["file"] for g in groups} == {str(p) for p in rendered.glob("*.yml")}
    committed = "https://github.com/trainwatch/trainwatch/blob/main/docs/runbooks.md#"
    local = stack.url("webhook") + "/runbooks#"
    def body(text: str) -> list[str]:  # the generator's header notes aside
        return [line for line in text.splitlines() if not line.startswith("#")]

    for path in (REPO / "prometheus/rules").glob("*.yml"):
        assert body((rendered / path.name).read_text().replace(local, committed)) == \
            body(path.read_text()), path.name
    links = {r["annotations"]["runbook_url"] for g in groups for r in g["rules"]
             if r["type"] == "alerting"}
    assert links and all(link.startswith(local) for link in links)
    status, page = http_get(stack.url("webhook") + "/runbooks")
    assert status == 200
    for link in links:
        assert f' id="{link.split("#")[1]}"'.encode() in page, link


def test_prometheus_sends_alerts_to_the_stacks_alertmanager(stack: Stack) -> None:
    managers = stack.api("alertmanagers")["activeAlertmanagers"]
    assert [m["url"] for m in managers] == [stack.url("alertmanager") + "/api/v2/alerts"]
    # Its alerts' "Graph" links (generatorURL) point at the address `up` printed.
    assert stack.api("status/flags")["web.external-url"] == stack.url("prometheus")
    status, metrics = http_get(stack.url("prometheus") + "/metrics")
    assert status == 200 and b"\nprometheus_notifications_alertmanagers_discovered 1\n" in metrics
    # That an alert really travels there is the next test's "a process that died".


def test_status_reports_each_process_its_targets_and_alertmanager(stack: Stack) -> None:
    done = trainwatch("stack", "status", state=stack.state)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for service, pid in stack.pids().items():
        line = next(x for x in lines if x.startswith(service + " "))
        assert stack.url(service) in line and f"pid {pid} " in line
        no_gpu = " alive (no GPU: no NVML on this machine, host metrics only)"
        assert line.endswith((" alive", no_gpu)), line
    assert any(x.startswith("scrape trainwatch-exporter") and x.endswith(" up") for x in lines)
    assert any(x.startswith("scrape pushgateway") and x.endswith(" up") for x in lines)
    assert f"alertmanager {stack.url('alertmanager')}: reached" in done.stdout


def test_no_nvml_is_shown_and_never_alerted(stack: Stack) -> None:
    _, metrics = http_get(stack.url("exporter") + "/metrics")
    if b"\ntrainwatch_gpu_nvml_absent 1" not in metrics:
        pytest.skip("this machine has NVML")
    done = trainwatch("stack", "status", state=stack.state)
    assert "alive (no GPU: no NVML on this machine, host metrics only)" in done.stdout
    # Once Prometheus has evaluated the rule after a scrape of that state: not even pending.
    query = urllib.parse.quote('trainwatch_scrape_collector_success{collector="gpu"} == 0')
    [sample] = wait_until(lambda: stack.api(f"query?query={query}")["result"],
                          what="the gpu collector's 0 in Prometheus")
    scraped = float(sample["value"][0])

    def evaluated() -> bool:
        [rule] = [r for g in stack.api("rules")["groups"] for r in g["rules"]
                  if r["name"] == "TrainwatchCollectorFailing"]
        when = datetime.fromisoformat(rule["lastEvaluation"])
        return when.timestamp() > scraped + 1

    wait_until(evaluated, timeout=30, what="an evaluation after that scrape")
    assert [a for a in stack.api("alerts")["alerts"]
            if a["labels"]["alertname"] == "TrainwatchCollectorFailing"] == []


def test_up_twice_starts_nothing_new(stack: Stack) -> None:
    before, processes = stack.pids(), sorted(marked(stack.state))
    again = trainwatch("stack", "up", "--scrape-interval=1s", state=stack.state)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already running") == len(STARTED)
    assert stack.pids() == before
    assert sorted(marked(stack.state)) == processes


RELOADED = {"alertmanager": "alertmanager_config_last_reload_success_timestamp_seconds",
            "prometheus": "prometheus_config_last_reload_success_timestamp_seconds"}


def metric(url: str, name: str) -> float:
    """One unlabelled sample of a service's own /metrics."""
    status, body = http_get(url + "/metrics")
    assert status == 200, body
    values = [float(line.split()[1]) for line in body.decode().splitlines()
              if line.split(" ", 1)[0] == name]
    assert len(values) == 1, f"{name} in {url}/metrics: {values}"
    return values[0]


def last_reloads(stack: Stack) -> dict[str, float]:
    """When Alertmanager and Prometheus last (re)loaded their configuration."""
    return {service: metric(stack.url(service), name) for service, name in RELOADED.items()}


def test_up_again_with_the_same_settings_reloads_nothing(stack: Stack) -> None:
    # A reload restarts Alertmanager's group_wait for every pending notification: an `up` run
    # to see the URLs again must not delay the notifications of alerts that are firing.
    before, pids = last_reloads(stack), stack.pids()
    again = trainwatch("stack", "up", "--scrape-interval=1s", state=stack.state)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reloaded" not in again.stdout and "restarting" not in again.stdout
    assert last_reloads(stack) == before
    assert stack.pids() == pids


def push(pushgateway: str, trial: str, text: str) -> None:
    group = f"/metrics/job/trainwatch_trial/experiment/gc/trial/{trial}/rank/0"
    request = urllib.request.Request(pushgateway + group, data=text.encode(), method="PUT")
    urllib.request.urlopen(request, timeout=5).close()


def pushed_trials(pushgateway: str) -> set[str]:
    _, body = http_get(pushgateway + "/api/v1/metrics")
    return {g["labels"].get("trial", "") for g in json.loads(body)["data"]}


def test_the_stack_runs_gc_which_retires_an_ended_group_and_never_a_live_one(
        stack: Stack) -> None:
    up = trainwatch("stack", "up", "--scrape-interval=1s", "--gc-every=1s",
                    "--gc-ended-after=1s", state=stack.state)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "`trainwatch gc` every 1s" in up.stdout
    pushgateway = stack.url("pushgateway")
    push(pushgateway, "ended", f'{names.EXIT}{{reason="clean"}} 1\n')
    push(pushgateway, "live", f"{names.STEPS}_total 5\n")
    wait_until(lambda: "ended" not in pushed_trials(pushgateway), timeout=30,
               what="gc to delete the ended group")
    assert "live" in pushed_trials(pushgateway)  # silent for seconds, not for --max-age
    log = (stack.state / "logs" / "gc.log").read_text()
    assert "deleted experiment=gc,rank=0,trial=ended (ended" in log
    status = trainwatch("stack", "status", state=stack.state)
    assert status.returncode == 0, status.stdout + status.stderr
    [line] = [x for x in status.stdout.splitlines() if x.startswith("gc ")]
    assert f"pid {pid_of(stack.state, 'gc')} " in line and "alive: last pass " in line
    # Bad gc settings are refused before anything starts or restarts.
    bad = one_clear_line(trainwatch("stack", "up", "--gc-every=soon", state=stack.state))
    assert "--gc-every: not a duration: 'soon'" in bad


def test_diagnose_and_trials_find_the_running_stacks_prometheus(stack: Stack) -> None:
    env = {"TRAINWATCH_STATE_DIR": str(stack.state)}
    assert prometheus_url(None, env) == stack.url("prometheus")
    assert prometheus_url(None, {**env, "TRAINWATCH_PROMETHEUS": "http://p:9"}) == "http://p:9"
    assert prometheus_url("http://q:9", env) == "http://q:9"
    done = trainwatch("trials", state=stack.state)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("EXPERIMENT")
    # Nothing running there: one line naming all three ways to give a Prometheus.
    line = one_clear_line(trainwatch("trials", state=stack.state / "nothing-here"))
    assert "--prometheus" in line and "TRAINWATCH_PROMETHEUS" in line and "stack up" in line


@pytest.mark.parametrize("args", [
    ("stack", "status"), ("stack", "notifications"), ("trials",), ("gc", "--dry-run"),
    ("stack", "up", "--scrape-interval=1s"), ("--help",)])
def test_every_command_ends_quietly_on_a_closed_pipe(stack: Stack, args: tuple[str, ...]) -> None:
    # As `trainwatch ... | head` once head has exited: every write to stdout fails.
    read, write = os.pipe()
    os.close(read)
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO), "TRAINWATCH_STATE_DIR": str(stack.state)}
        done = subprocess.run([sys.executable, "-m", "trainwatch.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=env, cwd=REPO,
                              check=False)
    finally:
        os.close(write)
    for noise in ("Traceback", "BrokenPipe", "Broken pipe", "Exception ignored"):
        assert noise not in done.stderr, done.stderr
    assert done.returncode in (0, 141), done


def test_up_with_short_windows_reloads_rendered_rules_then_goes_back(stack: Stack) -> None:
    before = stack.pids()
    short = trainwatch("stack", "up", "--scrape-interval=1s", "--for=20s", "--rate-window=30s",
                       state=stack.state)
    assert short.returncode == 0, short.stdout + short.stderr
    assert "prometheus: configuration or rules changed; reloaded" in short.stdout
    assert "alertmanager: configuration changed" not in short.stdout  # its file is the same
    rules = [r for g in stack.api("rules")["groups"] for r in g["rules"] if r["type"] == "alerting"]
    assert rules and {r["duration"] for r in rules} == {20}
    assert {g["file"] for g in stack.api("rules")["groups"]} <= {
        str(p) for p in (stack.state / "prometheus" / "rules").glob("*.yml")}
    reloaded = last_reloads(stack)["prometheus"]
    back = trainwatch("stack", "up", "--scrape-interval=1s", state=stack.state)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "prometheus: configuration or rules changed; reloaded" in back.stdout
    assert last_reloads(stack)["prometheus"] > reloaded
    rules = [r for g in stack.api("rules")["groups"] for r in g["rules"] if r["type"] == "alerting"]
    assert {r["duration"] for r in rules} != {20}
    assert stack.pids() == before


def test_an_up_that_changes_alertmanagers_configuration_reloads_it_and_only_it(
        stack: Stack, tmp_path: Path) -> None:
    am = stack.url("alertmanager")
    config = tmp_path / "alertmanager.yml"
    shipped = yaml.safe_load((stack.state / "alertmanager" / "alertmanager.yml").read_text())
    config.write_text(yaml.safe_dump(shipped))
    own = trainwatch("stack", "up", "--scrape-interval=1s", f"--alertmanager-config={config}",
                     state=stack.state)
    assert own.returncode == 0, own.stdout + own.stderr
    assert "alertmanager: its command line changed; restarting it" in own.stdout
    before, pids, hashed = last_reloads(stack), stack.pids(), metric(am, "alertmanager_config_hash")
    # The same file, a new receiver in it: Alertmanager reloads; Prometheus's is unchanged.
    config.write_text(yaml.safe_dump({**shipped,
                                      "receivers": [*shipped["receivers"], {"name": "extra"}]}))
    changed = trainwatch("stack", "up", "--scrape-interval=1s",
                         f"--alertmanager-config={config}", state=stack.state)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert "alertmanager: configuration changed; reloaded" in changed.stdout
    assert "prometheus: configuration or rules changed" not in changed.stdout
    after = last_reloads(stack)
    assert after["alertmanager"] > before["alertmanager"]
    assert after["prometheus"] == before["prometheus"]
    assert metric(am, "alertmanager_config_hash") != hashed
    _, body = http_get(am + "/api/v2/status")
    assert "extra" in json.loads(body)["config"]["original"]
    assert stack.pids() == pids
    # Back to the shipped configuration (another file: a restart), as the later tests expect.
    back = trainwatch("stack", "up", "--scrape-interval=1s", state=stack.state)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "alertmanager: its command line changed; restarting it" in back.stdout


def test_a_corrupt_pid_file_is_replaced_by_the_process_found_by_its_marker(stack: Stack) -> None:
    pid = pid_of(stack.state, "exporter")
    (stack.state / "run" / "exporter.pid").write_text("{not json")
    (stack.state / "stack.json").write_text("[")  # ports come from the processes themselves
    done = trainwatch("stack", "status", state=stack.state)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exporter.pid is corrupt" in done.stdout and f"found pid {pid}" in done.stdout
    assert pid_of(stack.state, "exporter") == pid
    assert f"{stack.url('prometheus')}   pid" in done.stdout
    assert prometheus_url(None, {"TRAINWATCH_STATE_DIR": str(stack.state)}) == \
        stack.url("prometheus")


def test_a_process_that_died_is_reported_alerted_on_and_restarted_alone(stack: Stack) -> None:
    before = stack.pids()
    # Rules rendered with a 1 s `for`, so the dead exporter's alert fires within seconds.
    short = trainwatch("stack", "up", "--scrape-interval=1s", "--for=1s", state=stack.state)
    assert short.returncode == 0, short.stdout + short.stderr
    os.kill(before["exporter"], signal.SIGKILL)
    wait_until(lambda: procs.start_time(before["exporter"]) is None, what="exporter gone")
    done = trainwatch("stack", "status", state=stack.state)
    assert done.returncode == 1
    assert f"pid {before['exporter']} has exited" in done.stdout
    assert "DOWN" in next(x for x in done.stdout.splitlines() if x.startswith("exporter "))

    def delivered() -> list[dict]:
        _, body = http_get(stack.url("alertmanager") + "/api/v2/alerts")
        return [a for a in json.loads(body)
                if a["labels"]["alertname"] == "TrainwatchExporterDown"
                and a["labels"]["instance"] == f"127.0.0.1:{stack.ports['exporter']}"]

    # Prometheus -> the stack's real Alertmanager, end to end.
    assert wait_until(delivered, timeout=60, what="TrainwatchExporterDown in Alertmanager")
    again = trainwatch("stack", "up", "--scrape-interval=1s", state=stack.state)
    assert again.returncode == 0, again.stdout + again.stderr
    after = stack.pids()
    assert after["exporter"] != before["exporter"]
    assert {s: p for s, p in after.items() if s != "exporter"} == \
        {s: p for s, p in before.items() if s != "exporter"}


@pytest.mark.skipif(not (REPO / ".venv-run/.installed").exists(),
                    reason="`make run`'s light .venv-run is not built in this checkout")
def test_make_run_starts_the_stack_and_make_stop_stops_it(tmp_path: Path) -> None:
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    env = {**os.environ, "TRAINWATCH_STATE_DIR": str(tmp_path / "s")}
    run = subprocess.run(["make", "-s", "run", "ARGS=" + " ".join(port_flags(ports))], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"export TRAINWATCH_PUSHGATEWAY=http://127.0.0.1:{ports['pushgateway']}" \
            in run.stdout
        assert len(marked(tmp_path / "s")) == len(STARTED)
        # Progress while it starts: a line as each service answers, before the summary.
        lines = run.stdout.splitlines()
        answered = [i for i, line in enumerate(lines) if line.startswith("starting: ")]
        assert len(answered) == len(STARTED), run.stdout
        assert max(answered) < lines.index(next(x for x in lines if x.startswith("prometheus ")))
        # A fresh shell, as after the README's steps: the line make run printed puts
        # `trainwatch` on PATH, and the README's commands work.
        activate = f"source {REPO / '.venv-run/bin/activate'}"
        assert f"`trainwatch` is not on your PATH: `{activate}` puts it there" in run.stdout
        assert "source .venv-run/bin/activate" in \
            (REPO / "README.md").read_text().split("\n## ")[0]
        shell_env = {**env, "PATH": "/usr/bin:/bin"}
        fresh = subprocess.run(["bash", "-c", f"{activate} && trainwatch stack status"],
                               cwd=REPO, env=shell_env, capture_output=True, text=True,
                               timeout=60, check=False)
        assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    finally:
        stop = subprocess.run(["make", "-s", "stop"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert marked(tmp_path / "s") == []


def test_grafana_gets_the_projects_provisioning_with_this_checkouts_dashboards(
        tmp_path: Path) -> None:
    out = grafana_provisioning(tmp_path)
    source = REPO / "grafana" / "provisioning"
    assert (out / "datasources" / "trainwatch.yaml").read_text() == \
        (source / "datasources" / "trainwatch.yaml").read_text()
    shipped = yaml.safe_load((source / "dashboards" / "trainwatch.yaml").read_text())
    written = yaml.safe_load((out / "dashboards" / "trainwatch.yaml").read_text())
    folder = Path(written["providers"][0]["options"]["path"])
    assert folder == REPO / "grafana" / "dashboards"
    assert sorted(p.name for p in folder.glob("*.json")) == \
        ["fleet.json", "gpu-hours.json", "node-gpu.json", "trial-profile.json"]
    # Only the folder differs from the shipped provider.
    shipped["providers"][0]["options"]["path"] = str(folder)
    assert written == shipped


def test_taken_ports_fail_with_one_line_naming_all_and_leave_nothing(tmp_path: Path) -> None:
    with socket.socket() as one, socket.socket() as two:
        for squatter in (one, two):
            squatter.bind(("127.0.0.1", 0))
            squatter.listen()
        taken = [one.getsockname()[1], two.getsockname()[1]]
        ports = dict(zip(SERVICES, free_ports(len(SERVICES))), prometheus=taken[0],
                     webhook=taken[1])
        line = one_clear_line(trainwatch("stack", "up", *port_flags(ports),
                                         state=tmp_path / "s"))
    assert f"ports {taken[1]} for webhook, {taken[0]} for prometheus on 127.0.0.1 are taken" \
        in line and line.endswith("pass --webhook-port PORT --prometheus-port PORT")
    assert marked(tmp_path / "s") == []
    assert not (tmp_path / "s").exists()  # the state directory it made is gone again


def test_a_service_that_cannot_start_fails_with_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "alertmanager.yml"
    bad.write_text("route: {receiver: nobody}\n")  # a receiver that is not defined
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    line = one_clear_line(trainwatch("stack", "up", *port_flags(ports), "--alertmanager-config",
                                     str(bad), state=tmp_path / "s"))
    assert line.startswith("trainwatch stack up: error: alertmanager exited with 1 before it "
                           "was ready: ")
    assert f"(log: {tmp_path / 's' / 'logs' / 'alertmanager.log'})" in line
    # The Pushgateway and exporter it had started first are stopped again.
    assert marked(tmp_path / "s") == []
    assert not list((tmp_path / "s" / "run").glob("*.pid"))


def test_a_second_command_while_one_works_on_the_stack_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s" / "run").mkdir(parents=True)
    with open(tmp_path / "s" / "run" / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running `up` holds it
        for action in ("up", "down"):
            line = one_clear_line(trainwatch("stack", action, state=tmp_path / "s"))
            assert line.endswith(f"another `trainwatch stack` command is working on "
                                 f"{tmp_path / 's'}; wait for it to finish")
    assert marked(tmp_path / "s") == []


@pytest.mark.parametrize(("flag", "says"), [
    ("--scrape-interval=fast", ("--scrape-interval: 'fast' is not a Prometheus duration above "
                                "0 (e.g. --scrape-interval 30s")),
    ("--for=soon", "--for: 'soon' is not a Prometheus duration above 0 (e.g. --for 30s"),
    ("--rate-window=0s", "--rate-window: '0s' is not a Prometheus duration above 0"),
    ("--runbook-url=wiki/runbooks", "override runbook_url: 'wiki/runbooks' is not an http(s)"),
    ("--exporter-port=70000", "--exporter-port: 70000 is not a TCP port (1-65535)"),
    ("--prometheus-external-url=vm:10911",
     "--prometheus-external-url: 'vm:10911' is not an http(s) URL like http://host:port/"),
])
def test_a_bad_flag_is_one_line_and_starts_nothing(tmp_path: Path, flag: str, says: str) -> None:
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    flags = [f for f in port_flags(ports) if not f.startswith("--exporter-port")]
    line = one_clear_line(trainwatch("stack", "up", *flags, flag, state=tmp_path / "s"))
    assert says in line
    assert marked(tmp_path / "s") == []
    assert not (tmp_path / "s").exists()


def test_a_missing_binary_fails_with_one_line_and_starts_nothing(tmp_path: Path) -> None:
    ports = dict(zip(SERVICES, free_ports(len(SERVICES))))
    line = one_clear_line(trainwatch("stack", "up", *port_flags(ports), state=tmp_path / "s",
                                     path=str(tmp_path)))
    assert line == ("trainwatch stack up: error: prometheus, prometheus-pushgateway, "
                    "prometheus-alertmanager not installed: run `make tools` or `sudo apt-get "
                    "install prometheus prometheus-alertmanager prometheus-pushgateway`, then "
                    "`trainwatch stack up` again")
    assert marked(tmp_path / "s") == []


def test_a_state_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    for action in ("up", "status", "down"):
        line = one_clear_line(trainwatch("stack", action, "--state-dir", str(tmp_path / "f")))
        assert line.endswith(f"state directory {tmp_path / 'f'} is a file, not a directory; "
                             "pass --state-dir DIR or set TRAINWATCH_STATE_DIR")


def test_an_unwritable_state_dir_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        # Root passes mode bits; the immutable flag stops it too.
        if os.access(locked, os.W_OK) and subprocess.run(
                ["chattr", "+i", str(locked)], check=False, capture_output=True).returncode != 0:
            pytest.skip("running as root without chattr: cannot make a directory unwritable")
        line = one_clear_line(trainwatch("stack", "up", "--state-dir", str(locked / "state")))
        assert f"state directory {locked / 'state'} is not writable" in line
        assert marked(locked / "state") == []
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=False, capture_output=True)
        locked.chmod(0o755)


def test_a_notification_reaches_the_stacks_receiver_on_its_moved_port(stack: Stack) -> None:
    # The fixture's free ports moved the receiver off 10919: the shipped config followed it.
    config = yaml.safe_load((stack.state / "alertmanager" / "alertmanager.yml").read_text())
    assert {hook["url"] for receiver in config["receivers"]
            for hook in receiver["webhook_configs"]} == {stack.url("webhook") + "/alerts"}
    # An alert that started longer ago than the shipped 30 s group_wait, as one Prometheus has
    # sent for a while: Alertmanager notifies its new group at once instead of after the wait
    # (which a `stack up` that reloads Alertmanager restarts).
    post_alert(stack.url("alertmanager"), DELIVERED,
               datetime.now(UTC) - timedelta(minutes=10))

    def listed() -> str:
        done = trainwatch("stack", "notifications", state=stack.state)
        assert done.returncode == 0, done.stderr
        return done.stdout if DELIVERED["alertname"] in done.stdout else ""

    text = wait_until(listed, timeout=90, what="the notification in `stack notifications`",
                      interval=1.0)
    assert re.search(r"^--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ via receiver trainwatch-warning$",
                     text, re.MULTILINE), text
    assert "[FIRING:1] TrainwatchStackDelivery stack-test/t1" in text, text
    log = (stack.state / "logs" / "webhook.log").read_text()
    assert "via receiver trainwatch-warning" in log
    # Its links (silences, the alert list) point at the Alertmanager `up` printed.
    notes = [json.loads(line)["notification"] for line in
             (stack.state / "webhook" / "notifications.jsonl").read_text().splitlines()]
    assert {note["externalURL"] for note in notes} == {stack.url("alertmanager")}


def test_down_stops_every_process_and_never_one_that_is_not_ours(stack: Stack) -> None:
    pids = stack.pids()
    # A pid file naming a live program the stack did not start (as after pid reuse).
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = procs.ProcRecord("grafana", stranger.pid, procs.start_time(stranger.pid) or 0,
                                  ("grafana-server",))
        record.save(stack.state / "run" / "grafana.pid")
        done = trainwatch("stack", "down", state=stack.state)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"pid {stranger.pid} in" in done.stdout and "now another program" in done.stdout
        assert stranger.poll() is None  # still running: never signalled
        for service, pid in pids.items():
            assert procs.start_time(pid) is None, f"{service} (pid {pid}) survived down"
        assert marked(stack.state) == []
        assert not list((stack.state / "run").glob("*.pid"))
        after = trainwatch("stack", "status", state=stack.state)
        assert after.returncode == 1 and after.stdout.count("DOWN") == len(STARTED)
    finally:
        stranger.kill()
        stranger.wait()
