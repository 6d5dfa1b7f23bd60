"""`trainwatch report`: the argument parser and the run, with every failure one line, exit 2."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainwatch import cliutil
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE, add_prometheus, add_trial, parse_time, span
from trainwatch.diagnose.entry import UnknownTrial, holding
from trainwatch.lookup import prometheus_url
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trainwatch.report.window import Asked, Window
from trainwatch.usage import GROUPINGS


def add_parser(commands: Any) -> None:
    report = commands.add_parser(
        "report", help="write one self-contained HTML file that shows a trial",
        description="One HTML file (no network needed to view it): diagnose's verdict and fix, "
        "and plots of the trial's phases, throughput, GPUs, nodes and alerts, for a running "
        "trial or one that ended within Prometheus's retention. With no time given, the "
        "window is the trial's life (its latest run's first sample to its last, or to now "
        "while it runs).")
    add_prometheus(report, timeout=30.0, several=True)
    add_trial(report, required=False)
    report.add_argument("--usage", action="store_true",
                        help="instead of a trial: where the GPU-hours went (`trainwatch usage`'s "
                        "table and its plots over time) over --since (default 7d, or "
                        "Prometheus's retention where shorter)")
    report.add_argument("--by", choices=tuple(GROUPINGS), default=None,
                        help="with --usage: one line per experiment (default), Kubernetes "
                        "namespace, Slurm job, user or node")
    report.add_argument("--since", type=span, metavar="DURATION",
                        help="the window: this long back from --end, --at or now (default: the "
                        "trial's life)")
    report.add_argument("--start", type=parse_time, metavar="TIME",
                        help="window start: Unix seconds or ISO 8601 (UTC unless it says)")
    report.add_argument("--end", type=parse_time, metavar="TIME",
                        help="window end (with --start or --since; default now)")
    report.add_argument("--at", type=parse_time, metavar="TIME",
                        help="read the trial as it was then, as `diagnose --at` does: the run on "
                        "at TIME, its life up to TIME (or --since/--start up to TIME)")
    report.add_argument("--baseline", metavar="EXPERIMENT/TRIAL[/RANK]",
                        help="add `trainwatch compare`'s answer against this trial: the two "
                        "side by side and what changed (needs one trial: --trial)")
    report.add_argument("-o", "--output", required=True, type=Path, metavar="FILE.html")


class OutputError(OSError):
    """The output file cannot be written."""


def _open_temp(output: Path) -> tuple[int, str]:
    """A temp file beside ``output`` (created first, so an unwritable path fails before any
    query); renamed over ``output`` only once the page is complete."""
    try:
        if output.is_dir():
            raise OutputError(f"{output} is a directory; name a file, e.g. {output}/report.html")
        return tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp",
                                dir=output.parent if str(output.parent) else ".")
    except OutputError:
        raise
    except OSError as err:
        raise OutputError(f"cannot write {output}: {err.strerror or err}") from None


def _check_usage(args: argparse.Namespace) -> None:
    """--usage reads the fleet over --since: no trial, no other window."""
    if not args.usage:
        if args.by is not None:
            raise ValueError("--by goes with --usage: e.g. --usage --by namespace")
        if args.experiment is None:
            raise ValueError("--experiment is required (or --usage for the fleet's GPU-hours), "
                             "e.g. --experiment resnet")
        return
    given = [flag for flag, value in (("--experiment", args.experiment), ("--trial", args.trial),
                                      ("--rank", args.rank), ("--start", args.start),
                                      ("--end", args.end), ("--at", args.at),
                                      ("--baseline", args.baseline)) if value is not None]
    if given:
        raise ValueError(f"--usage reads every trial over --since up to now: {given[0]} does "
                         "not go with it")
    if len(args.prometheus or []) > 1:
        raise ValueError("--usage reads one Prometheus (a global view of the shards): give one "
                         "--prometheus")


def _usage_page(args: argparse.Namespace) -> tuple[str, str]:
    """The usage page's text and what the line after it says."""
    from trainwatch.report import usage_page  # matplotlib: an optional extra

    api = PrometheusAPI(prometheus_url((args.prometheus or [None])[0]), timeout=args.timeout)
    doc = usage_page.collect(api, args.by or "experiment", args.since)
    return usage_page.page(doc), (f"GPU-hours by {doc.by}, {len(doc.groups)} group(s), the "
                                  f"last {cliutil.ago(doc.since)}")


def _trial_page(args: argparse.Namespace, asked: Asked) -> tuple[str, str]:
    """The trial report's text and what the line after it says."""
    from trainwatch.report import collect, page  # matplotlib: an optional extra

    apis = [PrometheusAPI(prometheus_url(url), timeout=args.timeout)
            for url in (args.prometheus or [None])]
    # The shards of a Prometheus sharded by trial: the one holding the trial is read.
    api = holding(apis, args.experiment, args.trial, None)  # --since is the window
    doc = collect.collect(api, args.experiment, args.trial, args.rank, asked, args.baseline)
    return page.page(doc), f"{len(doc.reports)} rank(s), {doc.window.describe()}"


def run(args: argparse.Namespace) -> int:
    name = "trainwatch report: error:"
    try:
        _check_usage(args)
        asked = Asked(args.since, args.start, args.end, args.at)
        if args.at is not None and args.end is not None:
            raise ValueError("--at and --end exclude each other: give one")
        if args.since is not None or args.start is not None or args.end is not None:
            Window.of(args.since, args.start, args.end if args.at is None else args.at)
        fd, temp = _open_temp(args.output)
    except (ValueError, OutputError) as err:
        print(f"{name} {cliutil.printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        try:
            text, summary = _usage_page(args) if args.usage else _trial_page(args, asked)
        except ImportError as err:
            raise ValueError(f"{err.name} is not installed: pip install 'trainwatch[report]'"
                             ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            fd = -1
            out.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp's 0600 is for the half-written file only
        os.replace(temp, args.output)
    except (ValueError, PrometheusError, UnknownTrial, LookupError) as err:
        print(f"{name} {cliutil.printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:
        print(f"{name} cannot write {args.output}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(temp):
            os.unlink(temp)
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 1024:.0f} kB): {summary}")
    return EXIT_OK
