"""`trainwatch trials` (trainwatch.diagnose.trials.list_trials) without a Prometheus: the runs
are given (find_runs replaced, as tests/test_history_unit.py does), and a fake API answers the
exact queries each row is read from (written out here): a running rank's from the recorded
rates, a young one's from its own samples, an ended, stale or unscraped one's at its last
sample over its life, split back from batched queries as Prometheus answers them. The live
path is tests/test_life_window.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
    TRIAL_STALE,
)
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import trials
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.runs import ENDED_CLEAN, FAILED, RUNNING, STALE, Run
from trainwatch.promapi import ANY, PrometheusAPI, PrometheusError
from trial_instrumentation import names

NOW = 10_000.0
DEPLOYMENT = Deployment(RecordNames("5m"), {
    DATALOADER_BOUND: AlertRule(DATALOADER_BOUND, 0.3, "x"),
    HOST_TO_DEVICE_BOUND: AlertRule(HOST_TO_DEVICE_BOUND, 0.2, "x"),
    CPU_SATURATED: AlertRule(CPU_SATURATED, 0.9, "x"),
    GPU_UNDERUTILIZED: AlertRule(GPU_UNDERUTILIZED, 0.5, "x", mfu_low=0.2),
    TRIAL_STALE: AlertRule(TRIAL_STALE, 40.0, "x")})
E = '{experiment="e"}'
BY = "by (experiment, trial, rank)"
ITEM = re.compile(r'label_replace\(last_over_time\(\((.*?)\)\[1ms:1ms\] @ ([0-9.]+)\), '
                  r'"trainwatch_batch_item", "(\d+)", "", ""\)')

INFO = f"trainwatch_trial_info{E}"
STEPS_RATE = f"trial:trainwatch_trial_steps:rate5m{E}"
STEPS_TOTAL = f"trainwatch_trial_steps_total{E}"
SHARES = f"trial_phase:trainwatch_trial_phase_seconds:share_rate5m{E}"
GPU = f"avg {BY} (trial_gpu:trainwatch_gpu_busy:ratio{E})"
MFU = f"max {BY} (trial:trainwatch_trial_mfu:ratio_rate5m{E})"
CPU = (f"max {BY} (trainwatch_trial_info{E} * on(nodename) group_left() max by (nodename) "
       "((max by (instance) (instance:trainwatch_cpu_utilization:ratio_rate5m)) * on(instance) "
       "group_left(nodename) max by (instance, nodename) (trainwatch_host_info)))")
NOW_STEPS = f"count {BY} ({STEPS_TOTAL})"
OLD_STEPS = f"count {BY} (count_over_time({STEPS_TOTAL}[5m] offset 5m))"
LIFE_STEPS = f"{STEPS_TOTAL}[5m]"
LIFE_STEP_SUM = f"trainwatch_trial_step_seconds_sum{E}"
LIFE_PHASE_SUM = f"trainwatch_trial_phase_seconds_sum{E}"


def hosts(since: str) -> str:
    return f"max by (instance, nodename) (max_over_time(trainwatch_host_info[{since}]))"


def m(trial: str, rank: str) -> str:
    return f'experiment="e", trial="{trial}", rank="{rank}"'


def life(trial: str, rank: str, span: str, filled: str | None = None,
         instance: str | None = None) -> dict[str, str]:
    """An ended run's reads over its life ``span`` (``[Ns] offset Ms``)."""
    cpu = "instance:trainwatch_cpu_utilization:ratio_rate5m" + (
        f'{{instance="{instance}"}}' if instance else "")
    reads = {
        "step_sums": f"trainwatch_trial_step_seconds_sum{{{m(trial, rank)}}}",
        "phase_sums": f"trainwatch_trial_phase_seconds_sum{{{m(trial, rank)}}}",
        "steps": f"max {BY} (trainwatch_trial_steps_total{{{m(trial, rank)}}})",
        "gpu": f"max {BY} (avg_over_time(trial_gpu:trainwatch_gpu_busy:ratio{{{m(trial, rank)}}}"
               f"{span}))",
        "node_cpu": (f'max {BY} (trainwatch_trial_info{{experiment="e", trial="{trial}"}} * '
                     "on(nodename) group_left() max by (nodename) ((max by (instance) ("
                     f"avg_over_time({cpu}{span}))) * on(instance) group_left(nodename) max by "
                     "(instance, nodename) (trainwatch_host_info)))")}
    if filled:
        reads["mfu"] = (f"max {BY} (avg_over_time(trial:trainwatch_trial_mfu:ratio_rate5m"
                        f"{{{m(trial, rank)}}}{filled}))")
    return reads


