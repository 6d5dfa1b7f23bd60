"""`trainwatch compare` without a Prometheus: a fake API that answers the exact queries a side
reads, at the instant it reads them (now for a running run, its last sample for an ended one),
so each figure, window and label is checked in milliseconds. The arithmetic of compare() is in
tests/test_runs.py; a live Prometheus in tests/test_life_window.py and
tests/test_after_the_run_live.py."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import compare
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.figures import UnknownTrial
from trainwatch.diagnose.runs import ENDED_CLEAN, RUNNING, STALE, Run
from trainwatch.promapi import COUNT
from trial_instrumentation import names

DEPLOYMENT = Deployment(RecordNames("5m"), {TRIAL_STALE: AlertRule(TRIAL_STALE, 40.0, "x")})
BUSY = RecordNames("5m").trial_gpu_busy
NOW = 10_000.0
SEL = 'experiment="e", trial="t", rank="1"'


class FakeAPI:
    """Answers ``(at, expr)`` from a table: ``value`` a number, ``query`` (labels, value)
    pairs; every read is logged with its instant and kind."""

    def __init__(self, table: dict[tuple[float | None, str], Any], at: float | None = None,
                 log: list[tuple[float | None, str, Any]] | None = None) -> None:
        self.table, self.at = table, at
        self.log = [] if log is None else log

    def pinned(self, at: float | None) -> FakeAPI:
        return FakeAPI(self.table, at, self.log)

    def value(self, expr: str, kind: Any = None) -> float | None:
        self.log.append((self.at, expr, kind))
        return self.table.get((self.at, expr))

    def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
        self.log.append((self.at, expr, kind))
        return self.table.get((self.at, expr), [])


def figures(at: float | None, window: str, steps: float = 400, samples: float | None = 12900,
            busy: list[tuple[dict[str, str], float]] | None = None,
            busy_at: float | None | str = "at") -> dict[Any, Any]:
    """A run's counters as Prometheus holds them at ``at``; its GPU busy over ``window``, read
    at ``busy_at`` (default ``at``)."""
    read_busy = at if busy_at == "at" else busy_at
    return {
        (at, f"{names.STEPS}_total{{{SEL}}}"): steps,
        (at, f"{names.SAMPLES}_total{{{SEL}}}"): samples,
        (at, f"{names.STEP_SECONDS}_sum{{{SEL}}}"): 50.0,
        (at, f"{names.PHASE_SECONDS}_sum{{{SEL}}}"): [({"phase": "dataloader_next"}, 30.0),
                                                     ({"phase": "train_batch"}, 14.0)],
        (at, f"{names.LOADER_LIMIT}{{{SEL}}}"): 3000.0,
        (at, f"{names.STEP_LIMIT}{{{SEL}}}"): 9000.0,
        (read_busy, f"avg by (source) (avg_over_time({BUSY}{{{SEL}}}{window}))"): busy or [
            ({"source": "sm_active"}, 0.625)],
    }


def run(**kw: Any) -> Run:
    base: dict[str, Any] = {"first": 9000.0, "last": 9990.0, "started": 9200.0, "pushed": 9980.0}
    return Run("e", "t", "1", "7", "n", "1", **(base | kw))


def test_a_running_sides_figures_are_over_its_life_up_to_now() -> None:
    """Started 800 s ago, at 400 steps and 12,900 samples: 0.5 steps/s, 16.125 samples/s."""
    api = FakeAPI(figures(None, "[800s]"))
    side = compare.run_side(api, DEPLOYMENT, run(current=True), "e/t rank 1", NOW)  # type: ignore[arg-type]
    assert (side.reference, side.state, side.steps) == ("e/t rank 1", RUNNING, 400)
    assert side.steps_per_second == pytest.approx(0.5)
    assert side.samples_per_second == pytest.approx(16.125)
    assert side.step_seconds == pytest.approx(0.125)
    assert side.phase_seconds == pytest.approx({"dataloader_next": 0.075, "train_batch": 0.035})
    assert (side.loader_limit, side.step_limit) == (3000.0, 9000.0)
    assert (side.gpu_busy, side.gpu_busy_source) == (0.625, "SM activity (NVML GPM)")
    assert side.share("dataloader_next") == pytest.approx(0.6)
    assert side.share("absent") is None
    assert {at for at, _, _ in api.log} == {None}
    kinds = {expr.split("{")[0]: kind for _, expr, kind in api.log}
    assert kinds[f"{names.STEPS}_total"] is COUNT and kinds[f"{names.SAMPLES}_total"] is COUNT
    assert kinds[f"{names.STEP_SECONDS}_sum"] is not COUNT


def test_an_ended_side_is_read_at_its_last_sample_over_start_to_final_push() -> None:
    """Ended clean: life is start (9200) to final push (9980), 780 s; its GPU busy read at its
    last sample (9990), 10 s after that push, and its counters there too once its group is
    gone (still scraped, they are flat since the final push: read now)."""
    for current, counters_at in ((True, None), (False, 9990.0)):
        api = FakeAPI(figures(counters_at, "[780s] offset 10s", steps=390, samples=1560,
                              busy_at=9990.0))
        ended = run(current=current, exit_reason=names.EXIT_CLEAN)
        side = compare.run_side(api, DEPLOYMENT, ended, "e/t", NOW)  # type: ignore[arg-type]
        assert side.state == ENDED_CLEAN and side.steps == 390
        assert side.steps_per_second == pytest.approx(0.5)
        assert side.samples_per_second == pytest.approx(2.0)
        assert side.gpu_busy == 0.625
        assert {at for at, _, _ in api.log} == {counters_at, 9990.0}


def test_a_run_gone_without_a_word_is_read_at_its_last_sample() -> None:
    api = FakeAPI(figures(9990.0, "[780s] offset 10s", steps=390))
    side = compare.run_side(api, DEPLOYMENT, run(current=False), "e/t", NOW)  # type: ignore[arg-type]
    assert side.state == STALE and side.steps_per_second == pytest.approx(0.5)


def test_a_running_side_is_stale_past_the_deployed_threshold() -> None:
    api = FakeAPI(figures(None, "[800s]"))
    young = run(current=True, pushed=NOW - 40.0)
    assert compare.run_side(api, DEPLOYMENT, young, "r", NOW).state == RUNNING  # type: ignore[arg-type]
    old = run(current=True, pushed=NOW - 40.5)
    assert compare.run_side(api, DEPLOYMENT, old, "r", NOW).state == STALE  # type: ignore[arg-type]


# Whole seconds rounded up, as an ended run's life_range: 60.4 s reads [61s], never [60s], which
# would miss its first samples.
@pytest.mark.parametrize(("age", "window"), [(0.4, "[1s]"), (1.6, "[2s]"), (2.5, "[3s]"),
                                             (60.4, "[61s]"), (60.0, "[60s]")])
def test_a_running_sides_window_is_at_least_a_second_and_covers_its_life(age: float,
                                                                         window: str) -> None:
    api = FakeAPI(figures(None, window))
    side = compare.run_side(api, DEPLOYMENT, run(current=True, started=NOW - age), "r", NOW)  # type: ignore[arg-type]
    assert side.gpu_busy == 0.625


def test_a_side_without_steps_or_a_life_has_no_rates_and_no_step_time() -> None:
    table = figures(None, "[800s]", steps=0)
    side = compare.run_side(FakeAPI(table), DEPLOYMENT, run(current=True), "r", NOW)  # type: ignore[arg-type]
    assert side.steps == 0 and side.steps_per_second == 0.0
    assert side.step_seconds is None and side.phase_seconds == {}
    del table[(None, f"{names.STEPS}_total{{{SEL}}}")]
    del table[(None, f"{names.SAMPLES}_total{{{SEL}}}")]
    side = compare.run_side(FakeAPI(table), DEPLOYMENT, run(current=True), "r", NOW)  # type: ignore[arg-type]
    assert side.steps is None and side.steps_per_second is None
    assert side.samples_per_second is None and side.step_seconds is None
    instant = run(current=False, started=9980.0)  # started at its final push: no life
    table = figures(9990.0, "[1s] offset 10s")
    side = compare.run_side(FakeAPI(table), DEPLOYMENT, instant, "r", NOW)  # type: ignore[arg-type]
    assert side.steps == 400 and side.steps_per_second is None
    assert side.samples_per_second is None and side.step_seconds == pytest.approx(0.125)


def test_a_step_time_needs_its_sum() -> None:
    table = figures(None, "[800s]")
    del table[(None, f"{names.STEP_SECONDS}_sum{{{SEL}}}")]
    side = compare.run_side(FakeAPI(table), DEPLOYMENT, run(current=True), "r", NOW)  # type: ignore[arg-type]
    assert side.step_seconds is None and side.phase_seconds == {}


def test_gpu_busy_is_the_first_source_that_is_a_number() -> None:
    busy = [({"source": "sm_active"}, math.nan), ({"source": "utilization"}, 0.25),
            ({"source": "sm_active"}, 0.75)]
    side = compare.run_side(FakeAPI(figures(None, "[800s]", busy=busy)), DEPLOYMENT,  # type: ignore[arg-type]
                            run(current=True), "r", NOW)
    assert (side.gpu_busy, side.gpu_busy_source) == (0.25, "NVML utilization (any kernel running)")
    odd = [({"source": "other"}, 0.5)]
    side = compare.run_side(FakeAPI(figures(None, "[800s]", busy=odd)), DEPLOYMENT,  # type: ignore[arg-type]
                            run(current=True), "r", NOW)
    assert (side.gpu_busy, side.gpu_busy_source) == (0.5, "?")
    side = compare.run_side(FakeAPI(figures(None, "[800s]", busy=[({}, math.nan)])),  # type: ignore[arg-type]
                            DEPLOYMENT, run(current=True), "r", NOW)
    assert (side.gpu_busy, side.gpu_busy_source) == (None, None)


# --- which runs a reference names -------------------------------------------------------------


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Known:
    """compare's run lookup over this list (find_runs filtered as Prometheus would)."""
    known = Known()

    def find(api: Any, since: float, experiment: str | None = None, trial: str | None = None,
             rank: str | None = None, now: float | None = None) -> list[Run]:
        known.asked.append((since, now))
        return [dataclasses.replace(r) for r in known  # each query reads new Run objects
                if (r.experiment, r.trial) == (experiment, trial) and rank in (None, r.rank)]

    monkeypatch.setattr(compare, "find_runs", find)
    monkeypatch.setattr(compare, "unknown_message",
                        lambda api, since, e, t, r, now: f"no {e}/{t} rank {r} in {since:g} s")
    monkeypatch.setattr(compare, "retention", lambda api: 777.0)
    monkeypatch.setattr(compare, "run_side", lambda api, d, r, label, now: compare.Side(
        label, r, "x", step_seconds=float(r.rank) + 1.0, phase_seconds={"p": float(r.rank)}))
    return known


