"""A whole trainwatch stack on loopback for the live tests: the committed rules rendered again
with short windows, the real trainwatch-exporter over the fake NVML, a real Pushgateway, a real
Prometheus scraping both, and real PyTorch CPU trials (examples/pytorch_loop.py).

    with live_stack(tmp_path, rate_window="10s", for_="5s") as stack:
        stack.start_trial("exp", "slow", "--loader-delay", "0.05")
        stack.prometheus.wait_for_series(...)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.stack import (
    REPO,
    Prometheus,
    Service,
    alerting_config,
    scrape_config,
    start_prometheus,
    start_pushgateway,
    start_trainwatch_exporter,
)
from prometheus import generate_rules

EXAMPLE = REPO / "examples" / "pytorch_loop.py"
DDP_EXAMPLE = REPO / "examples" / "ddp_gloo.py"


@dataclass
class LiveStack:
    """The running stack; trials started here are stopped when the stack stops."""

    workdir: Path
    prometheus: Prometheus
    pushgateway: Service
    exporter: Service
    trials: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def exporter_instance(self) -> str:
        return self.exporter.instance

    def start_trial(self, experiment: str, trial: str, *args: str,
                    env: dict[str, str] | None = None,
                    ranks: int | None = None) -> subprocess.Popen[bytes]:
        """examples/pytorch_loop.py pushing every 0.5 s; ``args`` add or override flags.
        ``ranks``: examples/ddp_gloo.py under torchrun with that many gloo CPU ranks."""
        if ranks is None:
            launch = [sys.executable, str(EXAMPLE)]
        else:  # its own rendezvous, on a port the OS gives its store as it binds it: a port
            # picked before (free_port) was taken meanwhile by a scrape's outgoing connection
            # in a clean-clone run (EADDRINUSE), and the trial never started
            launch = [str(Path(sys.executable).parent / "torchrun"), "--standalone",
                      "--nproc-per-node", str(ranks), str(DDP_EXAMPLE)]
        argv = [*launch, "--experiment", experiment, "--trial", trial,
                "--pushgateway", self.pushgateway.url, "--push-interval", "0.5", *args]
        # One intra-op thread: trials share a small CI machine with everything else.
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
        with open(self.workdir / f"trial-{trial}.log", "wb") as log:  # the child keeps a copy
            # Its own session, so stopping it also stops its DataLoader workers.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                    env=full_env, start_new_session=True)
        self.trials[trial] = proc
        return proc

    def start_process(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Any process (``argv``), logged to ``name``'s log and stopped with the trials."""
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        with open(self.workdir / f"trial-{name}.log", "wb") as log:  # the child keeps a copy
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                    env=env, start_new_session=True)
        self.trials[name] = proc
        return proc

    def trial_log(self, trial: str) -> str:
        return (self.workdir / f"trial-{trial}.log").read_text(errors="replace")

    def stop_trials(self) -> None:
        for proc in self.trials.values():
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# The exporter's fake GPUs: GPU 0 busy (50%), GPU 1 idle (5%), so a trial that claims both
# (TRAINWATCH_GPU_UUIDS) has one GPU below TrainwatchGPUUnderutilized's threshold.
FAKE_GPUS = 2
IDLE_GPU = 1


# The live stack scrapes every target and evaluates its rules this often.
INTERVAL = "1s"


@contextmanager
def live_stack(workdir: Path, *, rate_window: str, for_: str,
               stale_after: float | None = None, window: str | None = None,
               alertmanager: Service | None = None,
               exporter_args: tuple[str, ...] = ()) -> Iterator[LiveStack]:
    """Start everything (1 s scrape and evaluation); stop it all, trials first, on exit.
    ``stale_after`` (seconds) shortens TrainwatchTrialStale's threshold, ``window`` the alerts'
    own windows (TrainwatchTrialKeyShared's); with ``alertmanager``, Prometheus sends its
    alerts there; ``exporter_args`` go to the exporter (``--gpu.peak-flops``...)."""
    rules = workdir / "rules"
    generate_rules.write_rules(rules, for_=for_, rate_window=rate_window, stale_after=stale_after,
                               window=window)
    with start_pushgateway(workdir) as pgw, \
            start_trainwatch_exporter(workdir, *exporter_args, fake_gpus=FAKE_GPUS,
                                      idle_gpus=(IDLE_GPU,)) as exporter:
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [str(rules / "*.yml")],
            "scrape_configs": [scrape_config("trainwatch-exporter", exporter.url, INTERVAL),
                               scrape_config("pushgateway", pgw.url, INTERVAL,
                                             honor_labels=True)],
        }
        if alertmanager is not None:
            config["alerting"] = alerting_config(alertmanager)
        with start_prometheus(workdir, config) as prom:
            stack = LiveStack(workdir, prom, pgw, exporter)
            try:
                yield stack
            finally:
                stack.stop_trials()


