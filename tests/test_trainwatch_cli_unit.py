"""trainwatch/cli.py, the console script's dispatch and its end on a closed pipe: each command
reaches its own module's ``run`` (and only it) with its parsed arguments, and a reader that went
away (`trainwatch diagnose ... | head`) ends it with 141 and stdout pointed at /dev/null, whether
the pipe broke while the command wrote or at the final flush; any other error is not swallowed."""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from trainwatch import cli, gc, profile, run, usage
from trainwatch.diagnose import cli as diagnose_cli
from trainwatch.diagnose import pin
from trainwatch.report import cli as report_cli
from trainwatch.stack import cli as stack_cli

RUNNERS = {"stack": stack_cli, "gc": gc, "report": report_cli, "profile": profile, "run": run,
           "usage": usage, "baseline": pin, "diagnose": diagnose_cli}
ARGV = {"stack": ["stack", "status"], "gc": ["gc", "--pushgateway", "http://pgw:9091"],
        "report": ["report", "--experiment", "e", "-o", "r.html"],
        "profile": ["profile", "--experiment", "e", "--trial", "t"], "run": ["run", "--", "true"],
        "usage": ["usage"], "baseline": ["baseline", "show", "e/t"],
        "diagnose": ["diagnose", "--experiment", "e"], "trials": ["trials"],
        "compare": ["compare", "a/b", "c/d"], "check": ["check", "e/t"]}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, argparse.Namespace]]:
    """Each module's run stood in for: it records (module, args) and returns its own code."""
    seen: list[tuple[str, argparse.Namespace]] = []
    for code, (name, module) in enumerate(RUNNERS.items(), start=10):
        def runner(args: argparse.Namespace, name: str = name, code: int = code) -> int:
            seen.append((name, args))
            return code
        monkeypatch.setattr(module, "run", runner)
    return seen


@pytest.mark.parametrize("command", sorted(ARGV))
def test_each_command_reaches_its_own_modules_run_once_with_its_arguments(
        calls: list[tuple[str, argparse.Namespace]], command: str) -> None:
    owner = command if command in RUNNERS else "diagnose"  # trials, compare, check: diagnose's
    assert cli.main(ARGV[command]) == 10 + list(RUNNERS).index(owner)
    [(name, args)] = calls
    assert name == owner and args.command == command


def test_no_command_or_an_unknown_one_is_refused_with_exit_2(
        calls: list[tuple[str, argparse.Namespace]], capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["nonsense"]):
        with pytest.raises(SystemExit) as done:
            cli.main(argv)
        assert done.value.code == 2
    assert calls == [] and capsys.readouterr().err.count("trainwatch: error:") == 2


class Stdout:
    """A stdout on fd 99 whose flush can be made to fail as a closed pipe does."""

    def __init__(self, broken: bool) -> None:
        self.broken, self.flushes = broken, 0

    def flush(self) -> None:
        self.flushes += 1
        if self.broken:
            raise BrokenPipeError

    def fileno(self) -> int:
        return 99


def _pipe(monkeypatch: pytest.MonkeyPatch, broken_flush: bool,
          main: Any) -> tuple[Stdout, list[tuple[int, int]]]:
    out = Stdout(broken_flush)
    dups: list[tuple[int, int]] = []
    monkeypatch.setattr(cli.sys, "stdout", out)
    monkeypatch.setattr(cli.os, "open", lambda path, flags: 77 if (
        path, flags) == (os.devnull, os.O_WRONLY) else pytest.fail(f"opened {path}"))
    monkeypatch.setattr(cli.os, "dup2", lambda a, b: dups.append((a, b)))
    monkeypatch.setattr(cli, "_main", main)
    return out, dups


def test_a_command_that_ends_normally_returns_its_code_after_one_flush(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, dups = _pipe(monkeypatch, False, lambda argv: 3)
    assert cli.main([]) == 3 and out.flushes == 1 and dups == []


def test_a_pipe_closed_while_writing_ends_with_141_and_stdout_on_devnull(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def writes(argv: Any) -> int:
        raise BrokenPipeError
    out, dups = _pipe(monkeypatch, False, writes)
    assert cli.main([]) == 141 and dups == [(77, 99)] and out.flushes == 1


def test_a_pipe_found_closed_at_the_final_flush_ends_with_141_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, dups = _pipe(monkeypatch, True, lambda argv: 0)
    assert cli.main([]) == 141 and dups == [(77, 99)]


def test_another_error_is_raised_after_the_flush_and_stdout_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(argv: Any) -> int:
        raise ValueError("a bug")
    out, dups = _pipe(monkeypatch, False, fails)
    with pytest.raises(ValueError, match="a bug"):
        cli.main([])
    assert out.flushes == 1 and dups == []


# This file imported trainwatch.cli already: runpy runs it again as __main__, and says so.
@pytest.mark.filterwarnings("ignore:'trainwatch.cli' found in sys.modules")
def test_python_m_trainwatch_cli_runs_main_and_exits_with_its_code(
        monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, argparse.Namespace]]) -> None:
    import runpy
    monkeypatch.setattr(cli.sys, "argv", ["trainwatch", "usage"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("trainwatch.cli", run_name="__main__")
    assert done.value.code == 10 + list(RUNNERS).index("usage") and len(calls) == 1


def test_the_usage_shows_a_capitalised_placeholder_that_names_no_command() -> None:
    """``trainwatch [-h] X ...``: X stands for the command, so it must not read as one of them
    (``trainwatch baseline ...``), and is in capitals as every placeholder argparse makes."""
    parser = cli._parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    usage_words = parser.format_usage().split()
    assert usage_words[:3] == ["usage:", "trainwatch", "[-h]"] and usage_words[-1] == "..."
    placeholder = usage_words[-2]
    assert placeholder.isalpha() and placeholder.isupper()
    assert placeholder.lower() not in commands.choices and placeholder not in commands.choices
    assert f"\n  {placeholder}\n" in parser.format_help()  # the heading of the command list
