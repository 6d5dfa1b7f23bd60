"""`trainwatch diagnose`'s figures layer (trainwatch.diagnose.figures.gather_figures) without a
Prometheus: a fake API answers the exact queries it makes (written out here, not built by the
module under test), so every figure is checked against the series that feeds it, for two ranks
whose figures all differ, with what must not appear (another trial's rank, a NaN, an unknown
quantile, the +Inf bucket). The live path is tests/test_diagnose_live.py."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from trainwatch.contract import remedies
from trainwatch.contract.alerts import RANK_STRAGGLER, TRIAL_STALE
from trainwatch.contract.promql import select
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import figures
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.figures import (
    STALE_RANK,
    WINDOW_RANK,
    YOUNG_RANK,
    UnknownTrial,
    gather_figures,
)
from trainwatch.diagnose.verdict import limits_advice

NOW = 10_000.0
DEPLOYMENT = Deployment(RecordNames("5m"), {TRIAL_STALE: AlertRule(TRIAL_STALE, 40.0, "x")})
SEL = '{experiment="e", trial="t"}'
BY = "by (experiment, trial, rank)"

INFO_E = 'trainwatch_trial_info{experiment="e"}'
STEP_Q = f"trial:trainwatch_trial_step_seconds:quantile_rate5m{SEL}"
PHASES = f"trial_phase:trainwatch_trial_phase_seconds:share_rate5m{SEL}"
STEPS_RATE = f"trial:trainwatch_trial_steps:rate5m{SEL}"
SAMPLES_RATE = f"trial:trainwatch_trial_samples:rate5m{SEL}"
BUCKETS = f"group by (experiment, trial, rank, le) (trainwatch_trial_step_seconds_bucket{SEL})"
GPU_INFO = f"trainwatch_trial_gpu_info{SEL}"
GPU_UTIL = f"trial_gpu:trainwatch_gpu_utilization:ratio{SEL}"
GPU_MEM = f"trial_gpu:trainwatch_gpu_memory_used:ratio{SEL}"
GPU_SM = f"trial_gpu:trainwatch_gpu_sm_active:ratio{SEL}"
GPU_TENSOR = f"trial_gpu:trainwatch_gpu_tensor_active:ratio{SEL}"
LOADER_LIMIT = f"trainwatch_trial_loader_limit_samples_per_second{SEL}"
STEP_LIMIT = f"trainwatch_trial_step_limit_samples_per_second{SEL}"
THREADS = f"trainwatch_trial_compute_threads{SEL}"
UTIL_AVG = f"avg {BY} (avg_over_time(trial_gpu:trainwatch_gpu_utilization:ratio{SEL}[5m]))"
SM_AVG = f"avg {BY} (avg_over_time(trial_gpu:trainwatch_gpu_sm_active:ratio{SEL}[5m]))"
TENSOR_AVG = f"avg {BY} (avg_over_time(trial_gpu:trainwatch_gpu_tensor_active:ratio{SEL}[5m]))"
BUSY_AVG = ("avg by (experiment, trial, rank, source) (avg_over_time("
            f"trial_gpu:trainwatch_gpu_busy:ratio{SEL}[5m]))")
NODE_CPU = (f"max {BY} (trainwatch_trial_info{SEL} * on(nodename) group_left() max by "
            "(nodename) ((max by (instance) (instance:trainwatch_cpu_utilization:ratio_rate5m)) "
            "* on(instance) group_left(nodename) max by (instance, nodename) "
            "(trainwatch_host_info)))")
AGE = f"time() - max {BY} (push_time_seconds{SEL})"
EXIT = f"trainwatch_trial_exit{SEL}"
PROFILE = f"trainwatch_trial_profile_info{SEL}"
FLOPS = f"trainwatch_trial_model_flops_per_sample{SEL}"
NOW_STEPS = f"count {BY} (trainwatch_trial_steps_total{SEL})"
OLD_STEPS = f"count {BY} (count_over_time(trainwatch_trial_steps_total{SEL}[5m] offset 5m))"
LIFE_STEPS = f"trainwatch_trial_steps_total{SEL}[5m]"
LIFE_SAMPLES = f"trainwatch_trial_samples_total{SEL}[5m]"
LIFE_STEP_SUM = f"trainwatch_trial_step_seconds_sum{SEL}"
LIFE_PHASE_SUM = f"trainwatch_trial_phase_seconds_sum{SEL}"


def workers(window: str) -> str:
    """The loader evidence's worker count over ``window`` (loader_cause.gather)."""
    return (f"max {BY} (max_over_time(trainwatch_trial_loader_workers{SEL}[{window}]))")


