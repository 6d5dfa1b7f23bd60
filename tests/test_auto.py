"""Automatic instrumentation's parts (issue 39): the step clock of trial_instrumentation/auto/
steps.py, the sitecustomize that loads it (chained, and nothing without TRAINWATCH_AUTO), and
unmodified scripts against a real Pushgateway: an iterable-style dataset, a DataLoader subclass,
a job that forks, and a failure inside trainwatch (one warning, the job runs on)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.stack import REPO, Service
from tests.trial_support import pushed_value
from trial_instrumentation.auto import steps as auto_steps
from trial_instrumentation.auto.steps import AutoSteps
from trial_instrumentation.loader import Progress
from trial_instrumentation.names import DEFAULT_BUCKETS
from trial_instrumentation.steps import StepRecorder
from trial_instrumentation.timing import Histogram

SITE = REPO / "trial_instrumentation" / "auto" / "site"
class Batch:
    shape = (8, 4)  # eight samples, as a collated tensor's leading dimension says


BATCH = Batch()


class Clock:
    """A recorder over real histograms, and what it got."""

    def __init__(self) -> None:
        self.fetch, self.step, self.progress = (Histogram(DEFAULT_BUCKETS),
                                                Histogram(DEFAULT_BUCKETS), Progress())
        self.phases: dict[str, Histogram] = {}
        self.steps = AutoSteps(StepRecorder(self.fetch, self.step, self.progress),
                               self.fetch.observe, self.phase("train_batch").observe)

    def phase(self, name: str) -> Histogram:
        return self.phases.setdefault(name, Histogram(DEFAULT_BUCKETS))

    def fetch_at(self, start: float, seconds: float = 0.001) -> None:
        self.steps.fetched(start, start + seconds, BATCH)

    @property
    def counted(self) -> tuple[int, int, int]:
        return sum(self.step.counts), self.progress.samples, sum(self.fetch.counts)


def test_accumulated_batches_make_one_optimizer_step() -> None:
    clock, optimizer = Clock(), object()
    for step in range(4):
        for micro in range(3):  # fetches of 1, 2 and 3 ms
            clock.fetch_at(step * 1.0 + micro * 0.1, 0.001 * (micro + 1))
        clock.steps.optimizer_stepped(optimizer)
    assert clock.counted == (3, 72, 3)  # the fourth ends at close
    # Each step from its first fetch to the next step's first: 1 s, not from its last fetch
    # (0.8 s); its dataloader_next every fetch's time, 6 ms, not the last one's.
    assert clock.step.sum == pytest.approx(3 * 1.0)
    assert clock.fetch.sum == pytest.approx(3 * 0.006)
    clock.steps.close()
    assert clock.counted == (4, 96, 4)
    assert sum(clock.phases["train_batch"].counts) == 4


def test_two_optimizers_in_one_step_are_one_step() -> None:
    clock, generator, critic = Clock(), object(), object()
    for step in range(5):
        clock.fetch_at(step * 1.0)
        for optimizer in (generator, critic):
                clock.steps.optimizer_stepped(optimizer)
    clock.steps.close()
    assert clock.counted == (5, 40, 5)


def test_a_loop_without_a_loader_counts_each_optimizer_step() -> None:
    clock, optimizer = Clock(), object()
    for _ in range(6):
        clock.steps.optimizer_stepped(optimizer)
    clock.steps.close()
    assert clock.counted[0] == 6


def test_no_optimizer_counts_one_step_per_batch_and_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    with caplog.at_level(logging.WARNING):
        for i in range(auto_steps.UNDECIDED_FETCHES + 10):
            clock.fetch_at(i * 0.01)
        ended = clock.step.sum  # every batch's step but the last, still open
        clock.steps.close()
    batches = auto_steps.UNDECIDED_FETCHES + 10
    assert clock.counted == (batches, batches * 8, batches)
    # As it says: train_batch is not timed (nothing trained to end it); each step lasts from
    # its batch's fetch to the next one's, 10 ms, not the 1 ms fetch alone.
    assert sum(clock.phases["train_batch"].counts) == 0
    assert ended == pytest.approx((batches - 1) * 0.01)
    assert [r.message for r in caplog.records] == [
        (f"trainwatch: no optimizer step in the first {auto_steps.UNDECIDED_FETCHES} batches: "
         "counting one step per fetched batch (train_batch is not timed)")]


def test_a_few_batches_and_no_optimizer_are_counted_at_close() -> None:
    clock = Clock()
    for i in range(5):
        clock.fetch_at(i * 0.01)
    clock.steps.close()
    assert clock.counted == (5, 40, 5)


def test_the_end_of_the_data_ends_the_trained_step() -> None:
    clock, optimizer = Clock(), object()
    clock.fetch_at(0.0)
    clock.steps.optimizer_stepped(optimizer)
    clock.steps.exhausted(0.5)
    assert clock.counted == (1, 8, 1) and clock.step.sum == pytest.approx(0.5)
    clock.steps.close()
    assert clock.counted == (1, 8, 1)


def python(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=REPO)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINWATCH_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


SHOW = ("import sys; print(sorted(m for m in sys.modules if m.startswith('trial_instrumentation')),"
        " [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_Watch'],"
        " getattr(sys.modules.get('sitecustomize'), 'USER', None))")  # one string


def test_the_users_sitecustomize_still_runs_and_nothing_loads_when_unset(
        tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("USER = 'mine'\n")
    path = os.pathsep.join([str(SITE), str(tmp_path), str(REPO)])
    off = python(SHOW, clean_env(PYTHONPATH=path))
    assert (off.stdout, off.stderr) == ("[] [] mine\n", "")
    on = python(SHOW, clean_env(PYTHONPATH=path, TRAINWATCH_AUTO="1"))
    # On, but no torch imported: one watcher, nothing of trainwatch loaded.
    assert (on.stdout, on.stderr) == ("[] ['_Watch'] mine\n", "")
    zero = python(SHOW, clean_env(PYTHONPATH=path, TRAINWATCH_AUTO="0"))
    assert zero.stdout == "[] [] mine\n"


LOOP = """
import os, torch
from torch.utils.data import DataLoader, IterableDataset
class Stream(IterableDataset):
    def __iter__(self):
        return (torch.ones(4) for _ in range(STEPS * 8))
