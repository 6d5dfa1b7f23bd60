"""After the run (issue 20), on a live stack with real PyTorch trials: every trial's last push
reaches Prometheus, `trainwatch gc` retires ended groups, and `diagnose`, `trials` and `compare`
answer for trials that ended (and whose groups are gone), run by run.

One stack for the module: a loader-bound trial ("slow", 150 steps) and its healthy twin ("fast",
400 steps) end cleanly; "again" runs twice under one key (two runs of
different lengths, so that a figure read from the other run shows); "raises" fails; "killed"
is SIGKILLed; "running" runs on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import REPO, start_prometheus, wait_until
from prometheus import generate_rules
from tests.live_stack import LiveStack, live_stack
from trainwatch import gc
from trainwatch.contract import remedies
from trainwatch.diagnose import compare as compare_module
from trainwatch.diagnose.runs import Run
from trial_instrumentation import names

pytest.importorskip("torch")

EXPERIMENT = "after"
STALE_AFTER = 4.0
SLOW_STEPS, FAST_STEPS, AGAIN_STEPS = 150, 400, 40
AGAIN_SECOND_STEPS = 55  # the second run under "again"'s key: not the first's count
COMMON = ("--workers", "0", "--batch-size", "8")
LOADER_REMEDIES = {"too_few_workers": remedies.LOADER_TOO_FEW_WORKERS,
                   "decode_bound": remedies.LOADER_DECODE_BOUND,
                   "storage_bound": remedies.LOADER_STORAGE_BOUND,
                   "remote_storage": remedies.LOADER_REMOTE_STORAGE,
                   "latency_bound": remedies.LOADER_LATENCY_BOUND}
RAISES = textwrap.dedent("""
    import sys, time
    import trial_instrumentation as ti
    with ti.Trial(experiment=sys.argv[1], trial="raises", pushgateway=sys.argv[2],
                  push_interval=0.5) as trial:
        for step in trial.loader(range(10**9), samples=1):
            with trial.phase(ti.TRAIN_BATCH):
                time.sleep(0.005)
            if step == 60:
                raise RuntimeError("loss diverged")
