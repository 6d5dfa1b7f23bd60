"""Prometheus text format 0.0.4 for the exporter's own families, about 3x faster than
``prometheus_client.generate_latest``.

The general writer re-validates and re-escapes every label name of every sample; ours are
fixed by ``exporter.metrics`` (validated once, when the spec is made), so only label values
need escaping, and only when they contain one of the three characters that need it. Output is
checked by ``promtool check metrics`` and parsed back in the tests.

>>> from exporter.metrics import CPU_SECONDS
>>> family = CPU_SECONDS.family()
>>> family.add_metric(["user"], 12.5)
>>> print(render([family]).decode(), end="")
# HELP trainwatch_cpu_seconds_total CPU time spent in each mode, summed over all CPUs, in seconds (user and nice include guest time).
# TYPE trainwatch_cpu_seconds_total counter
trainwatch_cpu_seconds_total{mode="user"} 12.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TYPES = {"counter": "counter", "gauge": "gauge", "unknown": "untyped"}


def _value(value: float) -> str:
    if math.isfinite(value):
        return repr(float(value))
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def _label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def render(families: Iterable[Metric]) -> bytes:
    """Counter, gauge and untyped families (what the collectors make) as exposition text."""
    out: list[str] = []
    for family in families:
        kind = _TYPES.get(family.type)
        if kind is None:
            raise ValueError(f"{family.name}: {family.type} families are not rendered here")
        name = family.name + "_total" if kind == "counter" else family.name
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sample.labels.items())
                out.append(f"{sample.name}{{{labels}}} {_value(sample.value)}\n")
            else:
                out.append(f"{sample.name} {_value(sample.value)}\n")
    return "".join(out).encode()
