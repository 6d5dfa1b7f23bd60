"""`make demo`: watch trainwatch catch a slow data pipeline, from the metrics to the alert.

    python -m trainwatch.demo [--state-dir DIR] [--seconds 45]

It starts a `trainwatch stack` of its own (state in ``demo/`` under the stack's state directory,
free ports, rules rendered with short windows by the generator's overrides, the shipped
Alertmanager config rendered with short grouping delays for the stack's webhook receiver), then
two real PyTorch trials of examples/pytorch_loop.py side by side: one whose Dataset sleeps 50 ms
per batch, one healthy. It prints which alerts fired for which trial, the notification
Alertmanager delivered, `trainwatch diagnose` for each trial, the resolution once the slow trial
ends, and where to look next. The stack keeps running afterwards, for the URLs it prints, and
it says how to stop it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, TypeVar

from trainwatch import cli
from trainwatch.alertmanager import render_config, write_config
from trainwatch.contract.alerts import DATALOADER_BOUND
from trainwatch.contract.records import RecordNames
from trainwatch.demo import show
from trainwatch.layout import StateDir, project_file
from trainwatch.promapi import PrometheusAPI
from trainwatch.stack import commands
from trainwatch.stack.health import http_status
from trainwatch.stack.services import notifications_file
from trainwatch.stack.settings import DEFAULT_PORTS, READY_PATHS, StackSettings
from trainwatch.stack.up import up as stack_up
from trainwatch.webhook import Notification, alerts_in, recorded
from trial_instrumentation.durations import parse_duration

T = TypeVar("T")
EXPERIMENT = "demo"
ALERT = DATALOADER_BOUND
# Short windows for every alert, the rate window and the scrape/evaluation interval: an alert
# fires about 20 s after its condition starts instead of 10 minutes.
FOR, RATE_WINDOW, SCRAPE_INTERVAL = "10s", "15s", "2s"
# Alertmanager's grouping delays for the demo (the shipped ones wait 30 s and 5 min).
GROUP_WAIT, GROUP_INTERVAL = "2s", "3s"
# Beside the stack's own files in the demo's state directory: the trials' logs, the config.
TRIALS_DIR = "demo"
COMMON = ("--workers", "0", "--batch-size", "8", "--push-interval", "1")
# slow-loader sleeps 50 ms per batch in its Dataset; healthy runs the same loop without it.
TRIALS = {"slow-loader": ("--loader-delay", "0.05", "--steps", "100"),
          "healthy": ("--steps", "2000")}
# What the demo's stack takes of the node at its 2 s scrape (Prometheus, the exporter, the
# Pushgateway, Alertmanager, the webhook, gc), in cores: left free when the trials are sized.
STACK_CORES = 0.5
MIN_SHARE = 0.1  # the least share of a core the healthy trial computes on


@dataclass(frozen=True)
class Sizing:
    """The trials sized to the node: one torch thread each (more would wait for cores on a
    small host), no loader workers, and the healthy trial's compute capped at ``cpu_share`` of
    one core, half of what the node's idle cores leave after the stack, so the demo's own load
    never saturates the node (TrainwatchCPUSaturated, a "Node CPUs saturated" verdict).

    >>> Sizing.of(cpus=2, busy=0.3).cpu_share, Sizing.of(cpus=16, busy=0.1).cpu_share
    (0.45, 1.0)
    """

    cpus: int
    busy: float  # the node's busy CPU ratio before the demo
    cpu_share: float

    @classmethod
    def of(cls, cpus: int, busy: float) -> Sizing:
        return cls(cpus, busy, round(min(1.0, max(MIN_SHARE, cls.spare_of(cpus, busy) / 2)), 2))

    @staticmethod
    def spare_of(cpus: int, busy: float) -> float:
        return max(cpus * (1 - busy) - STACK_CORES, 0.0)

    @property
    def crowded(self) -> bool:
        """The node's other work leaves the trials less than the least they are given: its
        CPUs may be saturated whatever the demo does."""
        return self.spare_of(self.cpus, self.busy) / 2 < MIN_SHARE

    @classmethod
    def measured(cls) -> Sizing:
        import psutil

        return cls.of(os.cpu_count() or 1, psutil.cpu_percent(interval=1.0) / 100)

    def line(self) -> str:
        crowded = ("; other work keeps this node busy: TrainwatchCPUSaturated may fire and "
                   "diagnose may say \"Node CPUs saturated\" for both trials, whatever they do"
                   if self.crowded else "")
        return (f"Sized to this machine: {self.cpus} cores, {self.busy:.0%} busy before the "
                f"demo: one torch thread per trial (OMP_NUM_THREADS=1), no loader workers; the "
                f"healthy trial computes on at most {self.cpu_share:.0%} of a core (its "
                f"train_batch waits the rest, as for an accelerator){crowded}")


def free_port() -> int:
    """A free loopback port: the demo's stack must not meet the one `make run` started."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DemoError(RuntimeError):
    """The demo could not show what it meant to; the message says what happened."""