def lab(rank: str, trial: str = "t", **more: str) -> dict[str, str]:
    return {"experiment": "e", "trial": trial, "rank": rank, **more}


class FakeAPI:
    """``query`` answers an expression from ``rows`` ([] for any other), ``samples`` from
    ``series``, ``alerts`` its list; every expression asked is logged."""

    def __init__(self, rows: dict[str, list[tuple[dict[str, str], float]]],
                 series: dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]]
                 | None = None, alerts: list[dict[str, Any]] | None = None,
                 at: float | None = NOW) -> None:
        self.rows, self.series, self._alerts, self.at = rows, series or {}, alerts or [], at
        self.log: list[str] = []

    def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
        self.log.append(expr)
        return self.rows.get(expr, [])

    def samples(self, expr: str, kind: Any = None
                ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        self.log.append(expr)
        return self.series.get(expr, [])

    def alerts(self) -> list[dict[str, Any]]:
        return self._alerts


def infos() -> list[tuple[dict[str, str], float]]:
    return [(lab("1", nodename="n2", pid="8", world_size="2"), 1.0),
            (lab("0", nodename="n1", pid="7", world_size="2"), 1.0),
            (lab("0", trial="u", nodename="n3", pid="9", world_size="1"), 1.0)]


def two_ranks() -> dict[str, list[tuple[dict[str, str], float]]]:
    """Ranks 0 and 1 of e/t, every figure different, and rank 0 of e/u beside them."""
    gpu = {"instance": "n1:9400"}
    return {
        INFO_E: infos(),
        STEP_Q: [(lab("0", quantile="0.5"), 0.21), (lab("0", quantile="0.95"), 0.34),
                 (lab("0", quantile="0.75"), 0.29), (lab("1", quantile="0.5"), 0.23)],
        BUCKETS: [(lab("0", le="0.25"), 1.0), (lab("0", le="+Inf"), 1.0),
                  (lab("0", le="0.1"), 1.0), (lab("0", le="1"), 1.0), (lab("0"), 1.0),
                  (lab("1", le="0.5"), 1.0)],
        STEPS_RATE: [(lab("1"), math.nan), (lab("0"), 2.5)],  # NaN first: the rest is read
        SAMPLES_RATE: [(lab("0"), 80.0), (lab("1"), 72.0)],
        PHASES: [(lab("0", phase="train_batch"), 0.3), (lab("0", phase="dataloader_next"), 0.55),
                 (lab("0", phase="optimizer"), 0.15), (lab("1", phase="train_batch"), 0.9)],
        GPU_INFO: [(lab("0", uuid="GPU-b"), 1.0), (lab("0", uuid="GPU-a"), 1.0),
                   (lab("1", uuid="GPU-d"), 1.0)],
        GPU_UTIL: [(lab("0", uuid="GPU-a", gpu="0", **gpu), 0.61),
                   (lab("0", uuid="GPU-b", gpu="1", **gpu), 0.71),
                   (lab("0", uuid="GPU-c", gpu="2", **gpu), 0.05)],
        GPU_MEM: [(lab("0", uuid="GPU-a", gpu="0", **gpu), 0.42)],
        GPU_SM: [(lab("0", uuid="GPU-a", gpu="0", **gpu), 0.33)],
        GPU_TENSOR: [(lab("0", uuid="GPU-a", gpu="0", **gpu), 0.12)],
        LOADER_LIMIT: [(lab("0"), 3000.0)],
        STEP_LIMIT: [(lab("0"), 9000.0)],
        THREADS: [(lab("0"), 4.0), (lab("1"), 6.0)],
        UTIL_AVG: [(lab("0"), 0.58), (lab("1"), 0.48)],
        SM_AVG: [(lab("0"), 0.31)],
        TENSOR_AVG: [(lab("0"), 0.11)],
        BUSY_AVG: [(lab("0", source="utilization"), 0.8), (lab("0", source="sm_active"), 0.5),
                   (lab("1", source="sm_active"), 0.45)],
        NODE_CPU: [(lab("0"), 0.37), (lab("1"), 0.64)],
        AGE: [(lab("0"), 12.0), (lab("1"), 7.0)],
        PROFILE: [(lab("0", path="/tmp/trace.json", steps="5", device="cuda"), 1.0)],
        FLOPS: [(lab("0", precision="bf16"), 6e9)],
        # Two ranks and a scaling efficiency: the trial's scaling, on each of its ranks.
        f"count by (experiment, trial) (trainwatch_trial_info{SEL})": [
            ({"experiment": "e", "trial": "t"}, 2.0)],
        f"trial_ranks:trainwatch_trial_scaling_efficiency:ratio_rate5m{SEL}": [
            ({"experiment": "e", "trial": "t"}, 0.87)],
        "trainwatch_host_info": [({"nodename": "n1", "instance": "n1:9100"}, 1.0),
                                 ({"nodename": "n2", "instance": "n2:9100"}, 1.0)],
    }


def by_rank(found: list[tuple[figures.RankReport, figures.RankFacts]]
            ) -> dict[str, tuple[figures.RankReport, figures.RankFacts]]:
    return {f"{r.trial}/{r.rank}": (r, facts) for r, facts in found}


def alert(name: str, state: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, **labels}, "state": state, "value": 1.5}