class Known(list[Run]):
    """The runs Prometheus holds, and each lookup's (since, now)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[float, float | None]] = []


def key_run(trial: str, rank: str, first: float = 0.0) -> Run:
    return Run("e", trial, rank, "1", "n", "2", first, first + 10)


def test_a_reference_without_a_rank_is_the_lowest_ranks_latest_run(runs: Known) -> None:
    runs += [key_run("t", "10"), key_run("t", "2"), key_run("t", "x"), key_run("t", "2", 50.0)]
    found, label = compare.run_of_ref(None, ("e", "t", None), 60.0, NOW)  # type: ignore[arg-type]
    assert (found.rank, found.first, label) == ("2", 50.0, "e/t rank 2")


def test_a_rank_is_named_when_asked_for_or_when_there_are_several(runs: Known) -> None:
    runs += [key_run("one", "0"), key_run("two", "3"), key_run("two", "1")]
    assert compare.run_of_ref(None, ("e", "one", None), 60.0, NOW)[1] == "e/one"  # type: ignore[arg-type]
    assert compare.run_of_ref(None, ("e", "one", "0"), 60.0, NOW)[1] == "e/one rank 0"  # type: ignore[arg-type]
    assert compare.run_of_ref(None, ("e", "two", "3"), 60.0, NOW)[1] == "e/two rank 3"  # type: ignore[arg-type]
    assert compare.run_of_ref(None, ("e", "two", None), 60.0, NOW)[1] == "e/two rank 1"  # type: ignore[arg-type]


def test_an_unknown_reference_says_what_exists(runs: Known) -> None:
    with pytest.raises(UnknownTrial, match=r"^no e/gone rank None in 60 s$"):
        compare.run_of_ref(None, ("e", "gone", None), 60.0, NOW)  # type: ignore[arg-type]


def test_compare_refs_reads_both_sides_over_the_retention_by_default(runs: Known) -> None:
    runs += [key_run("a", "0"), key_run("b", "1")]
    found = compare.compare_refs(None, DEPLOYMENT, "e/a", "e/b/1", now=NOW)  # type: ignore[arg-type]
    assert (found.a.reference, found.b.reference) == ("e/a", "e/b rank 1")
    assert found.delta_step_seconds == pytest.approx(-1.0)
    assert runs.asked == [(777.0, NOW), (777.0, NOW)]
    runs.asked.clear()
    compare.compare_refs(None, DEPLOYMENT, "e/a", "e/b", since=30.0, now=NOW)  # type: ignore[arg-type]
    assert runs.asked == [(30.0, NOW), (30.0, NOW)]


def test_one_run_spelled_twice_is_refused(runs: Known) -> None:
    runs += [key_run("a", "0")]
    with pytest.raises(ValueError) as err:
        compare.compare_refs(None, DEPLOYMENT, "e/a/0", "e/a", now=NOW)  # type: ignore[arg-type]
    assert str(err.value) == ("e/a/0 and e/a are the same run (e/a rank 0): compare two "
                              "different trials or ranks")


def test_side_of_is_the_references_run_side(runs: Known) -> None:
    runs += [key_run("a", "4")]
    side = compare.side_of(None, DEPLOYMENT, ("e", "a", None), 60.0, NOW)  # type: ignore[arg-type]
    assert (side.reference, side.run.rank) == ("e/a", "4")


@pytest.mark.parametrize(("text", "parsed"), [("r/t", ("r", "t", None)),
                                              ("r/t/3", ("r", "t", "3"))])
def test_a_reference_parses(text: str, parsed: tuple[str, str, str | None]) -> None:
    assert compare.parse_reference(text) == parsed


@pytest.mark.parametrize("bad", ["r/t/", "r//3", "a/b/c/d/e"])
def test_a_reference_with_an_empty_or_extra_part_is_refused(bad: str) -> None:
    with pytest.raises(ValueError) as err:
        compare.parse_reference(bad)
    assert str(err.value) == (f"{bad!r} is not a trial reference: experiment/trial or "
                              "experiment/trial/rank, e.g. resnet/lr-0.1")


# --- what changed, and how it is printed ------------------------------------------------------


def side(name: str, step: float | None, phases: dict[str, float], **kw: Any) -> compare.Side:
    return compare.Side(name, Run("e", name, "0", "1", "n", "1", 0.0, 0.0, started=0.0,
                                  pushed=kw.pop("ran", 90.0)),
                        kw.pop("state", ENDED_CLEAN), step_seconds=step, phase_seconds=phases,
                        **kw)


def test_the_summary_names_the_ratio_the_difference_and_the_top_phase() -> None:
    a = side("a", 0.150, {"dataloader_next": 0.095, "train_batch": 0.040})
    b = side("b", 0.060, {"dataloader_next": 0.010, "train_batch": 0.045})
    found = compare.compare(a, b)
    assert found.summary == ("a takes 150.0 ms per step, 2.50x b's 60.0 ms (+90.0 ms); "
                             "dataloader_next +85.0 ms per step: 94% of the slowdown")
    assert [(c.phase, round(c.delta_seconds, 6), round(c.explained or 0, 4))
            for c in found.changes] == [("dataloader_next", 0.085, 0.9444),
                                        (compare.UNTIMED, 0.01, 0.1111),
                                        ("train_batch", -0.005, -0.0556)]


def test_a_phase_on_one_side_only_counts_as_zero_on_the_other() -> None:
    found = compare.compare(side("a", 0.1, {"new": 0.06}), side("b", 0.05, {"old": 0.03}))
    deltas = {c.phase: round(c.delta_seconds, 6) for c in found.changes}
    assert deltas == {"new": 0.06, "old": -0.03, compare.UNTIMED: 0.02}


def test_untimed_time_of_exactly_a_nanosecond_is_no_row() -> None:
    """1e-9 s of untimed time against none (1e-9 - 0.0 is 1e-9 exactly): not above the
    nanosecond, so no row."""
    found = compare.compare(side("a", 1e-9, {"p": 0.0}), side("b", 0.5, {"p": 0.5}))
    assert [c.phase for c in found.changes] == ["p"]


def test_untimed_time_under_a_nanosecond_is_no_row() -> None:
    base = side("b", 0.1, {"p": 0.08})
    found = compare.compare(side("a", 0.1 + 1.5e-9, {"p": 0.08 + 1e-9}), base)
    assert [c.phase for c in found.changes] == ["p"]
    found = compare.compare(side("a", 0.1 + 2.5e-9, {"p": 0.08 + 1e-9}), base)
    assert [c.phase for c in found.changes] == [compare.UNTIMED, "p"]
    found = compare.compare(side("a", 0.1 - 2.5e-9, {"p": 0.08 - 1e-9}), base)
    assert [c.phase for c in found.changes] == [compare.UNTIMED, "p"]


def test_a_difference_of_exactly_one_percent_is_a_change() -> None:
    found = compare.compare(side("a", 0.75, {"p": 0.5}), side("b", 0.5, {"p": 0.25}))
    assert found.summary.startswith("a takes 750.0 ms per step, 1.50x")  # a large one
    found = compare.compare(side("a", 0.505, {"p": 0.255}), side("b", 0.5, {"p": 0.25}))
    assert not found.summary.startswith("No change") and found.changes[0].explained == 1.0
    found = compare.compare(side("a", 0.5049, {"p": 0.2549}), side("b", 0.5, {"p": 0.25}))
    assert found.summary == ("No change: mean step time 504.9 ms against 500.0 ms "
                             "(within 1%)")
    assert [c.explained for c in found.changes] == [None]


def test_a_speed_up_and_a_baseline_of_zero() -> None:
    found = compare.compare(side("a", 0.2, {"p": 0.15}), side("b", 0.5, {"p": 0.45}))
    assert found.summary.endswith("p -300.0 ms per step: 100% of the speed-up")
    assert "0.40x b's 500.0 ms (-300.0 ms)" in found.summary
    zero = compare.compare(side("a", 0.2, {}), side("b", 0.0, {}))
    assert "infx b's 0.0 ms" in zero.summary
    assert zero.summary.endswith(f"{compare.UNTIMED} +200.0 ms per step: 100% of the slowdown")


def test_no_phase_at_all_still_summarises() -> None:
    found = compare.compare(side("a", 0.2, {}), side("b", 0.1, {}))
    assert found.summary.endswith(f"{compare.UNTIMED} +100.0 ms per step: 100% of the slowdown")
    same = compare.compare(side("a", 0.1, {}), side("b", 0.1, {}))
    assert same.changes == [] and same.summary.startswith("No change")


def test_the_side_without_a_step_is_named() -> None:
    found = compare.compare(side("a", 0.1, {}), side("b", None, {}))
    assert found.summary == "No comparison: b has no finished step in Prometheus"
    assert (found.delta_step_seconds, found.changes) == (None, [])
    assert compare.compare(side("a", None, {}), side("b", None, {})).summary.startswith(
        "No comparison: a has")


def test_the_table_shows_both_sides_and_what_changed() -> None:
    a = side("exp/a\x1b", 0.150, {"dataloader_next": 0.095, "train_batch": 0.040}, steps=1234,
             steps_per_second=6.666, samples_per_second=213.33, gpu_busy=0.4567,
             gpu_busy_source="SM", loader_limit=2000.4, ran=150.0)
    b = side("exp/b", 0.060, {"dataloader_next": 0.010, "train_batch": 0.045}, steps=4321,
             steps_per_second=3.14159, samples_per_second=98.76, state=RUNNING,
             step_limit=9000.4)
    text = compare.as_text(compare.compare(a, b))
    assert text.splitlines() == [
        "                   A              B (baseline)",
        "trial              exp/a\\x1b      exp/b",
        "state              ended clean    running",
        "ran                2 minutes      90 seconds",
        "steps              1,234          4,321",
        "steps/s            6.67           3.14",
        "samples/s          213.3          98.8",
        "step time          150.0 ms       60.0 ms",
        "GPU busy           45.7% (SM)     -",
        "loader limit       2,000          -",
        "step limit         -              9,000",
        "  dataloader_next  95.0 ms 63.3%  10.0 ms 16.7%",
        "  train_batch      40.0 ms 26.7%  45.0 ms 75.0%",
        "",
        ("WHAT CHANGED: exp/a\\x1b takes 150.0 ms per step, 2.50x exp/b's 60.0 ms (+90.0 ms); "
         "dataloader_next +85.0 ms per step: 94% of the slowdown"),
        "  dataloader_next +85.0 ms per step: 94% of the difference",
        f"  {compare.UNTIMED} +10.0 ms per step: 11% of the difference",
        "  train_batch -5.0 ms per step: -6% of the difference",
    ]


def test_limits_appear_when_either_side_has_one() -> None:
    for kw in ({"loader_limit": 5.0}, {"step_limit": 5.0}):
        for a_kw, b_kw in ((kw, {}), ({}, kw)):
            text = compare.as_text(compare.compare(side("a", 0.1, {}, **a_kw),
                                                   side("b", 0.1, {}, **b_kw)))
            assert "loader limit" in text and "step limit" in text
    text = compare.as_text(compare.compare(side("a", 0.1, {}), side("b", 0.1, {})))
    assert "limit" not in text


def test_no_change_lists_each_phase_without_a_share() -> None:
    text = compare.as_text(compare.compare(side("a", 0.1, {"p": 0.05}), side("b", 0.1, {"p": 0.05})))
    assert text.splitlines()[-2:] == [("WHAT CHANGED: No change: mean step time 100.0 ms against "
                                      "100.0 ms (within 1%)"), "  p 0.0 ms per step"]
    missing = compare.as_text(compare.compare(side("a", None, {}), side("b", 0.1, {})))
    assert missing.splitlines()[-1] == ("WHAT CHANGED: No comparison: a has no finished step in "
                                        "Prometheus")


def test_json_holds_both_sides_and_every_change() -> None:
    found = compare.compare(side("a\u00e9", 0.2, {"p": 0.1}), side("b", 0.1, {"p": 0.1}))
    doc = json.loads(compare.as_json(found))
    assert list(doc) == ["comparison"]
    assert doc["comparison"]["a"]["reference"] == "a\u00e9"
    assert "a\u00e9" in compare.as_json(found)  # not \u-escaped
    assert doc["comparison"]["delta_step_seconds"] == pytest.approx(0.1)
    assert [c["phase"] for c in doc["comparison"]["changes"]] == [compare.UNTIMED, "p"]
    assert compare.as_json(found).startswith('{\n  "comparison": {\n    "a": {')


def test_two_steps_of_no_time_are_no_change_not_a_crash() -> None:
    """Found by reading compare's survivors: 0 s against 0 s was 'significant' (0 >= 1% of 0)
    and divided by the zero difference (ZeroDivisionError) or took the top of no change
    (IndexError)."""
    for phases in ({}, {"p": 0.0}):
        found = compare.compare(side("a", 0.0, dict(phases)), side("b", 0.0, dict(phases)))
        assert found.summary == "No change: mean step time 0.0 ms against 0.0 ms (within 1%)"
        assert [c.explained for c in found.changes] == [None] * len(phases)


def test_a_nanosecond_from_a_step_of_no_time_is_no_change_and_just_over_it_is_one() -> None:
    """Against a baseline of 0 s every difference is over 1% of it: one of at most RESOLUTION
    (which no phase or untimed row holds) is none; one just over it is the untimed row's whole.
    Before, half a nanosecond was 'significant' with no row to name (IndexError)."""
    tiny = compare.RESOLUTION / 2
    found = compare.compare(side("a", tiny, {}), side("b", 0.0, {}))
    assert found.summary.startswith("No change") and found.changes == []
    over = compare.RESOLUTION * 3
    found = compare.compare(side("a", over, {}), side("b", 0.0, {}))
    assert [(c.phase, c.explained) for c in found.changes] == [(compare.UNTIMED, 1.0)]
    assert found.summary.endswith(f"{compare.UNTIMED} 0.0 ms per step: 100% of the slowdown")
    found = compare.compare(side("a", 0.0, {}), side("b", over, {}))  # and the other way
    assert found.summary.endswith("100% of the speed-up")


def test_a_difference_of_exactly_one_percent_of_the_baseline_is_a_change() -> None:
    """101 s against 100 s: the difference (1.0) and 1% of the baseline (0.01 x 100) are the
    same float, so the boundary itself is compared."""
    found = compare.compare(side("a", 101.0, {"p": 51.0}), side("b", 100.0, {"p": 50.0}))
    assert found.summary.startswith("a takes 101000.0 ms per step, 1.01x")
    assert found.changes[0].explained == 1.0


def test_a_share_needs_a_step_time() -> None:
    assert side("a", None, {"p": 0.5}).share("p") is None
    assert side("a", 0.0, {"p": 0.5}).share("p") is None
    assert side("a", 2.0, {"p": 0.5}).share("p") == 0.25


def test_a_life_is_its_end_less_its_start_whenever_it_started() -> None:
    """Started at 300 s (1970: small numbers tell a difference from a remainder), read at 1000
    s while running: 700 s of life, 350 steps at 0.5 steps/s, its GPU busy over [700s]."""
    early = run(first=0.0, started=300.0, pushed=990.0, last=999.0, current=True)
    table = figures(None, "[700s]", steps=350, samples=1400)
    side = compare.run_side(FakeAPI(table), DEPLOYMENT, early, "r", 1000.0)  # type: ignore[arg-type]
    assert side.steps_per_second == 0.5 and side.samples_per_second == 2.0
    assert side.gpu_busy == 0.625


@pytest.mark.parametrize(("started", "pushed"), [(1000.0, 1000.5), (1000.0, 990.0)])
def test_rates_need_a_life_above_zero_and_take_one_under_a_second(
        started: float, pushed: float) -> None:
    """Half a second of life is a life (800 steps/s); a final push before the start time (a
    clock stepped back) is none."""
    ended = run(first=started, started=started, pushed=pushed, last=pushed + 5.0,
                exit_reason=names.EXIT_CLEAN)
    window = ended.life_range
    side = compare.run_side(FakeAPI(figures(pushed + 5.0, window)), DEPLOYMENT, ended, "r",  # type: ignore[arg-type]
                            NOW)
    if pushed > started:
        assert side.steps_per_second == 800.0 and side.samples_per_second == 25800.0
    else:
        assert side.steps_per_second is None and side.samples_per_second is None


def test_a_phase_whose_name_sorts_before_the_untimed_row_is_still_a_row() -> None:
    text = compare.as_text(compare.compare(side("a", 0.1, {"(cast)": 0.05}),
                                           side("b", 0.1, {"(cast)": 0.04})))
    assert "  (cast)   50.0 ms 50.0%  40.0 ms 40.0%" in text.splitlines()


def test_each_limit_is_a_whole_number_on_either_side() -> None:
    text = compare.as_text(compare.compare(
        side("a", 0.1, {}, loader_limit=1234.4, step_limit=4321.4),
        side("b", 0.1, {}, loader_limit=5678.4, step_limit=8765.4)))
    lines = text.splitlines()
    assert "loader limit  1,234        5,678" in lines
    assert "step limit    4,321        8,765" in lines


def test_a_phase_a_user_named_untimed_keeps_its_row_beside_the_untimed_time() -> None:
    """A phase named like the untimed row is a phase: its change and the step time in no
    phase are two rows, and the phase table lists the phase (not the untimed time)."""
    base = side("b", 0.30, {compare.UNTIMED: 0.10, "p": 0.10})
    found = compare.compare(side("a", 0.45, {compare.UNTIMED: 0.20, "p": 0.10}), base)
    rows = [(c.phase, round(c.delta_seconds, 9), c.untimed) for c in found.changes]
    assert rows == [(compare.UNTIMED, 0.1, False), (compare.UNTIMED, 0.05, True), ("p", 0.0, False)]
    assert sum(c.explained or 0 for c in found.changes) == pytest.approx(1.0)
    text = compare.as_text(found)
    assert f"\n  {compare.UNTIMED}  200.0 ms 44.4%  100.0 ms 33.3%\n" in text  # the phase's row
    assert f"  {compare.UNTIMED} +100.0 ms per step: 67% of the difference" in text
    assert f"  {compare.UNTIMED} +50.0 ms per step: 33% of the difference" in text
    assert json.loads(compare.as_json(found))["comparison"]["changes"][1]["untimed"] is True


def test_one_run_read_twice_while_it_runs_is_the_same_run_however_spelled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reference is read by its own queries: a running rank's last sample and push can
    move between them (a scrape landing at the same instant). Its key, process and start say
    it is one run; another process under the key is another run."""
    from trainwatch.diagnose.runs import Run
    first = Run("e", "t", "0", "41", "n", "1", first=100.0, last=250.0, started=99.0,
                pushed=249.0, current=True)
    reads = iter([(first, "e/t"), (dataclasses.replace(first, last=255.0, pushed=254.5), "e/t/0")])
    monkeypatch.setattr(compare, "run_of_ref", lambda *_: next(reads))
    monkeypatch.setattr(compare, "retention", lambda _: 3600.0)
    with pytest.raises(ValueError, match=r"e/t and e/t/0 are the same run \(e/t rank 0\)"):
        compare.compare_refs(None, None, "e/t", "e/t/0", now=300.0)  # type: ignore[arg-type]
    restarted = dataclasses.replace(first, pid="42", started=260.0, first=261.0)
    reads = iter([(first, "e/t"), (restarted, "e/t/0")])
    sides = iter([side("a", 0.2, {"p": 0.1}), side("b", 0.1, {"p": 0.05})])
    monkeypatch.setattr(compare, "run_side", lambda *_: next(sides))
    found = compare.compare_refs(None, None, "e/t", "e/t/0", now=300.0)  # type: ignore[arg-type]
    assert found.delta_step_seconds == pytest.approx(0.1)


def test_two_runs_are_compared_whichever_sorts_first(runs: Known) -> None:
    runs += [key_run("a", "0"), key_run("b", "1")]
    found = compare.compare_refs(None, DEPLOYMENT, "e/b/1", "e/a", now=NOW)  # type: ignore[arg-type]
    assert (found.a.reference, found.b.reference) == ("e/b rank 1", "e/a")
    assert found.delta_step_seconds == pytest.approx(1.0)


def test_a_difference_of_exactly_the_resolution_is_no_change() -> None:
    tiny = compare.RESOLUTION  # against a step of 0 s: 1% of it is 0, the resolution decides
    found = compare.compare(side("a", tiny, {}), side("b", 0.0, {}))
    assert found.summary.startswith("No change: ") and found.changes == []
    found = compare.compare(side("a", 2 * tiny, {}), side("b", 0.0, {}))
    assert found.summary.startswith("a takes 0.0 ms per step, infx b's")
    assert [(c.phase, c.explained) for c in found.changes] == [(compare.UNTIMED, 1.0)]
