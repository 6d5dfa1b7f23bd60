"""trainwatch/run.py, `trainwatch run` in process: the environment the command is given (the
auto switch, the site folder first on PYTHONPATH, the names and the Pushgateway, flags over
variables over chosen names), the one line it prints, and the command it execs (exec stood in
for: it records what it was given); usage, a command not found and no Pushgateway."""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

import pytest

from trainwatch import cli, run
from trial_instrumentation import names

PGW = "http://127.0.0.1:19391"


def parse(*argv: str) -> argparse.Namespace:
    return cli._parser().parse_args(["run", *argv])


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """os.execvpe recorded, and an environment with no stack, names or PYTHONPATH of its own."""
    seen: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(run.os, "execvpe", lambda file, argv, env: seen.append(
        (file, list(argv), dict(env))))
    for variable in (names.ENV_EXPERIMENT, names.ENV_TRIAL, names.ENV_PUSHGATEWAY, "PYTHONPATH",
                     "SLURM_JOB_NAME", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID",
                     getattr(names, "ENV_K8S_NAMESPACE", "X_UNSET"),
                     getattr(names, "ENV_K8S_POD", "X_UNSET"), names.AUTO_ENV):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("TRAINWATCH_STATE_DIR", str(tmp_path / "no-stack"))
    return seen