def test_each_ranks_figures_are_read_from_its_own_series_and_no_other() -> None:
    alerts = [alert("Loader", "pending", **lab("0")), alert("Hot", "firing", uuid="GPU-a"),
              alert("Cpu", "firing", instance="n1:9100"), alert("Slow", "firing", **lab("1")),
              alert("Cpu", "firing", instance="n2:9100", **lab("0", trial="u")),
              alert("Disk", "pending", instance="n2:9100"),
              {"labels": {"alertname": "Aaa", **lab("1")}}]  # no state: '?', after firing
    # As /api/v1/alerts gives them: strings decoded from JSON, not the module's constants.
    api = FakeAPI(two_ranks(), alerts=json.loads(json.dumps(alerts)))
    got = by_rank(gather_figures(api, DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    assert list(got) == ["t/0", "t/1"]  # in rank order; e/u is another trial
    r, facts = got["t/0"]
    assert (r.experiment, r.nodename, r.pid, r.world_size, r.window) == ("e", "n1", "7", "2", "5m")
    assert r.dashboard_window is None
    assert r.step_seconds == {"0.5": 0.21, "0.95": 0.34}  # 0.75 is no quantile it reads
    assert r.step_bounds == (0.1, 0.25, 1.0)  # sorted, numbers, without +Inf
    assert (r.steps_per_second, r.samples_per_second) == (2.5, 80.0)
    assert r.phases == [("dataloader_next", 0.55), ("train_batch", 0.3), ("optimizer", 0.15)]
    assert [(g.uuid, g.instance, g.gpu, g.utilization, g.memory_used, g.sm_active,
             g.tensor_active) for g in r.gpus] == [
        ("GPU-a", "n1:9400", "0", 0.61, 0.42, 0.33, 0.12),
        ("GPU-b", "n1:9400", "1", 0.71, None, None, None),
        ("GPU-c", "n1:9400", "2", 0.05, None, None, None)]  # a figure without info: shown
    assert (r.node_cpu, r.push_age_seconds) == (0.37, 12.0)
    assert (r.loader_limit, r.step_limit) == (3000.0, 9000.0)
    assert r.limits_advice == limits_advice(3000.0, 9000.0)
    assert r.trace is not None and r.trace.path == "/tmp/trace.json"
    assert r.scaling is not None and r.scaling.efficiency == 0.87
    assert r.mfu is not None and r.mfu.precision == "bf16"
    assert [(a.name, a.state, a.value) for a in r.alerts] == [
        ("Cpu", "firing", "1.5"), ("Hot", "firing", "1.5"), ("Loader", "pending", "1.5")]
    assert facts.shares == {"train_batch": 0.3, "dataloader_next": 0.55, "optimizer": 0.15}
    assert facts.gpu == (0.58, 0.31, 0.11, pytest.approx(0.65), "sm_active+utilization")
    assert (facts.over, facts.life_steps, facts.cleanup, facts.exit_reason) == (
        WINDOW_RANK, None, None, None)
    assert facts.compute_threads == 4.0

    r, facts = got["t/1"]
    assert (r.nodename, r.pid) == ("n2", "8")
    assert r.step_seconds == {"0.5": 0.23}
    assert r.step_bounds == (0.5,)
    assert (r.steps_per_second, r.samples_per_second) == (None, 72.0)  # NaN: no measurement
    assert r.phases == [("train_batch", 0.9)]
    assert [(g.uuid, g.utilization) for g in r.gpus] == [("GPU-d", None)]
    assert (r.node_cpu, r.push_age_seconds) == (0.64, 7.0)
    assert (r.loader_limit, r.step_limit, r.limits_advice) == (None, None, None)
    assert (r.trace, r.mfu) == (None, None)
    assert r.scaling is not None and r.scaling.efficiency == 0.87
    assert [(a.name, a.state) for a in r.alerts] == [("Slow", "firing"), ("Aaa", "?"),
                                                     ("Disk", "pending")]
    assert facts.gpu == (0.48, None, None, 0.45, "sm_active")
    assert facts.compute_threads == 6.0
    assert facts.over == WINDOW_RANK


def test_a_gpu_series_without_a_uuid_names_no_gpu_and_breaks_nothing() -> None:
    """A server answering GPU series without their uuid label (a broken relabelling, a hostile
    server): no GPU of the rank, where a KeyError was a traceback past the CLI's one line."""
    rows = two_ranks()
    rows[GPU_INFO] = [(lab("0"), 1.0), *rows[GPU_INFO]]
    rows[GPU_UTIL] = [(lab("0", gpu="7", instance="n1:9400"), 0.99), *rows[GPU_UTIL]]
    got = by_rank(gather_figures(FakeAPI(rows), DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    assert [(g.uuid, g.utilization) for g in got["t/0"][0].gpus] == [
        ("GPU-a", 0.61), ("GPU-b", 0.71), ("GPU-c", 0.05)]
    assert [g.uuid for g in got["t/1"][0].gpus] == ["GPU-d"]


def test_a_rank_trial_or_only_filter_picks_those_ranks_alone() -> None:
    api = FakeAPI(two_ranks())
    got = gather_figures(api, DEPLOYMENT, "e", "t", "1")  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r, _ in got] == [("t", "1")]
    got = gather_figures(api, DEPLOYMENT, "e", "t", only={("e", "t", "0")})  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r, _ in got] == [("t", "0")]
    got = gather_figures(FakeAPI({INFO_E: infos()}), DEPLOYMENT, "e")  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r, _ in got] == [("t", "0"), ("t", "1"), ("u", "0")]
    got = gather_figures(FakeAPI({INFO_E: infos()}), DEPLOYMENT, "e", rank="0")  # type: ignore[arg-type]
    assert [(r.trial, r.rank) for r, _ in got] == [("t", "0"), ("u", "0")]


def test_a_rank_the_recorded_series_miss_is_read_from_the_deployed_rules_expression() -> None:
    """Rank 1 has no recorded quantiles: the two loaded expressions (one per quantile, the
    label the rule adds) answer for it; rank 0's recorded rows stand, the inline rows of rank
    0 and of the other trial are not taken."""
    n = RecordNames("5m")
    deployment = Deployment(n, DEPLOYMENT.alerts, {
        n.step_quantile: (("q50", {"quantile": "0.5"}), ("q95", {"quantile": "0.95"})),
        n.samples_rate: (("samples_inline", {}),)})
    rows = two_ranks()
    rows[STEP_Q] = [(lab("0", quantile="0.5"), 0.21)]
    rows["q50"] = [(lab("0"), 0.9), (lab("1"), 0.26), (lab("0", trial="u"), 0.8)]
    rows["q95"] = [(lab("1"), 0.41)]
    rows["samples_inline"] = [(lab("1"), 1.0)]
    api = FakeAPI(rows)
    got = by_rank(gather_figures(api, deployment, "e", "t"))  # type: ignore[arg-type]
    assert got["t/0"][0].step_seconds == {"0.5": 0.21}
    assert got["t/1"][0].step_seconds == {"0.5": 0.26, "0.95": 0.41}
    assert "samples_inline" not in api.log  # every chosen rank has its recorded samples rate
    assert got["t/1"][0].samples_per_second == 72.0
    # One rank chosen, its quantiles recorded: the other rank's rows ask for no inline rule.
    rows[STEP_Q] = [(lab("0", quantile="0.5"), 0.21), (lab("1", quantile="0.5"), 0.23)]
    api = FakeAPI(rows)
    [(r, _)] = gather_figures(api, deployment, "e", "t", "1")  # type: ignore[arg-type]
    assert r.step_seconds == {"0.5": 0.23}
    assert "q50" not in api.log and "samples_inline" not in api.log


def test_a_replaced_window_is_named_as_the_dashboards_window() -> None:
    got = gather_figures(FakeAPI({INFO_E: infos()}), DEPLOYMENT.over("1h"), "e", "t", "0")  # type: ignore[arg-type]
    assert (got[0][0].window, got[0][0].dashboard_window) == ("1h", "5m")
    # Rules of 5m read over 1h, then over 5m again (a window read from an option: equal to
    # the deployed one, not the same object): the dashboards' window, so none named.
    same = DEPLOYMENT.over("1h").over(str(["5m"])[2:4])
    got = gather_figures(FakeAPI({INFO_E: infos()}), same, "e", "t", "0")  # type: ignore[arg-type]
    assert same.dashboard_window is not same.names.window
    assert (got[0][0].window, got[0][0].dashboard_window) == ("5m", None)
    one_minute = Deployment(RecordNames("1m"), DEPLOYMENT.alerts).over("5m")
    got = gather_figures(FakeAPI({INFO_E: infos()}), one_minute, "e", "t", "0")  # type: ignore[arg-type]
    assert (got[0][0].window, got[0][0].dashboard_window) == ("5m", "1m")


def life_series() -> dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]]:
    """Counters over the last 5m: rank 0 100 s of samples, rank 1 50 s."""
    return {LIFE_STEPS: [(lab("0"), [(9000.0, 100.0), (9100.0, 300.0)]),
                         (lab("1"), [(9900.0, 10.0), (9950.0, 60.0)])],
            LIFE_SAMPLES: [(lab("0"), [(9000.0, 3200.0), (9100.0, 9600.0)]),
                           (lab("1"), [(9900.0, 320.0), (9950.0, 2020.0)])]}