@dataclass
class DemoResult:
    """What the demo saw (the test asserts on it)."""

    sizing: Sizing | None = None
    fired: dict[str, list[str]] = field(default_factory=dict)
    node_alerts: list[str] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)
    diagnose_exit: dict[str, int] = field(default_factory=dict)
    trial_exit: dict[str, int] = field(default_factory=dict)


def wait_for(probe: Callable[[], T | None], timeout: float, what: str,
             check: Callable[[], None] = lambda: None) -> T:
    """Poll ``probe`` (and ``check``, which raises when waiting cannot help) until truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check()
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise DemoError(f"gave up after {timeout:.0f} s waiting for {what}")


def delivered(state: StateDir) -> list[Notification]:
    """What the demo stack's webhook receiver was delivered so far."""
    return [note for _, note in recorded(notifications_file(state))]


def start_stack(state: StateDir, out: TextIO) -> StackSettings:
    commands.down(state, say=lambda _: None)  # a fresh stack each run: new ports, no old news
    notifications_file(state).unlink(missing_ok=True)
    ports = {name: free_port() for name in DEFAULT_PORTS}
    config = render_config(project_file("prometheus/alertmanager/alertmanager.yml"),
                           webhook_url=f"http://127.0.0.1:{ports['webhook']}/alerts",
                           group_wait=GROUP_WAIT, group_interval=GROUP_INTERVAL,
                           repeat_interval="1h")
    am_config = write_config(config, state.root / TRIALS_DIR / "alertmanager.yml")
    settings = StackSettings(ports=ports, for_=FOR, rate_window=RATE_WINDOW,
                             scrape_interval=SCRAPE_INTERVAL, alertmanager_config=str(am_config))
    out.write(f"== trainwatch stack up --state-dir {state.root} --for {FOR} --rate-window "
              f"{RATE_WINDOW} --scrape-interval {SCRAPE_INTERVAL} ==\n")
    def say(line: str) -> None:
        out.write(f"  {line}\n")

    if stack_up(state, settings, say=say) != 0:
        raise DemoError(f"the stack is not healthy: see `trainwatch stack status --state-dir "
                        f"{state.root}`")
    return settings


def start_trials(state: StateDir, pushgateway: str, seconds: float, sizing: Sizing
                 ) -> dict[str, subprocess.Popen[bytes]]:
    example = project_file("examples/pytorch_loop.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two trials share the CPUs with the stack
    sized = {"healthy": ("--cpu-share", f"{sizing.cpu_share:g}")}
    trials = {}
    for trial, args in TRIALS.items():
        argv = [sys.executable, str(example), "--experiment", EXPERIMENT, "--trial", trial,
                "--pushgateway", pushgateway, "--max-seconds", f"{seconds:g}", *COMMON, *args,
                *sized.get(trial, ())]
        with open(state.root / TRIALS_DIR / f"trial-{trial}.log", "wb") as log:
            trials[trial] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, start_new_session=True)
    return trials


