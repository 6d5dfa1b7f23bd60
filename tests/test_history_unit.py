"""trainwatch.diagnose.history without a Prometheus: the run lookup and the per-rank reports
replaced by stand-ins, so which instant each rank is read at, what an ended or stopped run's
title and figures say, which alerts fired in its life and what an unknown name is told are
checked in milliseconds. The live tests are tests/test_life_window.py and
tests/test_after_the_run_live.py."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from trainwatch.contract import remedies
from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_UNDERUTILIZED,
    TRIAL_STALE,
)
from trainwatch.contract.figures import HOST_INFO
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import history, loader_cause
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.figures import FIRED, AlertState, Gpu, RankReport, UnknownTrial
from trainwatch.diagnose.runs import Run
from trainwatch.diagnose.verdict import ENDED, STALE, Verdict
from trainwatch.promapi import COUNT
from trial_instrumentation import names

DEPLOYMENT = Deployment(RecordNames("5m"), {TRIAL_STALE: AlertRule(TRIAL_STALE, 60.0, "x")})
NOW = 100_000.0


def run(trial: str = "t", rank: str = "0", first: float = 1000.0, last: float = 2000.0,
        experiment: str = "e", **kw: Any) -> Run:
    return Run(experiment, trial, rank, "7", "n1", "2", first, last, **kw)


class FakeAPI:
    """Answers (instant, expression) from a table; logs each read."""

    def __init__(self, table: dict[tuple[float | None, str], Any] | None = None,
                 at: float | None = None, log: list[tuple[float | None, str]] | None = None
                 ) -> None:
        self.table, self.at = table or {}, at
        self.log = [] if log is None else log

    def pinned(self, at: float | None) -> FakeAPI:
        return FakeAPI(self.table, at, self.log)

    def value(self, expr: str, kind: Any = None) -> float | None:
        self.log.append((self.at, expr))
        return self.table.get((self.at, expr))

    def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
        self.log.append((self.at, expr))
        return self.table.get((self.at, expr), [])


# --- the names Prometheus knows instead ----------------------------------------------------


@pytest.fixture
def known(monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    """history's run lookup over this list."""
    runs: list[Run] = []

    def find(api: Any, since: float, experiment: str | None = None, trial: str | None = None,
             rank: str | None = None, now: float | None = None) -> list[Run]:
        return [r for r in runs if experiment in (None, r.experiment) and trial in (None, r.trial)
                and rank in (None, r.rank)]

    monkeypatch.setattr(history, "find_runs", find)
    return runs


def test_nothing_pushed_at_all_is_said(known: list[Run]) -> None:
    assert history.unknown_message(None, 7200.0, "e", "t", "1", NOW) == (  # type: ignore[arg-type]
        "no trial e/t rank 1 in Prometheus over the last 2 hours; none has pushed metrics")
    assert history.unknown_message(None, 90.0, "e", None, None, NOW) == (  # type: ignore[arg-type]
        "no trial e in Prometheus over the last 90 seconds; none has pushed metrics")
    assert history.unknown_message(None, 90.0, "e", "", "0", NOW).startswith(  # type: ignore[arg-type]
        "no trial e rank 0 in")


def test_an_unknown_experiment_gets_the_closest_name_and_the_list(known: list[Run]) -> None:
    known += [run(experiment="resnet"), run(experiment="bert"), run(experiment="resnet", trial="u")]
    assert history.unknown_message(None, 90.0, "resnet50", None, None, NOW) == (  # type: ignore[arg-type]
        "no experiment 'resnet50' in Prometheus over the last 90 seconds (did you mean resnet?); "
        "experiments: bert, resnet")
    assert history.unknown_message(None, 90.0, "zzzz", "t", None, NOW) == (  # type: ignore[arg-type]
        "no experiment 'zzzz' in Prometheus over the last 90 seconds; experiments: bert, resnet")
    # A known experiment without a trial asked for: the experiments, not its trials.
    assert history.unknown_message(None, 90.0, "bert", None, None, NOW).startswith(  # type: ignore[arg-type]
        "no experiment 'bert' in Prometheus over the last 90 seconds (did you mean bert?)")


def test_a_known_trial_with_an_unknown_rank_lists_its_ranks_in_order(known: list[Run]) -> None:
    known += [run(rank="10"), run(rank="2"), run(rank="0"), run(trial="other", rank="5")]
    assert history.unknown_message(None, 90.0, "e", "t", "9", NOW) == (  # type: ignore[arg-type]
        "no rank 9 of e/t in Prometheus over the last 90 seconds; its ranks: 0, 2, 10 "
        "(e.g. --rank 0)")