def life_rows(ages: list[tuple[dict[str, str], float]],
              pushgateways: int = 1) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {INFO_E: infos()[:2], AGE: ages,
            STEPS_RATE: [(lab("0"), 9.5), (lab("1"), 8.5)],
            SAMPLES_RATE: [(lab("0"), 99.0), (lab("1"), 98.0)],
            PHASES: [(lab("0", phase="train_batch"), 0.9), (lab("1", phase="train_batch"), 0.9)],
            LIFE_STEP_SUM: [(lab("0"), 40.0), (lab("1"), 10.0)],
            LIFE_PHASE_SUM: [(lab("0", phase="dataloader_next"), 10.0),
                             (lab("0", phase="train_batch"), 30.0),
                             (lab("1", phase="train_batch"), 6.0),
                             (lab("1", phase="dataloader_next"), 4.0)],
            "pushgateway_build_info": [({"instance": f"pg{i}:9091"}, 1.0)
                                       for i in range(pushgateways)]}


def test_a_rank_past_the_stale_threshold_is_read_over_its_life_and_one_at_it_is_not() -> None:
    rows = life_rows([(lab("0"), 40.5), (lab("1"), 40.0)])
    rows[workers("5m")] = [(lab("0"), 2.0)]
    rows[workers("100s")] = [(lab("0"), 7.0)]
    api = FakeAPI(rows, life_series())
    got = by_rank(gather_figures(api, DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    r, facts = got["t/0"]
    assert (facts.over, facts.life_steps, facts.exit_reason) == (STALE_RANK, 300, None)
    assert facts.cleanup == remedies.DELETE_GROUP.format(
        pushgateway="http://pg0:9091", experiment="e", trial="t", rank="0")
    assert (r.steps_per_second, r.samples_per_second) == (None, None)  # it is not running
    assert r.lifetime_seconds == 100.0
    assert r.phases == [("train_batch", 0.75), ("dataloader_next", 0.25)]
    # Its loader evidence is the rate window's: a stale rank is never read as a young one.
    assert facts.loader_evidence is not None and facts.loader_evidence.workers == 2.0
    assert workers("100s") not in api.log
    r, facts = got["t/1"]
    assert (facts.over, facts.life_steps, facts.cleanup) == (WINDOW_RANK, None, None)
    assert (r.steps_per_second, r.samples_per_second, r.lifetime_seconds) == (8.5, 98.0, None)
    assert r.phases == [("train_batch", 0.9)]


@pytest.mark.parametrize("pushgateways", [0, 2])
def test_a_cleanup_names_the_pushgateway_only_where_there_is_exactly_one(
        pushgateways: int) -> None:
    api = FakeAPI(life_rows([(lab("0"), 41.0)], pushgateways), life_series())
    facts = by_rank(gather_figures(api, DEPLOYMENT, "e", "t"))["t/0"][1]  # type: ignore[arg-type]
    assert facts.cleanup == remedies.DELETE_GROUP.format(
        pushgateway="http://PUSHGATEWAY", experiment="e", trial="t", rank="0")


def test_an_ended_rank_is_stale_however_recent_its_push_and_says_why() -> None:
    rows = life_rows([(lab("0"), 2.0), (lab("1"), 3.0)])
    rows[EXIT] = [(lab("1", reason="finished"), 1.0)]
    got = by_rank(gather_figures(FakeAPI(rows, life_series()), DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    r, facts = got["t/1"]
    assert (facts.over, facts.exit_reason, facts.life_steps) == (STALE_RANK, "finished", 60)
    assert r.lifetime_seconds == 50.0
    assert r.phases == [("train_batch", 0.6), ("dataloader_next", 0.4)]
    assert got["t/0"][1].over == WINDOW_RANK
    assert figures.ended_ranks(FakeAPI(rows), experiment="e", trial="t") == {  # type: ignore[arg-type]
        ("e", "t", "1"): "finished"}
    # Ended and silent past the threshold as well: stale still, with its reason.
    rows = life_rows([(lab("0"), 2.0), (lab("1"), 300.0)])
    rows[EXIT] = [(lab("1", reason="failed"), 1.0)]
    got = by_rank(gather_figures(FakeAPI(rows, life_series()), DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    assert (got["t/1"][1].over, got["t/1"][1].exit_reason) == (STALE_RANK, "failed")
    assert got["t/0"][1].over == WINDOW_RANK


def test_a_rank_younger_than_the_window_is_read_over_its_life_so_far() -> None:
    """Rank 0 has steps now and none a window ago; rank 1 has both."""
    rows = life_rows([(lab("0"), 2.0), (lab("1"), 3.0)])
    rows[NOW_STEPS] = [(lab("0"), 1.0), (lab("1"), 1.0)]
    rows[OLD_STEPS] = [(lab("1"), 1.0)]
    for starts in ({}, {("e", "t", "0"): NOW - 100.0}):  # its start known too: young still
        got = by_rank(gather_figures(FakeAPI(rows, life_series()), DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                     starts=starts))
        assert got["t/0"][1].over == YOUNG_RANK
    r, facts = got["t/0"]
    assert (facts.over, facts.life_steps, facts.cleanup) == (YOUNG_RANK, 300, None)
    assert (r.steps_per_second, r.samples_per_second, r.lifetime_seconds) == (2.0, 64.0, 100.0)
    assert r.phases == [("train_batch", 0.75), ("dataloader_next", 0.25)]
    r, facts = got["t/1"]
    assert (facts.over, r.steps_per_second, r.lifetime_seconds) == (WINDOW_RANK, 8.5, None)


def test_a_young_rank_without_raw_samples_keeps_the_recorded_figures() -> None:
    rows = life_rows([(lab("0"), 2.0)])
    rows[NOW_STEPS] = [(lab("0"), 1.0)]
    del rows[LIFE_STEP_SUM], rows[LIFE_PHASE_SUM]
    got = by_rank(gather_figures(FakeAPI(rows), DEPLOYMENT, "e", "t"))  # type: ignore[arg-type]
    r, facts = got["t/0"]
    assert (facts.over, facts.life_steps, r.steps_per_second) == (WINDOW_RANK, None, 9.5)


# -5: a start 5 s after now (its node's clock ahead) is a run younger than the window too.
@pytest.mark.parametrize(("ago", "young"), [(299.0, True), (300.0, False), (400.0, False),
                                            (-5.0, True)])
def test_a_run_started_under_a_window_ago_is_young(ago: float, young: bool) -> None:
    """The rank's key had a run before (its samples a window ago): its start decides."""
    rows = life_rows([(lab("0"), 2.0)])
    rows[NOW_STEPS] = rows[OLD_STEPS] = [(lab("0"), 1.0)]
    got = by_rank(gather_figures(FakeAPI(rows, life_series()), DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): NOW - ago}))
    assert got["t/0"][1].over == (YOUNG_RANK if young else WINDOW_RANK)
    assert got["t/1"][1].over == WINDOW_RANK


@pytest.mark.parametrize(("ago", "young"), [(1210.0, True), (3600.0, False)])
def test_a_run_started_under_a_replaced_window_ago_is_young_over_that_window(
        ago: float, young: bool) -> None:
    """diagnose --window 1h over rules of 5m: a run that started 20 minutes ago under a key
    that ran before is younger than the hour it is judged over (though older than the 5m the
    dashboards plot): read over its own life, not over an hour that holds the run before."""
    over = DEPLOYMENT.over("1h")
    rows = life_rows([(lab("0"), 2.0)])
    steps = f"trainwatch_trial_steps_total{SEL}"
    rows[f"count {BY} ({steps})"] = [(lab("0"), 1.0)]
    rows[f"count {BY} (count_over_time({steps}[1h] offset 1h))"] = [(lab("0"), 1.0)]
    got = by_rank(gather_figures(FakeAPI(rows, life_series()), over, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): NOW - ago}))
    assert got["t/0"][1].over == (YOUNG_RANK if young else WINDOW_RANK)
    assert got["t/1"][1].over == WINDOW_RANK


def test_without_a_pinned_instant_a_runs_age_is_from_now() -> None:
    rows = life_rows([(lab("0"), 2.0)])
    rows[NOW_STEPS] = rows[OLD_STEPS] = [(lab("0"), 1.0)]
    api = FakeAPI(rows, life_series(), at=None)
    got = by_rank(gather_figures(api, DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): time.time() - 100.0}))
    assert got["t/0"][1].over == YOUNG_RANK