# The shared live stack of the diagnose and report tests: a data-loader-bound trial and a healthy
# one of one experiment, started once per session (tests/conftest.py's two_trial_stack).
TWO_TRIALS_EXPERIMENT = "live-diagnose"
TWO_TRIALS_RATE_WINDOW, TWO_TRIALS_FOR = "10s", "3s"
BUSY_GPU = 0  # FakeGpu.deterministic(0): 50% utilization, 10 GiB of 80 GiB used
# A slow trial (--loader-delay 0.05) waits 50 ms a step for its loader, and the rest of its step
# (batch 8, CPU) takes about 1 ms here idle: a loader share near 0.98. Beside two busy processes
# the rest takes several ms (a loaded run read 0.897). Under this floor the rest of a step would
# take as long as the sleep; a share over a doubled step time reads 0.49 even idle.
SLOW_LOADER_SHARE_FLOOR = 0.5
# A trial's steps/s as Prometheus's rate() reads it may exceed its true rate: the counter is pushed
# every 0.5 s and scraped every 1 s, so the samples at a window's edges are up to a push old, and
# rate() extrapolates them to the window's edges (a CI run read 20.2 for a trial that sleeps 50 ms
# a step). Bounds on a rate allow this much over; steps vs samples (8 a step here) stays clear.
RATE_OVERSHOOT = 1.25
# A healthy trial's step burns 2 ms of CPU (a model's forward and backward on CPU): its loader's
# share (batch 8, no workers) reads near 0.03, not the 0.14 of a bare 1 ms step, which read 0.33
# under load, past TrainwatchDataloaderBound's 0.3 that a healthy twin must stay clear of.
HEALTHY_STEP = ("--step-cpu", "0.002")


@contextmanager
def two_trial_stack(workdir: Path) -> Iterator[LiveStack]:
    """The stack once the slow trial's TrainwatchDataloaderBound fires and the healthy trial has
    a window of shares; both keep running until the stack stops."""
    from benchmarks.fake_nvml import fake_uuid
    from trainwatch.contract.records import RecordNames

    names = RecordNames(TWO_TRIALS_RATE_WINDOW)
    experiment = TWO_TRIALS_EXPERIMENT
    with live_stack(workdir, rate_window=TWO_TRIALS_RATE_WINDOW, for_=TWO_TRIALS_FOR) as live:
        common = ("--workers", "0", "--batch-size", "8")
        # Each claims one fake GPU: the slow trial the idle one, the healthy trial the busy one.
        # Epoch after epoch over a small data set until the session's tests are done (600,000
        # steps' worth of data was a 600 MB tensor made before the first step).
        outlive = ("--steps", "2000", "--max-seconds", "3600")
        live.start_trial(experiment, "slow", *common, "--loader-delay", "0.05", *outlive,
                         env={"TRAINWATCH_GPU_UUIDS": fake_uuid(IDLE_GPU)})
        live.start_trial(experiment, "healthy", *common, *HEALTHY_STEP, *outlive,
                         env={"TRAINWATCH_GPU_UUIDS": fake_uuid(BUSY_GPU)})
        prom = live.prometheus
        # The slow trial's alert has fired, and the healthy trial has a window of shares.
        prom.wait_for_series(f'ALERTS{{alertname="TrainwatchDataloaderBound", '
                             f'alertstate="firing", experiment="{experiment}"}}', 60)
        prom.wait_for_series(f'count_over_time({names.phase_share}{{trial="healthy"}}[5s]) >= 4',
                             30)
        prom.wait_for_series(f"count({names.trial_gpu_utilization}) == 2", 30)
        for name, proc in live.trials.items():
            assert proc.poll() is None, live.trial_log(name)
        yield live
