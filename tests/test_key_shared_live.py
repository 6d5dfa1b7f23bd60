"""TrainwatchTrialKeyShared on a live stack: two real processes running trial_instrumentation
with one grouping key push to a real Pushgateway that a real Prometheus scrapes (1 s) with the
committed rules rendered again with short `for` and window; a third process with its own key
runs beside them. The alert fires for the shared key, naming both processes' real pids, and
not for the one that has its key to itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.stack import wait_until
from tests.live_stack import live_stack

ALERT, EXPERIMENT = "TrainwatchTrialKeyShared", "live-key-shared"
# `for` longer than the window, as in thresholds.yaml, so a restart would not fire.
FOR, WINDOW = "6s", "4s"
# A trial_instrumentation loop without torch. The two sharers push at different intervals:
# with equal ones a 1 s scrape, a multiple of both, could see the same pusher every time
# (in production pushes jitter and 10 s does not divide the 15 s scrape).
LOOP = """
import sys, time
import trial_instrumentation as ti
with ti.Trial(experiment=sys.argv[1], trial=sys.argv[2], pushgateway=sys.argv[3],
              push_interval=float(sys.argv[4]), rank=0, world_size=1) as trial:
    while True:
        with trial.phase(ti.TRAIN_BATCH):
            time.sleep(0.02)
"""


def key_alerts(alerts: list[dict[str, Any]], trial: str) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"]["alertname"] == ALERT
            and a["labels"].get("experiment") == EXPERIMENT and a["labels"]["trial"] == trial]


def test_two_processes_with_one_key_fire_key_shared_naming_both(tmp_path: Path) -> None:
    with live_stack(tmp_path, rate_window="10s", for_=FOR, window=WINDOW) as live:
        def loop(name: str, trial: str, interval: str) -> int:
            return live.start_process(name, [sys.executable, "-c", LOOP, EXPERIMENT, trial,
                                             live.pushgateway.url, interval]).pid

        pids = {loop("first", "shared", "0.35"), loop("second", "shared", "0.45")}
        alone = loop("alone", "alone", "0.35")
        prom = live.prometheus

        def firing() -> list[dict[str, Any]]:
            for name, proc in live.trials.items():
                assert proc.poll() is None, live.trial_log(name)
            return [a for a in key_alerts(prom.alerts(), "shared") if a["state"] == "firing"]

        [alert] = wait_until(firing, timeout=40, what=f"{ALERT} firing for the shared key",
                             interval=0.5)
        assert alert["labels"]["rank"] == "0" and alert["labels"]["severity"] == "warning"
        description = alert["annotations"]["description"]
        # Both sharers named, in the order of their pids (as strings), and no one else: not
        # the process beside them with its key to itself.
        named = ", ".join(f"node {os.uname().nodename} pid {pid}"
                          for pid in sorted(map(str, pids)))
        assert f"was pushed by 2 processes within {WINDOW} ({named}): " in description, \
            description
        assert f" pid {alone}" not in description, description
        # The lone process has pushed for longer than the shared key took to fire.
        assert prom.query(f'trainwatch_trial_info{{experiment="{EXPERIMENT}",trial="alone"}}')
        assert key_alerts(prom.alerts(), "alone") == []