def test_a_young_ranks_loader_evidence_is_over_its_own_life_so_far() -> None:
    """Rank 0 started 75.2 s ago (read over 76 s), rank 1's samples span 50 s: each gets its
    own window's evidence, not the rate window's and not the other's."""
    rows = life_rows([(lab("0"), 2.0), (lab("1"), 3.0)])
    rows[NOW_STEPS] = [(lab("0"), 1.0), (lab("1"), 1.0)]
    rows[OLD_STEPS] = [(lab("0"), 1.0)]
    rows[workers("5m")] = [(lab("0"), 2.0), (lab("1"), 2.0)]
    rows[workers("76s")] = [(lab("0"), 4.0), (lab("1"), 9.0)]
    rows[workers("50s")] = [(lab("0"), 9.0), (lab("1"), 3.0)]
    api = FakeAPI(rows, life_series())
    got = by_rank(gather_figures(api, DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): NOW - 75.2}))
    evidence = {key: got[key][1].loader_evidence for key in got}
    assert {key: e.workers if e else None for key, e in evidence.items()} == {
        "t/0": 4.0, "t/1": 3.0}
    assert workers("75s") not in api.log and workers("77s") not in api.log


def test_a_young_rank_under_a_second_old_is_read_over_a_second() -> None:
    rows = life_rows([(lab("0"), 2.0)])
    rows[NOW_STEPS] = [(lab("0"), 1.0)]
    rows[workers("5m")] = [(lab("0"), 2.0)]
    rows[workers("1s")] = [(lab("0"), 5.0)]
    got = by_rank(gather_figures(FakeAPI(rows, life_series()), DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): NOW - 0.4}))
    evidence = got["t/0"][1].loader_evidence
    assert evidence is not None and evidence.workers == 5.0


