"""trainwatch/cliutil.py's argument types and formatters at their edges, both sides of each
(mutation testing, `make mutation TARGETS=cliutil`, found them unasserted)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pytest

from trainwatch import cliutil
from trainwatch.cliutil import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    LATEST_TIME,
    MAX_DURATION,
    MAX_TIMEOUT,
    Parser,
    add_prometheus,
    add_trial,
    ago,
    bounded,
    duration,
    ms,
    parse_time,
    span,
    timeout_seconds,
)


def test_exit_codes_are_distinct_and_shell_conventional() -> None:
    assert (EXIT_OK, EXIT_FOUND, EXIT_USAGE) == (0, 1, 2)


@pytest.mark.parametrize(("seconds", "shown"), [
    (119.4, "119 seconds"), (120, "2 minutes"), (7199, "120 minutes"), (7200, "2 hours"),
    (48 * 3600 - 1, "48 hours"), (48 * 3600, "2 days"), (36 * 3600 + 360, "36.1 hours"),
    (90 * 60 * 60 * 24 + 8640, "90.1 days"), (0, "0 seconds"),
    # where an hour of 3,599 or 3,601 seconds (a day of 86,399 or 86,401) would round otherwise
    (7739, "2.1 hours"), (7382, "2.1 hours"), (203038, "2.3 days"), (185761, "2.2 days")])
def test_ago_changes_unit_at_each_edge(seconds: float, shown: str) -> None:
    assert ago(seconds) == shown


def test_ms_is_milliseconds_to_a_tenth() -> None:
    assert (ms(0.00125), ms(1.5), ms(0), ms(None)) == ("1.2 ms", "1500.0 ms", "0.0 ms", "-")


def test_duration_takes_up_to_a_hundred_years() -> None:
    assert duration("90s") == 90 and duration("0") == 0
    assert MAX_DURATION == 100 * 365 * 86400
    assert duration(f"{MAX_DURATION:.0f}") == MAX_DURATION
    for bad in (f"{MAX_DURATION + 1:.0f}", "-5m", "inf", "nan", "1e308", "banana"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
            duration(bad)


def test_span_is_a_duration_above_zero() -> None:
    assert span("1s") == 1 and span("0.001") == 0.001
    for bad in ("0", "0s", "0m"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a duration above 0"):
            span(bad)


def test_timeout_is_above_zero_and_at_most_a_day() -> None:
    assert MAX_TIMEOUT == 86400
    assert timeout_seconds("0.001") == 0.001 and timeout_seconds("1d") == MAX_TIMEOUT
    for bad in ("0", "-1", "86401", "1d1s", "inf", "nan", "banana"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a timeout"):
            timeout_seconds(bad)


def test_parse_time_from_1970_to_2100_a_zoneless_time_in_utc() -> None:
    assert LATEST_TIME == 4102444800  # 2100-01-01T00:00:00Z
    assert parse_time("0") == 0 and parse_time(f"{LATEST_TIME:.0f}") == LATEST_TIME
    assert parse_time("2100-01-01T00:00:00Z") == LATEST_TIME
    assert parse_time("2023-11-14T22:13:20") == 1700000000  # no zone: UTC, not local time
    assert parse_time("2023-11-14T23:13:20+01:00") == 1700000000
    for bad in ("-1", f"{LATEST_TIME + 1:.0f}", "2100-01-01T00:00:01Z", "nan", "inf",
                "0001-01-01T00:00:00Z", "banana"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a time"):
            parse_time(bad)


def test_a_zoneless_time_is_utc_where_the_local_zone_is_not(
        local_zone: Callable[[str], None]) -> None:
    local_zone("XYZ-05:30")  # 5 h 30 ahead of UTC
    assert time.localtime(0)[3:5] == (5, 30)  # the machine's zone really is another one
    assert parse_time("2023-11-14T22:13:20") == 1700000000
    assert parse_time("2023-11-15T03:43:20+05:30") == 1700000000  # a zone given is kept


def test_bounded_cuts_past_the_limit_and_not_at_it() -> None:
    assert bounded("x" * 5, 5) == "xxxxx"
    assert bounded("x" * 6, 5) == "xxxxx…(6 chars)"
    assert bounded("a\nb", 3) == "a\\nb"


def parser() -> Parser:
    p = Parser(prog="trainwatch t")
    add_prometheus(p)
    add_trial(p)
    p.add_argument("--steps", type=int)
    p.add_argument("--format", choices=["text", "json"])
    return p


def test_the_common_flags_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parser().parse_args(["--experiment", "e"])
    assert (args.prometheus, args.timeout, args.trial, args.rank) == (None, 10.0, None, None)
    several = Parser(prog="x")
    add_prometheus(several, timeout=3, several=True)
    args = several.parse_args(["--prometheus", "http://a", "--prometheus", "http://b"])
    assert (args.prometheus, args.timeout) == (["http://a", "http://b"], 3)
    assert "repeat it for the shards" in several.format_help()
    assert "repeat it" not in parser().format_help()
    assert "$TRAINWATCH_PROMETHEUS" in parser().format_help()


@pytest.mark.parametrize(("argv", "line"), [
    (["--experiment", "e", "--steps", "x"],
     "trainwatch t: error: argument --steps: invalid int value: 'x' (e.g. --steps STEPS)"),
    (["--experiment", "e", "--format", "xml"],
     ("trainwatch t: error: argument --format: invalid choice: 'xml' (choose from 'text', "
     "'json')")),
    (["--experiment", "e", "--timeout", "0"],
     ("trainwatch t: error: argument --timeout: not a timeout: '0' (seconds above 0, at most "
     "86400: a day; e.g. 10 or 2.5)")),
    ([], ("trainwatch t: error: the following arguments are required: --experiment "
         "(see `trainwatch t --help`)")),
])
def test_a_bad_flag_is_one_line_with_an_example(argv: list[str], line: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parser().parse_args(argv)
    assert done.value.code == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [line]


def test_an_example_comes_from_the_flags_own_metavar_or_table() -> None:
    p = Parser(prog="x")
    p.add_argument("--since", type=span, metavar="DURATION")
    p.add_argument("n", type=int)
    assert p._example("argument --since: not a duration above 0: '0'") == \
        f" (e.g. --since {cliutil.EXAMPLES.get('DURATION', 'DURATION')})"
    assert p._example("argument n: invalid int value: 'x'") == \
        f" (e.g. {cliutil.EXAMPLES.get('N', 'N')})"
    assert p._example("argument --nope: x") == " (see `x --help`)"


def test_an_example_names_a_flags_long_spelling() -> None:
    p = Parser(prog="x")
    p.add_argument("-s", "--steps", type=int)
    assert p._example("argument -s/--steps: invalid int value: 'x'") == " (e.g. --steps STEPS)"
