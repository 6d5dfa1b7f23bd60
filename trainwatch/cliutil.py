"""What every `trainwatch` command shares: its exit codes, its duration, time and timeout
arguments and how it says how long ago something happened.

Every number a flag takes is finite and in range, or the flag is refused in one line (an
argparse error, exit 2): ``nan``, ``inf`` and ``1e308`` are numbers to Python's ``float``, and
went on to delete nothing (``gc --max-age nan``) or to crash deep inside (``--timeout inf``).

>>> duration("1h30m"), ago(420)
(5400.0, '7 minutes')
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from datetime import UTC, datetime
from typing import NoReturn

from trial_instrumentation.durations import parse_duration

EXIT_OK = 0
# A finding: `diagnose` names a bottleneck, `stack status` a service that is down.
EXIT_FOUND = 1
# Bad input, or nothing to read: an unknown trial, an unreachable Prometheus or Pushgateway.
EXIT_USAGE = 2

# The longest duration a flag takes: 100 years, past any retention or age that means anything.
MAX_DURATION = 100 * 365 * 86400.0
# The longest --timeout: a day, far past any answer (a socket's and a timer's limits are
# centuries, but a number past them crashed the request).
MAX_TIMEOUT = 86400.0
# No Unix time trainwatch takes or reads is later: 2100-01-01T00:00:00Z.
LATEST_TIME = 4102444800.0


# An example value for each metavar, for the one line that refuses a flag's value.
EXAMPLES = {"DURATION": "1h", "TIME": "2026-11-23T08:00:00Z", "PORT": "9090", "N": "5",
            "URL": "http://127.0.0.1:9090", "FILE": "out.txt", "DIR": "/tmp/stack",
            "PERCENT": "5%"}


class Parser(argparse.ArgumentParser):
    """The ArgumentParser of every `trainwatch` command and subcommand (their ``parser_class``):
    a bad flag is ONE line on stderr, naming the flag, what was given and an example, exit 2
    (EXIT_USAGE), never argparse's usage block before it.

    >>> p = Parser(prog="trainwatch trials")
    >>> _ = p.add_argument("--since", type=span, metavar="DURATION")
    >>> p.parse_args(["--since", "banana"])
    Traceback (most recent call last):
    ...
    SystemExit: 2
    """

    def error(self, message: str) -> NoReturn:
        line = f"{self.prog}: error: {printable(message)}{self._example(message)}"
        print(line, file=sys.stderr)
        sys.exit(EXIT_USAGE)

    def _example(self, message: str) -> str:
        """`` (e.g. --steps 5)`` where argparse's message gives no example of its own."""
        if "e.g." in message or "choose from" in message:
            return ""
        named = re.match(r"argument (\S+?)(?:/\S+)?: ", message)
        action = next((a for a in self._actions if named and named.group(1) in
                       (a.option_strings or [str(a.metavar or a.dest)])), None)
        if action is None:
            return f" (see `{self.prog} --help`)"
        flag = action.option_strings[-1] if action.option_strings else ""
        shown = str(action.metavar or action.dest.upper())
        value = next(iter(action.choices)) if action.choices else EXAMPLES.get(shown, shown)
        return f" (e.g. {' '.join(part for part in (flag, str(value)) if part)})"


def duration(text: str) -> float:
    """An argparse type: seconds in ``90``, ``90s``, ``30m``, ``1h30m``, ``2d``; finite and at
    most 100 years (a value at or below 0 is each command's to refuse, saying why).

    >>> duration("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: not a duration: 'nan' (a finite number of seconds up to 100y, \
e.g. 90s, 30m, 1h, 2d)
    """
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (e.g. 90s, 30m, 1h, 2d)") from None
    if not abs(seconds) <= MAX_DURATION:  # NaN, ±inf, 1e308
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a finite number of seconds up to 100y, e.g. 90s, 30m, "
            "1h, 2d)")
    return seconds


def span(text: str) -> float:
    """An argparse type: a :func:`duration` above 0 (``--since``, ``--window``)."""
    seconds = duration(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"not a duration above 0: {text!r} (e.g. 90s, 30m, "
                                         "1h, 2d)")
    return seconds


def timeout_seconds(text: str) -> float:
    """An argparse type: ``--timeout``'s seconds (``10``, ``2.5``, ``30s``), above 0 and at
    most a day (MAX_TIMEOUT).

    >>> timeout_seconds("2.5"), timeout_seconds("1m")
    (2.5, 60.0)
    """
    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"not a timeout: {text!r} (seconds above 0, at most {MAX_TIMEOUT:.0f}: a day; e.g. 10 "
            "or 2.5)")
    return seconds


