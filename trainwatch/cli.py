"""The `trainwatch` console script: `trainwatch stack`, `diagnose`, `trials`, `report` and `gc`.

    trainwatch stack up | status | down
    trainwatch gc --pushgateway http://pushgateway:9091 --max-age 1h [--dry-run]
    trainwatch diagnose --prometheus http://prometheus:9090 --experiment E [--trial T] [--rank R]
    trainwatch trials --prometheus http://prometheus:9090 [--experiment E]
    trainwatch report --prometheus http://prometheus:9090 --experiment E [--trial T] [--since 1h]
        -o report.html

Without --prometheus, diagnose, trials and report read $TRAINWATCH_PROMETHEUS, else the Prometheus of
the running `trainwatch stack`.

Exit codes of diagnose: 0 no bottleneck (GPU-bound, or no GPU metrics to judge), 1 a bottleneck
found or the trial stopped pushing, 2 usage or configuration error (unknown trial, Prometheus unreachable, rules not loaded,
no timings yet). With several ranks the worst code wins.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from trainwatch import gc
from trainwatch.diagnose import render
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.report import UnknownTrial, gather
from trainwatch.diagnose.trials import list_trials
from trainwatch.diagnose.verdict import EXIT_OK, EXIT_USAGE, worst_exit_code
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trainwatch.report import cli as report_cli
from trainwatch.stack import cli as stack_cli
from trainwatch.stack.lookup import prometheus_url


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainwatch", description="Why is a training trial slow, and what to change: "
        "read from Prometheus.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    stack_cli.add_parser(commands)
    gc.add_parser(commands)
    report_cli.add_parser(commands)
    diagnose = commands.add_parser("diagnose", help="say what holds a trial back")
    trials = commands.add_parser("trials", help="list the trials Prometheus knows")
    for sub in (diagnose, trials):
        sub.add_argument("--prometheus", metavar="URL",
                         help="Prometheus base URL, e.g. http://prometheus:9090 (default: "
                         "$TRAINWATCH_PROMETHEUS, else the running `trainwatch stack`'s)")
        sub.add_argument("--format", choices=("text", "json"), default="text")
        sub.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout, seconds")
    diagnose.add_argument("--experiment", required=True)
    diagnose.add_argument("--trial", help="default: every trial of the experiment")
    diagnose.add_argument("--rank", help="default: every rank")
    trials.add_argument("--experiment", help="only this experiment's trials")
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
    if args.command == "stack":
        return stack_cli.run(args)
    if args.command == "gc":
        return gc.run(args)
    if args.command == "report":
        return report_cli.run(args)
    try:
        api = PrometheusAPI(prometheus_url(args.prometheus), timeout=args.timeout)
        deployment = Deployment.from_rules(api.rules(), where=f"Prometheus at {api.url}")
        if args.command == "trials":
            rows = list_trials(api, deployment, args.experiment)
            print(render.trials_json(rows) if args.format == "json" else render.trials_text(rows))
            return EXIT_OK
        reports = gather(api, deployment, args.experiment, args.trial, args.rank)
    except (ValueError, PrometheusError, UnknownTrial) as err:  # DeploymentError is a ValueError
        print(f"trainwatch {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(render.reports_json(reports) if args.format == "json"
          else render.reports_text(reports))
    return worst_exit_code(r.verdict for r in reports if r.verdict is not None)


if __name__ == "__main__":
    sys.exit(main())
