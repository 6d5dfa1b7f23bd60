"""Write the exporter's part of the chart's values schema from the exporter's own settings.

``exporter.config`` (the YAML config file), ``exporter.collectors`` and ``exporter.extraArgs``
are checked at ``helm install`` with the same names, types, choices and bounds the exporter
checks at start, so a value the exporter would refuse on every node fails before any pod runs.
The rest of ``values.schema.json`` is hand-written; this rewrites only those three entries:

    python -m helm.exporter_schema          # rewrite them (from the repository root)
    python -m helm.exporter_schema --check  # exit 1 if the file differs from what it writes
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from exporter.cli import build_parser
from exporter.collectors import COLLECTORS
from exporter.config import LISTEN_PATTERN, OPTIONS, SECTIONS
from exporter.webauth import MAX_ITERATIONS, SCHEME

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "helm" / "trainwatch" / "values.schema.json"
_TYPES = {str: "string", bool: "boolean", float: "number", int: "integer", dict: "object"}
# Bounds the exporter enforces in code (validate functions), by key.
_BOUNDS: dict[str, dict[str, Any]] = {
    "gpu.nvml_retry_seconds": {"minimum": 0},
    "web.listen_address": {"pattern": LISTEN_PATTERN.pattern},
}


def at_most(limit: int) -> str:
    """A regex for the integers 1..``limit`` written without leading zeros.

    >>> pattern = re.compile(f"^(?:{at_most(2000)})$")
    >>> [bool(pattern.match(str(n))) for n in (1, 999, 1999, 2000, 2001, 9999, 0)]
    [True, True, True, True, False, False, False]
    """
    digits = str(limit)
    options = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    for i, digit in enumerate(digits):  # same length: a smaller digit at position i
        low = "1" if i == 0 else "0"
        if int(digit) > int(low):
            below = low if int(digit) - 1 == int(low) else f"[{low}-{int(digit) - 1}]"
            options.append(f"{digits[:i]}{below}[0-9]{{{len(digits) - i - 1}}}")
    options.append(digits)
    return "|".join(options)


def _setting(key: str) -> dict[str, Any]:
    meta = OPTIONS[key].metadata
    entry: dict[str, Any] = {"type": _TYPES[meta["kind"]], "description": meta["help"]}
    if meta["choices"]:
        entry["enum"] = list(meta["choices"])
    entry.update(_BOUNDS.get(key, {}))
    if key == "web.basic_auth_users":
        entry["additionalProperties"] = {
            "type": "string",
            "pattern": rf"^{SCHEME}\$(?:{at_most(MAX_ITERATIONS)})\$[^$]+\$[A-Za-z0-9+/]{{43}}=$",
            "description": "a hash from `python -m exporter.webauth`, never a password"}
    return entry


def exporter_entries() -> dict[str, Any]:
    """The schema of ``exporter.config``, ``exporter.collectors`` and ``exporter.extraArgs``."""
    sections: dict[str, Any] = {
        section: {"type": "object", "additionalProperties": False, "properties": {
            key.split(".", 1)[1]: _setting(key) for key in OPTIONS
            if key.split(".", 1)[0] == section}}
        for section in SECTIONS if section != "collector"}
    collector = {"type": "object", "additionalProperties": False,
                 "properties": {name: {"type": "boolean", "description": entry.help}
                                for name, entry in COLLECTORS.items()}}
    sections["collector"] = collector
    flags = sorted(o for o in build_parser()._option_string_actions if o.startswith("--"))
    flag_pattern = "|".join(re.escape(flag) for flag in flags)
    return {
        "config": {"type": "object", "additionalProperties": False,
                   "propertyNames": {"enum": list(SECTIONS)},
                   "properties": {s: sections[s] for s in SECTIONS}},
        "collectors": {"type": "object", "propertyNames": {"enum": list(COLLECTORS)},
                       "additionalProperties": {"type": "boolean"}},
        "extraArgs": {"type": "array", "items": {
            "type": "string", "pattern": f"^(?:(?:{flag_pattern})(?:=.*)?|[^-].*)$",
            "description": "a flag of trainwatch-exporter --help, or the value of the one "
                           "before"}},
    }


def rendered(current: str) -> str:
    schema = json.loads(current)
    schema["properties"]["exporter"]["properties"].update(exporter_entries())
    return json.dumps(schema, indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    current = SCHEMA.read_text()
    wanted = rendered(current)
    if args.check:
        if current != wanted:
            print(f"{SCHEMA}: the exporter's entries differ; run helm/exporter_schema.py")
            return 1
        return 0
    SCHEMA.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
