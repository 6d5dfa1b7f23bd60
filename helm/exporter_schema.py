"""Write the exporter's part of the chart's values schema from the exporter's own settings.

``exporter.config`` (the YAML config file), ``exporter.collectors`` and ``exporter.extraArgs``
are checked at ``helm install`` with the same names, types, choices and bounds the exporter
checks at start, so a value the exporter would refuse on every node fails before any pod runs.
It also writes the floors that no value may go under (``bounds_entries``): each container's
memory and CPU limit, the exporter's memory limit (measured) and gc's ages (gc's own
constants). The rest of ``values.schema.json`` is hand-written; this rewrites only those entries:

    python -m helm.exporter_schema          # rewrite them (from the repository root)
    python -m helm.exporter_schema --check  # exit 1 if the file differs from what it writes
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from exporter.cli import build_parser
from exporter.collectors import COLLECTORS
from exporter.config import LISTEN_PATTERN, OPTIONS, SECTIONS
from exporter.webauth import MAX_ITERATIONS, SCHEME
from helm.generated import write_or_check
from helm.schema_bounds import CPU_UNITS, MEMORY_UNITS, number_above_zero, quantity_at_least
from trainwatch.gc import MIN_MAX_AGE
from trial_instrumentation.durations import UNITS

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "helm" / "trainwatch" / "values.schema.json"
_TYPES = {str: "string", bool: "boolean", float: "number", int: "integer", dict: "object"}
# Bounds the exporter enforces in code (validate functions), by key.
_BOUNDS: dict[str, dict[str, Any]] = {
    "gpu.nvml_retry_seconds": {"minimum": 0},
    "web.listen_address": {"pattern": LISTEN_PATTERN.pattern},
}


# Below 10 MB no trainwatch container starts (a Python interpreter alone is ~9 MB), and the
# kubelet kills it in a loop.
CONTAINER_MEMORY_FLOOR = 10**7
# The exporter's RSS, measured with psutil on a real exporter process (Python 3.12, x86_64):
# 30.8 MiB after 10 scrapes of 8 fake GPUs (benchmarks/fake_nvml_exporter.py), 36.3 MiB at its
# peak serving TLS with basic auth to 20 concurrent scrapers; issue 37 saw up to 47 MB. 64 MiB
# leaves room for the real NVML library (not mapped by the fake) and a scrape burst.
EXPORTER_MEMORY_FLOOR = 64 * 2**20
# The kernel's smallest CFS quota is 1 ms per 100 ms period: the kubelet raises any lower CPU
# limit to it (1m means 10m), so a lower value only misleads. At 10m the exporter, which needs
# 0.12 CPU-seconds to start and ~5 ms a scrape of 8 GPUs, is ready in ~12 s and answers a
# scrape in ~0.5 s: inside its probes' 30 s and Prometheus's 10 s scrape timeout.
CPU_FLOOR_MILLICORES = 10
# gc's ages: a number and one unit of the duration grammar gc reads (no unit: seconds).
GC_UNITS = {"": 1.0, **{unit: UNITS[unit] for unit in ("s", "m", "h", "d")}}


def _memory(floor: int, why: str) -> dict[str, Any]:
    return {"description": f"at least {floor / 2**20:.4g} MiB ({floor} bytes): {why}",
            "anyOf": [{"type": "string", "pattern": quantity_at_least(floor, MEMORY_UNITS)},
                      {"type": "integer", "minimum": floor}]}


def bounds_entries(schema: dict[str, Any]) -> None:
    """Write the floors into ``schema``: limits, and gc's ages."""
    limits = schema["$defs"]["resources"]["properties"]["limits"]["properties"]
    limits["memory"] = _memory(CONTAINER_MEMORY_FLOOR, "below that no trainwatch container "
                               "starts, and the kubelet kills it in a loop")
    limits["cpu"] = {
        "description": f"at least {CPU_FLOOR_MILLICORES}m: the kernel's smallest CPU quota "
                       "(1 ms per 100 ms); the kubelet raises a lower limit to it",
        "anyOf": [{"type": "string", "pattern": quantity_at_least(CPU_FLOOR_MILLICORES,
                                                                  CPU_UNITS)},
                  {"type": "number", "minimum": CPU_FLOOR_MILLICORES / 1000}]}
    exporter = schema["properties"]["exporter"]["properties"]
    exporter["resources"] = {"allOf": [{"$ref": "#/$defs/resources"}, {"properties": {
        "limits": {"properties": {"memory": _memory(
            EXPORTER_MEMORY_FLOOR, "the exporter's measured peak RSS is 36 MiB (8 GPUs, TLS, "
            "20 concurrent scrapers); below the floor the kubelet OOM-kills it in a loop")}}}}]}
    gc = schema["properties"]["gc"]["properties"]
    gc["maxAge"] = {"type": "string", "pattern": quantity_at_least(MIN_MAX_AGE, GC_UNITS),
                    "description": f"at least {MIN_MAX_AGE:g}s, which `trainwatch gc` "
                                   "requires (a shorter age deletes live trials' groups)"}
    gc["endedAfter"] = {"type": "string",
                        "pattern": f"^(?:{number_above_zero()})(?:s|m|h|d)?$",
                        "description": "above 0, which `trainwatch gc` requires (Prometheus "
                                       "must scrape a final push before it goes)"}


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
    bounds_entries(schema)
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(SCHEMA, rendered(SCHEMA.read_text()), argv,
                          __doc__.split("\n\n")[0],
                          "the exporter's entries; run helm/exporter_schema.py")


if __name__ == "__main__":
    sys.exit(main())