def lab(trial: str, rank: str, **more: str) -> dict[str, str]:
    return {"experiment": "e", "trial": trial, "rank": rank, **more}


class FakeAPI:
    """Answers ``(instant, expr)`` from ``rows`` ([] for any other); a batch of items (each
    ``last_over_time((E)[1ms:1ms] @ T)`` tagged with its index) item by item, as Prometheus
    does; ``samples`` from ``series``. Every query is logged with its instant."""

    def __init__(self, rows: dict[tuple[float | None, str], list[tuple[dict[str, str], float]]],
                 series: dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]]
                 | None = None, at: float | None = None,
                 log: list[tuple[float | None, str]] | None = None) -> None:
        self.rows, self.series, self.at = rows, series or {}, at
        self.log = [] if log is None else log

    def pinned(self, at: float | None) -> FakeAPI:
        return FakeAPI(self.rows, self.series, at, self.log)

    def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
        items = ITEM.findall(expr)
        if not items:
            self.log.append((self.at, expr))
            return self.rows.get((self.at, expr), [])
        found = []
        for inner, instant, index in items:
            self.log.append((float(instant), inner))
            found += [({**labels, "trainwatch_batch_item": index}, value)
                      for labels, value in self.rows.get((float(instant), inner), [])]
        return found

    def samples(self, expr: str, kind: Any = None
                ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        self.log.append((self.at, expr))
        return self.series.get(expr, [])


def given_runs(monkeypatch: pytest.MonkeyPatch, runs: list[Run]) -> list[tuple[Any, ...]]:
    asked: list[tuple[Any, ...]] = []

    def find_runs(api: Any, since: float, experiment: str | None = None,
                  now: float | None = None) -> list[Run]:
        asked.append((since, experiment, now))
        return runs

    monkeypatch.setattr(trials, "find_runs", find_runs)
    return asked


def run(trial: str, rank: str, node: str, first: float, last: float, started: float,
        pushed: float, **kw: Any) -> Run:
    return Run("e", trial, rank, f"{rank}{first:.0f}", node, "4", first, last, started, pushed,
               **kw)


# Running, read from the recorded rates (its run began 500 s ago, over the 5m window).
R0 = run("t", "0", "n1", 9000.0, 9990.0, 9500.0, 9985.0, current=True)
# Running, restarted 200 s ago under a key that ran before: its own samples.
R1 = run("t", "1", "n2", 9800.0, 9990.0, 9800.0, 9985.0, current=True)
# Ended cleanly long ago on a node of two exporters: read at its last sample over its life.
R2 = run("u", "0", "n3", 5000.0, 6000.0, 4990.0, 5995.0, exit_reason="finished")
# Still scraped but silent for 50 s, over the 40 s stale threshold.
R3 = run("t", "2", "n1", 9000.0, 9960.0, 9100.0, 9950.0, current=True)
# Pushing (10 s ago) but without a row of the recorded rates yet: over its life, 300 s.
R6 = run("t", "3", "n1", 9700.0, 9995.0, 9690.0, 9990.0, current=True)


def table() -> dict[tuple[float | None, str], list[tuple[dict[str, str], float]]]:
    rows: dict[tuple[float | None, str], list[tuple[dict[str, str], float]]] = {
        (None, INFO): [(lab("t", "0", nodename="n9"), 1.0), (lab("t", "1"), 1.0),
                       (lab("t", "2"), 1.0)],
        (None, STEPS_RATE): [(lab("t", "0"), 2.5), (lab("t", "1"), 1.1), (lab("t", "2"), 7.0)],
        (None, STEPS_TOTAL): [(lab("t", "0"), 1234.0), (lab("t", "1"), 450.0)],
        (None, SHARES): [(lab("t", "0", phase="dataloader_next"), 0.6),
                         (lab("t", "0", phase="train_batch"), 0.4),
                         (lab("t", "1", phase="dataloader_next"), 0.7)],
        (None, GPU): [(lab("t", "0"), 0.45), (lab("t", "1"), 0.95)],
        (None, MFU): [(lab("t", "0"), 0.31), (lab("t", "1"), 0.05)],
        (None, CPU): [(lab("t", "0"), 0.2), (lab("t", "1"), 0.3)],
        (NOW, hosts("3601s")): [({"nodename": "n1", "instance": "n1:9100"}, 1.0),
                                ({"nodename": "n3", "instance": "n3:9100"}, 1.0),
                                ({"nodename": "n3", "instance": "n3:9200"}, 1.0)],
    }
    r2 = life("u", "0", "[1005s] offset 5s", "[705s] offset 5s")
    rows.update({
        (6000.0, r2["step_sums"]): [(lab("u", "0"), 100.0)],
        (6000.0, r2["phase_sums"]): [(lab("u", "0", phase="train_batch"), 85.0),
                                     (lab("u", "0", phase="dataloader_next"), 15.0)],
        (6000.0, r2["steps"]): [(lab("u", "0"), 2010.0)],
        (6000.0, r2["gpu"]): [(lab("u", "0"), 0.92)],
        (6000.0, r2["node_cpu"]): [(lab("u", "0"), 0.95)],
        (6000.0, r2["mfu"]): [(lab("u", "0"), 0.12)],
    })
    r3 = life("t", "2", "[850s] offset 10s", "[550s] offset 10s", "n1:9100")
    rows.update({
        (9960.0, r3["step_sums"]): [(lab("t", "2"), 50.0)],
        (9960.0, r3["phase_sums"]): [(lab("t", "2", phase="train_batch"), 50.0)],
        (9960.0, r3["steps"]): [(lab("t", "2"), 1275.0)],
        (9960.0, r3["gpu"]): [(lab("t", "2"), 0.3)],
        (9960.0, r3["node_cpu"]): [(lab("t", "2"), 0.95)],
        (9960.0, r3["mfu"]): [(lab("t", "2"), 0.4)],
    })
    r6 = life("t", "3", "[300s] offset 5s", None, "n1:9100")
    rows.update({
        (9995.0, r6["step_sums"]): [(lab("t", "3"), 20.0)],
        (9995.0, r6["phase_sums"]): [(lab("t", "3", phase="dataloader_next"), 9.0)],
        (9995.0, r6["steps"]): [(lab("t", "3"), 600.0)],
        (9995.0, r6["node_cpu"]): [(lab("t", "3"), 0.5)],
    })
    return rows


def series() -> dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]]:
    return {LIFE_STEPS: [(lab("t", "1"), [(9810.0, 20.0), (9990.0, 470.0)])]}


