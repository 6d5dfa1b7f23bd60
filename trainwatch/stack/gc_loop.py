"""The stack's janitor: `trainwatch gc` against the stack's Pushgateway, once every interval.

    python -m trainwatch.stack.gc_loop --every 30s --status FILE -- --pushgateway URL [gc flags]

Everything after ``--`` is `trainwatch gc`'s own command line, parsed by gc itself, so the loop
retires exactly what a `trainwatch gc` run by hand would (ended groups once scraped, silent ones
after their age). A pass that deletes something or fails is logged with its time; every pass
rewrites ``FILE`` (JSON: when, exit code, interval), which `stack status` reads and `stack up`
waits for. SIGTERM ends the loop between passes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trainwatch import gc
from trainwatch.cliutil import span


@dataclass(frozen=True)
class Pass:
    """What the last pass did, as the status file keeps it."""

    at: float  # Unix time it finished
    exit: int  # `trainwatch gc`'s exit code
    every: float  # seconds between passes

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Pass | None:
        try:
            doc = json.loads(path.read_text())
            return cls(float(doc["at"]), int(doc["exit"]), float(doc["every"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def gc_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by `trainwatch gc`'s own parser (its defaults, its checks)."""
    parser = argparse.ArgumentParser(prog="trainwatch")
    gc.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["gc", *argv])


def one_pass(args: argparse.Namespace) -> int:
    """Run gc once; print its output, stamped, only when it deleted something or failed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gc.run(args)
    if code != gc.EXIT_OK or out.getvalue():
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for line in (out.getvalue() + err.getvalue()).splitlines():
            print(f"{stamp} {line}", flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainwatch.stack.gc_loop",
                                     description="run `trainwatch gc` every interval")
    parser.add_argument("--every", type=span, required=True, metavar="DURATION")
    parser.add_argument("--status", type=Path, required=True, metavar="FILE")
    parser.add_argument("gc", nargs=argparse.REMAINDER, help="-- then `trainwatch gc`'s flags")
    args = parser.parse_args(argv)
    rest = args.gc[1:] if args.gc[:1] == ["--"] else args.gc
    options = gc_args(rest)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"trainwatch gc {' '.join(rest)} every {args.every:g} s", flush=True)
    while not stop.is_set():
        Pass(time.time(), one_pass(options), args.every).save(args.status)
        stop.wait(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
