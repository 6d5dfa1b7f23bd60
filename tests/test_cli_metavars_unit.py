"""What `trainwatch <command> --help` and a usage error show an option's value as: every option
parsed as a duration (cliutil.duration, span: ``90``, ``30m``, ``1h30m``) shows DURATION, whatever
the command, and every option naming a server (Prometheus, the Pushgateway) shows URL, so the
usage line says what to write there."""

from __future__ import annotations

import argparse
import re

from trainwatch import cli
from trainwatch.cliutil import duration, span


def commands() -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    found = dict(sub.choices)
    for name, parser in list(found.items()):  # `trainwatch baseline set`, ...: one level more
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                found |= {f"{name} {n}": p for n, p in a.choices.items()}
    return found


def shown(parser: argparse.ArgumentParser, option: str) -> str | None:
    """The word the usage line shows after ``option`` (None: it takes no value)."""
    usage = " ".join(parser.format_usage().split())
    found = re.search(rf"\[?{re.escape(option)}(?: ([A-Z_]+))?[\] ]", usage + " ")
    assert found is not None, (option, usage)
    return found[1]


def test_every_duration_option_shows_duration_in_every_command() -> None:
    seen = []
    for name, parser in commands().items():
        for a in parser._actions:
            if a.type in (duration, span):
                seen.append((name, a.option_strings[-1], shown(parser, a.option_strings[-1])))
    assert {word for *_, word in seen} == {"DURATION"}, seen
    # gc's four, among them
    assert {o for n, o, _ in seen if n == "gc"} == {"--max-age", "--ended-after", "--timeout",
                                                    "--budget"}


def test_every_server_option_shows_url() -> None:
    seen = [(name, option, shown(parser, option)) for name, parser in commands().items()
            for a in parser._actions for option in a.option_strings[-1:]
            if option in ("--prometheus", "--pushgateway")]
    assert {word for *_, word in seen} == {"URL"}, seen
    assert {("gc", "--pushgateway", "URL"), ("run", "--pushgateway", "URL")} <= set(seen)


def test_every_time_option_shows_time_and_every_path_option_a_file_or_a_dir() -> None:
    from pathlib import Path

    from trainwatch.cliutil import parse_time
    times, paths = [], []
    for name, parser in commands().items():
        for a in parser._actions:
            if not a.option_strings or a.nargs == 0:
                continue
            if a.type is parse_time:
                times.append((name, a.option_strings[-1], shown(parser, a.option_strings[-1])))
            elif a.type is Path:
                paths.append((name, a.option_strings[-1], a.metavar))
    assert {word for *_, word in times} == {"TIME"}, times
    assert {("report", "--start"), ("report", "--end"), ("diagnose", "--at")} <= {
        (n, o) for n, o, _ in times}
    assert paths and all(str(word).split(".")[0] in ("FILE", "DIR") for *_, word in paths), paths
    assert "report" in {n for n, *_ in paths}  # -o: not a vacuous pass
