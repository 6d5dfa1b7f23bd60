"""`trainwatch profile`: ask a running trial for a ``torch.profiler`` trace of its next steps.

    trainwatch profile --experiment E --trial T [--rank R] [--steps N] [--trigger FILE]

Each rank's process is found in ``trainwatch_trial_info{nodename, pid}``. On this node it is sent
the signal (``SIGUSR2``, or ``--signal``); on another node nothing is guessed: the exact command
that asks is printed (``kubectl exec`` where the series names a pod, else ``ssh``). With
``--trigger FILE`` (the trial's ``TRAINWATCH_PROFILE_TRIGGER``, on a shared file system) the step
count is written there instead, which every rank watching it takes as a request. The signal
records the trial's own ``TRAINWATCH_PROFILE_STEPS`` (default 5); ``--steps`` needs the trigger.

Exit codes: 0 every rank asked, 1 a command printed for a rank on another node, 2 usage or
nothing to ask (unknown trial, an ended one, an unreachable Prometheus).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwatch.cliutil import EXIT_FOUND, EXIT_OK, EXIT_USAGE, add_prometheus, printable
from trainwatch.contract.promql import matchers
from trainwatch.lookup import prometheus_url
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trial_instrumentation import names
from trial_instrumentation.config import profile_steps


@dataclass(frozen=True)
class Rank:
    """One running rank's process, as its latest ``trainwatch_trial_info`` says."""

    rank: str
    nodename: str
    pid: int
    pod: str | None = None
    namespace: str | None = None

    def remote_command(self, sig: signal.Signals) -> str:
        kill = f"kill -{sig.name.removeprefix('SIG')} {self.pid}"
        if self.pod:
            where = f"-n {self.namespace} " if self.namespace else ""
            return f"kubectl exec {where}{self.pod} -- {kill}"
        return f"ssh {self.nodename} {kill}"


def add_parser(commands: Any) -> None:
    sub = commands.add_parser("profile", help="a torch.profiler trace of a running trial's "
                              "next steps")
    sub.add_argument("--experiment", required=True)
    sub.add_argument("--trial", required=True)
    sub.add_argument("--rank", help="default: every rank")
    sub.add_argument("--steps", type=profile_steps, metavar="N",
                     help="steps to record (with --trigger; the signal records the trial's "
                     f"{names.ENV_PROFILE_STEPS}, default 5)")
    sub.add_argument("--trigger", type=Path, metavar="FILE", help="write the request into "
                     f"the trial's {names.ENV_PROFILE_TRIGGER} file instead of signalling")
    sub.add_argument("--signal", default="USR2", help="the trial's "
                     f"{names.ENV_PROFILE_SIGNAL} (default USR2)")
    add_prometheus(sub)


def running_ranks(api: PrometheusAPI, experiment: str, trial: str,
                  rank: str | None) -> list[Rank]:
    """The ranks of the trial whose latest push carries no exit marker, by rank."""
    key = matchers(f'job="{names.JOB}"', experiment=experiment, trial=trial, rank=rank)
    ended = {labels.get("rank") for labels, _ in api.query(f"{names.EXIT}{{{key}}}")}
    found = {}
    for labels, _ in api.query(f"{names.TRIAL_INFO}{{{key}}}"):
        if labels.get("rank") not in ended and labels.get("pid", "").isdigit():
            found[labels["rank"]] = Rank(labels["rank"], labels.get("nodename", ""),
                                         int(labels["pid"]), labels.get("pod"),
                                         labels.get("namespace"))
    return [found[r] for r in sorted(found, key=lambda r: int(r) if r.isdigit() else 0)]


def run(args: argparse.Namespace) -> int:
    try:
        sig = signal.Signals[_signal_name(args.signal)]
        api = PrometheusAPI(prometheus_url(args.prometheus), timeout=args.timeout)
        ranks = running_ranks(api, args.experiment, args.trial, args.rank)
    except (KeyError, ValueError, PrometheusError) as err:
        print(f"trainwatch profile: error: {printable(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    who = printable(f"{args.experiment}/{args.trial}"
                    + (f" rank {args.rank}" if args.rank else ""))
    if not ranks:
        print(f"trainwatch profile: error: no running trial {who} in Prometheus at {api.url} "
              "(`trainwatch trials` lists them)", file=sys.stderr)
        return EXIT_USAGE
    if args.trigger is not None:
        return _write_trigger(args.trigger, args.steps, ranks)
    if args.steps is not None:
        print(f"trainwatch profile: the signal records the trial's own {names.ENV_PROFILE_STEPS} "
              "(default 5); --steps needs --trigger", file=sys.stderr)
    here, code = os.uname().nodename, EXIT_OK
    for rank in ranks:
        if rank.nodename != here:
            print(f"rank {printable(rank.rank)} runs on {printable(rank.nodename)}, not here "
                  f"({here}); ask it with:\n"
                  f"  {rank.remote_command(sig)}")
            code = EXIT_FOUND
            continue
        try:
            os.kill(rank.pid, sig)
        except ProcessLookupError:
            print(f"rank {rank.rank}: no process {rank.pid} on {here}: has the trial ended?",
                  file=sys.stderr)
            return EXIT_USAGE
        except PermissionError:
            print(f"rank {rank.rank}: not allowed to signal pid {rank.pid}; run as its user:\n"
                  f"  kill -{sig.name.removeprefix('SIG')} {rank.pid}", file=sys.stderr)
            return EXIT_USAGE
        print(f"rank {rank.rank}: sent {sig.name} to pid {rank.pid}; the trace is written after "
              "its next steps (its log names the file; `trainwatch diagnose` shows the summary)")
    return code


def _write_trigger(trigger: Path, steps: int | None, ranks: list[Rank]) -> int:
    try:
        trigger.write_text(f"{steps}\n" if steps else "")
    except OSError as err:
        print(f"trainwatch profile: error: cannot write {trigger}: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {trigger}: each rank watching it ({', '.join(r.rank for r in ranks)}) "
          "records a trace within its push interval")
    return EXIT_OK


def _signal_name(text: str) -> str:
    name = text.strip().upper()
    return name if name.startswith("SIG") else f"SIG{name}"