@pytest.mark.parametrize("start", [NOW, NOW + 5.0])  # started now, or ahead of now (skew)
def test_a_young_rank_of_no_age_keeps_the_rate_windows_evidence(start: float) -> None:
    rows = life_rows([(lab("0"), 2.0)])
    rows[NOW_STEPS] = [(lab("0"), 1.0)]
    rows[workers("5m")] = [(lab("0"), 2.0)]
    api = FakeAPI(rows, life_series())
    got = by_rank(gather_figures(api, DEPLOYMENT, "e", "t",  # type: ignore[arg-type]
                                 starts={("e", "t", "0"): start}))
    evidence = got["t/0"][1].loader_evidence
    assert evidence is not None and evidence.workers == 2.0
    assert [e for e in api.log if "loader_workers" in e and "[5m]" not in e] == []


def test_an_unknown_trial_or_rank_lists_the_experiments_trials_and_their_ranks() -> None:
    api = FakeAPI({INFO_E: infos()})
    with pytest.raises(UnknownTrial) as raised:
        gather_figures(api, DEPLOYMENT, "e", "v")  # type: ignore[arg-type]
    assert str(raised.value) == ("no trial e/v in Prometheus; trials of experiment e: "
                                 "t (rank 0, 1), u (rank 0)")
    with pytest.raises(UnknownTrial) as raised:
        gather_figures(api, DEPLOYMENT, "e", "t", "7")  # type: ignore[arg-type]
    assert str(raised.value).startswith("no trial e/t rank 7 in Prometheus; trials of ")


