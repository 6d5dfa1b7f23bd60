"""`trainwatch profile`: ask a running trial for a ``torch.profiler`` trace of its next steps.

    trainwatch profile --experiment E --trial T [--rank R] [--steps N] [--trigger FILE]

Each rank's process is found in ``trainwatch_trial_info{nodename, pid}``. On this node it is sent
the signal (``SIGUSR2``, or ``--signal``); on another node nothing is guessed: the exact command
that asks is printed (``kubectl exec`` where the series names a pod, else ``ssh``). With
``--trigger FILE`` (the trial's ``TRAINWATCH_PROFILE_TRIGGER``, on a shared file system) the step
count is written there instead, which every rank watching it takes as a request. The signal
records the trial's own ``TRAINWATCH_PROFILE_STEPS`` (default 5); ``--steps`` needs the trigger.

Then it waits (``--wait``: 5 s after a signal, 15 s after the trigger, which ranks read at each
push) for each rank's answer (``trial_instrumentation.profile_ack``) and prints what the trial
did: started (and written, if done by then), refused because a capture is running, or dropped.

Exit codes: 0 every rank asked (a capture started, or no answer yet), 1 a rank refused or
dropped the request, or a command printed for a rank on another node, 2 usage or nothing to
ask (unknown trial, an ended one, an unreachable Prometheus).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwatch.cliutil import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    add_prometheus,
    printable,
    span,
)
from trainwatch.contract.promql import matchers
from trainwatch.lookup import prometheus_url
from trainwatch.promapi import PrometheusAPI, PrometheusError
from trial_instrumentation import names, profile_ack
from trial_instrumentation.config import profile_steps

# How long `profile` waits for the trials' answers: a signal is taken at the next step
# boundary; the trigger file at the next push (10 s by default), then that boundary.
WAIT_SIGNAL, WAIT_TRIGGER = 5.0, 15.0
POLL = 0.05  # seconds between two reads of the answer files


@dataclass(frozen=True)
class Rank:
    """One running rank's process, as its latest ``trainwatch_trial_info`` says."""

    rank: str
    nodename: str
    pid: int
    pod: str | None = None
    namespace: str | None = None

    def remote_command(self, sig: signal.Signals) -> str:
        """The command that asks it, to paste into a shell: each name read from Prometheus
        quoted for the shell (a node named ``n1; rm -rf ~`` is one argument), and shown
        escaped where it holds a character a terminal would act on (cliutil.printable)."""
        def arg(value: str) -> str:
            return printable(shlex.quote(value))

        kill = f"kill -{sig.name.removeprefix('SIG')} {self.pid}"
        if self.pod:
            where = f"-n {arg(self.namespace)} " if self.namespace else ""
            return f"kubectl exec {where}{arg(self.pod)} -- {kill}"
        return f"ssh {arg(self.nodename)} {kill}"


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
    sub.add_argument("--wait", type=span, metavar="DURATION", help="how long to wait for each "
                     f"rank's answer (default {WAIT_SIGNAL:g}s after the signal, "
                     f"{WAIT_TRIGGER:g}s after --trigger)")
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
        return _write_trigger(args.trigger, args.steps, ranks,
                              WAIT_TRIGGER if args.wait is None else args.wait)
    if args.steps is not None:
        print(f"trainwatch profile: the signal records the trial's own {names.ENV_PROFILE_STEPS} "
              "(default 5); --steps needs --trigger", file=sys.stderr)
    here, code = os.uname().nodename, EXIT_OK
    asked: dict[str, Path] = {}
    since = time.time()
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
        asked[rank.rank] = profile_ack.by_pid(rank.pid)
    if asked:
        print(f"sent {sig.name} to pid {', '.join(str(r.pid) for r in ranks if r.rank in asked)}"
              "; waiting for the answer")
    answered = answers(asked, since, WAIT_SIGNAL if args.wait is None else args.wait)
    return max(code, answered)


def _write_trigger(trigger: Path, steps: int | None, ranks: list[Rank], wait: float) -> int:
    since = time.time() - 2.0  # another node's clock may be a little behind
    try:
        trigger.write_text(f"{steps}\n" if steps else "")
    except OSError as err:
        print(f"trainwatch profile: error: cannot write {trigger}: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {trigger}: each rank watching it ({', '.join(r.rank for r in ranks)}) "
          "takes it at its next push; waiting for the answers")
    return answers({r.rank: profile_ack.beside(trigger, r.rank) for r in ranks}, since, wait)


def answers(asked: dict[str, Path], since: float, wait: float) -> int:
    """Print each rank's answer (``asked``: rank -> its answer file) as it comes, until every
    rank's capture is written or refused or dropped, or ``wait`` seconds have passed; exit 1
    when a rank refused or dropped the request."""
    deadline, said, code = time.monotonic() + wait, {rank: "" for rank in asked}, EXIT_OK
    while True:
        for rank, path in asked.items():
            answer = profile_ack.read(path, since)
            if answer is None or answer["state"] == said[rank]:
                continue
            said[rank] = answer["state"]
            print(f"rank {printable(rank)}: {printable(str(answer.get('message', '')))}")
            if answer["state"] in (profile_ack.REFUSED, profile_ack.DROPPED):
                code = EXIT_FOUND
        pending = [r for r, state in said.items() if state in ("", profile_ack.STARTED)]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    for rank in pending:
        print(f"rank {printable(rank)}: " + (
            f"no answer within {wait:g} s (a step longer than that, or a trial library "
            "without answers): its log says what it did" if not said[rank] else
            f"still recording after {wait:g} s; its log names the file when written, "
            "`trainwatch diagnose` shows the summary"))
    return code


def _signal_name(text: str) -> str:
    name = text.strip().upper()
    return name if name.startswith("SIG") else f"SIG{name}"
