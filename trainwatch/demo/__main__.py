"""``python -m trainwatch.demo [--state-dir DIR] [--seconds S]`` (`make demo`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainwatch.alertmanager import AlertmanagerConfigError
from trainwatch.demo.run import DemoError, run
from trainwatch.layout import ENV_STATE_DIR, StackError
from trainwatch.layout import default_state_dir as default_stack_dir
from trainwatch.promapi import PrometheusError

# Under the stack's state directory ($TRAINWATCH_STATE_DIR, else ~/.local/state/trainwatch),
# beside the `make run` stack's files, never mixed with them.
DEMO_DIR = "demo"


def default_state_dir() -> Path:
    return default_stack_dir() / DEMO_DIR


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainwatch.demo",
                                     description="a slow and a healthy PyTorch trial, and the "
                                     "alert, notification and diagnosis trainwatch gives them")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help=f"the demo stack's files (default: {DEMO_DIR}/ in ${ENV_STATE_DIR}, "
                        f"else ~/.local/state/trainwatch/{DEMO_DIR})")
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="how long each trial trains (default 45; at least 30 lets the "
                        "alert fire while the slow one still runs)")
    args = parser.parse_args(argv)
    if args.seconds < 30:
        parser.error("--seconds must be at least 30")
    state_dir = (args.state_dir or default_state_dir()).absolute()
    stop = f"`trainwatch stack down --state-dir {state_dir}` stops its stack"
    try:
        run(state_dir, seconds=args.seconds)
    except (DemoError, StackError, PrometheusError, AlertmanagerConfigError) as err:
        started = (state_dir / "run").is_dir() and any((state_dir / "run").glob("*.pid"))
        print(f"make demo: error: {err}" + (f" ({stop})" if started else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"make demo: interrupted; {stop}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