def test_an_unknown_trials_message_and_the_scraped_ranks_go_by_number() -> None:
    ranks = [(lab(rank, world_size="12"), 1.0) for rank in ("10", "2", "11")]
    api = FakeAPI({INFO_E: [*ranks, (lab("1", trial="s"), 1.0)]})
    with pytest.raises(UnknownTrial) as raised:
        gather_figures(api, DEPLOYMENT, "e", "v")  # type: ignore[arg-type]
    assert str(raised.value) == ("no trial e/v in Prometheus; trials of experiment e: "
                                 "s (rank 1), t (rank 2, 10, 11)")
    assert [(x["trial"], x["rank"]) for x in figures.scraped_trials(api, "e")] == [  # type: ignore[arg-type]
        ("s", "1"), ("t", "2"), ("t", "10"), ("t", "11")]


def test_an_unknown_experiment_lists_the_experiments_or_says_there_are_none() -> None:
    rows = {"trainwatch_trial_info": [(lab("0", trial="x") | {"experiment": "b"}, 1.0),
                                      (lab("0") | {"experiment": "a"}, 1.0),
                                      (lab("1") | {"experiment": "b"}, 1.0)]}
    with pytest.raises(UnknownTrial) as raised:
        gather_figures(FakeAPI(rows), DEPLOYMENT, "e", "t")  # type: ignore[arg-type]
    assert str(raised.value) == "no experiment 'e' in Prometheus; experiments: a, b"
    with pytest.raises(UnknownTrial) as raised:
        gather_figures(FakeAPI({}), DEPLOYMENT, "e")  # type: ignore[arg-type]
    assert str(raised.value) == ("no experiment 'e' in Prometheus; experiments: none (no trial "
                                 "has pushed metrics)")


