"""Runs, their states and the comparison's arithmetic, without a Prometheus (the live tests are
tests/test_after_the_run_live.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainwatch.diagnose import compare
from trainwatch.diagnose.lifetime import _per_second
from trainwatch.diagnose.runs import (
    ENDED_CLEAN,
    FAILED,
    RUNNING,
    STALE,
    STATES,
    TERMINATED,
    Run,
    latest_per_rank,
    life_range,
)
from trial_instrumentation import names


def run(rank: str = "0", first: float = 100.0, last: float = 200.0, **kw: object) -> Run:
    return Run("e", "t", rank, "1", "n", "1", first, last, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kw", "now", "state"), [
    ({"current": True, "pushed": 195.0}, 200.0, RUNNING),
    ({"current": True, "pushed": 195.0}, 201.0, STALE),  # 6 s since its last push, over 5 s
    ({"current": False, "pushed": 199.0}, 200.0, STALE),  # gone without a word
    ({"exit_reason": names.EXIT_CLEAN, "current": True, "pushed": 199.0}, 200.0, ENDED_CLEAN),
    ({"exit_reason": names.EXIT_FAILED}, 9e9, FAILED),
    ({"exit_reason": names.EXIT_TERMINATED}, 9e9, TERMINATED),
    ({"exit_reason": "odd"}, 9e9, "ended (odd)"),
])
def test_a_runs_state_is_one_of_the_words_diagnose_uses(kw: dict[str, object], now: float,
                                                         state: str) -> None:
    assert run(**kw).state(stale_after=5.0, now=now) == state


def test_a_run_is_dated_from_its_start_to_its_last_push() -> None:
    assert run(started=90.0, pushed=150.0).seconds == 60.0
    assert run().seconds == 100.0  # pulled, before start times: first to last sample


def test_the_latest_run_of_each_rank_or_the_one_on_at_an_instant() -> None:
    old, new, other = run(first=0, last=50), run(first=60, last=90), run("1", first=10, last=20)
    assert latest_per_rank([new, other, old]) == [new, other]
    assert latest_per_rank([new, other, old], at=55) == [old, other]
    assert latest_per_rank([new, old], at=-1) == []


def test_a_counter_reset_cuts_the_run_before_it_off() -> None:
    assert _per_second([(0, 0), (10, 50)]) == (5.0, 10)
    assert _per_second([(0, 900), (10, 950), (20, 10), (30, 40)]) == (3.0, 10)
    assert _per_second([(0, 900), (10, 5)]) == (None, None)  # one sample of the new run


def side(name: str, step: float, phases: dict[str, float]) -> compare.Side:
    return compare.Side(name, run(), ENDED_CLEAN, steps=100, step_seconds=step,
                        phase_seconds=phases)


def test_the_change_is_ranked_by_the_share_of_the_difference_it_explains() -> None:
    slow = side("slow", 0.050, {"dataloader_next": 0.030, "train_batch": 0.015})
    fast = side("fast", 0.020, {"dataloader_next": 0.002, "train_batch": 0.012})
    found = compare.compare(slow, fast)
    assert found.delta_step_seconds == pytest.approx(0.030)
    assert [c.phase for c in found.changes] == ["dataloader_next", "train_batch",
                                                compare.UNTIMED]
    assert found.changes[0].explained == pytest.approx(28 / 30)
    assert sum(c.explained or 0 for c in found.changes) == pytest.approx(1.0)
    assert found.summary.endswith("dataloader_next +28.0 ms per step: 93% of the slowdown")
    assert "of the speed-up" in compare.compare(fast, slow).summary


def test_a_difference_under_one_percent_is_no_change() -> None:
    base = side("b", 0.100, {"train_batch": 0.09})
    assert compare.compare(side("a", 0.1009, {"train_batch": 0.0909}), base).summary.startswith(
        "No change")
    assert not compare.compare(side("a", 0.1011, {"train_batch": 0.0911}),
                               base).summary.startswith("No change")


def test_a_side_without_a_finished_step_cannot_be_compared() -> None:
    empty = compare.Side("empty", run(), RUNNING)
    found = compare.compare(empty, side("b", 0.1, {}))
    assert found.summary == "No comparison: empty has no finished step in Prometheus"


@pytest.mark.parametrize("bad", ["e", "e/", "/t", "e/t/0/x", ""])
def test_a_trial_reference_is_experiment_slash_trial(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a trial reference"):
        compare.parse_reference(bad)


def test_a_runs_identity_is_its_key_process_and_start_not_what_it_said_since() -> None:
    early = run(started=90.0, pushed=195.0, last=200.0, current=True)
    later = run(started=90.0, pushed=210.0, last=215.0, current=True)
    assert early.identity == later.identity == (("e", "t", "0"), "1", 90.0)
    assert early != later
    assert run(first=100.0).identity == (("e", "t", "0"), "1", 100.0)  # no start time: first
    restart = Run("e", "t", "0", "2", "n", "1", 100.0, 200.0, started=90.0)
    assert restart.identity != early.identity


@pytest.mark.parametrize(("seconds", "after", "text"), [
    (10.0, 1.0, "[10s] offset 1s"), (10.0, 0.6, "[10s] offset 1s"), (10.0, 0.4, "[10s]"),
    (10.0, 0.0, "[10s]"), (10.0, -3.0, "[10s]"),  # never an offset into the future
    (0.0, 5.0, "[1s] offset 5s"), (-2.0, 5.0, "[1s] offset 5s"), (59.5, 3.0, "[60s] offset 3s"),
    (120.0, 37.0, "[120s] offset 37s"),
    # never shorter than the life: a range cut to its nearest second (60) missed its first
    # 0.4 s, where the run's first sample lies
    (60.4, 3.0, "[61s] offset 3s"), (60.0, 3.0, "[60s] offset 3s")])
def test_a_life_range_is_at_least_a_second_and_offset_by_whole_seconds_past_it(
        seconds: float, after: float, text: str) -> None:
    assert life_range(seconds, after) == text


def test_a_life_range_is_offset_from_the_last_sample_back_to_the_final_push() -> None:
    # Its group was scraped 90 s after its final push (at 40): the range ends 90 s back.
    ended = run(first=20.0, last=130.0, started=10.0, pushed=40.0)
    assert ended.life_range == "[30s] offset 90s"
    assert run(first=20.0, last=130.0).life_range == "[110s]"  # pulled: its end is its last
    longer = run(first=20.0, last=400.0, started=10.0, pushed=140.0)  # 130 s, 260 s back
    assert longer.life_range == "[130s] offset 260s"
    assert longer.filled_life_range("1m") == "[70s] offset 260s"
    assert longer.filled_life_range("129s") == "[1s] offset 260s"
    assert longer.filled_life_range("130s") is None
    assert longer.filled_life_range("3m") is None  # shorter than the window: nothing filled


def test_the_state_words_are_the_ones_the_design_gives_each_its_own() -> None:
    """docs/design.md ("Its state is one word, the same in diagnose, trials, compare and
    report"): the words, in its order, and each state a run can be says its own."""
    design = (Path(__file__).resolve().parent.parent / "docs" / "design.md").read_text()
    said = re.search(r"Its state is one word, the same in [^:]*:(.*?)\.\n", design, re.DOTALL)
    assert said is not None
    words = re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", said[1]))  # not what is in ()
    assert STATES == tuple(words) == ("running", "ended clean", "failed", "terminated", "stale")
    ended = {reason: run(exit_reason=reason).state(stale_after=5.0, now=9e9)
             for reason in (names.EXIT_CLEAN, names.EXIT_FAILED, names.EXIT_TERMINATED)}
    assert list(ended.values()) == [ENDED_CLEAN, FAILED, TERMINATED] == list(words[1:4])
    pushing = run(current=True, pushed=195.0)
    assert [pushing.state(5.0, now) for now in (200.0, 201.0)] == [words[0], words[4]]
