"""Suggestions that point at what exists (issue 38, item 6), against the session's live stack
(tests/live_stack.py's two trials, one rank each): the same run compared with itself, an
experiment's typo in `trials`, a rank a trial does not have."""

from __future__ import annotations

import json
import re

import pytest

from tests.live_stack import TWO_TRIALS_EXPERIMENT
from tests.test_diagnose_live import trainwatch  # the command against the session's stack
from trial_instrumentation import names

pytest.importorskip("torch")

EXPERIMENT = TWO_TRIALS_EXPERIMENT


@pytest.mark.parametrize(("a", "b"), [("slow/0", "slow"), ("slow", "slow/0"),
                                      ("slow/0", "slow/0")])
def test_compare_of_a_run_with_itself_however_spelled_is_one_line_exit_2(two_trials, a, b):
    done = trainwatch(two_trials, "compare", f"{EXPERIMENT}/{a}", f"{EXPERIMENT}/{b}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "the same run" in done.stderr and f"{EXPERIMENT}/slow rank 0" in done.stderr
    assert "No change" not in done.stderr


def test_compare_of_two_runs_is_still_a_comparison(two_trials):
    done = trainwatch(two_trials, "compare", f"{EXPERIMENT}/slow", f"{EXPERIMENT}/healthy")
    assert done.returncode == 0, done.stderr
    assert "same run" not in done.stdout + done.stderr


def test_trials_of_an_experiment_typo_says_so_and_suggests_the_close_name(two_trials):
    done = trainwatch(two_trials, "trials", "--experiment", EXPERIMENT[:-1] + "x")
    assert done.returncode == 2 and done.stdout == ""  # no empty table
    assert done.stderr.count("\n") == 1
    assert f"no experiment {EXPERIMENT[:-1] + 'x'!r}" in done.stderr
    assert f"did you mean {EXPERIMENT}?" in done.stderr


def test_trials_of_an_experiment_that_exists_lists_it(two_trials):
    done = trainwatch(two_trials, "trials", "--experiment", EXPERIMENT)
    assert done.returncode == 0, done.stderr
    assert "no experiment" not in done.stderr and "slow" in done.stdout


def test_diagnose_of_a_rank_the_trial_lacks_names_the_ranks_it_has(two_trials):
    done = trainwatch(two_trials, "diagnose", "--experiment", EXPERIMENT, "--trial", "slow",
                      "--rank", "3")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert f"no rank 3 of {EXPERIMENT}/slow" in done.stderr
    assert "its ranks: 0 (e.g. --rank 0)" in done.stderr
    assert "did you mean" not in done.stderr  # never the name just typed


# Numbers in words a person reads (issue 38, item 7), on the same stack.

def test_a_long_since_reads_in_days_never_hours(two_trials):
    done = trainwatch(two_trials, "diagnose", "--experiment", "nope", "--since", "15d")
    assert done.returncode == 2
    assert "over the last 15 days" in done.stderr and "hours" not in done.stderr


def steps_now(two_trials) -> dict[str, float]:
    """Each trial's step counter as Prometheus holds it now."""
    return {r["metric"]["trial"]: float(r["value"][1]) for r in two_trials.prometheus.query(
        f'{names.STEPS}_total{{experiment="{EXPERIMENT}"}}')}


def test_trials_shows_a_running_trials_step_count(two_trials):
    # The counters only grow: the count `trials` read lies between theirs before and after.
    before = steps_now(two_trials)
    done = trainwatch(two_trials, "trials", "--experiment", EXPERIMENT, "--format", "json")
    between = steps_now(two_trials)
    rows = json.loads(done.stdout)["trials"]
    assert rows and all(r["live"] and r["steps"] > 0 for r in rows)
    assert {r["trial"]: before[r["trial"]] <= r["steps"] <= between[r["trial"]]
            for r in rows} == {"slow": True, "healthy": True}, (before, rows, between)
    text = trainwatch(two_trials, "trials", "--experiment", EXPERIMENT).stdout.splitlines()
    after = steps_now(two_trials)
    column = text[0].index(" STEPS ") + 1
    assert all(line[column:].split()[0].replace(",", "").isdigit() for line in text[1:]), text
    # The text's column is the steps so far too (not samples, 8 a step, nor a rate).
    shown = {line.split()[1]: int(line[column:].split()[0].replace(",", ""))
             for line in text[1:]}
    assert {t: between[t] <= n <= after[t] for t, n in shown.items()} == \
        {"slow": True, "healthy": True}, (between, shown, after)


# The healthy trial's steps (about 1 ms) fall in a low bucket; the slow trial's (over 50 ms) in
# one with several bounds under it.
@pytest.mark.parametrize("trial", ["healthy", "slow"])
def test_diagnose_marks_a_percentile_interpolated_inside_a_bucket(two_trials, trial):
    done = trainwatch(two_trials, "diagnose", "--experiment", EXPERIMENT, "--trial", trial)
    [line] = [line for line in done.stdout.splitlines() if "step time p50" in line]
    found = re.search(r"p50 ≈([\d.]+) ms \(within the ([\d.]+)–([\d.]+) ms bucket\)", line)
    assert found, line
    value, low, high = map(float, found.groups())
    assert low < value <= high
    # The bucket is the histogram's own: two neighbouring bounds (the first one's lower 0).
    bounds = sorted({float(r["metric"]["le"]) * 1000 for r in two_trials.prometheus.query(
        f'{names.STEP_SECONDS}_bucket{{experiment="{EXPERIMENT}", trial="{trial}"}}')} - {
        float("inf")})
    i = next(i for i, b in enumerate(bounds) if b == pytest.approx(high))
    assert low == pytest.approx(bounds[i - 1] if i else 0.0), (low, high, bounds)
