"""trainwatch/diagnose/decision.py without a stack: a rank's verdict from its figures and facts,
over the window, young or stale, with the deployed thresholds (the committed rules)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_diagnose_mfu import BUSY_AT, DEPLOYED, H100, MFU_LOW
from trainwatch.contract.alerts import CPU_SATURATED
from trainwatch.diagnose import decision
from trainwatch.diagnose.figures import STALE_RANK, WINDOW_RANK, YOUNG_RANK, RankFacts, RankReport
from trainwatch.diagnose.loader_cause import LoaderEvidence
from trainwatch.diagnose.mfu import Mfu

# Loader-bound by the report's phases (what a young or stale rank's life says), GPU-bound by the
# window's shares: which of the two a verdict rests on tells which figures it read.
LOADER_PHASES = [("dataloader_next", 0.81), ("train_batch", 0.17)]
TRAIN_SHARES = {"train_batch": 0.93, "dataloader_next": 0.04}
BUSY = min(BUSY_AT + 0.07, 1.0)
GPU = (BUSY, BUSY, None, BUSY, "sm_active")  # busy on every figure
LOW_MFU = Mfu(MFU_LOW * 0.4, "bf16", 989.4e12, (H100,))


def unique(text: str) -> str:
    """``text`` as a new string object, equal but not the constant's (not interned)."""
    return "".join(list(text))


def report(**kw: Any) -> RankReport:
    return RankReport("e", "t", "0", "node", "1", "1", "5m", **{
        "phases": list(LOADER_PHASES), "node_cpu": 0.2, **kw})


def judged(r: RankReport, facts: RankFacts) -> RankReport:
    decision.judge(r, facts, DEPLOYED)
    assert r.verdict is not None
    return r


@pytest.mark.parametrize("over", [WINDOW_RANK, unique(WINDOW_RANK)])
def test_a_rank_over_the_window_is_judged_on_its_shares_with_its_mfu(over: str) -> None:
    r = judged(report(mfu=LOW_MFU), RankFacts(dict(TRAIN_SHARES), GPU, over=over, life_steps=7))
    assert r.verdict is not None
    assert r.verdict.kind == "low_mfu" and not r.verdict.early and r.verdict.steps is None
    assert r.loader_cause is None
    # no MFU figure: GPU-bound, never low MFU
    r = judged(report(), RankFacts(dict(TRAIN_SHARES), GPU, over=over))
    assert r.verdict is not None and r.verdict.kind == "gpu_bound"


@pytest.mark.parametrize("over", [YOUNG_RANK, unique(YOUNG_RANK)])
def test_a_young_rank_is_judged_early_on_its_lifes_phases_without_its_mfu(over: str) -> None:
    r = judged(report(mfu=LOW_MFU), RankFacts(dict(TRAIN_SHARES), GPU, over=over, life_steps=7))
    assert r.verdict is not None
    assert (r.verdict.kind, r.verdict.early, r.verdict.steps) == ("dataloader", True, 7)
    r = judged(report(phases=[("train_batch", 0.93)], mfu=LOW_MFU),
               RankFacts({}, GPU, over=over, life_steps=3))
    assert r.verdict is not None
    assert (r.verdict.kind, r.verdict.early, r.verdict.steps) == ("gpu_bound", True, 3)


@pytest.mark.parametrize(("node_cpu", "kind"), [
    (min(DEPLOYED.alerts[CPU_SATURATED].threshold + 0.04, 1.0), "busy_cpu"),
    (DEPLOYED.alerts[CPU_SATURATED].threshold - 0.2, "gpu_bound")])
def test_a_young_rank_on_a_saturated_node_is_judged_early_on_its_nodes_cpu(
        node_cpu: float, kind: str) -> None:
    """The early verdict weighs the node's CPU as the windowed one does: train-bound phases,
    a busy GPU, and the node past TrainwatchCPUSaturated's threshold or under it."""
    r = judged(report(phases=[("train_batch", 0.93)], node_cpu=node_cpu),
               RankFacts({}, GPU, over=YOUNG_RANK, life_steps=4))
    assert r.verdict is not None
    assert (r.verdict.kind, r.verdict.early, r.verdict.steps) == (kind, True, 4)


def test_a_loader_bound_rank_gets_its_loaders_cause() -> None:
    evidence = LoaderEvidence(workers=4, workers_cpu=3.7, main_cpu=0.4, node_cpu=0.2,
                              cpu_count=32, per_worker_cpu=0.93)
    r = judged(report(), RankFacts({"dataloader_next": 0.81}, GPU, over=YOUNG_RANK,
                                   loader_evidence=evidence, life_steps=5))
    assert r.verdict is not None and r.verdict.kind == "dataloader"
    assert r.loader_cause is not None and r.loader_cause.kind == "too_few_workers"