class Mine(DataLoader):
    pass
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in Mine(Stream(), batch_size=8):
    model(x).sum().backward(); opt.step(); opt.zero_grad()
if FORK:
    pid = os.fork()
    if pid == 0:  # the child trains too, untimed: its parent's trial is not its own
        for x in DataLoader(Stream(), batch_size=8):
            model(x).sum().backward(); opt.step()
        os._exit(0)
    os.waitpid(pid, 0)
print("done")
"""


def auto_env(pushgateway: Service, trial: str, **extra: str) -> dict[str, str]:
    return clean_env(PYTHONPATH=f"{SITE}{os.pathsep}{REPO}", TRAINWATCH_AUTO="1",
                     TRAINWATCH_PUSHGATEWAY=pushgateway.url, TRAINWATCH_EXPERIMENT="auto",
                     TRAINWATCH_TRIAL=trial, **extra)


def test_an_iterable_dataset_through_a_loader_subclass_and_a_fork(pushgateway: Service) -> None:
    done = python(LOOP.replace("STEPS", "12").replace("FORK", "True"),
                  auto_env(pushgateway, "iterable"))
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="iterable") == 12
    assert pushed_value(pushgateway, "trainwatch_trial_samples_total", trial="iterable") == 96
    assert pushed_value(pushgateway, "trainwatch_trial_exit", trial="iterable",
                        reason="clean") == 1
    assert [line for line in done.stderr.splitlines()
            if not line.startswith("trainwatch: timing")] == [], done.stderr


def test_a_failure_inside_trainwatch_is_one_warning_and_the_job_runs_on(
        pushgateway: Service) -> None:
    done = python(LOOP.replace("STEPS", "5").replace("FORK", "False"),
                  auto_env(pushgateway, "broken", TRAINWATCH_PUSH_INTERVAL="soon"))
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    [warning] = done.stderr.splitlines()
    assert warning.startswith("trainwatch: automatic instrumentation disabled in this process "
                              "after an error (ValueError: environment variable "
                              "TRAINWATCH_PUSH_INTERVAL"), warning
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="broken") is None


def test_a_failing_script_ends_its_trial_failed(pushgateway: Service) -> None:
    code = LOOP.replace("STEPS", "3").replace("FORK", "False") + "raise SystemExit(3)\n"
    done = python(code.replace("raise SystemExit(3)", "import sys; sys.exit(3)"),
                  auto_env(pushgateway, "exit3"))
    assert done.returncode == 3
    assert pushed_value(pushgateway, "trainwatch_trial_exit", trial="exit3",
                        reason="failed") == 1
    crash = python(LOOP.replace("STEPS", "3").replace("FORK", "False") + "1 / 0\n",
                   auto_env(pushgateway, "crash"))
    assert crash.returncode == 1 and "ZeroDivisionError" in crash.stderr
    assert pushed_value(pushgateway, "trainwatch_trial_exit", trial="crash", reason="failed") == 1
    assert pushed_value(pushgateway, "trainwatch_trial_steps_total", trial="crash") == 3


TRAINWATCH = Path(sys.executable).parent / "trainwatch"


def trainwatch_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), "run", *args], capture_output=True, text=True,
                          timeout=60, check=False, env=env or clean_env(PYTHONPATH=str(REPO)))


def test_run_names_the_trial_once_and_becomes_the_command(pushgateway: Service) -> None:
    done = trainwatch_run("--pushgateway", pushgateway.url, "--", sys.executable, "-c",
                          "import os, sys; print(os.environ['TRAINWATCH_AUTO'], "
                          "os.environ['TRAINWATCH_EXPERIMENT'], os.environ['PYTHONPATH']"
                          ".split(os.pathsep)[0]); sys.exit(7)")
    assert done.returncode == 7  # the command's own status
    assert done.stdout.split() == ["1", "python", str(SITE)]
    [line] = done.stderr.splitlines()
    assert line.startswith("trainwatch run: experiment python, trial python-"), line
    assert line.endswith(f"(names from the script, the script's start), pushing to "
                         f"{pushgateway.url}"), line


def test_run_takes_slurms_names_and_says_what_is_wrong(pushgateway: Service) -> None:
    env = clean_env(PYTHONPATH=str(REPO), SLURM_JOB_NAME="bert", SLURM_JOB_ID="4242",
                    TRAINWATCH_PUSHGATEWAY=pushgateway.url)
    done = trainwatch_run("--", "true", env=env)
    assert done.returncode == 0
    assert done.stderr == ("trainwatch run: experiment bert, trial 4242 (names from Slurm, "
                           f"Slurm), pushing to {pushgateway.url}\n")
    assert trainwatch_run().returncode == 2
    missing = trainwatch_run("--", "no-such-command-here", env=env)
    assert missing.returncode == 127
    assert missing.stderr.splitlines()[-1] == ("trainwatch run: cannot run no-such-command-here:"
                                               " No such file or directory")