def test_an_unknown_trial_gets_the_closest_and_every_trial_with_its_ranks(
        known: list[Run]) -> None:
    known += [run("lr-0.1", "1"), run("lr-0.1", "0"), run("batch", "0"),
              run("lr-0.1", "0", experiment="other")]
    assert history.unknown_message(None, 90.0, "e", "lr-0.2", None, NOW) == (  # type: ignore[arg-type]
        "no trial e/lr-0.2 in Prometheus over the last 90 seconds (did you mean e/lr-0.1?); "
        "trials of experiment e: batch (rank 0), lr-0.1 (rank 0, 1)")
    assert history.unknown_message(None, 90.0, "e", "qqqq", "3", NOW) == (  # type: ignore[arg-type]
        "no trial e/qqqq rank 3 in Prometheus over the last 90 seconds; trials of experiment "
        "e: batch (rank 0), lr-0.1 (rank 0, 1)")


def test_run_of_is_the_ranks_latest_run(known: list[Run]) -> None:
    old, new = run(first=0.0, last=50.0), run(first=60.0, last=90.0)
    known += [old, new, run(rank="1")]
    assert history.run_of(None, 90.0, ("e", "t", "0")) == new  # type: ignore[arg-type]
    assert history.run_of(None, 90.0, ("e", "t", "7")) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("steps", "said"), [(None, "? steps"), (0, "0 steps"), (1, "1 step"),
                                             (2, "2 steps"), (12345, "12,345 steps")])
def test_a_step_count_is_said_in_words(steps: int | None, said: str) -> None:
    assert history._count(steps) == said


# --- which instant each rank is read at ----------------------------------------------------


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch, known: list[Run]) -> list[dict[str, Any]]:
    """decision.gather replaced: one report per rank asked for (verdict ``kinds[rank]``, else
    none); each call's instant, keys and starts logged. Ended reports skip _over_life."""
    calls: list[dict[str, Any]] = []

    def gather(api: FakeAPI, deployment: Deployment, experiment: str, trial: str | None,
               rank: str | None, *, only: dict[Any, Run], starts: dict[Any, float]
               ) -> list[RankReport]:
        calls.append({"at": api.at, "keys": sorted(only), "starts": starts,
                      "window": deployment.names.window})
        return [RankReport(e, t, r, nodename=None, pid=None, world_size=None, window="5m")
                for e, t, r in only]

    monkeypatch.setattr(history, "gather", gather)
    monkeypatch.setattr(history, "retention", lambda api: 10_000.0)
    return calls


def test_running_ranks_are_read_now_and_ended_ones_at_their_last_sample(
        known: list[Run], reports: list[dict[str, Any]]) -> None:
    live, ended = run("t", "1", current=True), run("t", "0", last=5000.0, started=900.0)
    other = run("t", "2", last=5000.0)
    known += [live, ended, other]
    found = history.gather_runs(FakeAPI(), DEPLOYMENT, "e", "t", now=NOW)  # type: ignore[arg-type]
    assert [(r.rank, r.run) for r in found] == [("0", ended), ("1", live), ("2", other)]
    by_instant = {c["at"]: c for c in reports}
    assert len(reports) == 2 and {at: c["keys"] for at, c in by_instant.items()} == {
        None: [("e", "t", "1")], 5000.0: [("e", "t", "0"), ("e", "t", "2")]}
    assert by_instant[5000.0]["starts"] == {("e", "t", "0"): 900.0, ("e", "t", "2"): 1000.0}
    assert by_instant[None]["window"] == "5m"


def test_a_trials_reports_come_in_rank_order_by_number_not_as_text(
        known: list[Run], reports: list[dict[str, Any]]) -> None:
    known += [run("t", rank, current=True) for rank in ("10", "2", "1")] + [run("s", "11")]
    found = history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r in found] == [("s", "11"), ("t", "1"), ("t", "2"), ("t", "10")]


def test_an_unknown_trials_message_lists_each_trials_ranks_by_number(known: list[Run]) -> None:
    known += [run("lr", "10"), run("lr", "2"), run("lr", "1")]
    assert history.unknown_message(None, 90.0, "e", "qqqq", None, NOW).endswith(  # type: ignore[arg-type]
        "trials of experiment e: lr (rank 1, 2, 10)")


def test_at_an_instant_each_rank_is_read_there_or_where_it_ended(
        known: list[Run], reports: list[dict[str, Any]]) -> None:
    early, late = run("t", "0", last=3000.0), run("t", "1", first=2000.0, last=9000.0,
                                                  current=True)
    known += [early, late]
    history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=4000.0, since=NOW)  # type: ignore[arg-type]
    assert sorted((c["at"], c["keys"]) for c in reports) == [(3000.0, [("e", "t", "0")]),
                                                             (4000.0, [("e", "t", "1")])]


