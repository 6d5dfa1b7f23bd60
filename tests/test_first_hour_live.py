"""The first minutes of a trial on a live stack (tests/live_stack.py): real Prometheus,
Pushgateway and exporter, real PyTorch CPU trials, the committed rules rendered with a short
`for` but the deployed 5m rate window, so a trial stays younger than its window all test long.

- an alert ends within one evaluation after the trial's clean exit (not a window later);
- `trainwatch diagnose` answers within a minute of a trial's start, marked early;
- a trial that stopped pushing gets a "stopped pushing" verdict with its last profile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import trial_instrumentation as ti
from tests.live_stack import LiveStack, live_stack
from tests.stack import wait_until

torch = pytest.importorskip("torch")

RATE_WINDOW, FOR, STALE_AFTER = "5m", "2s", 6.0
EXPERIMENT = "first-hour"
ALERT = "TrainwatchDataloaderBound"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with live_stack(tmp_path_factory.mktemp("first_hour"), rate_window=RATE_WINDOW, for_=FOR,
                    stale_after=STALE_AFTER) as live:
        yield live


def loader_bound_trial(pushgateway: str, trial: str, stop: threading.Event) -> None:
    """A real PyTorch CPU loop whose batches take 30 ms to load, until ``stop``; then the
    ``with`` block exits cleanly: final push, group deleted."""
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches() -> Iterator[torch.Tensor]:
        while not stop.is_set():
            time.sleep(0.03)
            yield torch.randn(4, 8)

    with ti.Trial(experiment=EXPERIMENT, trial=trial, pushgateway=pushgateway,
                  push_interval=0.5) as t:
        for x in t.loader(batches()):
            with t.phase(ti.TRAIN_BATCH):
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()


def alert_states(stack: LiveStack, trial: str) -> list[str]:
    return [a["state"] for a in stack.prometheus.alerts()
            if a["labels"]["alertname"] == ALERT and a["labels"].get("trial") == trial]


def test_alert_ends_within_one_evaluation_after_a_clean_exit(stack: LiveStack) -> None:
    stop = threading.Event()
    runner = threading.Thread(target=loader_bound_trial,
                              args=(stack.pushgateway.url, "exits", stop))
    runner.start()
    try:
        wait_until(lambda: "firing" in alert_states(stack, "exits"), timeout=60,
                   what=f"{ALERT} firing for trial exits", interval=0.2)
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()
    exited = time.monotonic()
    # The 5m window still holds the trial's samples; only the gate on its (deleted) group can
    # end the alert. Scrape and evaluation are 1 s apart here: allow a few under load.
    wait_until(lambda: alert_states(stack, "exits") == [], timeout=60,
               what=f"{ALERT} gone after the clean exit", interval=0.1)
    assert time.monotonic() - exited < 5
