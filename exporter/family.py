"""One scrape's samples of one metric, as the collectors hand them to the exposition writer.

``Family`` keeps the rows as collected, (label values, value), and reads as a
``prometheus_client`` metric family (``name``, ``documentation``, ``type``, ``samples``: a
counter's name without ``_total``, its samples with it), so a ``CollectorRegistry``,
``generate_latest`` and the tests take it; ``exporter.exposition`` writes the rows directly.
It is cheaper to fill than prometheus_client's families, which build a dict and a named tuple
per sample (with 8 GPUs, 400 of them a scrape), and it does not import prometheus_client.

>>> from exporter.metrics import CPU_SECONDS
>>> family = Family(CPU_SECONDS)
>>> family.add_metric(("user",), 12.5)
>>> family.name, family.type, family.samples[0].name, family.samples[0].labels
('trainwatch_cpu_seconds', 'counter', 'trainwatch_cpu_seconds_total', {'mode': 'user'})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from exporter.metrics import MetricSpec

# prometheus_client's family types, by the spec's kind.
_FAMILY_TYPES = {"gauge": "gauge", "counter": "counter", "untyped": "unknown"}


class ExpositionSample(NamedTuple):
    """One sample as prometheus_client's ``Sample`` has it (what its registry and parser read)."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: Any = None
    exemplar: Any = None
    native_histogram: Any = None


class Family:
    """The rows of one spec in one scrape; label values in the spec's label order."""

    __slots__ = ("rows", "spec")
    unit = ""

    def __init__(self, spec: MetricSpec,
                 rows: list[tuple[Sequence[str], float]] | None = None) -> None:
        self.spec = spec
        self.rows: list[tuple[Sequence[str], float]] = [] if rows is None else rows

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        self.rows.append((labels, value))

    @property
    def name(self) -> str:
        name = self.spec.name
        return name.removesuffix("_total") if self.spec.kind == "counter" else name

    @property
    def documentation(self) -> str:
        return self.spec.help

    @property
    def type(self) -> str:
        return _FAMILY_TYPES[self.spec.kind]

    @property
    def samples(self) -> list[ExpositionSample]:
        spec = self.spec
        return [ExpositionSample(spec.name, dict(zip(spec.labels, labels)), value)
                for labels, value in self.rows]
