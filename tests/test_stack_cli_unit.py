"""trainwatch/stack/cli.py, `trainwatch stack ACTION` parsed and run in process: each action
reaches its own function (and no other) with the state directory asked for, `up` with every flag
in its settings field (each port its own service's), and each failure one line and exit 2 (130
for an interrupt) while a closed pipe and other errors are not swallowed. The functions that
would start or stop services are stood in for; they record what they were given."""

from __future__ import annotations

import argparse
import errno
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from trainwatch import cli
from trainwatch.layout import ENV_STATE_DIR, StackError, StateDir
from trainwatch.stack import cli as stack_cli
from trainwatch.stack import commands
from trainwatch.stack.settings import DEFAULT_PORTS, StackSettings


def parse(*argv: str) -> argparse.Namespace:
    """Parsed as from a command line: each word a string of its own (as sys.argv's are), never
    the interned literal the code compares it with."""
    return cli._parser().parse_args(["stack", *("".join(list(word)) for word in argv)])


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """up, status, notifications and down recorded; each returns a code of its own."""
    seen: list[tuple[Any, ...]] = []

    def record(name: str, code: int) -> Any:
        def stand_in(*args: Any, **kwargs: Any) -> int:
            seen.append((name, *args, *kwargs.items()))
            return code
        return stand_in

    monkeypatch.setattr(stack_cli, "up", record("up", 11))
    for code, name in enumerate(("status", "notifications", "down"), start=12):
        monkeypatch.setattr(commands, name, record(name, code))
    return seen


@pytest.mark.parametrize(("action", "code"), [("status", 12), ("notifications", 13),
                                              ("down", 14)])
def test_each_action_runs_its_own_function_once_on_the_state_directory_given(
        calls: list[tuple[Any, ...]], tmp_path: Path, action: str, code: int) -> None:
    assert stack_cli.run(parse(action, "--state-dir", str(tmp_path / "s"))) == code
    assert calls == [(action, StateDir(tmp_path / "s"))]


def test_without_state_dir_the_variables_directory_is_used(
        calls: list[tuple[Any, ...]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path / "from-env"))
    assert stack_cli.run(parse("down")) == 14
    assert calls == [("down", StateDir(tmp_path / "from-env"))]


def test_up_passes_every_flag_to_its_own_setting_and_each_port_to_its_service(
        calls: list[tuple[Any, ...]], tmp_path: Path) -> None:
    ports = {name: 20001 + i * 7 for i, name in enumerate(DEFAULT_PORTS)}
    argv = [f"--{name}-port={port}" for name, port in ports.items()]
    assert stack_cli.run(parse(
        "up", "--state-dir", str(tmp_path), *argv, "--for", "20s", "--rate-window", "31s",
        "--scrape-interval", "3s", "--alertmanager-config", "am.yml", "--runbook-url",
        "http://rb/x", "--prometheus-external-url", "http://p.example",
        "--alertmanager-external-url", "http://a.example", "--gc-every", "17s",
        "--gc-ended-after", "2m", "--gc-max-age", "3h")) == 11
    assert calls == [("up", StateDir(tmp_path), StackSettings(
        ports=ports, for_="20s", rate_window="31s", scrape_interval="3s",
        alertmanager_config="am.yml", runbook_url="http://rb/x",
        prometheus_external_url="http://p.example", alertmanager_external_url="http://a.example",
        gc_every="17s", gc_ended_after="2m", gc_max_age="3h"))]


def test_up_without_flags_asks_for_nothing(calls: list[tuple[Any, ...]], tmp_path: Path) -> None:
    assert stack_cli.run(parse("up", "--state-dir", str(tmp_path))) == 11
    assert calls == [("up", StateDir(tmp_path),
                      StackSettings(ports=dict.fromkeys(DEFAULT_PORTS)))]


@pytest.mark.parametrize("argv", [["stack"], ["stack", "restart"],
                                  ["stack", "status", "--for", "20s"]])