def parse_time(text: str) -> float:
    """Unix seconds from ``1700000000`` or an ISO 8601 time (``2026-11-23T08:00:00Z``; a time
    without a zone is UTC), from 1970 to 2100 (LATEST_TIME).

    >>> parse_time("1700000000"), parse_time("2023-11-14T22:13:20Z")
    (1700000000.0, 1700000000.0)
    """
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a time: {text!r} (Unix seconds or ISO 8601, e.g. 2026-11-23T08:00:00Z)"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        seconds = parsed.timestamp()
    if not 0 <= seconds <= LATEST_TIME:  # NaN, ±inf, 1e308, year 1 or 9999
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (Unix seconds or ISO 8601 from 1970 to 2100, e.g. "
            "2026-11-23T08:00:00Z)")
    return seconds


def ago(seconds: float) -> str:
    """A duration as a person reads it, the one formatter of every command's durations: over
    48 hours in days, never '360.0 hours'.

    >>> ago(75), ago(420), ago(9000), ago(36 * 3600), ago(15 * 86400), ago(2.5e8)
    ('75 seconds', '7 minutes', '2.5 hours', '36 hours', '15 days', '2,893.5 days')
    """
    if seconds < 120:
        return f"{seconds:.0f} seconds"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 48 * 3600:
        return f"{_one_decimal(seconds / 3600)} hours"
    return f"{_one_decimal(seconds / 86400)} days"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, the one way every command prints a step or phase time.

    >>> ms(0.0423), ms(None)
    ('42.3 ms', '-')
    """
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _one_decimal(value: float) -> str:
    text = f"{value:,.1f}"
    return text.removesuffix(".0")


def signed(value: float, spec: str = ".1f", unit: str = "") -> str:
    """``value`` with its sign (``+12.3 ms``, ``-4%``), except a value that rounds to zero,
    which has none: never '-0.0 ms' or '-0%'.

    >>> signed(12.34, unit=" ms"), signed(-0.04, unit=" ms"), signed(-0.004, ".0%")
    ('+12.3 ms', '0.0 ms', '0%')
    """
    text = f"{value:+{spec}}"
    if not any(c in "123456789" for c in text):  # every digit 0: it rounds to zero
        text = text[1:]
    return text + unit


def add_prometheus(sub: argparse.ArgumentParser, timeout: float = 10.0,
                   several: bool = False) -> None:
    """``--prometheus`` and ``--timeout``, as every command that reads Prometheus takes them;
    ``several``: ``--prometheus`` may be repeated (a list, or None when not given)."""
    sub.add_argument("--prometheus", metavar="URL", action="append" if several else "store",
                     help="Prometheus base URL, e.g. http://prometheus:9090 (default: "
                     "$TRAINWATCH_PROMETHEUS, else the running `trainwatch stack`'s)" +
                     ("; repeat it for the shards of a Prometheus sharded by trial: the one "
                      "holding the trial is read" if several else ""))
    sub.add_argument("--timeout", type=timeout_seconds, default=timeout,
                     help=f"HTTP timeout for each request, seconds (default {timeout:g})")


def add_trial(sub: argparse.ArgumentParser, required: bool = True) -> None:
    """``--experiment``, ``--trial`` and ``--rank``: which trial a command is about
    (``required=False``: the command checks it, e.g. `report` without ``--usage``)."""
    sub.add_argument("--experiment", required=required)
    sub.add_argument("--trial", help="default: every trial of the experiment")
    sub.add_argument("--rank", help="default: every rank")


def printable(text: str) -> str:
    """``text`` as every human-readable output shows a user's name (an experiment, trial,
    phase, rank or node, a label read back from Prometheus or the Pushgateway): each character
    a terminal or a page would act on or hide written out as its escape, the rest as it is.
    Newlines and CR (``\\n``, ``\\r``), tab, ESC, BEL, NUL, DEL, the C1 controls, U+2028/2029,
    bidi and other format characters and unassigned code points: a name cannot clear the
    screen, retitle the window or start a line of its own (``VERDICT: healthy``). Every escape
    starts with a backslash and has a fixed length, so two names without a backslash never
    print alike. JSON outputs escape by JSON's rules instead.

    >>> print(printable("lr-0.1\\nVERDICT: healthy\\x1b[2J\\u2028"))
    lr-0.1\\nVERDICT: healthy\\x1b[2J\\u2028
    >>> printable("résumé/批 0.1 (a)")
    'résumé/批 0.1 (a)'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace")
                   .decode("ascii") for c in text)


def bounded(text: str, limit: int = 200) -> str:
    """:func:`printable` of ``text``'s first ``limit`` characters, and how long it was when
    longer: a log line that names a 1,000,000-character name stays short.

    >>> bounded("x" * 1000, 5)
    'xxxxx…(1000 chars)'
    """
    shown = printable(text[:limit])
    return shown if len(text) <= limit else f"{shown}…({len(text)} chars)"