""")


def run_to_end(live: LiveStack, *trials: tuple[str, ...]) -> dict[str, int]:
    """Start each ``(trial, *args)`` at once; wait for all to exit cleanly; their pids."""
    procs = {trial: live.start_trial(EXPERIMENT, trial, *COMMON, *args)
             for trial, *args in trials}
    for trial, proc in procs.items():
        assert proc.wait(timeout=120) == 0, live.trial_log(trial)
    return {trial: proc.pid for trial, proc in procs.items()}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    workdir = tmp_path_factory.mktemp("after_the_run")
    with live_stack(workdir, rate_window="10s", for_="3s", stale_after=STALE_AFTER) as live:
        # Light loops (10 ms per batch) that run epoch after epoch over a small data set until
        # the stack stops them: they run beside the others on a small machine.
        light = (*COMMON, "--steps", "200", "--max-seconds", "900", "--loader-delay", "0.01")
        live.start_trial(EXPERIMENT, "running", *light)
        killed = live.start_trial(EXPERIMENT, "killed", *light)
        raises = live.start_process("raises", [sys.executable, "-c", RAISES, EXPERIMENT,
                                               live.pushgateway.url])
        run_to_end(live, ("slow", "--steps", str(SLOW_STEPS), "--loader-delay", "0.02"),
                   ("fast", "--steps", str(FAST_STEPS)), ("again", "--steps", str(AGAIN_STEPS)))
        prom = live.prometheus
        # The first run's final push scraped before the second run replaces the group.
        prom.wait_for_series(f'{names.EXIT}{{trial="again"}}', 30)
        again = run_to_end(live, ("again", "--steps", str(AGAIN_SECOND_STEPS)))["again"]
        # The second run's final push scraped: its own process, carrying the exit marker.
        prom.wait_for_series(f'{names.TRIAL_INFO}{{trial="again", pid="{again}"}} and on '
                             f'(experiment, trial, rank) {names.EXIT}{{trial="again"}}', 30)
        assert raises.wait(timeout=60) == 1, live.trial_log("raises")
        prom.wait_for_series(f'{names.STEPS}_total{{trial="killed"}} > 20', 120)
        killed.kill()
        killed.wait()
        for trial in ("slow", "fast", "raises"):
            prom.wait_for_series(f'{names.EXIT}{{trial="{trial}"}}', 30)
        yield live


def trainwatch(stack: LiveStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainwatch.cli", *args, "--prometheus",
                           stack.prometheus.url], check=False, capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def as_json(stack: LiveStack, *args: str) -> tuple[int, Any]:
    done = trainwatch(stack, *args, "--format", "json")
    assert not done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def diagnosed(stack: LiveStack, trial: str) -> dict[str, Any]:
    code, doc = as_json(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", trial)
    [report] = doc["reports"]
    report["exit_code"] = code
    return report


def retire_ended_groups(stack: LiveStack) -> None:
    gateway = gc.Pushgateway(stack.pushgateway.url, 5, {})
    wait_until(lambda: len(gc.collect(gateway, names.JOB, 3600, dry_run=True,
                                      ended_after=1.0)) >= 3,
               what="the ended groups to age past 1 s")
    gc.collect(gateway, names.JOB, 3600, dry_run=False, ended_after=1.0)
    for trial in ("slow", "fast", "raises"):
        stack.prometheus.wait_for_series(f'absent({names.TRIAL_INFO}{{trial="{trial}"}})', 30)


def test_every_clean_exit_reaches_prometheus_with_its_last_step_and_its_marker(
        stack: LiveStack) -> None:
    for trial, steps in (("slow", SLOW_STEPS), ("fast", FAST_STEPS),
                         ("again", AGAIN_SECOND_STEPS)):
        [last] = stack.prometheus.query(f'{names.STEPS}_total{{trial="{trial}"}}')
        assert float(last["value"][1]) == steps, trial
        [marker] = stack.prometheus.query(f'{names.EXIT}{{trial="{trial}"}}')
        assert marker["metric"]["reason"] == names.EXIT_CLEAN


def test_an_ended_trial_is_diagnosed_over_its_life_after_gc_retired_its_group(
        stack: LiveStack) -> None:
    before = diagnosed(stack, "slow")
    retire_ended_groups(stack)
    report = diagnosed(stack, "slow")
    verdict, run = report["verdict"], report["run"]
    assert run["current"] is False and run["exit_reason"] == names.EXIT_CLEAN
    assert verdict["title"].startswith("Ended ")
    assert f" ago (clean, {SLOW_STEPS} steps in " in verdict["title"]
    assert ": over its life, Data loader: " in verdict["title"], verdict
    assert verdict["steps"] == SLOW_STEPS and verdict["cleanup"] is None
    # After a clean end, what to change is its life's finding, with that alert's runbook.
    assert verdict["alert"] == "TrainwatchDataloaderBound" and report["exit_code"] == 1
    assert verdict["runbook_url"].endswith("#trainwatchdataloaderbound")
    # Its loader's cause over its life, with that cause's remedy in place of every loader fix
    # (which of the five: how busy this shared machine's cores were while it ran).
    cause = report["loader_cause"]
    assert cause is not None and cause["kind"] in LOADER_REMEDIES, report
    assert verdict["remedy"].startswith(LOADER_REMEDIES[cause["kind"]].split("{")[0])
    assert "CPU-seconds/s" in cause["evidence"] and "the trial process" in cause["evidence"]
    # One answer whenever it is asked: its cause and figures over [start, final push] are the
    # same while its group stayed and after gc retired it (the window once ran to the last
    # scrape, and the cause drifted from "too few workers" to "latency" as it lengthened).
    assert before["loader_cause"] is not None
    assert before["loader_cause"]["kind"] == cause["kind"], (before["loader_cause"], cause)
    assert "workers wanting" not in cause["evidence"]  # --workers 0: no word of workers
    # An ended run crossed no stale threshold: kind "ended"; its figure is its life's share,
    # and its finding is the one it had while it ran (and in `trials`).
    assert verdict["kind"] == "ended" and verdict["finding"] == before["verdict"]["finding"] \
        == "dataloader", verdict
    assert verdict["measured"] == pytest.approx(report["phases"][0]["share"])
    assert verdict["comparison"] == ">" and verdict["threshold"] == 0.3
    assert report["phases"][0]["phase"] == names.DATALOADER_NEXT
    # Over its life: the final count over the time from its start to its last push.
    life = run["pushed"] - run["started"]
    assert report["steps_per_second"] == pytest.approx(SLOW_STEPS / life)
    assert run["started"] <= run["first"] <= run["last"] and run["pushed"] <= run["last"]
    # The same figures as while its group was still there.
    assert dict(map(tuple, [(p["phase"], p["share"]) for p in report["phases"]])) == \
        pytest.approx({p["phase"]: p["share"] for p in before["phases"]})
    text = trainwatch(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", "slow").stdout
    assert "ENDED: numbers over its whole run" in text and "clean up once" not in text


def test_trials_since_lists_every_run_with_its_state(stack: LiveStack) -> None:
    wait_until(lambda: diagnosed(stack, "killed")["verdict"]["kind"] == "stale", timeout=30,
               what="the killed trial past the stale threshold", interval=0.5)
    _, doc = as_json(stack, "trials", "--experiment", EXPERIMENT, "--since", "1h")
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in doc["trials"]:
        rows.setdefault(row["trial"], []).append(row)
    states = {trial: [r["state"] for r in found] for trial, found in rows.items()}
    assert states == {"running": ["running"], "slow": ["ended clean"], "fast": ["ended clean"],
                      "again": ["ended clean", "ended clean"], "raises": ["failed"],
                      "killed": ["stale"]}, (doc, stack.trial_log("running"))
    first, second = rows["again"]
    assert first["pid"] != second["pid"] and first["started"] < second["started"]
    assert second["pid"] == str(stack.trials["again"].pid)  # the one started second
    # Each run its own count, read over its own life: never the sum, never the other's.
    assert (first["steps"], second["steps"]) == (AGAIN_STEPS, AGAIN_SECOND_STEPS)
    assert rows["slow"][0]["cause"] == "dataloader" and rows["slow"][0]["steps"] == SLOW_STEPS
    assert rows["running"][0]["live"] and rows["running"][0]["steps_per_second"] > 0
    text = trainwatch(stack, "trials", "--experiment", EXPERIMENT, "--since", "1h").stdout
    assert text.splitlines()[0].split()[:5] == ["EXPERIMENT", "TRIAL", "RANK", "NODE", "PID"]
    assert "ended clean" in text and "failed" in text


def test_a_restart_under_one_key_is_judged_on_its_own_run(stack: LiveStack) -> None:
    report = diagnosed(stack, "again")
    run = report["run"]
    # The second run's process and count, not the first's (40 steps) nor both runs' (95).
    assert run["pid"] == str(stack.trials["again"].pid)  # the second run's process
    assert report["verdict"]["steps"] == AGAIN_SECOND_STEPS
    life = run["pushed"] - run["started"]
    assert report["steps_per_second"] == pytest.approx(AGAIN_SECOND_STEPS / life)


def test_compare_names_the_phase_that_explains_the_slowdown(stack: LiveStack) -> None:
    code, doc = as_json(stack, "compare", f"{EXPERIMENT}/slow", f"{EXPERIMENT}/fast")
    c = doc["comparison"]
    assert code == 0 and c["a"]["steps"] == SLOW_STEPS and c["b"]["steps"] == FAST_STEPS
    top = c["changes"][0]
    assert top["phase"] == names.DATALOADER_NEXT and top["explained"] > 0.7, c["changes"]
    # Per step: about the 20 ms the slow trial's loader sleeps, not its life's total (3 s).
    assert 0.015 < c["delta_step_seconds"] < 0.1, c
    assert 0.015 < top["delta_seconds"] < 0.05, top
    assert c["a"]["step_seconds"] == pytest.approx(
        c["b"]["step_seconds"] + c["delta_step_seconds"]), c
    assert sum(ch["explained"] for ch in c["changes"]) == pytest.approx(1.0)
    text = trainwatch(stack, "compare", f"{EXPERIMENT}/slow", f"{EXPERIMENT}/fast").stdout
    assert "WHAT CHANGED: " in text and "of the slowdown" in text
    assert "dataloader_next +" in text.split("WHAT CHANGED: ")[1].splitlines()[0]


def test_a_trial_compared_with_its_own_figures_shows_no_change(stack: LiveStack) -> None:
    side = compare_module.Side("x", Run("e", "t", "0", "1", "n", "1", 0.0, 10.0), "ended clean",
                               steps=10, step_seconds=0.02,
                               phase_seconds={names.DATALOADER_NEXT: 0.015})
    same = compare_module.compare(side, side)
    assert same.summary.startswith("No change: ") and all(c.explained is None
                                                           for c in same.changes)


@pytest.mark.parametrize(("args", "said"), [
    (("diagnose", "--experiment", EXPERIMENT, "--trial", "slwo"),
     f"did you mean {EXPERIMENT}/slow?"),
    (("diagnose", "--experiment", "aftre"), f"did you mean {EXPERIMENT}?"),
    (("diagnose", "--experiment", EXPERIMENT, "--at", "2001-01-01T00:00:00Z"),
     "outside the"),
    (("compare", f"{EXPERIMENT}/slow", f"{EXPERIMENT}/slow"), "are the same run"),
    (("compare", f"{EXPERIMENT}/slow", "nonsense"), "is not a trial reference"),
])
def test_bad_input_is_one_line_and_exit_2(stack: LiveStack, args: tuple[str, ...],
                                          said: str) -> None:
    done = trainwatch(stack, *args)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"trainwatch {args[0]}: error: ") and said in line, line


def test_a_prometheus_without_the_rules_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with start_prometheus(tmp_path, {"scrape_configs": []}) as bare:
        done = subprocess.run([sys.executable, "-m", "trainwatch.cli", "trials", "--prometheus",
                               bare.url], check=False, capture_output=True, text=True, cwd=REPO,
                              timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "rules" in done.stderr


def test_at_an_instant_of_its_run_an_ended_trial_is_read_as_it_was_then(
        stack: LiveStack) -> None:
    run = diagnosed(stack, "slow")["run"]
    middle = run["pushed"] - 1.5  # while it ran, not while its group waited for gc
    code, doc = as_json(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", "slow",
                        "--at", f"{middle:.3f}")
    [then] = doc["reports"]
    assert then["verdict"]["kind"] == "dataloader" and code == 1, then["verdict"]
    assert then["verdict"]["finding"] == diagnosed(stack, "slow")["verdict"]["finding"]
    assert then["run"]["pid"] == run["pid"] and then["verdict"]["measured"] > 0.3  # its share


def test_a_window_of_ones_own_replaces_the_rate_window(stack: LiveStack) -> None:
    code, doc = as_json(stack, "diagnose", "--experiment", EXPERIMENT, "--trial", "running",
                        "--window", "1h")
    [report] = doc["reports"]
    assert code == 1 and report["window"] == "3600s", report
    assert report["verdict"]["kind"] == "dataloader", report
    assert report["phases"][0]["phase"] == names.DATALOADER_NEXT and report["steps_per_second"]


def test_rules_rendered_again_with_another_window_still_judge_the_running_trial(
        stack: LiveStack) -> None:
    # Last in the module: it changes the stack's rules. Right after the reload no series of the
    # new window's records exists yet; diagnose evaluates the deployed rules' own expressions.
    generate_rules.write_rules(stack.workdir / "rules", for_="3s", rate_window="30s",
                               stale_after=STALE_AFTER)
    urllib.request.urlopen(urllib.request.Request(f"{stack.prometheus.url}/-/reload",
                                                  method="POST"), timeout=10).close()
    wait_until(lambda: any(r.get("name", "").endswith("rate30s")
                           for g in stack.prometheus.api("rules")["groups"] for r in g["rules"]),
               what="the 30s rules loaded")
    report = diagnosed(stack, "running")
    assert report["window"] == "30s" and report["phases"], report
    assert report["phases"][0]["phase"] == names.DATALOADER_NEXT
    assert report["verdict"]["kind"] == "dataloader" and report["steps_per_second"] > 0