def test_no_action_an_unknown_one_or_ups_flag_elsewhere_is_refused(
        calls: list[tuple[Any, ...]], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli._parser().parse_args(argv)
    assert done.value.code == 2 and calls == []


def failing(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def fails(state: StateDir) -> int:
        raise error
    monkeypatch.setattr(commands, "status", fails)


def test_a_stack_error_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, StackError("prometheus is missing"))
    assert stack_cli.run(parse("status", "--state-dir", str(tmp_path))) == 2
    assert capsys.readouterr() == ("", ("trainwatch stack status: error: prometheus is "
                                   "missing\n"))


def test_an_os_error_names_its_file_or_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, PermissionError(errno.EACCES, "Permission denied", "/s/run/x.pid"))
    assert stack_cli.run(parse("status", "--state-dir", str(tmp_path))) == 2
    assert capsys.readouterr().err == ("trainwatch stack status: error: /s/run/x.pid: "
                                       "Permission denied\n")
    failing(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    assert stack_cli.run(parse("status", "--state-dir", str(tmp_path))) == 2
    assert capsys.readouterr().err == ("trainwatch stack status: error: No space left on "
                                       "device\n")
    failing(monkeypatch, OSError("a reason with no errno"))  # no strerror: the error itself
    assert stack_cli.run(parse("status", "--state-dir", str(tmp_path))) == 2
    assert capsys.readouterr().err == "trainwatch stack status: error: a reason with no errno\n"


def test_an_interrupt_exits_130_saying_what_was_started_was_stopped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, KeyboardInterrupt())
    assert stack_cli.run(parse("status", "--state-dir", str(tmp_path))) == 130
    assert capsys.readouterr() == ("", ("trainwatch stack status: interrupted; what this run "
                                   "started was stopped\n"))


@pytest.mark.parametrize("error", [BrokenPipeError(errno.EPIPE, "Broken pipe"),
                                   RuntimeError("a bug"), SystemExit(5)])
def test_a_closed_pipe_and_other_errors_are_not_swallowed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: BaseException,
        capsys: pytest.CaptureFixture[str]) -> None:
    failing(monkeypatch, error)
    with pytest.raises(type(error)):
        stack_cli.run(parse("status", "--state-dir", str(tmp_path)))
    assert capsys.readouterr() == ("", "")


def test_the_help_names_every_service_and_ups_port_flags_their_defaults(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["stack", "up", "--help"])
    out = capsys.readouterr().out
    for name, port in DEFAULT_PORTS.items():
        assert f"--{name}-port PORT" in out and f"default {port}," in " ".join(out.split())


def test_each_up_option_shows_a_word_whose_example_up_accepts(
        calls: list[tuple[Any, ...]], tmp_path: Path) -> None:
    """The usage line's word after each `stack up` option is one the one-line errors give an
    example of (cliutil.EXAMPLES), and that example is a value `up` accepts there: a duration
    where a duration is read, a URL where a URL is, a file name where a file is."""
    from trainwatch.cliutil import EXAMPLES
    from trainwatch.stack import services
    from trainwatch.stack.settings import check

    [sub] = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    stack = sub.choices["stack"]
    assert " ".join(stack.format_usage().split()) == "usage: trainwatch stack [-h] ACTION ..."
    [actions] = [a for a in stack._actions if isinstance(a, argparse._SubParsersAction)]
    options = [a for a in actions.choices["up"]._actions
               if a.option_strings and a.nargs != 0 and a.dest != "state_dir"]
    assert len(options) >= 15  # the ports, the rules' durations, the URLs, gc's three
    for action in options:
        flag, word = action.option_strings[-1], action.metavar
        assert word in EXAMPLES, (flag, word)
        assert (word == "PORT") == (action.type is int), (flag, word)  # a number only there
        calls.clear()
        assert stack_cli.run(parse("up", "--state-dir", str(tmp_path), flag,
                                   EXAMPLES[word])) == 11, flag
        [(_, _, asked)] = calls
        # Ports, durations and URLs as `up` checks them, the ports not asked for its defaults.
        asked = replace(asked, ports={**DEFAULT_PORTS,
                                      **{k: v for k, v in asked.ports.items() if v}})
        check(asked)
        services._gc(StateDir.resolve(str(tmp_path)), asked)  # gc's durations
