"""Names for a trial nobody named (trial_instrumentation/auto/naming.py): the script's name
from each kind of command line, the scheduler variables' precedence, the launcher's start."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from trial_instrumentation import names
from trial_instrumentation.auto import naming
from trial_instrumentation.auto.naming import choose, launch_time, script_name

NS, POD = names.ENV_K8S_NAMESPACE, names.ENV_K8S_POD


@pytest.fixture
def utc(local_zone: Callable[[str], None]) -> None:
    local_zone("UTC")


@pytest.mark.parametrize(("argv", "script"), [
    (["train.py"], "train"),
    (["/x/y/train.py", "--lr", "1"], "train"),
    (["torchrun", "--nproc-per-node", "2", "fit.py", "--data", "d.py"], "fit"),
    (["python", "-m", "pkg.train", "--cfg", "c.py"], "pkg.train"),
    (["python", "-m", "a/b"], "a-b"),
    (["python", "-m", ""], "unnamed"),
    (["/opt/bin/py3", "-m"], "py3"),  # -m with nothing after it
    (["/usr/local/bin/my-launcher", "--x"], "my-launcher"),
    ([], "python"),
    ([""], "python"),
    (["", "--flag"], "python"),  # no program name: python, whatever follows
    (["/usr/bin/prog", ""], "prog"),
    (["-m"], "-m"),  # -m as the program, nothing after it
    (["python3", "-u", "-X", "dev", "-m", "pkg.fit", "--lr", "1"], "pkg.fit"),
    (["python3", "-u", "-m", "pkg.train", "--x", "y"], "pkg.train"),
    (["x"] * 300 + ["-m"], "x"),  # a long command line ending in -m
])
def test_the_script_name_comes_from_the_command_line(argv: list[str], script: str) -> None:
    assert script_name(argv) == script


def test_a_name_is_cut_to_the_label_length() -> None:
    long = "s" * (names.MAX_LABEL_LENGTH + 40)
    assert script_name([f"{long}.py"]) == "s" * names.MAX_LABEL_LENGTH
    exact = "e" * names.MAX_LABEL_LENGTH
    assert script_name([f"{exact}.py"]) == exact
    experiment, trial, _ = choose({"SLURM_JOB_NAME": "a/b/c", "SLURM_JOB_ID": long}, ["t.py"])
    assert (experiment, trial) == ("a-b-c", "s" * names.MAX_LABEL_LENGTH)


def test_slurm_wins_over_torchrun_and_kubernetes() -> None:
    env = {"SLURM_JOB_NAME": "bert", "SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "rdzv",
           NS: "team-a", POD: "pod-1"}
    assert choose(env, ["train.py"]) == ("bert", "4242", "Slurm, Slurm")


def test_torchrun_before_kubernetes_for_the_trial_and_kubernetes_for_the_experiment() -> None:
    env = {"TORCHELASTIC_RUN_ID": "rdzv-7", NS: "team-a", POD: "pod-1"}
    assert choose(env, ["train.py"]) == ("team-a", "rdzv-7", "Kubernetes, torchrun")
    assert choose({NS: "team-a", POD: "pod-1"}, ["train.py"]) == (
        "team-a", "pod-1", "Kubernetes, Kubernetes")


def test_blank_values_and_torchruns_none_are_not_names(utc: None) -> None:
    env = {"SLURM_JOB_NAME": "  ", "SLURM_JOB_ID": "", "TORCHELASTIC_RUN_ID": "none",
           POD: " pod-2 "}
    assert choose(env, ["train.py"], started=0.0) == ("train", "pod-2",
                                                      "the script, Kubernetes")
    assert choose({"SLURM_JOB_NAME": " bert "}, ["train.py"], started=1700000000.0) == (
        "bert", "train-20231114-221320", "Slurm, the script's start")


def test_with_no_scheduler_the_trial_is_the_script_and_its_start(utc: None) -> None:
    assert choose({}, ["/x/train.py"], started=1700000000.0) == (
        "train", "train-20231114-221320", "the script, the script's start")
    before = time.time()
    experiment, trial, where = choose({}, ["fit.py"])
    after = time.time()
    assert experiment == "fit" and where == "the script, the script's start"
    stamps = {f"fit-{time.strftime('%Y%m%d-%H%M%S', time.localtime(t))}"
              for t in (before, after)}
    assert trial in stamps


def test_a_torchrun_rank_takes_its_launchers_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(naming.os, "getppid", lambda: 1)  # init: started long before now
    launcher = psutil.Process(1).create_time()
    env = {names.ENV_LOCAL_RANK: "3", "TORCHELASTIC_RUN_ID": "rdzv"}
    assert launch_time(env) == pytest.approx(launcher, abs=0.05)
    # Either variable alone is not torchrun's rank: now.
    for alone in ({names.ENV_LOCAL_RANK: "3"}, {"TORCHELASTIC_RUN_ID": "rdzv"}, {}):
        before = time.time()
        assert before <= launch_time(alone) <= time.time()


def test_a_launcher_that_cannot_be_read_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = max(psutil.pids()) + 100_000
    monkeypatch.setattr(naming.os, "getppid", lambda: gone)
    env = {names.ENV_LOCAL_RANK: "0", "TORCHELASTIC_RUN_ID": "rdzv"}
    before = time.time()
    assert before <= launch_time(env) <= time.time()


def test_the_launchers_start_is_read_from_proc_whatever_its_name(tmp_path: Path) -> None:
    assert naming._process_start(os.getpid()) == pytest.approx(
        psutil.Process().create_time(), abs=0.05)
    # A process name with ") " in it must not shift the fields read after it.
    odd = tmp_path / "we) ird) 1 2"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    with subprocess.Popen([str(odd), "30"]) as process:
        try:
            assert naming._process_start(process.pid) == pytest.approx(
                psutil.Process(process.pid).create_time(), abs=0.05)
        finally:
            process.kill()


def test_torchruns_none_is_no_name_in_a_string_of_its_own() -> None:
    # As os.environ gives it: a string made at run time, equal to "none", not the literal.
    none = "no" + "ne"[: len("ne")]
    assert choose({"TORCHELASTIC_RUN_ID": none, POD: "pod-3"}, ["t.py"])[1:] == (
        "pod-3", "the script, Kubernetes")
