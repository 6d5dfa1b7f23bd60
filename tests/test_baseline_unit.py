"""trainwatch/diagnose/baseline.py's own arithmetic and choices, without a stack: the rates read
over a run's life, the GPU products joined from the runs' uuids, the line a baseline says, which
rank `diagnose` judges and which run a `trials` row is. Prometheus's answers are given at the
one boundary the module reads through (``_per_run`` and ``batched.read``)."""

from __future__ import annotations

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