@pytest.mark.parametrize("over", [STALE_RANK, unique(STALE_RANK)])
def test_a_stale_rank_stopped_pushing_and_its_profile_is_its_lifes_phases(over: str) -> None:
    r = judged(report(push_age_seconds=437.5, mfu=LOW_MFU),
               RankFacts(dict(TRAIN_SHARES), GPU, over=over, life_steps=1200,
                         cleanup="curl -X DELETE x"))
    v = r.verdict
    assert v is not None
    assert (v.kind, v.measured, v.steps, v.cleanup) == ("stale", 437.5, 1200, "curl -X DELETE x")
    assert v.title == "Stopped pushing 7 minutes ago: crashed or killed"
    assert v.last_profile is not None and v.last_profile.startswith("Data loader")
    assert r.loader_cause is None and not v.early


def test_a_stale_rank_without_a_push_age_or_cleanup_reads_zero_and_empty() -> None:
    r = judged(report(), RankFacts({}, GPU, over=STALE_RANK))
    v = r.verdict
    assert v is not None
    assert (v.kind, v.measured, v.steps, v.cleanup) == ("stale", 0.0, None, "")
    assert v.title == "Stopped pushing 0 seconds ago: crashed or killed"


@pytest.mark.parametrize(("age", "said"), [(42.0, "42 seconds"), (None, "0 seconds")])
def test_a_stale_rank_that_said_it_ended_is_ended_since_its_push(age: float | None,
                                                                 said: str) -> None:
    r = judged(report(push_age_seconds=age),
               RankFacts({}, GPU, over=STALE_RANK, exit_reason="failed", life_steps=9,
                         cleanup="curl -X DELETE y"))
    v = r.verdict
    assert v is not None
    assert (v.kind, v.exit_reason, v.steps, v.measured) == ("ended", "failed", 9, None)
    assert v.title == f"Ended {said} ago: an exception or a non-zero exit"
    assert v.cleanup == "curl -X DELETE y"


def test_gather_judges_each_rank_figures_gathered_with_the_selection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []
    ranks = [(report(), RankFacts(dict(TRAIN_SHARES), GPU)),
             (report(push_age_seconds=61.0), RankFacts({}, GPU, over=STALE_RANK))]

    def gather_figures(api: Any, deployment: Any, experiment: str, trial: str | None = None,
                       rank: str | None = None, *, only: Any = None,
                       starts: Any = None) -> list[tuple[RankReport, RankFacts]]:
        asked.append((api, deployment, experiment, trial, rank, only, starts))
        return ranks

    monkeypatch.setattr(decision, "gather_figures", gather_figures)
    only, starts = {("e", "t", "0")}, {("e", "t", "0"): 12.5}
    got = decision.gather("api", DEPLOYED, "e", trial="t", rank="0",  # type: ignore[arg-type]
                          only=only, starts=starts)
    assert asked == [("api", DEPLOYED, "e", "t", "0", only, starts)]
    assert got == [r for r, _ in ranks]
    assert [r.verdict.kind for r in got if r.verdict] == ["gpu_bound", "stale"]
    assert decision.gather("api", DEPLOYED, "e") == got  # type: ignore[arg-type]
    assert asked[-1] == ("api", DEPLOYED, "e", None, None, None, None)


SATURATED = DEPLOYED.alerts[CPU_SATURATED].threshold
TRAIN_BOUND = {"train_batch": 0.69, "dataloader_next": 0.05, "to_device": 0.01}


def noted(evidence: LoaderEvidence | None, threads: float | None = 2) -> list[str]:
    """The compute-threads notes of a train-bound rank on a saturated node of 2 cores."""
    node_cpu = min(SATURATED + 0.05, 1.0)
    r = RankReport("e", "t", "0", "node", "1", "1", "5m", node_cpu=node_cpu,
                   phases=sorted(TRAIN_BOUND.items(), key=lambda item: -item[1]))
    judged(r, RankFacts(dict(TRAIN_BOUND), (None,) * 5, compute_threads=threads,
                        loader_evidence=evidence))
    assert r.verdict is not None
    return [n for n in r.verdict.notes if "compute threads on" in n]


def test_the_compute_threads_note_reads_the_cores_and_own_cpu_from_the_loader_evidence(
        ) -> None:
    busy = min(SATURATED + 0.05, 1.0)
    [note] = noted(LoaderEvidence(workers=0, main_cpu=1.2, cpu_count=2, per_worker_cpu=1.2))
    assert note.startswith(f"train_batch runs 2 compute threads on {2 - (busy * 2 - 1.2):.1f} "
                           f"free cores of 2 (node CPU {busy:.1%} busy")
    [note] = noted(LoaderEvidence(workers=0, cpu_count=2), threads=4)  # own CPU unknown
    assert note.startswith("train_batch runs 4 compute threads on 2.0 free cores of 2")
    assert noted(None) == []  # no evidence: the node's cores are unknown
    assert noted(LoaderEvidence(workers=0, main_cpu=1.2, cpu_count=2), threads=None) == []
