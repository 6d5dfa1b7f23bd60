"""Write docs/instrumentation.md's settings table from the settings declared in
:mod:`trial_instrumentation.config` (variable, argument, default, meaning):

    python -m trial_instrumentation.settings_doc          # rewrite the table (repository root)
    python -m trial_instrumentation.settings_doc --check  # exit 1 if the file differs

>>> row = [line for line in table().splitlines() if "push_interval" in line][0]
>>> row.split(" | ")[:3]
['| `TRAINWATCH_PUSH_INTERVAL`', '`push_interval`', '`10`']
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import Field
from pathlib import Path
from typing import Any

from trial_instrumentation.config import default_of, settings

DOC = Path("docs") / "instrumentation.md"
BEGIN = ("<!-- trial settings: written by `python -m trial_instrumentation.settings_doc` from "
         "trial_instrumentation/config.py; edit them there -->")
END = "<!-- end of trial settings -->"
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def shown(setting: Field[Any]) -> str:
    """The default as the table writes it."""
    way = setting.metadata["shown"]
    if isinstance(way, str):
        return way
    default = default_of(setting)
    if way is not None:
        return str(way(default))
    if setting.metadata["required"]:
        return "required when enabled"
    if default is None:
        return "unset"
    return f"`{default:g}`" if isinstance(default, (int, float)) else f"`{default}`"


def _scheduler(variable: str) -> str:
    """Who sets a variable that is not trainwatch's: torchrun or Slurm."""
    if variable in TORCHRUN:
        return " (torchrun)"
    return " (Slurm)" if variable.startswith("SLURM_") else ""


def table() -> str:
    lines = ["| variable | argument | default | meaning |", "|---|---|---|---|"]
    for setting in settings():
        env = setting.metadata["env"]
        variable = "–" if env is None else f"`{env}`" + _scheduler(env)
        if fallback := setting.metadata["fallback"]:
            variable += f", else `{fallback}`{_scheduler(fallback)}"
        argument = f"`{setting.name}`" if setting.metadata["argument"] else "–"
        lines.append(f"| {variable} | {argument} | {shown(setting)} | "
                     f"{setting.metadata['doc']} |")
    return "\n".join(lines)


def rewritten(text: str) -> str:
    """``text`` with the table between the markers replaced; ValueError without them."""
    head, found, rest = text.partition(BEGIN + "\n")
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise ValueError(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = DOC.read_text()
    new = rewritten(text)
    if args.check:
        if new != text:
            print(f"{DOC} is out of date: run python -m trial_instrumentation.settings_doc",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