def life_sums() -> dict[tuple[float | None, str], list[tuple[dict[str, str], float]]]:
    return {(None, LIFE_STEP_SUM): [(lab("t", "1"), 100.0)],
            (None, LIFE_PHASE_SUM): [(lab("t", "1", phase="dataloader_next"), 10.0),
                                     (lab("t", "1", phase="train_batch"), 90.0)]}


def rows_by_key(found: list[trials.TrialRow]) -> dict[str, trials.TrialRow]:
    return {f"{r.trial}/{r.rank}": r for r in found}


def test_each_runs_row_is_read_where_its_figures_are(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = given_runs(monkeypatch, [R2, R6, R3, R1, R0])
    api = FakeAPI(table() | life_sums(), series())
    found = trials.list_trials(api, DEPLOYMENT, "e", since=3600.4, now=NOW)  # type: ignore[arg-type]
    assert asked == [(3600.4, "e", NOW)]
    assert [f"{r.trial}/{r.rank}" for r in found] == ["t/0", "t/1", "t/3", "t/2", "u/0"]
    got = rows_by_key(found)

    r = got["t/0"]  # the recorded rates
    assert (r.state, r.live, r.pid, r.nodename) == (RUNNING, True, R0.pid, "n1")
    assert (r.started, r.ended, r.push_age_seconds) == (9500.0, None, 15.0)
    assert (r.steps_per_second, r.dataloader_share, r.gpu_busy, r.mfu) == (2.5, 0.6, 0.45, 0.31)
    assert (r.steps, r.cause) == (1234, "dataloader")

    r = got["t/1"]  # restarted: its own samples and shares, no MFU (a rate it has not filled)
    assert (r.state, r.live, r.steps) == (RUNNING, True, 450)
    assert (r.steps_per_second, r.dataloader_share, r.gpu_busy, r.mfu) == (2.5, 0.1, 0.95, None)
    assert r.cause == "gpu_bound"  # its recorded 0.7 loader share (the run before) not read

    r = got["t/2"]  # stale: over its life, at its last sample; its node's one exporter's CPU
    assert (r.state, r.live, r.started, r.ended, r.push_age_seconds) == (
        STALE, False, 9100.0, 9950.0, 50.0)
    assert (r.steps, r.steps_per_second, r.dataloader_share) == (1275, 1.5, None)
    assert (r.gpu_busy, r.mfu, r.cause) == (0.3, 0.4, "busy_cpu")

    r = got["u/0"]  # ended: its node has two exporters, so every node's CPU series is read
    assert (r.state, r.live, r.started, r.ended) == ("ended (finished)", False, 4990.0, 5995.0)
    assert (r.steps, r.steps_per_second, r.dataloader_share) == (2010, 2.0, 0.15)
    assert (r.gpu_busy, r.mfu, r.cause) == (0.92, 0.12, "busy_cpu")  # its node's CPU read

    r = got["t/3"]  # running without a recorded row: over its life so far, no MFU (300 s)
    assert (r.state, r.live, r.ended, r.push_age_seconds) == (RUNNING, True, None, 10.0)
    assert (r.steps, r.steps_per_second, r.dataloader_share) == (600, 2.0, 0.45)
    assert (r.gpu_busy, r.mfu, r.cause) == (None, None, "dataloader")
    assert not any("trial:trainwatch_trial_mfu" in expr and 'rank="3"' in expr
                   for _, expr in api.log)


def test_an_ended_run_still_scraped_is_read_over_its_life_not_from_the_rates(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """e/t/2 said it ended cleanly (or failed) and its group is still scraped, with a row of
    the recorded rates: its row is still its life's, read at its last sample."""
    for reason, state in ((names.EXIT_CLEAN, ENDED_CLEAN), (names.EXIT_FAILED, FAILED)):
        ended = run("t", "2", "n1", 9000.0, 9960.0, 9100.0, 9950.0, current=True,
                    exit_reason=reason)
        given_runs(monkeypatch, [ended])
        [row] = trials.list_trials(FakeAPI(table()), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
        assert (row.state, row.live, row.ended) == (state, False, 9950.0)
        assert (row.steps, row.steps_per_second, row.gpu_busy) == (1275, 1.5, 0.3)


@pytest.mark.parametrize(("node_cpu", "cause"), [(0.96, "busy_cpu"), (0.35, "underused_gpu")])
def test_a_running_rows_cause_weighs_its_nodes_cpu_as_diagnose_does(
        monkeypatch: pytest.MonkeyPatch, node_cpu: float, cause: str) -> None:
    """A running rank (from the recorded rates) that waits on no loader, its GPU 45% busy: on
    a node past TrainwatchCPUSaturated's 0.9 its cause is the node's CPUs, else the GPU."""
    given_runs(monkeypatch, [R0])
    rows = table()
    rows[(None, SHARES)] = [(lab("t", "0", phase="train_batch"), 0.97),
                            (lab("t", "0", phase="dataloader_next"), 0.03)]
    rows[(None, CPU)] = [(lab("t", "1"), 0.99), (lab("t", "0"), node_cpu)]
    [row] = trials.list_trials(FakeAPI(rows), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert (row.state, row.gpu_busy, row.cause) == (RUNNING, 0.45, cause)


@pytest.mark.parametrize(("mfu", "cause"), [(0.12, "low_mfu"), (0.31, "gpu_bound")])
def test_a_running_rows_cause_weighs_its_mfu_as_diagnose_does(
        monkeypatch: pytest.MonkeyPatch, mfu: float, cause: str) -> None:
    """A running rank whose GPU is 95% busy: under TrainwatchGPUUnderutilized's mfu_low its
    cause is the low MFU, at or over it GPU-bound."""
    given_runs(monkeypatch, [R0])
    rows = table()
    rows[(None, SHARES)] = [(lab("t", "0", phase="train_batch"), 0.97),
                            (lab("t", "0", phase="dataloader_next"), 0.03)]
    rows[(None, GPU)] = [(lab("t", "0"), 0.95), (lab("t", "1"), 0.1)]
    rows[(None, MFU)] = [(lab("t", "1"), 0.01), (lab("t", "0"), mfu)]
    [row] = trials.list_trials(FakeAPI(rows), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert (row.state, row.gpu_busy, row.mfu, row.cause) == (RUNNING, 0.95, mfu, cause)


@pytest.mark.parametrize(("gpu", "mfu", "cause"), [(0.3, 0.31, "underused_gpu"),
                                                   (0.95, 0.12, "low_mfu"),
                                                   (0.95, 0.31, "gpu_bound")])
def test_an_ended_rows_cause_weighs_its_lifes_gpu_busy_and_mfu_as_diagnose_does(
        monkeypatch: pytest.MonkeyPatch, gpu: float, mfu: float, cause: str) -> None:
    """e/u/0 ended long ago, waiting on no loader on an idle node: its cause is its life's GPU
    busy against TrainwatchGPUUnderutilized's threshold, then its MFU against mfu_low."""
    given_runs(monkeypatch, [R2])
    rows = table()
    r2 = life("u", "0", "[1005s] offset 5s", "[705s] offset 5s")
    rows[(6000.0, r2["phase_sums"])] = [(lab("u", "0", phase="train_batch"), 97.0),
                                        (lab("u", "0", phase="dataloader_next"), 3.0)]
    rows[(6000.0, r2["node_cpu"])] = [(lab("u", "0"), 0.4)]
    rows[(6000.0, r2["gpu"])] = [(lab("u", "0"), gpu)]
    rows[(6000.0, r2["mfu"])] = [(lab("u", "0"), mfu)]
    [row] = trials.list_trials(FakeAPI(rows), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert (row.live, row.gpu_busy, row.mfu, row.cause) == (False, gpu, mfu, cause)


def test_a_push_stamped_ahead_of_now_has_a_negative_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Pushgateway's clock 3 s ahead of the CLI's: the age says so, not a remainder."""
    given_runs(monkeypatch, [run("t", "0", "n1", 9000.0, 9990.0, 9500.0, NOW + 3.0,
                                 current=True)])
    [row] = trials.list_trials(FakeAPI(table()), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert (row.state, row.push_age_seconds) == (RUNNING, -3.0)


def test_only_runs_read_over_their_life_ask_for_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    given_runs(monkeypatch, [R0])
    api = FakeAPI(table())
    [row] = trials.list_trials(api, DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert (row.steps_per_second, row.cause) == (2.5, "dataloader")
    assert not any("trainwatch_host_info[" in expr for _, expr in api.log)


# NOW + 5: a start stamped ahead of now (its node's clock) is under a window ago too.
@pytest.mark.parametrize(("started", "restarted"), [(9701.0, True), (9700.0, False),
                                                    (NOW + 5.0, True)])
def test_a_run_is_read_from_its_own_samples_for_one_window_after_its_start(
        monkeypatch: pytest.MonkeyPatch, started: float, restarted: bool) -> None:
    given_runs(monkeypatch, [run("t", "1", "n2", 9000.0, 9990.0, started, 9985.0,
                                 current=True)])
    [row] = trials.list_trials(FakeAPI(table() | life_sums(), series()), DEPLOYMENT, "e",  # type: ignore[arg-type]
                               now=NOW)
    assert (row.steps_per_second, row.dataloader_share, row.mfu) == (
        (2.5, 0.1, None) if restarted else (1.1, 0.7, 0.05))


def test_a_rank_younger_than_the_window_has_its_life_so_far_without_being_restarted() -> None:
    rows = table() | life_sums()
    rows[(None, NOW_STEPS)] = [(lab("t", "1"), 1.0), (lab("t", "0"), 1.0)]
    rows[(None, OLD_STEPS)] = [(lab("t", "0"), 1.0)]
    both = trials._current(FakeAPI(rows, series()), DEPLOYMENT, "e", {("e", "t", "1")})  # type: ignore[arg-type]
    assert (both[("e", "t", "1")].steps_per_second, both[("e", "t", "1")].mfu) == (2.5, None)
    current = trials._current(FakeAPI(rows, series()), DEPLOYMENT, "e", set())  # type: ignore[arg-type]
    assert (current[("e", "t", "1")].steps_per_second, current[("e", "t", "1")].mfu) == (2.5, None)
    assert (current[("e", "t", "0")].steps_per_second, current[("e", "t", "0")].mfu) == (2.5, 0.31)
    assert current[("e", "t", "2")].steps is None  # no steps counter read: not zero


def test_a_young_rank_without_samples_keeps_its_recorded_rate_but_no_mfu() -> None:
    current = trials._current(FakeAPI(table()), DEPLOYMENT, "e", {("e", "t", "1")})  # type: ignore[arg-type]
    row = current[("e", "t", "1")]
    assert (row.steps_per_second, row.dataloader_share, row.mfu) == (1.1, 0.7, None)


def test_runs_sort_live_first_then_by_key_and_a_keys_runs_oldest_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    old = run("t", "0", "n1", 100.0, 200.0, 90.0, 195.0, exit_reason="failed")
    older = run("t", "0", "n1", 10.0, 50.0, 5.0, 45.0, exit_reason="failed")
    asked = given_runs(monkeypatch, [R2, old, R0, older, R1])
    api = FakeAPI(table())
    found = trials.list_trials(api, DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert asked == [(3600.0, "e", NOW)]  # an hour back by default
    assert (NOW, hosts("3600s")) in api.log
    assert [(r.trial, r.rank, r.started) for r in found] == [
        ("t", "0", 9500.0), ("t", "1", 9800.0), ("t", "0", 5.0), ("t", "0", 90.0),
        ("u", "0", 4990.0)]


def test_a_run_without_a_life_has_no_rate() -> None:
    instant = run("t", "0", "n1", 500.0, 500.0, 500.0, 500.0, exit_reason="failed")
    brief = run("t", "0", "n1", 500.0, 501.0, 500.0, 500.5, exit_reason="failed")
    steps = [(lab("t", "0"), 3.0)]
    empty: list[tuple[dict[str, str], float]] = []
    answer = {"step_sums": empty, "phase_sums": empty, "steps": steps, "gpu": empty,
              "node_cpu": empty}
    assert trials._life_row(DEPLOYMENT, instant, answer).steps_per_second is None  # type: ignore[arg-type]
    assert trials._life_row(DEPLOYMENT, brief, answer).steps_per_second == 6.0  # type: ignore[arg-type]
    row = trials._life_row(DEPLOYMENT, brief, {**answer, "steps": empty})  # type: ignore[arg-type]
    assert (row.steps, row.steps_per_second, row.cause, row.mfu) == (None, None, None, None)


def test_a_nodes_instances_are_read_over_the_whole_lookback() -> None:
    api = FakeAPI({(None, hosts("60s")): [({"nodename": "a", "instance": "a:1"}, 1.0),
                                          ({"nodename": "a", "instance": "a:2"}, 1.0),
                                          ({"instance": "x:1"}, 1.0)]})
    assert trials.node_instances(api, 59.2) == {"a": ["a:1", "a:2"], "": ["x:1"]}  # type: ignore[arg-type]
    assert trials.node_instances(FakeAPI({(None, hosts("1s")): [({"nodename": "b"}, 1.0)]}),  # type: ignore[arg-type]
                                 0.2) == {"b": [""]}
    assert trials.node_instances(FakeAPI({(None, hosts("1s")): [({"nodename": "b"}, 1.0)]}),  # type: ignore[arg-type]
                                 0.0) == {"b": [""]}


class Checked(FakeAPI):
    """FakeAPI whose answers are checked as the real client checks each value it is asked
    for (PrometheusAPI._sample with the kind asked: a count, a time, any number)."""

    def pinned(self, at: float | None) -> Checked:
        return Checked(self.rows, self.series, at, self.log)

    def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
        found = super().query(expr, kind)
        client = PrometheusAPI("http://127.0.0.1:9")
        return [(labels, client._sample([NOW, str(value)], kind or ANY, expr)[1])
                for labels, value in found]


def test_an_ended_runs_steps_are_read_as_a_count_and_its_other_figures_as_numbers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    given_runs(monkeypatch, [R2])
    r2 = life("u", "0", "[1005s] offset 5s", "[705s] offset 5s")
    [row] = trials.list_trials(Checked(table()), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert row.steps == 2010
    negative = table() | {(6000.0, r2["gpu"]): [(lab("u", "0"), -0.5)]}  # any number: kept
    [row] = trials.list_trials(Checked(negative), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert row.gpu_busy == -0.5
    broken = table() | {(6000.0, r2["steps"]): [(lab("u", "0"), -3.0)]}  # no count of steps
    with pytest.raises(PrometheusError, match=r"'-3.0' where a count .* is due"):
        trials.list_trials(Checked(broken), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]


def test_a_trials_ranks_are_listed_by_number_not_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = [run("u", rank, "n3", 5000.0, 6000.0, 4990.0, 5995.0, exit_reason="finished")
             for rank in ("10", "2", "11")]
    given_runs(monkeypatch, [*ranks, R2])
    found = trials.list_trials(FakeAPI(table()), DEPLOYMENT, "e", now=NOW)  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r in found] == [("u", "0"), ("u", "2"), ("u", "10"), ("u", "11")]