def test_a_window_replaces_the_deployed_one_in_whole_seconds(
        known: list[Run], reports: list[dict[str, Any]]) -> None:
    known += [run(current=True)]
    for window, named in ((90.4, "90s"), (0.2, "1s"), (1.6, "2s")):
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, window=window)  # type: ignore[arg-type]
        assert reports.pop()["window"] == named


@pytest.mark.parametrize(("at", "said"), [
    (NOW + 300, "--at is 5 minutes in the future"),
    (NOW - 10_001, ("--at is 2.8 hours ago, outside the 2.8 hours looked at (Prometheus's "
                   "retention, or --since)"))])
def test_an_instant_outside_what_is_looked_at_is_refused(
        at: float, said: str, known: list[Run], reports: list[dict[str, Any]]) -> None:
    known += [run(current=True)]
    with pytest.raises(ValueError) as err:
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=at)  # type: ignore[arg-type]
    assert str(err.value) == said and reports == []


def test_the_edges_of_what_is_looked_at_are_in_it(known: list[Run],
                                                  reports: list[dict[str, Any]]) -> None:
    known += [run(first=0.0, last=NOW, current=True)]
    for at in (NOW, NOW - 10_000.0):
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=at)  # type: ignore[arg-type]
    history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=NOW - 500.0, since=500.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside the 8 minutes looked at"):
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=NOW - 501.0, since=500.0)  # type: ignore[arg-type]
    assert len(reports) == 3


def test_no_run_is_an_unknown_trial(known: list[Run], reports: list[dict[str, Any]]) -> None:
    with pytest.raises(UnknownTrial, match="none has pushed metrics"):
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", "t", now=NOW)  # type: ignore[arg-type]


# --- an ended or stopped run over its life -------------------------------------------------


SEL = 'experiment="e", trial="t", rank="0"'


def verdict(kind: str = STALE, **kw: Any) -> Verdict:
    base: dict[str, Any] = {"kind": kind, "title": "live title", "bottleneck": False,
                            "measured": 42.0, "comparison": ">", "threshold": 60.0,
                            "alert": TRIAL_STALE, "remedy": "r", "runbook_url": None,
                            "steps": 17, "last_profile": "dataloader_next 60%",
                            "cleanup": "curl -X DELETE x"}
    return Verdict(**(base | kw))


def report(**kw: Any) -> RankReport:
    return RankReport("e", "t", "0", nodename=kw.pop("nodename", None), pid="7", world_size="2",
                      window="5m", verdict=kw.pop("verdict", verdict()), **kw)


def over_life(api: Any, deployment: Deployment, rank: RankReport, ended: Run,
              now: float) -> RankReport:
    return history._over_life(api, deployment, rank, ended, now)


def life_api(steps: float | None = 1800.0, samples: float | None = 57600.0,
             at: float = 2000.0) -> FakeAPI:
    return FakeAPI({(None, f"{names.STEPS}_total{{{SEL}}}"): steps,
                    (None, f"{names.SAMPLES}_total{{{SEL}}}"): samples})


def test_a_run_that_stopped_without_a_word_is_titled_so_with_its_silence() -> None:
    stopped = run(first=1000.0, last=1900.0, started=1000.0, pushed=1900.0)
    done = over_life(life_api(), DEPLOYMENT, report(push_age_seconds=5.0), stopped,
                              NOW)  # type: ignore[arg-type]
    v = done.verdict
    assert v is not None and done.run == stopped
    age = NOW - 1900.0
    assert v.title == ("Stopped pushing 27.2 hours ago without a word (crashed or killed; "
                       "1,800 steps in 15 minutes): over its life, dataloader_next 60%")
    assert (v.steps, v.measured, v.cleanup, v.kind) == (1800, age, None, STALE)
    assert done.push_age_seconds == age and done.lifetime_seconds == 900.0
    assert done.steps_per_second == 2.0 and done.samples_per_second == 64.0
    assert done.loader_cause is None


def test_a_stopped_run_still_scraped_keeps_prometheus_age_and_its_clean_up() -> None:
    stopped = run(first=1000.0, last=1900.0, started=1000.0, pushed=1900.0, current=True)
    done = over_life(life_api(), DEPLOYMENT, report(push_age_seconds=75.0), stopped,
                              NOW)  # type: ignore[arg-type]
    assert done.push_age_seconds == 75.0 and done.verdict is not None
    assert done.verdict.cleanup == "curl -X DELETE x" and done.verdict.measured == 75.0
    assert done.verdict.title.startswith("Stopped pushing 75 seconds ago")
    unknown_age = over_life(life_api(), DEPLOYMENT, report(), stopped, NOW)  # type: ignore[arg-type]
    assert unknown_age.push_age_seconds == NOW - 1900.0


