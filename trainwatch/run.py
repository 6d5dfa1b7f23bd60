"""`trainwatch run`: time an unmodified training command (docs/instrumentation.md, "Zero lines:
trainwatch run").

    trainwatch run [--experiment E] [--trial T] [--pushgateway URL] -- COMMAND ...

The command replaces this process (its exit status, its signals) with ``TRAINWATCH_AUTO=1`` and
trial_instrumentation/auto/site first on ``PYTHONPATH``: every Python process it starts that
imports torch is timed (each rank under torchrun), in the same series as the library's. The
flags set ``TRAINWATCH_EXPERIMENT``, ``TRAINWATCH_TRIAL`` and ``TRAINWATCH_PUSHGATEWAY``, the
variables the library reads; left out, the names are chosen here once (the scheduler's, else
the script's name and now: trial_instrumentation/auto/naming.py), so every process of the
command shares them, and the Pushgateway is ``$TRAINWATCH_PUSHGATEWAY``, else the running
`trainwatch stack`'s. Exit codes: the command's; 2 for usage, 127 for a command not found.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from trainwatch.cliutil import EXIT_USAGE
from trainwatch.lookup import NoPrometheus, pushgateway_url
from trial_instrumentation import names
from trial_instrumentation.auto import naming

SITE = Path(naming.__file__).resolve().parent / "site"
EXIT_NOT_FOUND = 127  # as a shell says it


def add_parser(commands: Any) -> None:
    sub = commands.add_parser("run", help="run a training command with every torch process in "
                              "it timed, no change to its code")
    sub.add_argument("--experiment", help=f"default: ${names.ENV_EXPERIMENT}, else the "
                     "scheduler's job name, else the script's name")
    sub.add_argument("--trial", help=f"default: ${names.ENV_TRIAL}, else the scheduler's job "
                     "id, else the script's name and the start time")
    sub.add_argument("--pushgateway", metavar="URL", help=f"default: ${names.ENV_PUSHGATEWAY}, "
                     "else the running `trainwatch stack`'s")
    sub.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def environment(args: argparse.Namespace, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """The command's environment, and the line that says what it will be timed as."""
    command = args.argv
    out = {**env, names.AUTO_ENV: "1",
           "PYTHONPATH": os.pathsep.join([str(SITE), *filter(None, [env.get("PYTHONPATH")])])}
    for variable, value in ((names.ENV_EXPERIMENT, args.experiment),
                            (names.ENV_TRIAL, args.trial),
                            (names.ENV_PUSHGATEWAY, args.pushgateway)):
        if value:
            out[variable] = value
    experiment, trial, where = naming.choose(out, command)
    picked = [bool(out.get(v)) for v in (names.ENV_EXPERIMENT, names.ENV_TRIAL)]
    out.setdefault(names.ENV_EXPERIMENT, experiment)
    out.setdefault(names.ENV_TRIAL, trial)
    # naming's "<the experiment's source>, <the trial's>", each named here the flag's or
    # variable's where one was given (naming leaves those to the library and does not say so)
    chosen = where.split(", ")
    source = "flags and environment" if all(picked) else ", ".join(
        "flag or environment" if given else chosen[i] for i, given in enumerate(picked))
    try:
        out[names.ENV_PUSHGATEWAY] = pushgateway_url(None, out)  # the flag's, the variable's
    except NoPrometheus:
        return out, (f"trainwatch run: no Pushgateway (--pushgateway, "
                     f"${names.ENV_PUSHGATEWAY} or a running `trainwatch stack`): "
                     "nothing is timed")
    return out, (f"trainwatch run: experiment {out[names.ENV_EXPERIMENT]}, trial "
                 f"{out[names.ENV_TRIAL]} (names from {source}), pushing to "
                 f"{out[names.ENV_PUSHGATEWAY]}")


def run(args: argparse.Namespace) -> int:
    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("trainwatch run: no command: trainwatch run [flags] -- COMMAND ...",
              file=sys.stderr)
        return EXIT_USAGE
    args.argv = command
    env, said = environment(args, dict(os.environ))
    print(said, file=sys.stderr, flush=True)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"trainwatch run: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_USAGE  # not reached: exec replaced this process
