"""Which runs make a run's baseline (trainwatch/diagnose/baseline.py, Baselines.auto) and what
the baseline says, over runs given directly: the last 5 of its experiment and rank that ended
clean before it ended, with its world size and, where both are known, its GPU product."""

from __future__ import annotations

import pytest

from trainwatch.diagnose import compare
from trainwatch.diagnose.baseline import Baselines
from trainwatch.diagnose.runs import Run
from trial_instrumentation import names

NOW = 100_000.0


class Stale:
    def threshold(self, name: str) -> float:
        return 300.0


def run(trial: str, ended: float, *, reason: str | None = names.EXIT_CLEAN, rank: str = "0",
        world: str = "1", pid: str = "1", current: bool = False) -> Run:
    return Run("nightly", trial, rank, pid, "node", world, first=ended - 100, last=ended + 5,
               started=ended - 100, pushed=ended, exit_reason=reason, current=current)


class Given(Baselines):
    """Baselines over ``runs``, each with a throughput (samples/s) and GPU products."""

    def __init__(self, runs: dict[Run, float], gpus: dict[Run, frozenset[str]] | None = None
                 ) -> None:
        super().__init__(None, Stale(), now=NOW, since=86400.0)  # type: ignore[arg-type]
        self.given, self.products = runs, gpus or {}
        self.pins: dict[str, str] = {}  # what `trainwatch baseline set` left in Prometheus

    def pin(self, experiment: str) -> str | None:
        return self.pins.get(experiment)

    def runs(self, experiment: str) -> list[Run]:
        return [r for r in self.given if r.experiment == experiment]

    def gpus(self, run: Run) -> frozenset[str]:
        return self.products.get(run, frozenset())

    def rates(self, run: Run) -> tuple[float | None, float | None]:
        return self.given[run], self.given[run] / 8

    def side(self, run: Run) -> compare.Side:
        speed = self.given[run]
        side = compare.Side(f"{run.experiment}/{run.trial}", run, "ended clean", steps=100,
                            steps_per_second=speed / 8, samples_per_second=speed,
                            step_seconds=8 / speed)
        side.phase_seconds = {names.DATALOADER_NEXT: 8 / speed - 0.01, names.TRAIN_BATCH: 0.01}
        return side


def test_the_last_five_clean_runs_before_it_ended_with_its_world_size_and_rank() -> None:
    healthy = {run(f"n{i}", 1000.0 * i): 100.0 + i for i in range(1, 8)}
    others = {run("failed", 7500, reason=names.EXIT_FAILED): 1.0,
              run("killed", 7600, reason=None): 1.0,
              run("wide", 7700, world="2"): 1.0,
              run("rank1", 7800, rank="1"): 1.0,
              run("later", 9500): 1.0}
    checked = run("today", 9000)
    given = Given({**healthy, **others, checked: 80.0})
    assert [r.trial for r in given.auto(checked)] == ["n3", "n4", "n5", "n6", "n7"]
    found = given.of(checked)
    assert found.state == "slower" and found.judgement.median == 105.0
    assert found.line().startswith("24% slower than the median of the last 5 runs of nightly "
                                   f"({names.DATALOADER_NEXT} +")
    assert found.reasons[0].phase == names.DATALOADER_NEXT


def test_earlier_runs_under_its_own_key_count_but_never_itself() -> None:
    earlier = {run("nightly", 1000.0 * i, pid=str(i)): 100.0 for i in range(1, 4)}
    running = run("nightly", NOW, pid="9", reason=None, current=True)
    given = Given({**earlier, running: 100.0})
    assert [r.pid for r in given.auto(running)] == ["1", "2", "3"]
    assert given.of(running).state == "no change"


def test_another_gpu_product_is_no_baseline_where_both_are_known() -> None:
    h100, a100 = frozenset({"NVIDIA H100 80GB HBM3"}), frozenset({"NVIDIA A100-SXM4-80GB"})
    a, b, c = run("a", 1000), run("b", 2000), run("c", 3000)
    checked = run("today", 9000)
    given = Given({a: 100.0, b: 100.0, c: 100.0, checked: 50.0},
                  {a: a100, b: h100, c: frozenset(), checked: h100})
    assert [r.trial for r in given.auto(checked)] == ["b", "c"]  # c: its product unknown


def test_a_run_of_an_unknown_gpu_product_takes_the_runs_of_any_product() -> None:
    """Its own product unknown (no exporter on its node, a CPU run), so no other is known to
    differ: every clean run counts, of a known product or not."""
    h100, a100 = frozenset({"NVIDIA H100 80GB HBM3"}), frozenset({"NVIDIA A100-SXM4-80GB"})
    a, b, c = run("a", 1000), run("b", 2000), run("c", 3000)
    checked = run("today", 9000)
    given = Given({a: 100.0, b: 100.0, c: 100.0, checked: 50.0},
                  {a: a100, b: h100, c: frozenset(), checked: frozenset()})
    assert [r.trial for r in given.auto(checked)] == ["a", "b", "c"]
    assert given.of(checked).state == "slower"


@pytest.mark.parametrize(("count", "said"), [(0, "no baseline (0 runs)"),
                                             (1, "no baseline (1 run)")])
def test_fewer_than_two_runs_say_so(count: int, said: str) -> None:
    given = Given({**{run(f"n{i}", 1000.0 * i): 100.0 for i in range(1, count + 1)},
                   run("today", 9000): 10.0})
    found = given.of(run("today", 9000))
    assert found.line() == said and not found.judgement.beyond(0.0)


def test_trials_judges_every_row_from_the_counts_alone_without_reading_sides() -> None:
    class CountsOnly(Given):
        def side(self, run: Run) -> compare.Side:
            raise AssertionError("trials reads no side: two counts a run")

    given = CountsOnly({**{run(f"n{i}", 1000.0 * i): 100.0 for i in range(1, 4)},
                        run("today", 9000): 50.0})
    found = given.of(run("today", 9000), reasons=False)
    assert found.judgement.percent == "\u221250%" and found.reasons == []


def test_a_pinned_baseline_replaces_the_last_runs_median_but_not_for_itself() -> None:
    healthy = {run(f"n{i}", 1000.0 * i): 100.0 + i for i in range(1, 8)}
    checked = run("today", 9000)
    given = Given({**healthy, checked: 80.0})
    given.pins["nightly"] = "nightly/n1"
    found = given.of(checked)
    assert found.baseline_runs == ["nightly/n1"] and found.judgement.median == 101.0
    assert found.line().startswith("21% slower than nightly/n1, the pinned baseline (")
    assert given.of(checked, "nightly/n2").baseline_runs == ["nightly/n2"]  # --baseline wins
    pinned_itself = given.of(run("n1", 1000.0))  # the pinned run: its automatic baseline
    assert "the pinned baseline" not in pinned_itself.line()
    given.pins.clear()
    assert given.of(checked).baseline_runs[-1] == "nightly/n7"
