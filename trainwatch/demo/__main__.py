"""``python -m trainwatch.demo [--state-dir DIR] [--seconds S]`` (`make demo`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from trainwatch.alertmanager import AlertmanagerConfigError
from trainwatch.demo.run import DemoError, run
from trainwatch.promapi import PrometheusError
from trainwatch.stack.layout import StackError

ENV_STATE_DIR = "TRAINWATCH_DEMO_STATE_DIR"


def default_state_dir() -> Path:
    """Beside the `make run` stack's (~/.local/state/trainwatch), never inside it."""
    if os.environ.get(ENV_STATE_DIR):
        return Path(os.environ[ENV_STATE_DIR]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "trainwatch-demo"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainwatch.demo",
                                     description="a slow and a healthy PyTorch trial, and the "
                                     "alert, notification and diagnosis trainwatch gives them")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help=f"the demo stack's files (default: ${ENV_STATE_DIR}, else "
                        "~/.local/state/trainwatch-demo)")
    parser.add_argument("--seconds", type=float, default=45.0,
                        help="how long each trial trains (default 45; at least 30 lets the "
                        "alert fire while the slow one still runs)")
    args = parser.parse_args(argv)
    if args.seconds < 30:
        parser.error("--seconds must be at least 30")
    try:
        run(args.state_dir or default_state_dir(), seconds=args.seconds)
    except (DemoError, StackError, PrometheusError, AlertmanagerConfigError) as err:
        print(f"make demo: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("make demo: interrupted; `trainwatch stack down --state-dir DIR` stops its stack",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