def test_push_age_is_seconds_since_each_ranks_last_push() -> None:
    assert figures.push_age(experiment="e", trial="t") == AGE


def test_a_straggler_is_named_with_the_node_its_own_info_says() -> None:
    """The trial's ranks' nodes (each rank's trainwatch_trial_info nodename) name a straggler
    where it runs: rank 1 on n2, not rank 0's node nor none."""
    deployment = Deployment(RecordNames("5m"), {
        TRIAL_STALE: AlertRule(TRIAL_STALE, 40.0, "x"),
        RANK_STRAGGLER: AlertRule(RANK_STRAGGLER, 1.25, "fix the slow rank")})
    own = select(deployment.names.rank_step_mean, experiment="e", trial="t")
    rows = two_ranks()  # rank 0 on n1, rank 1 on n2

    class Spread(FakeAPI):
        def query(self, expr: str, kind: Any = None) -> list[tuple[dict[str, str], float]]:
            if expr == own:
                return [(lab("0"), 0.2), (lab("1"), 0.32)]
            if expr.startswith(f"{own} / on"):  # each rank's own step over the median's
                return [(lab("0"), 0.8), (lab("1"), 1.6)]
            return super().query(expr, kind)

    got = by_rank(gather_figures(Spread(rows), deployment, "e", "t"))  # type: ignore[arg-type]
    spread = got["t/0"][0].ranks
    assert spread is not None and spread.stragglers == (("1", "n2", 1.6),)