def run(state_dir: Path | None, seconds: float = 45.0, out: TextIO = sys.stdout) -> DemoResult:
    """The whole demo; DemoError or StackError when a step cannot be shown (its stack may be
    left running: `trainwatch stack down --state-dir DIR` stops it)."""
    state, result = StateDir.resolve(state_dir), DemoResult()
    state.prepare()
    (state.root / TRIALS_DIR).mkdir(exist_ok=True)
    result.sizing = sizing = Sizing.measured()  # before the stack adds its own load
    settings = start_stack(state, out)
    out.write(f"\n== {sizing.line()} ==\n")
    trials = start_trials(state, settings.url("pushgateway"), seconds, sizing)
    out.write(f"\n== Two PyTorch trials of experiment '{EXPERIMENT}' for {seconds:g} s: "
              "slow-loader (50 ms per batch in its Dataset) and healthy ==\n")
    out.flush()
    try:
        runbook = _story(state, settings, trials, seconds, result, out)
    finally:
        for proc in trials.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        result.notifications = delivered(state)
    answering = {s: settings.url(s) for s in DEFAULT_PORTS
                 if http_status(settings.url(s) + READY_PATHS[s]) == 200}
    show.print_next_steps(out, answering, state.root, EXPERIMENT,
                          RecordNames(RATE_WINDOW).phase_share, runbook)
    return result


def _story(state: StateDir, settings: StackSettings, trials: dict[str, subprocess.Popen[bytes]],
           seconds: float, result: DemoResult, out: TextIO) -> str:
    """Alert, notification, diagnosis, resolution; returns the notification's runbook link."""
    prometheus = PrometheusAPI(settings.url("prometheus"))
    templates = project_file("prometheus/alertmanager/templates")

    def running() -> None:
        for name, proc in trials.items():
            if proc.poll() is not None:
                log = state.root / TRIALS_DIR / f"trial-{name}.log"
                raise DemoError(f"trial {name} exited with {proc.returncode} too early: "
                                f"see {log}")

    fired = wait_for(lambda: alerts_in(delivered(state), ALERT, "firing", trial="slow-loader"),
                     90, f"{ALERT} to be delivered for slow-loader", running)
    # The healthy trial judged for longer than `for`: had it an alert, it would fire.
    judged = (f"count_over_time({RecordNames(RATE_WINDOW).phase_share}{{trial="
              f'"healthy", phase="dataloader_next"}}[14s]) >= 6')
    wait_for(lambda: prometheus.query(judged), 60, "the healthy trial to be judged", running)
    result.fired, result.node_alerts = show.alerts_by_trial(prometheus.alerts(), EXPERIMENT,
                                                            TRIALS)
    show.print_alerts(out, result.fired, result.node_alerts)
    show.print_notification(out, "Notification delivered", fired[0][0], templates)
    for trial in TRIALS:
        out.write(f"\n== trainwatch diagnose --experiment {EXPERIMENT} --trial {trial} ==\n")
        out.flush()
        with contextlib.redirect_stdout(out):
            result.diagnose_exit[trial] = cli.main(
                ["diagnose", "--prometheus", settings.url("prometheus"),
                 "--experiment", EXPERIMENT, "--trial", trial])
    out.write("\n(the trials run on to the end of their time budget...)\n")
    out.flush()
    for name, proc in trials.items():
        try:
            result.trial_exit[name] = proc.wait(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            raise DemoError(f"trial {name} ran past its {seconds:g} s budget") from None
    resolved = wait_for(lambda: alerts_in(delivered(state), ALERT, "resolved",
                                          trial="slow-loader"),
                        60, "the resolution to be delivered")
    show.print_notification(out, "Resolved, after slow-loader ended cleanly", resolved[0][0],
                            templates)
    # Every notification the demo caused, as `trainwatch stack notifications` lists them, once
    # Alertmanager has had a grouping interval to send what it still held.
    every = wait_for(settled(state), 30, "Alertmanager's last notifications")
    show.print_every_notification(out, every, templates, state.root)
    return str(fired[0][1]["annotations"].get("runbook_url", ""))


def settled(state: StateDir) -> Callable[[], list[tuple[str, Notification]] | None]:
    """A probe: every notification so far, once none came for two of the demo's grouping
    intervals (Alertmanager has sent what it held); None before."""
    last = [-1, 0.0]  # how many, since when

    def probe() -> list[tuple[str, Notification]] | None:
        every, now = list(recorded(notifications_file(state))), time.monotonic()
        if last[0] != len(every):
            last[:] = [len(every), now]
            return None
        return every if now - last[1] >= 2 * parse_duration(GROUP_INTERVAL) else None
    return probe
