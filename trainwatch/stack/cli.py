"""Command-line wiring of `trainwatch stack up | status | down`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainwatch.cliutil import EXIT_USAGE
from trainwatch.layout import ENV_STATE_DIR, StackError, StateDir
from trainwatch.stack import commands
from trainwatch.stack.settings import DEFAULT_PORTS, GC_EVERY, StackSettings
from trainwatch.stack.up import up

HELP = ("a local Prometheus, Pushgateway, Alertmanager, exporter, `trainwatch gc` (and Grafana) "
        "on loopback")


def add_parser(commands_: Any) -> None:
    """Add `stack` to the `trainwatch` command's subcommands."""
    stack = commands_.add_parser("stack", help=HELP, description=HELP + ".")
    actions = stack.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the stack (starts only what is not running)")
    status = actions.add_parser("status", help="is every process alive, every target scraped")
    down = actions.add_parser("down", help="stop every process of the stack")
    notes = actions.add_parser("notifications", help="what Alertmanager delivered to the "
                               "stack's webhook receiver, with times")
    for sub in (up, status, down, notes):
        sub.add_argument("--state-dir", metavar="DIR",
                         help=f"data, logs and pid files (default: ${ENV_STATE_DIR}, "
                         "else ~/.local/state/trainwatch)")
    for name, port in DEFAULT_PORTS.items():
        up.add_argument(f"--{name}-port", type=int, metavar="PORT",
                        help=f"default {port}, or the port it already runs on")
    up.add_argument("--for", dest="for_", metavar="DURATION",
                    help="render the rules with every alert's `for` set to this (e.g. 20s)")
    up.add_argument("--rate-window", metavar="DURATION",
                    help="render the rules with this rate window (e.g. 30s)")
    up.add_argument("--scrape-interval", metavar="DURATION",
                    help="Prometheus scrape and rule evaluation interval "
                    "(default: prometheus/prometheus.yml's)")
    up.add_argument("--alertmanager-config", metavar="FILE",
                    help="default: prometheus/alertmanager/alertmanager.yml")
    up.add_argument("--runbook-url", metavar="URL",
                    help="where alerts link for their runbook (default: the checkout's "
                    "docs/runbooks.md, served by the stack's webhook process at /runbooks)")
    for service in ("prometheus", "alertmanager"):
        up.add_argument(f"--{service}-external-url", metavar="URL",
                        help=f"where links in alerts and notifications point for {service} "
                        "(default: the URL `up` prints)")
    up.add_argument("--gc-every", metavar="DURATION",
                    help=f"how often the stack runs `trainwatch gc` (default {GC_EVERY})")
    up.add_argument("--gc-ended-after", metavar="DURATION",
                    help="its --ended-after: an ended trial's group goes this long after its "
                    "final push (default: gc's)")
    up.add_argument("--gc-max-age", metavar="DURATION",
                    help="its --max-age: a group that stopped pushing goes after this (default: "
                    "gc's)")


def run(args: argparse.Namespace) -> int:
    try:
        state = StateDir.resolve(args.state_dir)
        if args.action == "up":
            asked = StackSettings(
                ports={name: getattr(args, f"{name}_port") for name in DEFAULT_PORTS},
                for_=args.for_, rate_window=args.rate_window,
                scrape_interval=args.scrape_interval,
                alertmanager_config=args.alertmanager_config, runbook_url=args.runbook_url,
                prometheus_external_url=args.prometheus_external_url,
                alertmanager_external_url=args.alertmanager_external_url, gc_every=args.gc_every,
                gc_ended_after=args.gc_ended_after, gc_max_age=args.gc_max_age)
            return up(state, asked)
        if args.action == "status":
            return commands.status(state)
        if args.action == "notifications":
            return commands.notifications(state)
        return commands.down(state)
    except StackError as err:
        print(f"trainwatch stack {args.action}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # a reader that went away: trainwatch.cli.main ends quietly
    except OSError as err:  # e.g. the state directory turned read-only under a running stack
        where = f"{err.filename}: " if err.filename else ""
        print(f"trainwatch stack {args.action}: error: {where}{err.strerror or err}",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"trainwatch stack {args.action}: interrupted; what this run started was stopped",
              file=sys.stderr)
        return 130
