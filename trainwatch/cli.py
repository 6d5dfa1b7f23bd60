"""The `trainwatch` console script: `trainwatch stack`, `gc`, `diagnose`, `trials`, `compare`
and `report`.

    trainwatch stack up | status | down
    trainwatch gc --pushgateway http://pushgateway:9091 [--ended-after 2m] [--max-age 1h]
    trainwatch diagnose --experiment E [--trial T] [--rank R] [--since 7d] [--at TIME]
    trainwatch trials [--experiment E] [--since 7d]
    trainwatch compare E/T[/R] E/T[/R]
    trainwatch report --experiment E [--trial T] [--since 1h] -o report.html
    trainwatch profile --experiment E --trial T [--rank R] [--steps N --trigger FILE]
    trainwatch run [--experiment E] [--trial T] [--pushgateway URL] -- COMMAND ...
    trainwatch usage [--since 7d] [--by experiment|namespace|job|user|node] [--format table|json|csv]

Without --prometheus, diagnose, trials, compare and report read $TRAINWATCH_PROMETHEUS, else the
Prometheus of the running `trainwatch stack`. Exit codes: trainwatch/diagnose/cli.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from trainwatch import gc, profile, run, usage
from trainwatch.cliutil import Parser
from trainwatch.diagnose import cli as diagnose_cli
from trainwatch.diagnose import pin
from trainwatch.report import cli as report_cli
from trainwatch.stack import cli as stack_cli


def _parser() -> argparse.ArgumentParser:
    # Parser: every bad flag one line, exit 2; its subcommands' parsers are Parsers too.
    parser = Parser(
        prog="trainwatch", description="Why is a training trial slow, and what to change: "
        "read from Prometheus.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    stack_cli.add_parser(commands)
    gc.add_parser(commands)
    report_cli.add_parser(commands)
    diagnose_cli.add_parsers(commands)
    pin.add_parser(commands)
    profile.add_parser(commands)
    run.add_parser(commands)
    usage.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a reader that closed the pipe (`trainwatch diagnose ... | head`) ends
    it quietly with 141, as a shell's own commands end on SIGPIPE."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # here, while the error can still be caught (and on --help)
    except BrokenPipeError:
        # Python flushes stdout again at exit and would print that error: point it at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    commands = {"stack": stack_cli.run, "gc": gc.run, "report": report_cli.run,
                "profile": profile.run, "run": run.run, "usage": usage.run, "baseline": pin.run}
    return commands.get(args.command, diagnose_cli.run)(args)  # diagnose, trials, compare, check


if __name__ == "__main__":
    sys.exit(main())
