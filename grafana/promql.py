"""PromQL building blocks the dashboards share: selectors, rule names, joins, legends.

Selectors and thresholds come from thresholds.yaml through the rule generator
(``prometheus.rulegen``), recording-rule names and selector helpers from ``trainwatch.contract``,
metric names from docs/design.md's contract.
The live-query test proves every name here exists in a running stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus.rulegen.settings import Settings
from trainwatch.contract.figures import GPU_INFO, HOST_INFO
from trainwatch.contract.promql import BY_TRIAL, TRIAL_LABELS, select
from trainwatch.contract.records import RecordNames

TRIAL_INFO = "trainwatch_trial_info"
TRIAL_GPU_INFO = "trainwatch_trial_gpu_info"

# Legends: a hardware series names its host and its GPU, a trial series its rank and node.
GPU_LEGEND = "{{instance}} GPU {{gpu}} {{name}}"
TRIAL_LEGEND = "{{experiment}}/{{trial}} rank {{rank}} on {{nodename}}"

_LONE_SELECTOR = re.compile(r"^[A-Za-z_:][\w:]*(\{[^{}]*\})?$")


def parens(expr: str) -> str:
    """Parenthesise ``expr`` unless it is a lone selector, so it can be an operand."""
    return expr if _LONE_SELECTOR.match(expr) else f"({expr})"


@dataclass(frozen=True)
class Promql:
    """Selectors and joins parameterised by thresholds.yaml.

    Example:
        >>> from prometheus.rulegen.settings import load_settings
        >>> q = Promql(load_settings())
        >>> q.exporter("trainwatch_cpu_count", 'instance=~"$instance"')
        'trainwatch_cpu_count{job="trainwatch-exporter", instance=~"$instance"}'
    """

    settings: Settings
    names: RecordNames = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", RecordNames(self.settings.rate_window))

    def exporter(self, metric: str, *matchers: str) -> str:
        """A series scraped from trainwatch-exporter."""
        return select(metric, self.settings.selector("exporter"), *matchers)

    def trial(self, metric: str, *matchers: str) -> str:
        """A series pushed by trial_instrumentation."""
        return select(metric, self.settings.selector("trial"), *matchers)

    def with_gpu_name(self, expr: str) -> str:
        """Adds the GPU's model ``name`` (from trainwatch_gpu_info) for legends."""
        return (f"{parens(expr)} * on(instance, uuid) group_left(name) "
                f"{self.exporter(GPU_INFO)}")

    def with_nodename(self, expr: str) -> str:
        """Adds the trial's ``nodename`` (from trainwatch_trial_info) for legends."""
        return (f"{parens(expr)} * on({', '.join(TRIAL_LABELS)}) group_left(nodename) "
                f"{self.trial(TRIAL_INFO)}")

    def trial_nodes(self, *trial_matchers: str) -> str:
        """trainwatch_host_info of the nodes the selected trials run on (the nodename join)."""
        return (f"{self.exporter(HOST_INFO)} and on(nodename) "
                f"{self.trial(TRIAL_INFO, *trial_matchers)}")

    def per_trial(self, expr: str, *trial_matchers: str) -> str:
        """A per-instance host series moved onto the selected trials' labels."""
        on_host = (f"{parens(expr)} * on(instance) group_left(nodename) "
                   f"{self.exporter(HOST_INFO)}")
        return (f"max {BY_TRIAL} ({self.trial(TRIAL_INFO, *trial_matchers)} "
                f"* on(nodename) group_left() max by (nodename) ({on_host}))")