@pytest.mark.parametrize(("reason", "how"), [
    (names.EXIT_FAILED, "failed: an exception or a non-zero exit"),
    ("oom", "reason=oom")])
def test_an_ended_run_says_how_and_crossed_no_threshold(reason: str, how: str) -> None:
    ended = run(first=1000.0, last=1960.0, started=1000.0, pushed=1060.0, exit_reason=reason,
                current=True)
    done = over_life(life_api(steps=1.0, samples=None), DEPLOYMENT,  # type: ignore[arg-type]
                              report(push_age_seconds=3.0, verdict=verdict(ENDED)), ended, NOW)
    v = done.verdict
    assert v is not None
    assert v.title == (f"Ended 3 seconds ago ({how}, 1 step in 60 seconds): over its life, "
                       "dataloader_next 60%")
    assert (v.measured, v.cleanup, v.steps) == (None, None, 1)
    assert done.samples_per_second is None and done.steps_per_second == pytest.approx(1 / 60)


def test_without_counters_or_a_life_the_verdicts_own_steps_and_no_rates() -> None:
    instant = run(first=1000.0, last=1000.0, started=1000.0, pushed=1000.0)
    done = over_life(life_api(steps=None, samples=None), DEPLOYMENT,  # type: ignore[arg-type]
                              report(verdict=verdict(last_profile=None)), instant, NOW)
    assert done.verdict is not None and done.verdict.steps == 17
    assert done.verdict.title.endswith("(crashed or killed; 17 steps in 0 seconds): no timings")
    assert (done.steps_per_second, done.samples_per_second) == (None, None)
    zero = over_life(life_api(steps=500.0), DEPLOYMENT, report(), instant, NOW)  # type: ignore[arg-type]
    assert zero.steps_per_second is None and zero.verdict is not None
    assert zero.verdict.steps == 500


def test_the_counters_are_read_as_counts() -> None:
    kinds: list[Any] = []

    class Counting(FakeAPI):
        def value(self, expr: str, kind: Any = None) -> float | None:
            kinds.append(kind)
            return super().value(expr, kind)

    over_life(Counting(life_api().table), DEPLOYMENT, report(), run(), NOW)  # type: ignore[arg-type]
    assert kinds == [COUNT, COUNT]


def test_the_alerts_of_an_ended_run_are_those_that_fired_in_its_life() -> None:
    """Its rank's, its GPUs' and its node's (found by nodename at its last sample), over its
    life (start to final push, offset to its last sample); not another rank's."""
    ended = run(first=1000.0, last=1960.0, started=1000.0, pushed=1060.0)
    window = ended.life_range
    rank_alerts = f'ALERTS{{alertstate="firing", {SEL}}}'
    table = {
        (1960.0, f'{HOST_INFO}{{nodename="n1"}}'): [({"instance": "i1:9100"}, 1.0)],
        (1960.0, f"max_over_time({rank_alerts}{window})"): [
            ({"__name__": "ALERTS", "alertname": "TrainwatchDataloaderBound",
              "alertstate": "firing", "experiment": "e", "trial": "t", "rank": "0",
              "phase": "dataloader_next"}, 1.0)],
        (1960.0, f'max_over_time(ALERTS{{alertstate="firing", uuid="GPU-1"}}{window})'): [
            ({"alertname": "TrainwatchGPUHot", "alertstate": "firing", "uuid": "GPU-1"}, 1.0)],
        (1960.0, f'max_over_time(ALERTS{{alertstate="firing", instance="i1:9100"}}{window})'): [
            ({"alertname": "TrainwatchCPUSaturated", "alertstate": "firing",
              "instance": "i1:9100"}, 1.0),
            ({"alertname": "TrainwatchCPUSaturated", "alertstate": "firing",
              "instance": "i1:9100"}, 1.0)],
    }
    got = history._fired_in_life(FakeAPI(table), ended, report(  # type: ignore[arg-type]
        nodename="n1", gpus=[Gpu("GPU-1", "i1:9100", "0")]))
    assert sorted(a.name for a in got) == ["TrainwatchCPUSaturated", "TrainwatchDataloaderBound",
                                           "TrainwatchGPUHot"]
    assert all(isinstance(a, AlertState) and a.state == FIRED for a in got)
    # Without a node name, no node alert is looked for.
    no_node = history._fired_in_life(FakeAPI(table), ended, report(  # type: ignore[arg-type]
        gpus=[Gpu("GPU-1", "i1:9100", "0")]))
    assert sorted(a.name for a in no_node) == ["TrainwatchDataloaderBound", "TrainwatchGPUHot"]


