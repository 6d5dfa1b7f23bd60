"""GPU-seconds per trial rank (issue 40, "Where the GPU-hours went"): how many GPU-seconds a live
rank held in each step of ``USAGE_INTERVAL`` and how many of them its GPUs were busy (the one
GPU-busy rule), so ``sum_over_time(<record>[7d])`` is the week's GPU-seconds with no multiplier.

The group runs at its own fixed interval, whatever Prometheus's evaluation interval: each sample
is one interval's GPU-seconds. Only live ranks count (promql.live_trials: fresh, no exit
marker), so an ended or killed trial whose group is still scraped holds nothing.
"""

from __future__ import annotations

from typing import Any

from prometheus.rulegen.promql import live_trials
from prometheus.rulegen.settings import Settings
from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.promql import TRIAL_LABELS, by, on, select
from trainwatch.contract.records import USAGE_INTERVAL, USAGE_INTERVAL_SECONDS, RecordNames
from trial_instrumentation import names


def usage_group(s: Settings, n: RecordNames) -> dict[str, Any]:
    """The ``trainwatch.usage.rules`` group: GPU-seconds held, then busy, per live rank."""
    live = live_trials(s.selector("trial"), s.threshold(TRIAL_STALE))
    gpus = f"max {by(*TRIAL_LABELS, 'uuid')} ({select(names.GPU_INFO, s.selector('trial'))})"
    held = (f"{USAGE_INTERVAL_SECONDS} * count {by(*TRIAL_LABELS)} (\n  {gpus}\n"
            f"  and {on(*TRIAL_LABELS)}\n  {live}\n)")
    # Each GPU once per rank (its busy record may carry two sources while GPM comes and goes).
    busy = (f"{USAGE_INTERVAL_SECONDS} * sum {by(*TRIAL_LABELS)} (\n"
            f"  max {by(*TRIAL_LABELS, 'uuid')} ({n.trial_gpu_busy})\n"
            f"  and {on(*TRIAL_LABELS)}\n  {live}\n)")
    return {"name": "trainwatch.usage.rules", "interval": USAGE_INTERVAL,
            "rules": [{"record": n.gpu_seconds_held, "expr": held},
                      {"record": n.gpu_seconds_busy, "expr": busy}]}
