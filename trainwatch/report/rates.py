"""The recording rules' expressions, written inline for a report to run on the raw series.

A trial recorded under other rules (re-rendered with another window, deployed after it ran, or
replaced) has no recorded series under the names the deployed rules give; the report then
computes each figure from what the trial and the exporter pushed and scraped, with these
expressions. They are the rules' own: tests/test_report.py renders prometheus/rulegen's rules
and checks that each one equals its expression here, given the rule's selector and window.

Example:
    >>> RawRates("5m").counter_rate("trainwatch_trial_steps_total", trial="a")
    'sum by (experiment, trial, rank) (rate(trainwatch_trial_steps_total{trial="a"}[5m]))'
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.contract.promql import GPU_LABELS, TRIAL_LABELS, by, on, select
from trainwatch.contract.records import BUSY_SOURCES
from trial_instrumentation import names

# CPU modes that are not work done for the node (as node-mixin counts them).
NOT_BUSY_MODES = 'mode=~"idle|iowait|steal"'
# The GPU-busy rule's sources (its ``source`` label, records.BUSY_SOURCES) -> the exporter
# series each reads, in the rule's order of preference.
BUSY_METRICS = {"sm_active": "trainwatch_gpu_sm_active_ratio",
                "utilization": "trainwatch_gpu_utilization_ratio"}


@dataclass(frozen=True)
class RawRates:
    """The expressions of the rules rendered with rate window ``window``; ``matchers`` and
    ``labels`` select the raw series as :func:`select` does."""

    window: str

    def _rate(self, metric: str, *matchers: str, **labels: str | None) -> str:
        return f"rate({select(metric, *matchers, **labels)}[{self.window}])"

    def phase_share(self, *matchers: str, **labels: str | None) -> str:
        """RecordNames.phase_share: each phase's time over the step time, per rank."""
        phases = self._rate(f"{names.PHASE_SECONDS}_sum", *matchers, **labels)
        steps = self._rate(f"{names.STEP_SECONDS}_sum", *matchers, **labels)
        return (f"sum {by(*TRIAL_LABELS, 'phase')} ({phases})\n"
                f"/ {on(*TRIAL_LABELS)} group_left\n"
                f"sum {by(*TRIAL_LABELS)} ({steps})")

    def counter_rate(self, counter: str, *matchers: str, **labels: str | None) -> str:
        """RecordNames.steps_rate and samples_rate: a trial counter's rate, per rank."""
        return f"sum {by(*TRIAL_LABELS)} ({self._rate(counter, *matchers, **labels)})"

    def cpu_utilization(self, *matchers: str) -> str:
        """RecordNames.cpu_utilization: the share of a node's CPU time spent working."""
        idle = self._rate("trainwatch_cpu_seconds_total", *matchers, NOT_BUSY_MODES)
        return (f"1 - sum {by('instance')} ({idle})\n"
                f"/ max {by('instance')} ({select('trainwatch_cpu_count', *matchers)})")

    def device_rate(self, stem: str, *matchers: str) -> str:
        """RecordNames.device_rate: an exporter byte or operation counter's rate per device."""
        rate = self._rate(f"trainwatch_{stem}_total", *matchers)
        return f"sum {by('instance', 'device')} ({rate})"

    def gpu_busy(self, *matchers: str) -> str:
        """RecordNames.gpu_busy: SM activity where GPM reports it, else NVML utilization, per
        GPU, with the one used in the ``source`` label (no rate: the window plays no part)."""
        def per_gpu(metric: str) -> str:
            return f"max {by(*GPU_LABELS)} ({select(metric, *matchers)})"

        labelled = [f'label_replace({per_gpu(BUSY_METRICS[source])}, "source", "{source}", "", "")'
                    for source in BUSY_SOURCES]
        return f"\nor {on(*GPU_LABELS)}\n".join(labelled)
