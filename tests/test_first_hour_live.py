"""The first minutes of a trial on a live stack (tests/live_stack.py): real Prometheus,
Pushgateway and exporter, real PyTorch CPU trials, the committed rules rendered with a short
`for` but the deployed 5m rate window, so a trial stays younger than its window all test long.

- an alert ends within one evaluation after the trial's clean exit (not a window later);
- `trainwatch diagnose` answers within a minute of a trial's start, marked early;
- a trial that stopped pushing gets a "stopped pushing" verdict with its last timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trial_instrumentation as ti
from benchmarks.stack import wait_until
from tests.live_stack import RATE_OVERSHOOT, SLOW_LOADER_SHARE_FLOOR, LiveStack, live_stack

torch = pytest.importorskip("torch")

RATE_WINDOW, FOR, STALE_AFTER = "5m", "2s", 6.0
EXPERIMENT = "first-hour"
ALERT = "TrainwatchDataloaderBound"
TRAINWATCH = Path(sys.executable).parent / "trainwatch"
CPU_TRIAL = ("--workers", "0", "--batch-size", "8")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with live_stack(tmp_path_factory.mktemp("first_hour"), rate_window=RATE_WINDOW, for_=FOR,
                    stale_after=STALE_AFTER) as live:
        yield live


class Crash(Exception):
    """What a failing trial raises out of its ``with`` block."""


def loader_bound_trial(pushgateway: str, trial: str, stop: threading.Event,
                       fail: bool = False) -> None:
    """A real PyTorch CPU loop whose batches take 30 ms to load, until ``stop``; then the
    ``with`` block exits cleanly (final push marked clean) or, if ``fail``, raises Crash out of
    it (final push marked failed); either way the group is left for gc."""
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
        if fail:
            raise Crash("the trial's own bug")


def alert_states(stack: LiveStack, trial: str) -> list[str]:
    return [a["state"] for a in stack.prometheus.alerts()
            if a["labels"]["alertname"] == ALERT and a["labels"].get("trial") == trial]


def end_once_firing(stack: LiveStack, trial: str, fail: bool = False) -> None:
    """Run :func:`loader_bound_trial` until its alert fires, then end it (raising if ``fail``)."""
    stop = threading.Event()

    def run() -> None:
        if not fail:
            loader_bound_trial(stack.pushgateway.url, trial, stop)
            return
        with pytest.raises(Crash):
            loader_bound_trial(stack.pushgateway.url, trial, stop, fail=True)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        wait_until(lambda: "firing" in alert_states(stack, trial), timeout=60,
                   what=f"{ALERT} firing for trial {trial}", interval=0.2)
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive()


def test_alert_ends_within_one_evaluation_after_a_clean_exit(stack: LiveStack) -> None:
    end_once_firing(stack, "exits")
    exited = time.monotonic()
    # The 5m window still holds the trial's samples; only the gate on its (deleted) group can
    # end the alert. Scrape and evaluation are 1 s apart here: allow a few under load.
    wait_until(lambda: alert_states(stack, "exits") == [], timeout=60,
               what=f"{ALERT} gone after the clean exit", interval=0.1)
    assert time.monotonic() - exited < 5


def diagnose(stack: LiveStack, trial: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), "diagnose", "--prometheus", stack.prometheus.url,
                           "--experiment", EXPERIMENT, "--trial", trial, *extra],
                          capture_output=True, text=True, timeout=30, check=False)


def trials(stack: LiveStack) -> list[dict[str, Any]]:
    done = subprocess.run([str(TRAINWATCH), "trials", "--prometheus", stack.prometheus.url,
                           "--experiment", EXPERIMENT, "--format", "json"],
                          capture_output=True, text=True, timeout=30, check=True)
    return list(json.loads(done.stdout)["trials"])


def verdict_of(stack: LiveStack, trial: str) -> tuple[int, dict[str, Any]] | None:
    done = diagnose(stack, trial, "--format", "json")
    if done.returncode not in (0, 1):
        return None
    [report] = json.loads(done.stdout)["reports"]
    return done.returncode, report


def test_diagnose_answers_within_a_minute_of_the_start_marked_early(stack: LiveStack) -> None:
    started = time.monotonic()
    # 50 ms per batch in the loader: at most 20 steps/s, ~98% of each step in dataloader_next.
    proc = stack.start_trial(EXPERIMENT, "young", *CPU_TRIAL, "--loader-delay", "0.05",
                             "--steps", "3000")

    def loader_verdict() -> tuple[int, dict[str, Any]] | None:
        assert proc.poll() is None, stack.trial_log("young")
        found = verdict_of(stack, "young")
        return found if found and found[1]["verdict"]["kind"] == "dataloader" else None

    code, report = wait_until(loader_verdict, timeout=60, what="a data-loader verdict",
                              interval=1.0)
    elapsed = time.monotonic() - started
    verdict = report["verdict"]
    assert code == 1 and verdict["early"] is True and verdict["steps"] >= 1, verdict
    assert elapsed < 60 and report["phases"][0]["phase"] == "dataloader_next"
    # Steps/s over the samples that exist: at most the loader's 20/s, and at least the steps
    # counted over the whole time since launch (imports included), which under-counts. A rate
    # over the 5m window would read some ten times lower.
    floor = verdict["steps"] / elapsed
    assert 0.8 * floor <= report["steps_per_second"] <= RATE_OVERSHOOT / 0.05, (report, floor)
    assert report["lifetime_seconds"] < 60
    text = diagnose(stack, "young").stdout
    assert "VERDICT (early, " in text and "steps): Data loader:" in text, text
    # `trainwatch trials` reads the same samples, not the low 5m rate.
    [row] = [r for r in trials(stack) if r["trial"] == "young"]
    assert row["live"] and 0.8 * floor <= row["steps_per_second"] <= RATE_OVERSHOOT / 0.05, row
    assert row["dataloader_share"] > SLOW_LOADER_SHARE_FLOOR, row


def test_a_trial_that_raises_ends_its_alerts_fires_trial_failed_and_never_stale(
        stack: LiveStack) -> None:
    end_once_firing(stack, "raises", fail=True)
    # Its group stays, fresh, with the failed marker: the marker alone ends the alert.
    wait_until(lambda: alert_states(stack, "raises") == [], timeout=30,
               what=f"{ALERT} gone after the failed exit", interval=0.1)

    def trial_alerts() -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in stack.prometheus.alerts()
                if a["labels"].get("trial") == "raises"}

    wait_until(lambda: trial_alerts().get("TrainwatchTrialFailed") == "firing", timeout=30,
               what="TrainwatchTrialFailed firing", interval=0.2)
    code, report = verdict_of(stack, "raises") or (None, {})
    verdict = report["verdict"]
    assert code == 1 and verdict["exit_reason"] == ti.names.EXIT_FAILED, verdict
    title = verdict["title"]
    assert title.startswith("Ended ") and " ago (failed: an exception or a non-zero exit, " in title
    assert ": over its life, Data loader: " in title and verdict["alert"] == "TrainwatchTrialFailed"
    assert verdict["last_profile"].startswith("Data loader: "), verdict
    [row] = [r for r in trials(stack) if r["trial"] == "raises"]
    # Not live; its steps/s over its whole life, not a rate that falls to 0 once it stopped.
    assert not row["live"] and row["state"] == "failed" and row["steps_per_second"] > 0, row
    # Its steps (not its samples, 4 a batch), at most one per 30 ms load, as diagnose counts.
    assert row["steps"] == verdict["steps"] and row["steps_per_second"] <= 1 / 0.03, row
    # Past the stale threshold plus `for`, a group without the marker would fire Stale.
    wait_until(lambda: (verdict_of(stack, "raises") or (0, {"push_age_seconds": 0}))[1][
        "push_age_seconds"] > STALE_AFTER + 4, timeout=30, what="the group older than Stale's "
        "threshold and for", interval=0.5)
    assert trial_alerts() == {"TrainwatchTrialFailed": "firing"}


def test_a_trial_that_stopped_pushing_gets_its_last_profile_and_the_clean_up_line(
        stack: LiveStack) -> None:
    # SIGKILL (an OOM kill, a lost node): no final push, no exit marker, the group left.
    # Epoch after epoch over a small data set (1,000,000 steps' worth was a 1 GB tensor).
    proc = stack.start_trial(EXPERIMENT, "gone", *CPU_TRIAL, "--loader-delay", "0.02",
                             "--steps", "200", "--max-seconds", "600")
    steps_total = f'{ti.names.STEPS}_total{{trial="gone"}} >= 60'
    stack.prometheus.wait_for_series(steps_total, timeout=60)
    proc.kill()
    proc.wait(timeout=10)

    def stale_verdict() -> tuple[int, dict[str, Any]] | None:
        found = verdict_of(stack, "gone")
        return found if found and found[1]["verdict"]["kind"] == "stale" else None

    code, report = wait_until(stale_verdict, timeout=STALE_AFTER + 30,
                              what="a stopped-pushing verdict", interval=0.5)
    verdict = report["verdict"]
    assert code == 1 and verdict["title"].startswith("Stopped pushing ") and \
        " ago without a word (crashed or killed; " in verdict["title"], verdict
    assert verdict["measured"] > STALE_AFTER and verdict["alert"] == "TrainwatchTrialStale"
    [pushed] = stack.prometheus.query(steps_total)  # its last push, frozen since the kill
    assert verdict["steps"] == int(float(pushed["value"][1])) and verdict["exit_reason"] is None
    assert verdict["last_profile"].startswith("Data loader: "), verdict
    assert report["phases"][0]["phase"] == "dataloader_next" and report["step_seconds"]["0.5"] > 0
    group = f"/metrics/job/trainwatch_trial/experiment/{EXPERIMENT}/trial/gone/rank/0"
    assert verdict["cleanup"] == f"curl -X DELETE {stack.pushgateway.url}{group}"
    text = diagnose(stack, "gone").stdout
    assert "clean up once it is gone: curl -X DELETE" in text and "last timings: Data loader" in text
    [row] = [r for r in trials(stack) if r["trial"] == "gone"]
    assert not row["live"] and row["state"] == "stale" and row["steps_per_second"] > 0, row
    # Its last push's steps (not its samples, 8 a batch), at most one per 20 ms load.
    assert row["steps"] == verdict["steps"] and row["steps_per_second"] <= 1 / 0.02, row
    # The clean-up line works: the group goes. The trial stays in diagnose's history, read at
    # its last sample, with the same steps and no clean-up line left to give.
    urllib.request.urlopen(urllib.request.Request(stack.pushgateway.url + group, method="DELETE"),
                           timeout=5).close()

    def retired() -> tuple[int, dict[str, Any]] | None:
        """Read from history once the group is gone: no clean-up line, and no longer its
        current series (a read between the DELETE and the scrape that marks its series stale
        once saw a live verdict)."""
        found = verdict_of(stack, "gone")
        done = found and found[1]["verdict"]["cleanup"] is None and \
            found[1]["run"]["current"] is False
        return found if done else None

    code, after = wait_until(retired, timeout=30, what="the deleted group read from history",
                             interval=0.5)
    assert code == 1 and after["verdict"]["title"].startswith("Stopped pushing "), after
    assert after["verdict"]["steps"] == verdict["steps"] and after["run"]["current"] is False
