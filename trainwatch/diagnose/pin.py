"""`trainwatch baseline set|show|clear`: an experiment's pinned baseline, kept in Prometheus.

    trainwatch baseline set E/T [--pushgateway URL]   # E's runs are judged against T's run
    trainwatch baseline show E                        # the pinned trial, or "auto"
    trainwatch baseline clear E                       # back to the last runs' median

The pin is one series, ``trainwatch_baseline_pinned{experiment="E",trial="T"} 1``, pushed to
the Pushgateway as a group of its own (job ``trainwatch_baseline``, grouping key
``experiment``), so every Prometheus that scrapes the Pushgateway holds it, every machine's
CLI reads it, and gc (which sweeps the trials' job) never retires it. `check`, `diagnose`,
`trials` and the report judge E's runs against the pinned trial's run wherever they would take
the automatic baseline. No local file: a CI runner and a laptop see the same pin.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainwatch import cliutil
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE, add_prometheus
from trainwatch.contract.figures import BASELINE_PIN, BASELINE_PIN_JOB
from trainwatch.contract.promql import select
from trainwatch.lookup import NoPrometheus, prometheus_url, pushgateway_url
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trial_instrumentation import names

AUTO_SAID = "auto (the median of the last runs that ended clean)"


def pinned(api: PrometheusAPI, experiment: str) -> str | None:
    """The trial pinned as ``experiment``'s baseline (E/T), None where none is."""
    return all_pinned(api, experiment).get(experiment)


def all_pinned(api: PrometheusAPI, experiment: str | None = None) -> dict[str, str]:
    """Each experiment's pinned trial (E/T; of ``experiment`` alone if given), in one query:
    the last by name where a Prometheus holds several."""
    found: dict[str, str] = {}
    for labels in sorted((labels for labels, _ in api.query(
            select(BASELINE_PIN, experiment=experiment))), key=lambda lbl: lbl.get("trial", "")):
        name = labels.get("experiment", "")
        found[name] = f"{name}/{labels.get('trial', '')}"
    return found


def _push(gateway: str, experiment: str, timeout: float, trial: str | None) -> None:
    """Pin ``trial`` (None: clear the pin) through prometheus_client's own Pushgateway
    client, the library's: grouping key, escaping and base64 as every trial's push has them."""
    from prometheus_client import CollectorRegistry, Gauge, delete_from_gateway, push_to_gateway

    key = {"experiment": experiment}
    try:
        if trial is None:
            delete_from_gateway(gateway, job=BASELINE_PIN_JOB, grouping_key=key, timeout=timeout)
            return
        registry = CollectorRegistry()
        Gauge(BASELINE_PIN, "The trial pinned as the experiment's baseline.", ["trial"],
              registry=registry).labels(trial).set(1)
        push_to_gateway(gateway, job=BASELINE_PIN_JOB, registry=registry, grouping_key=key,
                        timeout=timeout)
    except OSError as err:
        raise ValueError(f"the Pushgateway at {gateway}: {err}") from None


def add_parser(commands: Any) -> None:
    sub = commands.add_parser("baseline", help="pin, show or clear an experiment's baseline "
                              "trial (kept in Prometheus, through the Pushgateway)")
    sub.add_argument("action", choices=("set", "show", "clear"))
    sub.add_argument("target", metavar="E/T or E",
                     help="set: experiment/trial; show and clear: the experiment")
    sub.add_argument("--pushgateway", metavar="URL", help=f"set and clear (default: "
                     f"${names.ENV_PUSHGATEWAY}, else the running `trainwatch stack`'s)")
    add_prometheus(sub)


def run(args: argparse.Namespace) -> int:
    from trainwatch.diagnose.baseline import Baselines
    from trainwatch.diagnose.compare import parse_reference
    from trainwatch.diagnose.figures import UnknownTrial
    from trainwatch.diagnose.rulesource import deployment_of

    try:
        api = PrometheusAPI(prometheus_url(args.prometheus), timeout=args.timeout)
        if args.action == "set":
            experiment, trial, rank = parse_reference(args.target)
            if rank is not None:
                raise ValueError(f"{args.target!r}: a baseline is experiment/trial")
            run = Baselines(api, deployment_of(api)).trial_run(experiment, trial)  # it exists
            _push(pushgateway_url(args.pushgateway), experiment, args.timeout, run.trial)
            print(f"pinned {cliutil.printable(experiment)}/{cliutil.printable(run.trial)} as the "
                  f"baseline of {cliutil.printable(experiment)} (Prometheus holds it from its "
                  "next scrape of the Pushgateway)")
        elif args.action == "clear":
            _push(pushgateway_url(args.pushgateway), args.target, args.timeout, None)
            print(f"cleared: {cliutil.printable(args.target)} is judged against {AUTO_SAID}")
        else:
            found = pinned(api, args.target)
            print(f"{cliutil.printable(args.target)}: "
                  + (f"pinned to {cliutil.printable(found)}" if found else AUTO_SAID))
    except (ValueError, PrometheusError, UnknownTrial, NoPrometheus) as err:
        print(f"trainwatch baseline: error: {cliutil.printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK

