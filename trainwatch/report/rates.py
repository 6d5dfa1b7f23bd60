"""The recording rules' figures, written inline for a report to run on the raw series.

A trial recorded under other rules (re-rendered with another window, deployed after it ran, or
replaced) has no recorded series under the names the deployed rules give; the report then
computes each figure from what the trial and the exporter pushed and scraped. The expressions
are the rules' own, from the one definition both render (trainwatch.contract.figures), with
the run's age written inline where a rule reads its record.

Example:
    >>> print(RawRates("5m").cpu_utilization())
    1 - sum by (instance) (rate(trainwatch_cpu_seconds_total{mode=~"idle|iowait|steal"}[5m]))
    / max by (instance) (trainwatch_cpu_count)
"""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch.contract import figures
from trainwatch.contract.promql import matchers as written
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration


@dataclass(frozen=True)
class RawRates:
    """The figures of the rules rendered with rate window ``window``; ``matchers`` and
    ``labels`` select the raw series as :func:`trainwatch.contract.promql.select` does."""

    window: str

    def _counter(self, metric: str, trial: str, *extra: str) -> str:
        age = figures.inline_age(trial, parse_duration(self.window))
        return figures.born_at_zero(metric, trial, self.window, age, *extra)

    def phase_share(self, *matchers: str, **labels: str | None) -> str:
        """RecordNames.phase_share: each phase's time over the step time, per rank."""
        trial = written(*matchers, **labels)
        phases = self._counter(f"{names.PHASE_SECONDS}_sum", trial, "phase")
        steps = self._counter(f"{names.STEP_SECONDS}_sum", trial)
        return figures.phase_share(f"(\n{phases}\n)", f"(\n{steps}\n)")

    def counter_rate(self, counter: str, *matchers: str, **labels: str | None) -> str:
        """RecordNames.steps_rate and samples_rate: a trial counter's rate, per rank."""
        return self._counter(counter, written(*matchers, **labels))

    def cpu_utilization(self, *matchers: str) -> str:
        """RecordNames.cpu_utilization: the share of a node's CPU time spent working."""
        return figures.cpu_utilization(written(*matchers), self.window)

    def device_rate(self, stem: str, *matchers: str) -> str:
        """RecordNames.device_rate: an exporter byte or operation counter's rate per device."""
        return figures.device_rate(f"trainwatch_{stem}_total", written(*matchers), self.window)

    def gpu_busy(self, *matchers: str) -> str:
        """RecordNames.gpu_busy: SM activity where GPM reports it, else NVML utilization."""
        return figures.gpu_busy(written(*matchers))
