"""`trainwatch diagnose`, `trials` and `compare`: their arguments and their runs, every failure
one line and exit 2.

    trainwatch diagnose --experiment E [--trial T] [--rank R] [--since 7d] [--at TIME] [--window 1h]
    trainwatch trials [--experiment E] [--since 7d]
    trainwatch compare E/T[/R] E/T[/R] [--since 7d]
    trainwatch check E/T [--baseline auto|E/T] [--max-slowdown 5%] [--format text|json|junit]

Exit codes of diagnose: 0 no bottleneck (GPU-bound, or no GPU metrics to judge; a run that ended
clean or terminated is judged on its life's profile), 1 a bottleneck found, or the trial failed
or stopped pushing, 2 usage or configuration error (unknown trial, Prometheus unreachable, rules
not loaded, no timings yet). With several ranks the worst code wins.
Exit codes of check: trainwatch/diagnose/check.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainwatch import cliutil
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE, add_prometheus, add_trial, parse_time, span
from trainwatch.diagnose import baseline, check, compare, render
from trainwatch.diagnose.figures import UnknownTrial
from trainwatch.diagnose.history import gather_runs, unknown_message
from trainwatch.diagnose.rulesource import deployment_of
from trainwatch.diagnose.servers import NotOnAnyServer, holding
from trainwatch.diagnose.trials import DEFAULT_SINCE, list_trials
from trainwatch.diagnose.verdict import worst_exit_code
from trainwatch.lookup import prometheus_url
from trainwatch.promapi import PrometheusAPI, PrometheusError


def add_parsers(commands: Any) -> None:
    """Add `diagnose`, `trials` and `compare` to the `trainwatch` command's subcommands."""
    diagnose = commands.add_parser("diagnose", help="say what holds a trial back, running or "
                                   "ended")
    trials = commands.add_parser("trials", help="list the trials Prometheus knows, running "
                                 "and ended")
    versus = commands.add_parser("compare", help="two trials side by side, and what changed")
    gate = commands.add_parser("check", help="a CI gate: exit 1 when a run is slower than its "
                               "baseline (the last runs of its experiment)")
    for sub in (diagnose, trials, versus, gate):
        add_prometheus(sub, several=True)
        sub.add_argument("--format", choices=("text", "json", "junit") if sub is gate
                         else ("text", "json"), default="text")
    for sub in (diagnose, versus, gate):
        sub.add_argument("--since", type=span, metavar="DURATION",
                         help="how far back to look for the trial (default: Prometheus's "
                         "retention)")
    add_trial(diagnose)
    diagnose.add_argument("--at", type=parse_time, metavar="TIME",
                          help="read the trial as it was then: Unix seconds or ISO 8601 (UTC "
                          "unless it says); default: now if it runs, else its last push")
    diagnose.add_argument("--window", type=span, metavar="DURATION",
                          help="judge over this window (ending now, or at --at) instead of the "
                          "deployed rules' rate window; an ended trial without --at is judged "
                          "over its life")
    trials.add_argument("--experiment", help="only this experiment's trials")
    trials.add_argument("--since", type=span, default=DEFAULT_SINCE,
                        metavar="DURATION", help="list runs with samples this far back "
                        "(default 1h; e.g. 7d)")
    check.add_arguments(gate)
    versus.add_argument("first", metavar="A", help="experiment/trial[/rank], e.g. resnet/lr-0.1")
    versus.add_argument("second", metavar="B", help="the trial to compare A against (the "
                        "baseline: 'what changed' is A minus B)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.command == "check":
            check.parse_slowdown(args.max_slowdown)  # bad input before any server is asked
        apis = [PrometheusAPI(prometheus_url(url), timeout=args.timeout)
                for url in (args.prometheus or [None])]
        if args.command == "trials":
            rows, notes = [], []
            for api in apis:  # the shards of a sharded Prometheus: each lists its own trials
                deployment = deployment_of(api)
                notes += [deployment.source] if deployment.source else []
                judged = baseline.Baselines(api, deployment)
                # The baselines' runs (over the retention) are found while the rows are read.
                with ThreadPoolExecutor(1) as pool:
                    ahead = pool.submit(judged.read_runs, None if args.experiment is None
                                        else [args.experiment])
                    listed = list_trials(api, deployment, args.experiment, args.since)
                    ahead.result()
                baseline.for_rows(judged, listed)
                rows += listed
            if args.experiment is not None and not rows:  # a typo: say so, with close names
                raise UnknownTrial(unknown_message(apis[0], args.since, args.experiment, None,
                                                   None, time.time()))
            print(render.trials_json(rows, notes) if args.format == "json"
                  else "\n".join([*render.notes_text(notes), render.trials_text(rows)]))
            return EXIT_OK
        if args.command == "check":
            return run_check(apis, args)
        if args.command == "compare":
            api = compare_server(apis, args.first, args.second, args.since)
            deployment = deployment_of(api)
            if deployment.source is not None:
                raise ValueError(f"compare reads the trials' raw counters, which Prometheus at "
                                 f"{api.url} (a global view) does not hold: give the shard "
                                 "holding both, or run diagnose on each")
            found = compare.compare_refs(api, deployment, args.first, args.second, args.since)
            print(compare.as_json(found) if args.format == "json" else compare.as_text(found))
            return EXIT_OK
        api = holding(apis, args.experiment, args.trial, args.since)
        deployment = deployment_of(api)
        if deployment.source is not None and args.window is not None:
            raise ValueError(f"--window reads the raw series, which Prometheus at {api.url} "
                             "(a global view) does not hold: give the shards (--prometheus "
                             "once per shard) for --window")
        reports = gather_runs(api, deployment, args.experiment, args.trial, args.rank,
                              since=args.since, at=args.at, window=args.window)
        baselines = baseline.for_reports(baseline.Baselines(api, deployment),
                                         [r.run for r in reports if r.run is not None])
    except (ValueError, PrometheusError, UnknownTrial, NotOnAnyServer) as err:
        # DeploymentError is a ValueError
        print(f"trainwatch {args.command}: error: {cliutil.printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    notes = [deployment.source] if deployment.source else []
    print(render.reports_json(reports, notes, baselines) if args.format == "json"
          else "\n".join([*render.notes_text(notes), render.reports_text(reports, baselines)]))
    return worst_exit_code(r.verdict for r in reports if r.verdict is not None)


def run_check(apis: list[PrometheusAPI], args: argparse.Namespace) -> int:
    """`trainwatch check`: its output, its exit code (errors are the caller's: exit 2)."""
    experiment, trial, _ = compare.parse_reference(args.trial)
    api = holding(apis, experiment, trial, args.since)
    found = check.check(api, deployment_of(api), args.trial, args.baseline, args.max_slowdown,
                        args.since)
    print({"json": check.as_json, "junit": check.as_junit}.get(args.format, check.as_text)(found))
    return found.exit_code


def compare_server(apis: list[PrometheusAPI], first: str, second: str,
                   since: float | None) -> PrometheusAPI:
    """The one server holding both trials compared (compare reads one Prometheus)."""
    a, b = (ref.split("/") for ref in (first, second))
    if len(apis) == 1 or len(a) < 2 or len(b) < 2:
        return apis[0]  # compare_refs says what is wrong with a malformed reference
    api = holding(apis, a[0], a[1], since)
    if holding(apis, b[0], b[1], since) is not api:
        raise NotOnAnyServer(f"{first} and {second} are on different Prometheus servers; "
                             "compare reads one shard's raw series: run diagnose on each (or "
                             "on the global view)")
    return api