def test_the_command_after_the_dashes_is_execd_with_the_flags_names_and_site_first(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYTHONPATH", "/opt/mine")
    monkeypatch.setenv("KEPT_AS_IS", "x y")
    args = parse("--experiment", "bert", "--trial", "t-7", "--pushgateway", PGW, "--",
                 "python3", "train.py", "--", "--lr", "1")
    assert run.run(args) == 2  # exec replaces the process; were it to return, usage
    [(file, argv, env)] = execs
    assert file == "python3" and argv == ["python3", "train.py", "--", "--lr", "1"]
    assert env[names.AUTO_ENV] == "1"
    assert env["PYTHONPATH"] == f"{run.SITE}{os.pathsep}/opt/mine"
    assert (env[names.ENV_EXPERIMENT], env[names.ENV_TRIAL], env[names.ENV_PUSHGATEWAY]) == (
        "bert", "t-7", PGW)
    assert env["KEPT_AS_IS"] == "x y" and env["TRAINWATCH_STATE_DIR"] == os.environ[
        "TRAINWATCH_STATE_DIR"]
    assert capsys.readouterr() == ("", ("trainwatch run: experiment bert, trial t-7 (names from "
                                   f"flags and environment), pushing to {PGW}\n"))
    assert names.ENV_EXPERIMENT not in os.environ  # this process's own environment untouched


def test_without_dashes_the_command_is_the_same_and_a_site_alone_on_an_empty_pythonpath(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setenv(names.ENV_PUSHGATEWAY, PGW)
    monkeypatch.setenv("SLURM_JOB_NAME", "bert")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert run.run(parse("true", "x")) == 2
    [(file, argv, env)] = execs
    assert (file, argv) == ("true", ["true", "x"])
    assert env["PYTHONPATH"] == str(run.SITE)
    assert (env[names.ENV_EXPERIMENT], env[names.ENV_TRIAL]) == ("bert", "4242")
    assert capsys.readouterr().err == ("trainwatch run: experiment bert, trial 4242 (names from "
                                       f"Slurm, Slurm), pushing to {PGW}\n")


def test_one_name_given_says_where_the_other_came_from_and_an_empty_flag_is_no_flag(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_JOB_NAME", "from-slurm")
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv(names.ENV_PUSHGATEWAY, PGW)
    assert run.run(parse("--experiment", "mine", "--trial", "", "--pushgateway", "", "--",
                         "true")) == 2
    [(_, _, env)] = execs
    assert (env[names.ENV_EXPERIMENT], env[names.ENV_TRIAL], env[names.ENV_PUSHGATEWAY]) == (
        "mine", "99", PGW)
    # The experiment is the flag's, not Slurm's job name: the line says so.
    assert capsys.readouterr().err == ("trainwatch run: experiment mine, trial 99 (names from "
                                       f"flag or environment, Slurm), pushing to {PGW}\n")
    execs.clear()
    monkeypatch.setenv(names.ENV_TRIAL, "env-trial")  # both named: by flag and variable
    assert run.run(parse("--experiment", "mine", "--", "true")) == 2
    assert execs[0][2][names.ENV_TRIAL] == "env-trial"
    assert "(names from flags and environment)" in capsys.readouterr().err


def test_names_chosen_here_are_the_scripts_and_the_variable_pushgateway_loses_to_the_flag(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(names.ENV_PUSHGATEWAY, "http://127.0.0.1:1")
    assert run.run(parse("--pushgateway", PGW, "python", "/x/train.py")) == 2
    [(_, _, env)] = execs
    assert env[names.ENV_EXPERIMENT] == "train" and env[names.ENV_TRIAL].startswith("train-")
    assert env[names.ENV_PUSHGATEWAY] == PGW
    assert capsys.readouterr().err == (
        f"trainwatch run: experiment train, trial {env[names.ENV_TRIAL]} (names from the "
        f"script, the script's start), pushing to {PGW}\n")


def test_no_pushgateway_anywhere_still_runs_the_command_and_says_nothing_is_timed(
        execs: list[tuple[str, list[str], dict[str, str]]],
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run.run(parse("--experiment", "e", "--trial", "t", "--", "true")) == 2
    [(file, _, env)] = execs
    assert file == "true" and names.ENV_PUSHGATEWAY not in env
    assert (env[names.ENV_EXPERIMENT], env[names.ENV_TRIAL], env[names.AUTO_ENV]) == (
        "e", "t", "1")
    assert capsys.readouterr().err == (
        f"trainwatch run: no Pushgateway (--pushgateway, ${names.ENV_PUSHGATEWAY} or a running "
        "`trainwatch stack`): nothing is timed\n")


@pytest.mark.parametrize("argv", [[], ["--"]])
def test_no_command_is_usage_and_nothing_runs(
        execs: list[tuple[str, list[str], dict[str, str]]], argv: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run.run(parse("--pushgateway", PGW, *argv)) == 2
    assert execs == []
    assert capsys.readouterr() == (
        "", "trainwatch run: no command: trainwatch run [flags] -- COMMAND ...\n")


def test_a_command_that_cannot_run_exits_127_with_the_systems_reason(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def fails(file: str, argv: list[str], env: dict[str, str]) -> None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), file)
    monkeypatch.setattr(run.os, "execvpe", fails)
    assert run.run(parse("--pushgateway", PGW, "--", "no-such-thing", "a")) == 127
    assert capsys.readouterr().err.splitlines()[-1] == (
        "trainwatch run: cannot run no-such-thing: No such file or directory")


def test_the_site_folder_holds_the_sitecustomize_that_times_torch() -> None:
    assert (run.SITE / "sitecustomize.py").is_file()


def test_only_a_leading_double_dash_is_dropped_whatever_sorts_before_it(
        execs: list[tuple[str, list[str], dict[str, str]]]) -> None:
    for command in (["+x", "--"], ["+", "a"], ["!", "--", "b"]):  # each sorts before "--"
        execs.clear()
        assert run.run(parse("--pushgateway", PGW, *command)) == 2
        assert [(file, argv) for file, argv, _ in execs] == [(command[0], command)]


class Stderr:
    """A stderr that keeps what was written apart from what was flushed."""

    def __init__(self) -> None:
        self.pending, self.flushed = "", ""

    def write(self, text: str) -> int:
        self.pending += text
        return len(text)

    def flush(self) -> None:
        self.flushed, self.pending = self.flushed + self.pending, ""


def test_the_line_is_flushed_before_the_command_replaces_this_process(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    err = Stderr()
    at_exec: list[str] = []
    monkeypatch.setattr(run.sys, "stderr", err)
    monkeypatch.setattr(run.os, "execvpe", lambda file, argv, env: at_exec.append(err.flushed))
    monkeypatch.setenv("TRAINWATCH_STATE_DIR", str(tmp_path))
    assert run.run(parse("--experiment", "e", "--trial", "t", "--pushgateway", PGW, "true")) == 2
    assert at_exec == [("trainwatch run: experiment e, trial t (names from flags and "
                       f"environment), pushing to {PGW}\n")]


def test_a_trial_named_by_its_variable_and_an_experiment_chosen_here_say_so_each(
        execs: list[tuple[str, list[str], dict[str, str]]], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(names.ENV_TRIAL, "lr-0.1")
    monkeypatch.setenv("SLURM_JOB_ID", "99")  # not the trial: the variable names it
    assert run.run(parse("--pushgateway", PGW, "python", "train.py")) == 2
    assert capsys.readouterr().err == ("trainwatch run: experiment train, trial lr-0.1 (names "
                                       f"from the script, flag or environment), pushing to {PGW}\n")
