"""The statistics of a baseline: a run's throughput against the median of earlier runs of its
experiment, honestly (docs/design.md, "The run that got slower").

The baseline is the median of the runs' throughputs (samples/s per rank, steps/s where samples
are absent). Their own spread is the noise: a run whose throughput lies between the slowest and
the fastest baseline run is "no change", however far from the median; fewer than
:data:`MIN_RUNS` runs is no baseline at all. ``change`` is the run's throughput over the median,
minus 1: -0.23 is 23% slower.

>>> judge(77.0, [100.0, 98.0, 103.0, 101.0, 99.0]).state
'slower'
>>> judge(99.5, [100.0, 98.0, 103.0]).state, judge(50.0, [100.0]).state
('no change', 'no baseline')
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from trainwatch.cliutil import signed
from trainwatch.contract.figures import BASELINE_MIN_RUNS, BASELINE_RUNS

# How many earlier runs make a baseline, and the fewest with a spread to tell noise from a
# change: the contract's, which the recorded baseline counts with too.
LAST_RUNS, MIN_RUNS = BASELINE_RUNS, BASELINE_MIN_RUNS
NO_BASELINE, NO_CHANGE, SLOWER, FASTER = "no baseline", "no change", "slower", "faster"


@dataclass(frozen=True)
class Judgement:
    """A throughput against its baseline runs'."""

    state: str  # NO_BASELINE, NO_CHANGE, SLOWER or FASTER
    runs: int  # baseline runs with a throughput
    median: float | None = None
    change: float | None = None  # throughput / median - 1 (negative: slower)
    low: float | None = None  # the slowest baseline run's change from the median (<= 0)
    high: float | None = None  # the fastest one's (>= 0)

    def beyond(self, max_slowdown: float) -> bool:
        """Slower than the baseline's own spread and by more than ``max_slowdown`` (0.05 is
        5%): what fails `trainwatch check`."""
        return self.state == SLOWER and self.change is not None and -self.change > max_slowdown

    @property
    def percent(self) -> str:
        """'-23%', '+4%', or 'no baseline'."""
        if self.change is None:
            return NO_BASELINE
        return signed(self.change * 100, ".0f", "%").replace("-", "\u2212")


def judge(current: float | None, baseline: Sequence[float], minimum: int = MIN_RUNS
          ) -> Judgement:
    """``current`` against ``baseline`` (the earlier runs' throughputs; non-finite or
    non-positive ones are left out, as runs without a throughput)."""
    runs = [v for v in baseline if math.isfinite(v) and v > 0]
    if len(runs) < minimum or current is None or not math.isfinite(current):
        return Judgement(NO_BASELINE, len(runs))
    median = statistics.median(runs)
    change = current / median - 1
    low, high = min(runs) / median - 1, max(runs) / median - 1
    if current < min(runs):
        state = SLOWER
    elif current > max(runs):
        state = FASTER
    else:
        state = NO_CHANGE
    return Judgement(state, len(runs), median, change, low, high)


def parse_slowdown(text: str) -> float:
    """``5%`` or ``0.05`` -> 0.05: a fraction from 0 to 1.

    >>> parse_slowdown("5%"), parse_slowdown("0.15")
    (0.05, 0.15)
    """
    said = text.strip()
    try:
        value = float(said[:-1]) / 100 if said.endswith("%") else float(said)
    except ValueError:
        raise ValueError(f"--max-slowdown {text!r} is not a percentage (e.g. 5% or 0.05)"
                         ) from None
    if not 0 <= value < 1:  # NaN fails both
        raise ValueError(f"--max-slowdown {text!r} is not between 0% and 100%")
    return value