def test_one_alert_that_fired_for_each_of_two_gpus_is_listed_once_per_gpu() -> None:
    """The same alert name about two GPUs of the run are two alerts, as a live rank lists
    them; the same alert read twice (one series per query that matched it) is one."""
    ended = run(first=1000.0, last=1960.0, started=1000.0, pushed=1060.0)
    window = ended.life_range

    def hot(uuid: str) -> dict[str, str]:
        return {"alertname": "TrainwatchGPUHot", "alertstate": "firing", "uuid": uuid}

    table = {
        (1960.0, f'max_over_time(ALERTS{{alertstate="firing", uuid="GPU-1"}}{window})'): [
            (hot("GPU-1"), 1.0)],
        (1960.0, f'max_over_time(ALERTS{{alertstate="firing", uuid="GPU-2"}}{window})'): [
            (hot("GPU-2"), 1.0), (hot("GPU-2"), 1.0)],
    }
    got = history._fired_in_life(FakeAPI(table), ended, report(  # type: ignore[arg-type]
        gpus=[Gpu("GPU-1", "i1:9100", "0"), Gpu("GPU-2", "i1:9100", "1")]))
    assert [(a.name, a.state) for a in got] == [("TrainwatchGPUHot", FIRED)] * 2


def test_an_ended_run_s_report_carries_its_life_s_alerts() -> None:
    ended = run(first=1000.0, last=1960.0, started=1000.0, pushed=1060.0)
    table = life_api().table | {
        (1960.0, f'max_over_time(ALERTS{{alertstate="firing", {SEL}}}{ended.life_range})'): [
            ({"alertname": "TrainwatchTrialStale", "alertstate": "firing", "experiment": "e",
              "trial": "t", "rank": "0"}, 1.0)]}
    done = over_life(FakeAPI(table), DEPLOYMENT, report(  # type: ignore[arg-type]
        alerts=[AlertState("Now", "firing", "1")]), ended, NOW)
    assert [a.name for a in done.alerts] == ["TrainwatchTrialStale"]


def test_the_ways_a_run_ends_are_worded() -> None:
    assert history.HOW == {names.EXIT_CLEAN: "clean",
                           names.EXIT_FAILED: "failed: an exception or a non-zero exit",
                           names.EXIT_TERMINATED: "terminated: SIGTERM"}
    assert history._ended(report(verdict=verdict(ENDED)))
    assert history._ended(report(verdict=verdict(STALE)))
    assert not history._ended(report(verdict=dataclasses.replace(verdict(), kind="gpu_bound")))
    assert not history._ended(report(verdict=None))


# --- more of what an unknown name is told, and the call itself ------------------------------


def test_only_the_experiment_asked_for_lists_its_trials(known: list[Run]) -> None:
    """Another experiment's trials are not listed, whether its name sorts after or before."""
    known += [run("lr-0.1", "0", experiment="resnet"), run("wide", "3", experiment="vit"),
              run("deep", "1", experiment="bert")]
    assert history.unknown_message(None, 90.0, "resnet", "lr-0.2", None, NOW) == (  # type: ignore[arg-type]
        "no trial resnet/lr-0.2 in Prometheus over the last 90 seconds (did you mean "
        "resnet/lr-0.1?); trials of experiment resnet: lr-0.1 (rank 0)")


def test_an_experiment_typed_is_matched_by_its_text_not_its_object(known: list[Run]) -> None:
    """The name typed (argparse) is another str object than the one Prometheus answered."""
    known += [run("lr-0.1", "0", experiment="resnet")]
    typed = b"resnet".decode()  # a new str, as argv's is
    assert typed == "resnet" and typed is not known[0].experiment
    assert history.unknown_message(None, 90.0, typed, "lr-0.2", None, NOW) == (  # type: ignore[arg-type]
        "no trial resnet/lr-0.2 in Prometheus over the last 90 seconds (did you mean "
        "resnet/lr-0.1?); trials of experiment resnet: lr-0.1 (rank 0)")


