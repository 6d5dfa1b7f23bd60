"""trainwatch/diagnose/baseline.py's own arithmetic and choices, without a stack: the rates read
over a run's life, the GPU products joined from the runs' uuids, the line a baseline says, which
rank `diagnose` judges and which run a `trials` row is. Prometheus's answers are given at the
one boundary the module reads through (``_per_run`` and ``batched.read``)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from trainwatch.diagnose import baseline, compare
from trainwatch.diagnose.baseline import Baseline, Baselines, for_reports, for_rows
from trainwatch.diagnose.baseline_stats import Judgement
from trainwatch.diagnose.runs import Run
from trainwatch.diagnose.trials import TrialRow
from trial_instrumentation import names

NOW = 100_000.0


class Stale:
    def threshold(self, name: str) -> float:
        return 300.0


def make(trial: str, *, start: float, end: float, rank: str = "0", pid: str = "1",
         reason: str | None = names.EXIT_CLEAN, current: bool = False,
         experiment: str = "e") -> Run:
    return Run(experiment, trial, rank, pid, "node", "1", first=start + 2, last=end + 5,
               started=start, pushed=end, exit_reason=reason, current=current)


def fresh() -> Baselines:
    return Baselines(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]


def test_rates_are_the_final_counts_over_the_life_to_its_end_or_to_now_while_it_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # lives that start under half their end (an end modulo its start is no life) and counts
    # that do not divide them (a floor division is no rate)
    ended = make("a", start=400.0, end=1_150.0)  # a life of 750 s
    running = make("b", start=30_000.0, end=99_990.0, reason=None, current=True)  # 70,000 s
    nothing = make("c", start=5_000.0, end=5_000.0)  # no life at all
    counts = {f"{names.SAMPLES}_total": [9_300.0, 1_428_000.0, 7.0],
              f"{names.STEPS}_total": [375.0, None, 7.0]}

    def per_run(api: Any, runs: list[Run], grouped: Any, kind: Any = None) -> list[Any]:
        metric = next(m for m in counts if m in grouped(""))
        return [[] if value is None else [({}, value)] for value in counts[metric]]

    monkeypatch.setattr(baseline, "_per_run", per_run)
    found = fresh()
    found.read_rates([ended, running, nothing])
    assert found.rates(ended) == (12.4, 0.5)
    assert found.rates(running) == (20.4, None)  # no steps counted: unknown, not 0
    assert found.rates(nothing) == (None, None)  # a life of 0 s has no rate


def test_a_run_still_scraped_but_with_its_final_push_ends_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    done = make("a", start=99_000.0, end=99_500.0, current=True)  # exit reason given

    def per_run(api: Any, runs: list[Run], grouped: Any, kind: Any = None) -> list[Any]:
        return [[({}, 1_000.0)]]

    monkeypatch.setattr(baseline, "_per_run", per_run)
    found = fresh()
    found.read_rates([done])
    assert found.rates(done) == (2.0, 2.0)  # over 500 s, not 1,000 s to now


def test_each_runs_products_are_those_of_its_own_uuids_read_where_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ended = make("a", start=1_000.0, end=1_250.0)
    running = make("b", start=99_600.0, end=99_990.0, reason=None, current=True)
    bare = make("c", start=2_000.0, end=2_300.0)
    held = {ended.trial: ["GPU-1", "GPU-2"], running.trial: ["GPU-3"], bare.trial: []}

    def per_run(api: Any, runs: list[Run], grouped: Any, kind: Any = None) -> list[Any]:
        return [[({"uuid": u}, 1.0) for u in held[r.trial]] for r in runs]

    asked: list[tuple[str, float | None]] = []

    def read(api: Any, items: list[tuple[str, float | None]], kind: Any = None) -> list[Any]:
        asked.extend(items)
        products = {"GPU-1": "H100", "GPU-2": "H100 NVL", "GPU-3": "A100"}
        return [[({"uuid": u, "name": name}, 1.0) for u, name in products.items()
                 if re.escape(u).replace("\\", "\\\\") in expr] for expr, _ in items]

    monkeypatch.setattr(baseline, "_per_run", per_run)
    monkeypatch.setattr(baseline.batched, "read", read)
    found = fresh()
    found.read_gpus([ended, running, bare])
    assert found.gpus(ended) == frozenset({"H100", "H100 NVL"})
    assert found.gpus(running) == frozenset({"A100"})
    assert found.gpus(bare) == frozenset()
    # one item per instant: the ended run at its last sample, the running one now
    assert [instant for _, instant in asked] == [ended.last, None]
    assert "GPU-3" not in asked[0][0] and "GPU-1" not in asked[1][0]


def judgement(change: float | None, state: str, runs: int = 5, low: float | None = None,
              high: float | None = None) -> Judgement:
    return Judgement(state, runs, median=100.0 if change is not None else None, change=change,
                     low=low, high=high)


def said(j: Judgement, reasons: list[compare.Change] | None = None) -> str:
    return Baseline("e/t", "the median of the last 5 runs of e", "sample", 77.0, [], [], j,
                    reasons=reasons or []).line()


def test_a_baseline_line_says_slower_faster_or_within_the_spread_and_why() -> None:
    why = [compare.Change("untimed", 0.5, None),
           compare.Change(names.DATALOADER_NEXT, 0.0214, 0.853)]
    assert said(judgement(-0.231, "slower"), why) == (
        "23% slower than the median of the last 5 runs of e (dataloader_next +21 ms per step "
        "explains 85%)")
    assert said(judgement(0.04, "faster"), [compare.Change("train_batch", -0.0031, 0.6)]) == (
        "4% faster than the median of the last 5 runs of e (train_batch -3 ms per step "
        "explains 60%)")
    assert said(judgement(0.0, "no change", low=-0.05, high=0.03), why) == (
        "0% faster than the median of the last 5 runs of e: no change, within the baseline "
        "runs' own spread (-5% to +3%)")  # no reason given for no change
    assert said(judgement(-0.02, "no change", low=-0.05, high=0.03)).startswith("2% slower")
    assert said(judgement(None, "no baseline", runs=1)) == "no baseline (1 run)"
    assert said(judgement(None, "no baseline", runs=0)) == "no baseline (0 runs)"


def test_diagnose_judges_each_trial_once_by_its_lowest_rank() -> None:
    class Judged(Baselines):
        def of(self, run: Run, pinned: str = baseline.AUTO, reasons: bool = True) -> Any:
            return run.rank

    ranks = [make("t", start=1.0, end=2.0, rank=r) for r in ("10", "2", "9")]
    other = make("u", start=1.0, end=2.0, rank="3")
    judged = for_reports(Judged(None, Stale(), now=NOW), [*ranks, other])  # type: ignore[arg-type]
    assert judged == {("e", "t", "2"): "2", ("e", "u", "3"): "3"}  # 2 before 9 and 10
    judged = for_reports(Judged(None, Stale(), now=NOW), ranks[::-1])  # type: ignore[arg-type]
    assert judged == {("e", "t", "2"): "2"}


def row(trial: str, pid: str | None, started: float | None) -> TrialRow:
    return TrialRow("e", trial, "0", "node", None, None, None, None, True, pid=pid,
                    started=started)


def test_a_trials_row_is_judged_as_the_run_of_its_key_process_and_start() -> None:
    first = make("t", start=1_000.0, end=1_500.0, pid="11")
    second = make("t", start=2_000.0, end=2_500.0, pid="12")
    quiet = make("q", start=3_000.0, end=3_500.0, pid="")

    class Judged(Baselines):
        def runs(self, experiment: str) -> list[Run]:
            return [first, second, quiet] if experiment == "e" else []

        def read_gpus(self, runs: Any) -> None:  # read_ahead's reads: nothing to read here
            pass

        def read_rates(self, runs: Any) -> None:
            pass

        def against(self, run: Run, pinned: str = baseline.AUTO, unread: Any = None) -> Any:
            return [], "", None

        def of(self, run: Run, pinned: str = baseline.AUTO, reasons: bool = True) -> Any:
            assert not reasons  # trials judges every row from its counts alone
            speed = {"11": -0.25, "12": 0.125, "": 0.0}[run.pid]
            return Baseline("e/t", "x", "sample", 1.0, [], [], Judgement(
                "slower", 5, 100.0, speed, -0.1, 0.1))

    rows = [row("t", "12", 2_000.0), row("t", "11", 1_000.0), row("t", "11", 2_000.0),
            row("t", "11", None), row("q", None, 3_000.0)]
    for_rows(Judged(None, Stale(), now=NOW), rows)  # type: ignore[arg-type]
    assert [r.vs_baseline for r in rows] == [0.125, -0.25, None, None, 0.0]
    assert [r.vs_baseline_text for r in rows] == ["+12%", "\u221225%", "no baseline",
                                                  "no baseline", "0%"]
    assert rows[0].baseline is not None and rows[0].baseline.startswith("12% faster than x")
    assert rows[2].baseline is None and rows[3].baseline is None


def test_throughput_is_per_sample_only_where_every_run_counted_samples() -> None:
    me = make("me", start=9_000.0, end=9_500.0)
    others = [make(f"b{i}", start=1_000.0 * i, end=1_000.0 * i + 500) for i in range(1, 4)]

    class Given(Baselines):
        def __init__(self, rates: dict[str, tuple[float | None, float | None]]) -> None:
            super().__init__(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
            self.given = rates

        def rates(self, run: Run) -> tuple[float | None, float | None]:
            return self.given[run.trial]

    everyone = {"me": (80.0, 10.0), "b1": (100.0, 12.5), "b2": (100.0, 12.5),
                "b3": (100.0, 12.5)}
    found = Given(everyone).judged(me, others, "them", None, reasons=False)
    assert (found.unit, found.throughput, found.baseline_throughputs) == (
        "sample", 80.0, [100.0, 100.0, 100.0])
    one_without = {**everyone, "b2": (None, 10.0)}
    found = Given(one_without).judged(me, others, "them", None, reasons=False)
    assert (found.unit, found.throughput, found.baseline_throughputs) == (
        "step", 10.0, [12.5, 10.0, 12.5])
    assert found.baseline_runs == ["e/b1", "e/b2", "e/b3"]
    # a pinned run is judged alone: the minimum of one baseline run
    pinned = Given(everyone).judged(me, others[:1], "e/b1", 1, reasons=False)
    assert pinned.state == "slower" and pinned.judgement.change == pytest.approx(-0.2)


def test_the_reasons_compare_it_with_the_baseline_run_nearest_the_median() -> None:
    me = make("me", start=9_000.0, end=9_500.0)
    # four runs: the median (101) between 98 and 104, as near to both; the older one is taken
    others = [make(f"b{i}", start=1_000.0 * i, end=1_000.0 * i + 500) for i in range(1, 5)]
    speeds = {"me": 50.0, "b1": 90.0, "b2": 98.0, "b3": 104.0, "b4": 130.0}
    compared: list[str] = []

    class Given(Baselines):
        def rates(self, run: Run) -> tuple[float | None, float | None]:
            return speeds[run.trial], None

        def side(self, run: Run) -> compare.Side:
            side = compare.Side(f"e/{run.trial}", run, "ended clean", steps=100,
                                steps_per_second=speeds[run.trial] / 8,
                                samples_per_second=speeds[run.trial],
                                step_seconds=8 / speeds[run.trial])
            side.phase_seconds = {names.DATALOADER_NEXT: 8 / speeds[run.trial] - 0.01,
                                  names.TRAIN_BATCH: 0.01}
            compared.append(run.trial)
            return side

    found = Given(None, Stale(), now=NOW).judged(  # type: ignore[arg-type]
        me, others, "them", None)
    assert found.judgement.median == 101.0
    assert found.comparison is not None and found.comparison.b.reference == "e/b2"
    assert found.reasons and found.reasons[0].phase == names.DATALOADER_NEXT
    assert found.line().startswith("50% slower than them (dataloader_next +")


def test_a_baseline_of_any_count_but_one_says_runs() -> None:
    assert said(judgement(None, "no baseline", runs=2)) == "no baseline (2 runs)"


class Listed(Baselines):
    """Baselines over given runs (each with a throughput), every read answered from them."""

    def __init__(self, runs: dict[Run, float]) -> None:
        super().__init__(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
        self.given = runs

    def pin(self, experiment: str) -> str | None:
        return None

    def runs(self, experiment: str) -> list[Run]:
        return [r for r in self.given if r.experiment == experiment]

    def gpus(self, run: Run) -> frozenset[str]:
        return frozenset()

    def rates(self, run: Run) -> tuple[float | None, float | None]:
        return self.given[run], None


def test_a_pinned_trial_is_its_lowest_ranks_latest_run_of_that_trial_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rank names made at run time, as each answer from Prometheus makes them: equal strings,
    # not one object; rank 103 sorts before rank 12 as text
    earlier = make("b", start=1_000.0, end=1_500.0, rank=str(12), pid="1")
    later = make("b", start=3_000.0, end=3_500.0, rank=str(12), pid="2")
    rank10 = make("b", start=5_000.0, end=5_500.0, rank=str(103))
    before = make("a", start=6_000.0, end=6_500.0, rank="0")  # a trial sorting before "b"
    found = Listed({earlier: 1.0, later: 1.0, rank10: 1.0, before: 1.0})
    assert found.trial_run("e", "b") is later
    monkeypatch.setattr(baseline, "unknown_message", lambda *a: "no trial e/c")
    with pytest.raises(baseline.UnknownTrial, match="no trial e/c"):
        found.trial_run("e", "c")


def test_baseline_runs_are_taken_whatever_their_names_sort_against_the_judged_one() -> None:
    judged = make("a-today", start=9_000.0, end=9_500.0)
    older = {make(f"n{i}", start=1_000.0 * i, end=1_000.0 * i + 500): 100.0 + i
             for i in range(1, 4)}
    found = Listed({**older, judged: 80.0})
    assert [r.trial for r in found.auto(judged)] == ["n1", "n2", "n3"]


def test_a_pinned_reference_is_judged_against_even_when_it_sorts_before_auto() -> None:
    judged = make("today", start=9_000.0, end=9_500.0)
    pinned = make("aa", start=1_000.0, end=1_500.0)
    others = {make(f"n{i}", start=1_000.0 * i + 2_000, end=1_000.0 * i + 2_500): 100.0
              for i in range(1, 4)}
    found = Listed({judged: 80.0, pinned: 160.0, **others})
    against = found.of(judged, pinned="e/aa", reasons=False)
    assert (against.against, against.baseline_runs, against.state) == ("e/aa", ["e/aa"],
                                                                       "slower")
    assert found.against(judged, "e/aa")[2] == 1  # one run is enough when pinned
    assert found.against(judged)[1] == "the median of the last 4 runs of e"


def test_a_large_step_time_change_is_said_in_whole_milliseconds() -> None:
    assert said(judgement(-0.5, "slower"), [compare.Change("train_batch", 2.5, 0.9)]).endswith(
        "(train_batch +2500 ms per step explains 90%)")


def test_since_pins_and_sides_are_each_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(baseline, "retention", lambda api: asked.append("retention") or 3600.0)
    monkeypatch.setattr(baseline.pins, "pinned",
                        lambda api, e: asked.append(f"pin {e}") or f"{e}/p")
    monkeypatch.setattr(baseline.pins, "all_pinned",
                        lambda api: asked.append("all pins") or {"a": "a/p"})
    run = make("t", start=1.0, end=2.0)
    monkeypatch.setattr(baseline.compare, "run_side",
                        lambda *a: asked.append("side") or "the side")
    found = Baselines(None, Stale(), now=NOW)  # type: ignore[arg-type]
    assert (found.since, found.since) == (3600.0, 3600.0)
    assert Baselines(None, Stale(), now=NOW, since=60.0).since == 60.0  # type: ignore[arg-type]
    assert (found.pin("e"), found.pin("e")) == ("e/p", "e/p")
    assert (found.side(run), found.side(run)) == ("the side", "the side")
    assert asked == ["retention", "pin e", "side"]
    found.read_pins({"e2"})  # one experiment: read when asked, not in a query for all
    assert asked[-1] == "side"
    found.read_pins({"a", "b"})
    assert (asked[-1], found.pin("a"), found.pin("b")) == ("all pins", "a/p", None)


def test_auto_spelled_on_the_command_line_is_auto() -> None:
    judged = make("today", start=9_000.0, end=9_500.0)
    older = {make(f"n{i}", start=1_000.0 * i, end=1_000.0 * i + 500): 100.0 for i in range(1, 4)}
    found = Listed({**older, judged: 80.0})
    assert found.against(judged, "AUTO".lower())[1] == "the median of the last 3 runs of e"


def test_an_experiments_pin_is_used_whatever_it_sorts_against_the_judged_trial() -> None:
    judged = make("today", start=9_000.0, end=9_500.0)
    pinned = make("zz", start=1_000.0, end=1_500.0)
    found = Listed({judged: 80.0, pinned: 160.0})
    found.pin = lambda experiment: "e/zz"  # type: ignore[method-assign]
    assert found.against(judged)[1:] == ("e/zz, the pinned baseline", 1)


def test_the_baseline_of_a_run_is_its_rank_and_world_sizes_clean_runs_before_its_end() -> None:
    one, zero = str(1), str(0)  # made at run time, as read from Prometheus
    running = Run("e", "now", one, "9", "node", str(2), first=99_000.0, last=99_992.0,
                  started=99_000.0, pushed=99_990.0, current=True)
    given = {
        make("after-its-push", start=99_200.0, end=99_995.0, rank=str(1)): 100.0,
        make("same-end", start=99_000.0, end=99_990.0, rank=str(1)): 100.0,
        make("lower-rank", start=1_000.0, end=1_500.0, rank=zero): 100.0,
        make("oom", start=4_000.0, end=4_500.0, rank=str(1), reason="oom"): 100.0,
        Run("e", "narrower", str(1), "1", "node", str(1), first=2_000.0, last=2_505.0,
            started=2_000.0, pushed=2_500.0, exit_reason=names.EXIT_CLEAN): 100.0,
        Run("e", "same-world", str(1), "1", "node", str(2), first=3_000.0, last=3_505.0,
            started=3_000.0, pushed=3_500.0, exit_reason=names.EXIT_CLEAN): 100.0,
        running: 90.0}
    for r in list(given)[:4]:  # the world size of the judged run, made at run time too
        given[dataclasses.replace(r, world_size=str(2))] = given.pop(r)
    found = Listed(given)
    # running: its baseline ends now, so a run that ended after its last push counts; not a
    # run of another rank or world size, nor one that ended any other way ("ended (oom)")
    assert [r.trial for r in found.auto(running)] == ["same-world", "same-end", "after-its-push"]
    ended = dataclasses.replace(running, exit_reason=names.EXIT_CLEAN)  # its final push came
    assert [r.trial for r in found.auto(ended)] == ["same-world"]  # ended at 99,990: not after


def test_equal_gpu_products_read_as_distinct_sets_are_the_same_product() -> None:
    judged = make("today", start=9_000.0, end=9_500.0)
    other = make("n1", start=1_000.0, end=1_500.0)

    class Products(Listed):
        def gpus(self, run: Run) -> frozenset[str]:
            return frozenset(["H100"])  # a new set each read, as each query answers

    assert Products({judged: 1.0, other: 1.0}).auto(judged) == [other]


def test_a_life_ending_before_it_started_has_no_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    skewed = make("a", start=1_000.0, end=900.0)
    monkeypatch.setattr(baseline, "_per_run", lambda api, runs, grouped, kind=None: [[({}, 50.0)]])
    found = fresh()
    found.read_rates([skewed])
    assert found.rates(skewed) == (None, None)


def test_diagnose_judges_a_ranks_first_run_when_it_has_two() -> None:
    class Judged(Baselines):
        def of(self, run: Run, pinned: str = baseline.AUTO, reasons: bool = True) -> Any:
            return run.pid

    first, second = (make("t", start=1.0, end=2.0, pid=p) for p in ("1", "2"))
    assert for_reports(Judged(None, Stale(), now=NOW), [first, second]) == {  # type: ignore[arg-type]
        ("e", "t", "0"): "1"}


def test_reading_ahead_goes_on_past_a_run_whose_pinned_trial_is_gone() -> None:
    gone, kept = make("a", start=1_000.0, end=1_500.0), make("b", start=2_000.0, end=2_500.0)
    base = make("n1", start=100.0, end=200.0)
    read: list[Run] = []

    class Ahead(Listed):
        def read_gpus(self, runs: Any) -> None:
            pass

        def read_rates(self, runs: Any) -> None:
            read.extend(runs)

        def against(self, run: Run, pinned: str = baseline.AUTO, unread: Any = None) -> Any:
            if run is gone:
                raise baseline.UnknownTrial("e/x is gone")
            return [base], "x", None

    baseline.read_ahead(Ahead({gone: 1.0, kept: 1.0, base: 1.0}), [gone, kept])
    assert read == [gone, kept, base]


def test_a_pinned_reference_in_an_experiment_sorting_before_auto_is_still_a_reference() -> None:
    judged = make("today", start=9_000.0, end=9_500.0, experiment="ab")
    pinned = make("p", start=1_000.0, end=1_500.0, experiment="ab")
    others = {make(f"n{i}", start=1_000.0 * i + 2_000, end=1_000.0 * i + 2_500,
                   experiment="ab"): 100.0 for i in range(1, 4)}
    found = Listed({judged: 80.0, pinned: 160.0, **others})
    assert found.against(judged, "ab/p")[1:] == ("ab/p", 1)  # "ab/p" sorts before "auto"
    found.pin = lambda experiment: "ab/n1"  # type: ignore[method-assign]
    # typed on the command line, auto still takes the experiment's pin
    assert found.against(judged, "AUTO".lower())[1:] == ("ab/n1, the pinned baseline", 1)


def test_a_later_rank_sorting_after_the_lowest_is_not_the_lowest_ranks_run() -> None:
    lowest = make("b", start=1_000.0, end=1_500.0, rank=str(12))
    later = make("b", start=7_000.0, end=7_500.0, rank=str(13))
    assert Listed({lowest: 1.0, later: 1.0}).trial_run("e", "b") is lowest


def test_no_experiment_reads_no_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline.pins, "all_pinned", lambda api: pytest.fail("read"))
    fresh().read_pins(set())


def test_a_reference_sorting_before_auto_wins_over_the_experiments_pin() -> None:
    judged = make("today", start=9_000.0, end=9_500.0, experiment="ab")
    pinned = make("p", start=1_000.0, end=1_500.0, experiment="ab")
    found = Listed({judged: 80.0, pinned: 160.0})
    found.pin = lambda experiment: "ab/other"  # type: ignore[method-assign]
    assert found.against(judged, "ab/p")[1:] == ("ab/p", 1)


def test_a_life_under_a_second_has_a_rate_and_one_under_zero_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    short, skewed = make("a", start=1_000.0, end=1_000.5), make("b", start=1_000.0, end=999.5)
    monkeypatch.setattr(baseline, "_per_run",
                        lambda api, runs, grouped, kind=None: [[({}, 3.0)], [({}, 3.0)]])
    found = fresh()
    found.read_rates([short, skewed])
    assert found.rates(short) == (6.0, 6.0) and found.rates(skewed) == (None, None)


# -- the GPU products' queries, answered as Prometheus answers them ----------------------------

_AGGREGATE = re.compile(r"\Amax by \((?P<by>[\w, ]*)\) \((?P<metric>[\w:]+)\{(?P<inner>.*)\}\)\Z")
_MATCHER = re.compile(r'(\w+)(=~|=)"((?:[^"\\]|\\.)*)", ?')


def answered(series: list[dict[str, str]], expr: str) -> list[tuple[dict[str, str], float]]:
    """``max by (labels) (metric{matchers})`` over ``series`` (each a sample of value 1): the
    series the matchers select (an absent label is ""), one per value of the ``by`` labels,
    with only those labels, as Prometheus answers it."""
    found = _AGGREGATE.match(expr)
    assert found is not None, expr
    labels = [label.strip() for label in found["by"].split(",")]
    wanted = [(k, op, json.loads(f'"{v}"')) for k, op, v in _MATCHER.findall(found["inner"] + ", ")]
    groups: dict[tuple[str, ...], dict[str, str]] = {}
    for s in series:
        if s["__name__"] != found["metric"] or not all(
                (re.fullmatch(v, s.get(k, "")) if op == "=~" else s.get(k, "") == v)
                for k, op, v in wanted):
            continue
        key = tuple(s.get(label, "") for label in labels)
        groups[key] = {k: v for k, v in zip(labels, key) if v}
    return [(group, 1.0) for group in groups.values()]


def test_a_runs_products_are_the_names_of_its_own_gpus_uuids_kept_apart_by_uuid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ended = make("a", start=1_000.0, end=1_250.0)
    other = make("b", start=2_000.0, end=2_250.0)
    held = [{"__name__": names.GPU_INFO, "experiment": "e", "trial": trial, "rank": "0",
             "uuid": uuid, "pid": pid, "job": "trainwatch_trial"}
            for trial, uuid, pid in (("a", "GPU-1", "1"), ("a", "GPU-1", "2"),  # two processes
                                     ("a", "GPU-2", "1"), ("b", "GPU-3", "1"))]
    products = [{"__name__": baseline.GPU_IDENTITY, "uuid": uuid, "name": name,
                 "instance": instance}
                for uuid, name, instance in (("GPU-1", "H100", "n1:9400"),
                                             ("GPU-1", "H100", "n1:9401"),  # a second exporter
                                             ("GPU-2", "H100 NVL", "n1:9400"),
                                             ("GPU-3", "A100", "n2:9400"),
                                             ("GPU-4", "B200", "n3:9400"))]  # nobody's
    monkeypatch.setattr(baseline.batched, "read", lambda api, items, kind=None: [
        answered(held + products, expr) for expr, _ in items])
    found = fresh()
    found.read_gpus([ended, other])
    # each run's own products, each GPU's by its uuid: not another's, not one left unnamed
    assert found.gpus(ended) == frozenset({"H100", "H100 NVL"})
    assert found.gpus(other) == frozenset({"A100"})


def test_the_json_names_each_figure_as_the_baseline_and_the_trials_rows_name_it() -> None:
    # every figure a value of its own, so that one said under another's name shows
    j = Judgement("slower", 3, median=16.0, change=-0.21875, low=-0.0625, high=0.09375)
    why = [compare.Change(names.DATALOADER_NEXT, 0.0214, 0.853)]
    b = Baseline("e/t", "the median of the last 3 runs of e", "step", 12.5,
                 ["e/a", "e/b", "e/c"], [15.0, 16.0, 17.5], j, reasons=why)
    said = b.as_dict()
    plain = [f.name for f in dataclasses.fields(Baseline)
             if f.name not in ("reference", "comparison", "judgement", "reasons")]
    assert {k: said.get(k) for k in plain} == {k: getattr(b, k) for k in plain}
    assert (said["trial"], said["state"], said["line"]) == ("e/t", "slower", b.line())
    assert said["judgement"] == {f.name: getattr(j, f.name) for f in dataclasses.fields(j)}
    assert said["reasons"] == [{f.name: getattr(r, f.name) for f in dataclasses.fields(r)}
                               for r in why]
    # the change under the names `trials --json` gives it in a row that holds this baseline
    run = make("t", start=1_000.0, end=1_500.0)

    class Judged(Listed):
        def read_gpus(self, runs: Any) -> None:
            pass

        def read_rates(self, runs: Any) -> None:
            pass

        def of(self, run: Run, pinned: str = baseline.AUTO, reasons: bool = True) -> Baseline:
            return b

    shown = TrialRow("e", "t", "0", "node", None, None, None, None, False, pid=run.pid,
                     started=run.start)
    for_rows(Judged({run: 1.0}), [shown])
    vs = [f.name for f in dataclasses.fields(TrialRow) if f.name.startswith("vs_baseline")]
    assert len(vs) == 2 and {k: said.get(k) for k in vs} == {k: getattr(shown, k) for k in vs}
    assert said["vs_baseline"] != said["vs_baseline_text"]
    # nothing else: not the comparison (its sides are diagnose's), not the reference twice
    assert set(said) == {"trial", "state", "line", "judgement", "reasons", *plain, *vs}
