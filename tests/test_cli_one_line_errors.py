"""Every bad flag value of every `trainwatch` subcommand is ONE line on stderr that names the
flag, what was given and an example, exit 2: never argparse's usage block (issue 38, item 5).

The walk reads the parser itself, so a subcommand or typed flag added later is checked too."""

from __future__ import annotations

import argparse

import pytest

from trainwatch import cli
from trainwatch.cliutil import EXIT_USAGE

BAD = "banana"


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) for every leaf subcommand: ("stack", "up"), ("trials",), ..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _subcommands(sub, (*path, name))


def _rejects(action: argparse.Action, value: str) -> bool:
    if action.choices is not None:
        return value not in action.choices
    try:
        action.type(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return True
    return False


def _typed_flags() -> list[tuple[tuple[str, ...], str]]:
    """(subcommand path, flag) for every option whose type or choices refuse 'banana'."""
    return [(path, action.option_strings[-1])
            for path, parser in _subcommands(cli._parser())
            for action in parser._actions
            if action.option_strings and (action.type is not None or action.choices)
            and action.nargs is None and _rejects(action, BAD)]


FLAGS = _typed_flags()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def test_the_walk_finds_every_typed_flag_the_issue_names():
    found = {(" ".join(path), flag) for path, flag in FLAGS}
    for expected in [("trials", "--since"), ("diagnose", "--since"), ("diagnose", "--at"),
                     ("diagnose", "--window"), ("gc", "--max-age"), ("report", "--since"),
                     ("compare", "--since"), ("check", "--since"), ("profile", "--steps"),
                     ("trials", "--format"), ("stack up", "--prometheus-port"),
                     ("diagnose", "--timeout")]:
        assert expected in found
    assert len(FLAGS) >= 30


@pytest.mark.parametrize(("path", "flag"), FLAGS, ids=[f"{' '.join(p)} {f}" for p, f in FLAGS])
def test_a_bad_value_is_one_line_naming_the_flag_the_value_and_an_example(path, flag, capsys):
    code, out, err = _run([*path, flag, BAD], capsys)
    assert code == EXIT_USAGE
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n")
    assert not err.startswith("usage: ")
    assert err.startswith(f"trainwatch {' '.join(path)}: error: ")
    assert flag in err and repr(BAD) in err
    assert "e.g." in err or "choose from" in err
    assert err.count("e.g.") <= 1  # one example, not argparse's and ours


@pytest.mark.parametrize(("path", "flag"), FLAGS, ids=[f"{' '.join(p)} {f}" for p, f in FLAGS])
def test_a_flag_without_its_value_is_one_line_with_an_example(path, flag, capsys):
    code, out, err = _run([*path, flag], capsys)
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and not err.startswith("usage: ")
    assert f"argument {flag}" in err or f"/{flag}" in err
    assert "e.g." in err or "choose from" in err


@pytest.mark.parametrize("argv", [["bogus"], ["stack"], ["trials", "--bogus"], ["compare", "a"],
                                  ["diagnose"]])
def test_an_unknown_command_or_missing_argument_is_one_line_too(argv, capsys):
    code, out, err = _run(argv, capsys)
    assert code == EXIT_USAGE and out == ""
    assert err.count("\n") == 1 and not err.startswith("usage: ") and err.startswith("trainwatch")


def test_good_values_still_parse_to_their_numbers():
    parser = cli._parser()
    assert parser.parse_args(["trials", "--since", "2d"]).since == 2 * 86400
    assert parser.parse_args(["profile", "--experiment", "e", "--trial", "t",
                              "--steps", "3"]).steps == 3
    assert parser.parse_args(["stack", "up", "--prometheus-port", "9999"]).prometheus_port == 9999


def test_help_is_still_argparse_s_full_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["trials", "--help"])
    assert exited.value.code == 0
    assert "usage: trainwatch trials" in capsys.readouterr().out