def test_only_the_api_the_deployment_the_names_are_positional() -> None:
    params = inspect.signature(history.gather_runs).parameters.values()
    assert [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == [
        "api", "deployment", "experiment", "trial", "rank"]
    assert [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY] == [
        "since", "at", "window", "now"]


@pytest.mark.parametrize(("at", "since", "said"), [
    # Over twice now away (now is any instant here): the distance is at - now, not a remainder.
    (250_000.0, None, "--at is 41.7 hours in the future"),
    (30_000.0, None, ("--at is 19.4 hours ago, outside the 2.8 hours looked at (Prometheus's "
                      "retention, or --since)")),
    (30_000.0, 50_000.0, ("--at is 19.4 hours ago, outside the 13.9 hours looked at "
                          "(Prometheus's retention, or --since)"))])
def test_an_instant_far_outside_says_how_far(at: float, since: float | None, said: str,
                                             known: list[Run],
                                             reports: list[dict[str, Any]]) -> None:
    known += [run(current=True)]
    with pytest.raises(ValueError) as err:
        history.gather_runs(FakeAPI(), DEPLOYMENT, "e", now=NOW, at=at, since=since)  # type: ignore[arg-type]
    assert str(err.value) == said and reports == []


def test_a_life_under_a_second_still_has_rates() -> None:
    brief = run(first=1000.0, last=1000.5, started=1000.0, pushed=1000.5)
    done = over_life(life_api(steps=3.0, samples=96.0), DEPLOYMENT, report(), brief,  # type: ignore[arg-type]
                     NOW)
    assert done.lifetime_seconds == 0.5
    assert (done.steps_per_second, done.samples_per_second) == (6.0, 192.0)


# --- an ended run's GPU busy and MFU, and its loader's figures, over its life ---------------


N5 = RecordNames("5m")
# Started (its own clock) before its first scrape; its final push at 871.9, its group scraped
# on until 2000 (waiting for gc): a life of 751.5 s, more than twice the 5m window, and a last
# sample more than twice the final push's time, so no remainder stands in for a difference.
LONG = run(first=130.0, last=2000.0, started=120.4, pushed=871.9, exit_reason=names.EXIT_CLEAN)
BUSY_LIFE = f"avg_over_time({N5.trial_gpu_busy}{{{SEL}}}[752s] offset 1128s)"


@pytest.mark.parametrize(("window", "mfu_range"), [
    ("5m", "[452s] offset 1128s"),  # the life less its first window (751.5 - 300 s)
    ("10m", "[152s] offset 1128s")])
def test_an_ended_runs_gpu_busy_is_its_lifes_and_its_mfu_the_life_after_its_first_window(
        window: str, mfu_range: str) -> None:
    n = RecordNames(window)
    busy = f"avg_over_time({n.trial_gpu_busy}{{{SEL}}}[752s] offset 1128s)"
    mfu = f"avg_over_time({n.mfu}{{{SEL}}}{mfu_range})"
    api = FakeAPI({(2000.0, busy): 0.87, (2000.0, mfu): 0.083, (None, busy): 0.11,
                   (None, mfu): 0.61})
    assert history.life_gpu(api, Deployment(n, {}), LONG) == (0.87, 0.083)  # type: ignore[arg-type]
    assert api.log == [(2000.0, busy), (2000.0, mfu)]


@pytest.mark.parametrize(("pushed", "mfu_range"), [
    (1300.5, "[1s]"),  # half a second past the window: its MFU over that half second
    (1300.0, None),  # a life of exactly one window: the rate of its first window reads low
    (1299.5, None)])
def test_an_mfu_is_read_only_for_a_life_longer_than_the_window(pushed: float,
                                                               mfu_range: str | None) -> None:
    ended = run(first=1000.0, last=pushed, started=1000.0, pushed=pushed)
    busy = f"avg_over_time({N5.trial_gpu_busy}{{{SEL}}}{ended.life_range})"
    mfu = f"avg_over_time({N5.mfu}{{{SEL}}}{mfu_range})"
    api = FakeAPI({(pushed, busy): 0.9, (pushed, mfu): 0.3})
    got = history.life_gpu(api, DEPLOYMENT, ended)  # type: ignore[arg-type]
    assert got == (0.9, 0.3 if mfu_range else None)
    assert api.log == [(pushed, busy)] + ([(pushed, mfu)] if mfu_range else [])


@pytest.fixture
def loader_gathered(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """loader_cause.gather replaced: its arguments logged, the loader's query run once, one
    evidence per rank (this one's and another's) returned."""
    calls: list[dict[str, Any]] = []

    def gather(query: Any, window: str, node_cpu: dict[Any, float | None], life: Run | None,
               /, **sel: str) -> dict[Any, Any]:
        query("loader_query")
        calls.append({"window": window, "node_cpu": node_cpu, "life": life, "sel": sel})
        return {life.key: "its evidence", ("e", "t", "1"): "another's"}  # type: ignore[union-attr]

    monkeypatch.setattr(loader_cause, "gather", gather)
    return calls


@pytest.mark.parametrize(("ended", "window"), [
    (LONG, "1880s"),  # its first scrape to its last sample (2000 - 120.4 s), whole seconds
    (run(first=1999.6, last=2000.0, started=1999.6), "1s"),
    # 879.4 s: the next whole second, never the nearest (879 s left its first 0.4 s out)
    (run(first=1120.6, last=2000.0, started=1120.6), "880s"),
    (run(first=2000.0, last=2000.0), "1s")])  # one sample: a window of at least a second
def test_the_loaders_figures_cover_every_sample_of_the_run(
        ended: Run, window: str, loader_gathered: list[dict[str, Any]]) -> None:
    node = loader_cause.node_cpu(
        f"avg_over_time({N5.cpu_utilization}{ended.life_range})", experiment="e", trial="t",
        rank="0")
    api = FakeAPI({(2000.0, node): 0.47, (None, node): 0.99})
    assert history._loader_over_life(api, DEPLOYMENT, ended) == (0.47, "its evidence")  # type: ignore[arg-type]
    assert loader_gathered == [{"window": window, "node_cpu": {("e", "t", "0"): 0.47},
                                "life": ended,
                                "sel": {"experiment": "e", "trial": "t", "rank": "0"}}]
    assert api.log == [(2000.0, node), (2000.0, "loader_query")]


# --- the finding of a life that ended cleanly or was terminated -----------------------------


RULES = {TRIAL_STALE: AlertRule(TRIAL_STALE, 60.0, "x"),
         DATALOADER_BOUND: AlertRule(DATALOADER_BOUND, 0.3, "fix the loader"),
         CPU_SATURATED: AlertRule(CPU_SATURATED, 0.9, "fix the node"),
         GPU_UNDERUTILIZED: AlertRule(GPU_UNDERUTILIZED, 0.5, "fix the GPU", mfu_low=0.2)}
RULED = Deployment(N5, RULES)
GPU_BOUND_LIFE = [("train_batch", 0.93), ("dataloader_next", 0.07)]


def life_table(node_cpu: float, busy: float, mfu: float) -> dict[tuple[float | None, str], Any]:
    """LONG's life: counters, its node's CPU, its GPUs' busy and its MFU at its last sample."""
    node = loader_cause.node_cpu(f"avg_over_time({N5.cpu_utilization}{LONG.life_range})",
                                 experiment="e", trial="t", rank="0")
    return life_api().table | {
        (2000.0, node): node_cpu, (2000.0, BUSY_LIFE): busy,
        (2000.0, f"avg_over_time({N5.mfu}{{{SEL}}}[452s] offset 1128s)"): mfu}


@pytest.mark.parametrize(("reason", "how"), [(names.EXIT_CLEAN, "clean"),
                                             (names.EXIT_TERMINATED, "terminated: SIGTERM")])
def test_a_busy_gpu_at_a_low_mfu_over_its_life_is_the_finding(reason: str, how: str) -> None:
    ended = dataclasses.replace(LONG, exit_reason=reason)
    done = over_life(FakeAPI(life_table(0.41, 0.87, 0.083)), RULED,  # type: ignore[arg-type]
                     report(verdict=verdict(ENDED, last_profile="No GPU metrics"),
                            phases=GPU_BOUND_LIFE, push_age_seconds=3.0), ended, NOW)
    v = done.verdict
    assert v is not None and done.loader_cause is None
    assert v.title == (f"Ended 27.5 hours ago ({how}, 1,800 steps in 13 minutes): over its "
                       "life, GPU busy, MFU low: 8.3% < threshold 20.0%")
    assert (v.kind, v.life_kind, v.bottleneck, v.measured, v.comparison, v.threshold) == (
        ENDED, "low_mfu", True, 0.083, "<", 0.2)
    assert (v.alert, v.remedy, v.runbook_url) == (None, remedies.LOW_MFU, None)
    assert v.metric is not None and "GPU busy 87.0%" in v.metric


def ended_life(cpu: float, gpu: float, mfu: float, run: Run = LONG) -> Verdict:
    """The verdict of an ended run whose last push looked GPU-bound, over a life with this
    node CPU, GPU busy and MFU."""
    done = over_life(FakeAPI(life_table(cpu, gpu, mfu)), RULED,  # type: ignore[arg-type]
                     report(verdict=verdict(ENDED), phases=GPU_BOUND_LIFE), run, NOW)
    assert done.verdict is not None
    return done.verdict


def test_a_life_on_a_saturated_node_is_cpu_bound_whatever_its_gpu() -> None:
    v = ended_life(0.95, 0.87, 0.083)
    assert v.title.endswith("over its life, Node CPUs saturated: 95.0% > threshold 90.0%")
    assert (v.life_kind, v.alert, v.remedy, v.measured, v.threshold) == (
        "busy_cpu", CPU_SATURATED, "fix the node", 0.95, 0.9)


def test_a_life_with_a_busy_gpu_and_a_good_mfu_is_gpu_bound() -> None:
    v = ended_life(0.41, 0.87, 0.35)
    assert v.title.endswith("over its life, GPU-bound: 87.0% >= threshold 50.0%")
    assert (v.life_kind, v.bottleneck, v.measured) == ("gpu_bound", False, 0.87)


@pytest.mark.parametrize("reason", [names.EXIT_FAILED, None, "oom"])
def test_a_failed_or_killed_life_keeps_its_verdict_with_its_lifes_finding_and_title(
        reason: str | None) -> None:
    """What to do first stays its log (the stale verdict's alert and remedy); what its life
    was is decided as `trials` decides it, on the same figures over that life, not the
    shares-only profile its last push had (which read "dataloader_next 60%")."""
    v = ended_life(0.95, 0.87, 0.083, dataclasses.replace(LONG, exit_reason=reason))
    assert v.title.endswith("): over its life, Node CPUs saturated: 95.0% > threshold 90.0%")
    assert (v.finding, v.alert, v.remedy, v.bottleneck) == ("busy_cpu", TRIAL_STALE, "r", False)
    assert v.kind == ENDED and v.measured != 0.95  # its own figure, not the life's CPU


@pytest.mark.parametrize("reason", [names.EXIT_CLEAN, names.EXIT_TERMINATED, None])
def test_a_life_with_no_timings_is_not_decided(reason: str | None) -> None:
    ended = dataclasses.replace(LONG, exit_reason=reason)
    api = FakeAPI(life_table(0.95, 0.87, 0.083))
    done = over_life(api, RULED, report(verdict=verdict(ENDED), phases=[]), ended, NOW)  # type: ignore[arg-type]
    v = done.verdict
    assert v is not None
    assert v.title.endswith("): over its life, dataloader_next 60%")
    assert (v.life_kind, v.alert, v.remedy, v.bottleneck) == (None, TRIAL_STALE, "r", False)
    assert not [expr for _, expr in api.log if "avg_over_time" in expr]


def test_a_loader_bound_life_gets_its_loaders_cause_over_that_life(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's figures over its life (as _loader_over_life reads them) name the cause."""
    one_busy_worker = loader_cause.LoaderEvidence(workers=1, workers_cpu=0.97, main_cpu=0.3,
                                                  node_cpu=0.5, cpu_count=2,
                                                  per_worker_cpu=0.97)
    lives: list[Run | None] = []

    def gather(query: Any, window: str, node_cpu: Any, life: Run | None, /,
               **sel: str) -> dict[Any, Any]:
        lives.append(life)
        return {LONG.key: one_busy_worker}

    monkeypatch.setattr(loader_cause, "gather", gather)
    causes = {"worker_busy": 0.5, "disk_busy": 0.6, "network_busy": 0.6, "rchar_over_read": 4}
    rules = RULES | {DATALOADER_BOUND: AlertRule(DATALOADER_BOUND, 0.3, "fix the loader",
                                                 causes=causes)}
    done = over_life(FakeAPI(life_table(0.5, 0.87, 0.35)), Deployment(N5, rules),  # type: ignore[arg-type]
                     report(verdict=verdict(ENDED),
                            phases=[("dataloader_next", 0.62), ("train_batch", 0.38)]),
                     LONG, NOW)
    v, cause = done.verdict, done.loader_cause
    assert lives == [LONG] and v is not None and cause is not None
    assert cause.kind == "too_few_workers" and v.remedy == cause.remedy
    assert v.remedy.startswith("Raise DataLoader num_workers from 1 to ~2")
    assert (v.life_kind, v.alert, v.measured, v.threshold) == (
        "dataloader", DATALOADER_BOUND, 0.62, 0.3)
    assert v.title.endswith("over its life, Data loader: 62.0% > threshold 30.0%")


@pytest.mark.parametrize(("threads", "noted"), [(4.0, True), (1.0, False)])
def test_a_train_bound_life_on_a_saturated_node_notes_its_compute_threads(
        monkeypatch: pytest.MonkeyPatch, threads: float, noted: bool) -> None:
    """The compute-threads note of an ended run, from its last push's thread count and its
    life's loader figures (its node's 2 cores, its own 1.2 CPU), as a running rank's."""
    evidence = loader_cause.LoaderEvidence(workers=0, main_cpu=1.2, cpu_count=2,
                                           per_worker_cpu=1.2)
    monkeypatch.setattr(loader_cause, "gather", lambda *args, **kw: {LONG.key: evidence})
    table = life_table(0.95, 0.87, 0.35) | {
        (2000.0, f"{names.COMPUTE_THREADS}{{{SEL}}}"): threads}
    done = over_life(FakeAPI(table), RULED,  # type: ignore[arg-type]
                     report(verdict=verdict(ENDED), phases=GPU_BOUND_LIFE), LONG, NOW)
    assert done.verdict is not None and done.verdict.life_kind == "busy_cpu"
    said = [n for n in done.verdict.notes if "compute threads on" in n]
    assert [n.split(" compute threads on ")[0] for n in said] == (
        [f"train_batch runs {threads:g}"] if noted else [])
