"""`trainwatch diagnose` without a live trial: the verdict table, reading the deployed rules,
the renderings, and the CLI's answers to bad input (exit 2, a sentence, no traceback).

The live test against a real stack is test_diagnose_live.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, Prometheus, Service, start_prometheus
from tests.trial_support import closed_port_url
from trainwatch import cli
from trainwatch.contract import remedies
from trainwatch.contract.alerts import (
    CPU_SATURATED,
    DATALOADER_BOUND,
    GPU_LAUNCH_BOUND,
    GPU_TENSOR_CORES_IDLE,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
)
from trainwatch.contract.checks import CHECKS
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import cli as diagnose_cli
from trainwatch.diagnose import verdict as verdict_module
from trainwatch.diagnose.deployed import REQUIRED_ALERTS, AlertRule, Deployment, DeploymentError
from trainwatch.diagnose.figures import Gpu, RankReport, selector
from trainwatch.diagnose.render import reports_json, reports_text
from trainwatch.diagnose.verdict import (
    Measurements,
    Verdict,
    ago,
    decide,
    limits_advice,
    stale,
    worst_exit_code,
)

THRESHOLDS = yaml.safe_load((REPO / "prometheus" / "thresholds.yaml").read_text())["alerts"]
TRAINWATCH = Path(sys.executable).parent / "trainwatch"


def loaded_rules() -> list[dict[str, Any]]:
    """The committed rule files as /api/v1/rules lists them (type, name, annotations)."""
    rules = []
    for path in sorted((REPO / "prometheus" / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    rules.append({"type": "recording", "name": rule["record"]})
                else:
                    rules.append({"type": "alerting", "name": rule["alert"],
                                  "annotations": rule["annotations"]})
    return rules


def alerts(**thresholds: float) -> dict[str, AlertRule]:
    """Alert rules with made-up thresholds and remedies, so a test sees which one decided."""
    return {name: AlertRule(name, thresholds[name], f"remedy of {name}", f"runbook#{name}")
            for name in thresholds}


DEFAULT = alerts(**{DATALOADER_BOUND: 0.3, HOST_TO_DEVICE_BOUND: 0.2, CPU_SATURATED: 0.9,
                    GPU_UNDERUTILIZED: 0.5})
DEFAULT_GPM = {**DEFAULT,
               GPU_LAUNCH_BOUND: AlertRule(GPU_LAUNCH_BOUND, 0.5, f"remedy of {GPU_LAUNCH_BOUND}",
                                           busy=0.9),
               GPU_TENSOR_CORES_IDLE: AlertRule(GPU_TENSOR_CORES_IDLE, 0.05,
                                                f"remedy of {GPU_TENSOR_CORES_IDLE}", busy=0.5)}

# (phase shares, node CPU, GPU utilization) -> (verdict kind, measured, exit code)
VERDICTS = [
    ({"dataloader_next": 0.6, "train_batch": 0.4}, 0.5, 0.9, "dataloader", 0.6, 1),
    # Exactly at the threshold is not over it (the alert compares with >).
    ({"dataloader_next": 0.3, "train_batch": 0.7}, 0.5, 0.9, "gpu_bound", 0.9, 0),
    # Neither copy alone crosses 20%; together they do.
    ({"to_device": 0.15, "from_device": 0.1, "train_batch": 0.75}, 0.5, 0.9, "memory_copies",
     0.25, 1),
    # Several bottlenecks: the dashboard's priority order decides (data loader, copies, CPU,
    # underused GPU); each pair of neighbours in that order is crossed at once.
    ({"dataloader_next": 0.5, "to_device": 0.5}, 0.99, 0.1, "dataloader", 0.5, 1),
    ({"to_device": 0.25, "train_batch": 0.75}, 0.95, 0.1, "memory_copies", 0.25, 1),
    ({"train_batch": 1.0}, 0.95, 0.1, "busy_cpu", 0.95, 1),
    ({"from_device": 0.21}, 0.91, None, "memory_copies", 0.21, 1),
    ({"train_batch": 1.0}, None, 0.2, "underused_gpu", 0.2, 1),
    ({"train_batch": 1.0}, 0.9, 0.49, "underused_gpu", 0.49, 1),
    ({"train_batch": 1.0}, 0.5, 0.5, "gpu_bound", 0.5, 0),
    ({"train_batch": 1.0}, 0.5, None, "no_gpu_metrics", None, 0),
    ({}, 0.99, 0.1, "no_timings", None, 2),
]


@pytest.mark.parametrize(("shares", "cpu", "gpu", "kind", "measured", "code"), VERDICTS)
def test_verdict_table(shares: dict[str, float], cpu: float | None, gpu: float | None,
                       kind: str, measured: float | None, code: int) -> None:
    v = decide(Measurements(shares, node_cpu=cpu, gpu_utilization=gpu), DEFAULT)
    assert (v.kind, v.exit_code) == (kind, code)
    assert v.measured == (None if measured is None else pytest.approx(measured))
    if v.bottleneck:
        assert v.remedy == f"remedy of {v.alert}" and v.runbook_url == f"runbook#{v.alert}"
        assert v.threshold == DEFAULT[str(v.alert)].threshold


def test_checks_follow_the_dashboards_priority_order() -> None:
    # grafana/verdict.py builds the Bottleneck panel from this table; test_dashboards.py checks
    # the panel's query against the same cases in a real PromQL engine.
    assert [(kind, alert) for kind, _, alert, _, _ in CHECKS] == [
        ("dataloader", DATALOADER_BOUND), ("memory_copies", HOST_TO_DEVICE_BOUND),
        ("busy_cpu", CPU_SATURATED), ("launch_bound", GPU_LAUNCH_BOUND),
        ("underused_gpu", GPU_UNDERUTILIZED), ("tensor_cores_idle", GPU_TENSOR_CORES_IDLE)]


# GPM (Hopper and newer): (NVML utilization, SM activity, tensor activity) -> (kind, measured,
# the metric the verdict names). Defaults: launch-bound under 50% SMs while utilization >= 90%,
# tensor cores idle under 5% while SMs >= 50%, underused under 50%.
GPM_VERDICTS = [
    # The issue-12 H100: NVML says 99%, the SMs are 22.5% active.
    (0.99, 0.225, 0.218, "launch_bound", 0.225, "SM activity (NVML GPM)"),
    # Not looking busy (70%), SMs idle: underused, decided by SM activity where it exists.
    (0.7, 0.2, 0.1, "underused_gpu", 0.2, "SM activity (NVML GPM)"),
    # Busy SMs, tensor cores idle: an fp32 model.
    (0.99, 0.8, 0.01, "tensor_cores_idle", 0.01, "tensor-core activity (NVML GPM)"),
    # Busy SMs doing tensor work: GPU-bound, measured by SM activity.
    (0.99, 0.8, 0.6, "gpu_bound", 0.8, "SM activity (NVML GPM)"),
    # A board without GPM: NVML utilization decides, as before.
    (0.99, None, None, "gpu_bound", 0.99, "NVML utilization (any kernel running)"),
    (0.3, None, None, "underused_gpu", 0.3, "NVML utilization (any kernel running)"),
]


@pytest.mark.parametrize(("util", "sm", "tensor", "kind", "measured", "metric"), GPM_VERDICTS)
def test_gpm_verdicts_use_sm_activity_wherever_it_exists(
        util: float, sm: float | None, tensor: float | None, kind: str, measured: float,
        metric: str) -> None:
    v = decide(Measurements({"train_batch": 1.0}, 0.5, util, sm, tensor), DEFAULT_GPM)
    assert (v.kind, v.measured, v.metric) == (kind, pytest.approx(measured), metric)
    if v.bottleneck:
        assert v.remedy == f"remedy of {v.alert}"


def test_gpm_checks_are_skipped_where_their_alerts_are_not_deployed() -> None:
    # Rules deployed before the GPM alerts: no launch-bound verdict; SM activity still decides
    # whether the GPU is busy.
    v = decide(Measurements({"train_batch": 1.0}, 0.5, 0.99, 0.2, 0.2), DEFAULT)
    assert (v.kind, v.alert) == ("underused_gpu", GPU_UNDERUTILIZED)


@pytest.mark.parametrize(("source", "metric"), [
    ("sm_active", "SM activity (NVML GPM)"),
    ("utilization", "NVML utilization (any kernel running)")])
def test_the_gpu_busy_rule_decides_and_names_its_source(source: str, metric: str) -> None:
    # The recorded gpu-busy value (trial_gpu:trainwatch_gpu_busy:ratio), as the alert reads it:
    # the H100 at 99% NVML utilization and 22.5% SM activity is underused by it.
    v = decide(Measurements({"train_batch": 1.0}, 0.5, 0.99, None, None, 0.225, source),
               DEFAULT)
    assert (v.kind, v.measured, v.metric) == ("underused_gpu", 0.225, metric)


RANKS = {  # rank -> (measurements, its exit code alone)
    "healthy": (Measurements({"train_batch": 1.0}, 0.5, 0.9), 0),
    "no_gpu": (Measurements({"train_batch": 1.0}, 0.5, None), 0),
    "bound": (Measurements({"dataloader_next": 0.6, "train_batch": 0.4}, 0.5, 0.9), 1),
    "no_timings": (Measurements({}, 0.5, 0.9), 2),
}


@pytest.mark.parametrize("ranks", [("healthy", "bound"), ("bound", "healthy"),
                                   ("healthy", "no_gpu"), ("bound", "no_timings", "healthy"),
                                   ("healthy",)])
def test_several_ranks_exit_with_the_worst_ranks_code(
        ranks: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One bottlenecked rank beside healthy ones still fails, through the CLI's own path."""
    reports = []
    for rank, name in enumerate(ranks):
        r = RankReport("exp", "t1", str(rank), "node-a", "42", str(len(ranks)), "5m")
        r.verdict = decide(RANKS[name][0], DEFAULT)
        reports.append(r)
    expected = max(RANKS[name][1] for name in ranks)
    assert worst_exit_code(r.verdict for r in reports if r.verdict) == expected

    class Rules:  # Prometheus's /api/v1/rules, answered from the committed rule files
        def __init__(self, url: str, timeout: float) -> None:
            self.url = url

        def rules(self) -> list[dict[str, Any]]:
            return loaded_rules()

    monkeypatch.setattr(diagnose_cli, "PrometheusAPI", Rules)
    monkeypatch.setattr(diagnose_cli, "gather_runs", lambda *args, **kwargs: reports)
    code = cli.main(["diagnose", "--prometheus", "http://127.0.0.1:9", "--experiment", "exp",
                     "--format", "json"])
    assert code == expected
    assert [d["verdict"]["exit_code"] for d in json.loads(capsys.readouterr().out)["reports"]] \
        == [RANKS[name][1] for name in ranks]


@pytest.mark.parametrize(("seconds", "said"), [
    (0, "0 seconds"), (75, "75 seconds"), (119, "119 seconds"), (120, "2 minutes"),
    (420, "7 minutes"), (7140, "119 minutes"), (7199, "120 minutes"), (7200, "2 hours"), (9000, "2.5 hours"),
    (172_799, "48 hours"), (172_800, "2 days"), (3_600_000, "41.7 days")])
def test_verdict_ages_read_in_a_sensible_unit(seconds: float, said: str) -> None:
    assert ago(seconds) == said


@pytest.mark.parametrize(("loader", "step", "advice"), [
    (400.0, 1000.0, ("the loader delivers 400 samples/s, the step consumes 1000 samples/s: "
                    "the loader must get 2.5x faster")),
    (1000.0, 1000.0, ("the loader delivers 1000 samples/s, the step consumes 1000 samples/s: "
                     "the step is the limit; the loader has 1.0x headroom")),
    (3000.0, 1000.0, ("the loader delivers 3000 samples/s, the step consumes 1000 samples/s: "
                     "the step is the limit; the loader has 3.0x headroom")),
    (1.0, 4.0, ("the loader delivers 1 samples/s, the step consumes 4 samples/s: "
               "the loader must get 4.0x faster")),
    (2500.0, 1000.0, ("the loader delivers 2500 samples/s, the step consumes 1000 samples/s: "
                     "the step is the limit; the loader has 2.5x headroom")),
    (4.0, 1.0, ("the loader delivers 4 samples/s, the step consumes 1 samples/s: "
               "the step is the limit; the loader has 4.0x headroom")),
    (None, 1000.0, None), (400.0, None, None), (0.0, 1000.0, None), (400.0, 0.0, None),
    (400.0, -1.0, None),
    (-1.0, 1000.0, None)])
def test_verdict_limits_advice_names_the_slower_side(loader: float | None, step: float | None,
                                                     advice: str | None) -> None:
    assert limits_advice(loader, step) == advice


def test_stale_verdict_without_a_measured_profile_quotes_its_title_alone() -> None:
    rule = AlertRule("TrainwatchTrialStale", 300, "delete the group")
    profile = decide(Measurements({}), DEFAULT)  # no timings: nothing was measured
    v = stale(420, rule, profile, None, "curl -X DELETE ...")
    assert (v.kind, v.last_profile, v.exit_code) == ("stale", "No timings yet", 1)


@pytest.mark.parametrize(("measured", "threshold", "comparison"), [
    (0.5, None, None), (None, 0.3, ">"), (None, None, ">"), (0.5, 0.3, None)])
def test_stale_quotes_a_profile_number_only_when_it_has_all_three(
        measured: float | None, threshold: float | None, comparison: str | None) -> None:
    profile = Verdict("x", "Profile", True, measured, comparison, threshold, None, "", None)
    v = stale(420, AlertRule("TrainwatchTrialStale", 300, "delete"), profile, None, "curl")
    assert v.last_profile == "Profile"


def test_verdict_and_measurements_are_immutable() -> None:
    m = Measurements({"train_batch": 1.0}, gpu_utilization=0.9)
    v = decide(m, DEFAULT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.node_cpu = 0.5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.kind = "dataloader"  # type: ignore[misc]


def test_a_gate_exactly_at_its_busy_level_counts_as_busy() -> None:
    # Launch-bound needs a GPU that looks busy: NVML utilization at least the alert's `busy`.
    at_gate = Measurements({"train_batch": 1.0}, 0.5, gpu_utilization=0.9, gpu_sm_active=0.2)
    assert decide(at_gate, DEFAULT_GPM).kind == "launch_bound"
    below = Measurements({"train_batch": 1.0}, 0.5, gpu_utilization=0.89, gpu_sm_active=0.2)
    assert decide(below, DEFAULT_GPM).kind == "underused_gpu"


def test_a_gate_not_measured_or_without_a_busy_level_never_claims_launch_bound() -> None:
    # Launch-bound says "busy but idle SMs": without the utilization, or without the alert's
    # busy level to compare it with, the GPU is not known to be busy, so the next check speaks.
    unknown = Measurements({"train_batch": 1.0}, 0.5, gpu_utilization=None, gpu_sm_active=0.2)
    assert decide(unknown, DEFAULT_GPM).kind == "underused_gpu"
    no_busy = {name: dataclasses.replace(rule, busy=None) for name, rule in DEFAULT_GPM.items()}
    busy = Measurements({"train_batch": 1.0}, 0.5, gpu_utilization=0.95, gpu_sm_active=0.2)
    assert decide(busy, no_busy).kind == "underused_gpu"


def test_verdict_uses_the_thresholds_it_is_given() -> None:
    m = Measurements({"dataloader_next": 0.6, "train_batch": 0.4}, gpu_utilization=0.9)
    assert decide(m, DEFAULT).kind == "dataloader"
    assert decide(m, {**DEFAULT, **alerts(**{DATALOADER_BOUND: 0.7})}).kind == "gpu_bound"
    busy = decide(Measurements({"train_batch": 1.0}, gpu_utilization=0.4),
                  {**DEFAULT, **alerts(**{GPU_UNDERUTILIZED: 0.3})})
    assert (busy.kind, busy.remedy, busy.threshold) == ("gpu_bound", remedies.BUSY_GPU, 0.3)


def test_deployment_reads_thresholds_and_remedies_from_the_committed_rules() -> None:
    d = Deployment.from_rules(loaded_rules())
    assert d.names == RecordNames("5m")
    for name in REQUIRED_ALERTS:
        assert d.threshold(name) == pytest.approx(float(THRESHOLDS[name]["threshold"])), name
    assert d.alerts[DATALOADER_BOUND].remedy == remedies.DATALOADER
    for name in (GPU_LAUNCH_BOUND, GPU_TENSOR_CORES_IDLE):  # the gate's level comes along
        assert d.alerts[name].busy == pytest.approx(float(THRESHOLDS[name]["busy"])), name
        assert d.threshold(name) == pytest.approx(float(THRESHOLDS[name]["threshold"])), name
    older = Deployment.from_rules([r for r in loaded_rules() if r["name"] != GPU_LAUNCH_BOUND])
    assert GPU_LAUNCH_BOUND not in older.alerts  # rules from before the GPM alerts still load
    assert str(d.alerts[HOST_TO_DEVICE_BOUND].runbook_url).endswith("#trainwatchhosttodevicebound")


def test_deployment_errors_name_what_is_missing() -> None:
    rules = loaded_rules()
    with pytest.raises(DeploymentError, match="no trainwatch recording rules loaded"):
        Deployment.from_rules([r for r in rules if r["type"] == "alerting"])
    with pytest.raises(DeploymentError, match=f"no alerting rule {CPU_SATURATED} loaded"):
        Deployment.from_rules([r for r in rules if r["name"] != CPU_SATURATED])
    old = [{**r, "annotations": {k: v for k, v in r.get("annotations", {}).items()
                                 if k != "threshold"}} for r in rules]
    with pytest.raises(DeploymentError, match=f"{DATALOADER_BOUND} has no numeric `threshold`"):
        Deployment.from_rules(old)


def test_record_names_are_discovered_from_the_window_in_their_names() -> None:
    assert RecordNames.discover(["up", RecordNames("10s").steps_rate]) is None
    assert RecordNames.discover([RecordNames("10s").phase_share, "x"]) == RecordNames("10s")


def test_selector_escapes_label_values() -> None:
    assert selector("m", experiment='a"b\\c', trial=None) == 'm{experiment="a\\"b\\\\c"}'


def report() -> RankReport:
    r = RankReport("exp", "t1", "0", "node-a", "42", "2", "5m", {"0.5": 0.05, "0.95": 0.08},
                   12.5, 100.0, [("dataloader_next", 0.6), ("train_batch", 0.4)],
                   [Gpu("GPU-1", "node-a:9400", "0", 0.35, 0.5)], 0.4, 1.5)
    r.verdict = decide(Measurements(dict(r.phases), r.node_cpu, 0.35), DEFAULT)
    return r


def test_text_and_json_carry_the_same_verdict() -> None:
    text = reports_text([report()])
    assert "Trial exp/t1 rank 0 on node-a (pid 42, world size 2)" in text
    assert "p50 50.0 ms, p95 80.0 ms; 12.50 steps/s" in text
    assert "dataloader_next  60.0%  " + "█" * 18 in text  # 60% of a 30-wide bar
    assert "GPU GPU-1 (GPU 0 on node-a:9400): utilization 35.0%, memory used 50.0%" in text
    assert (f"VERDICT: Data loader: 60.0% > threshold 30.0% ({DATALOADER_BOUND})" in text
            and f"remedy of {DATALOADER_BOUND}" in text)
    [doc] = json.loads(reports_json([report()]))["reports"]
    assert doc["verdict"] | {"remedy": None} == {
        "kind": "dataloader", "title": "Data loader", "bottleneck": True, "measured": 0.6,
        "comparison": ">", "threshold": 0.3, "alert": DATALOADER_BOUND, "remedy": None,
        "runbook_url": f"runbook#{DATALOADER_BOUND}", "exit_code": 1, "early": False,
        "steps": None, "last_profile": None, "cleanup": None,
        "metric": "dataloader_next share of step time", "exit_reason": None,
        "life_kind": None, "notes": [], "finding": "dataloader"}
    assert "  measured: dataloader_next share of step time" in text
    assert doc["phases"][0] == {"phase": "dataloader_next", "share": 0.6}
    assert doc["gpus"][0]["uuid"] == "GPU-1" and doc["nodename"] == "node-a"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    return subprocess.run([str(TRAINWATCH), *args], capture_output=True, text=True, timeout=30,
                          check=False)


def assert_usage_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2, done
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def test_unreachable_prometheus_is_a_sentence_not_a_traceback() -> None:
    url = closed_port_url()
    done = run_cli("diagnose", "--prometheus", url, "--experiment", "e", "--timeout", "2")
    assert_usage_error(done, f"cannot reach Prometheus at {url}")


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["diagnose", "--prometheus", "http://127.0.0.1:9"])
    assert exit_info.value.code == 2 and "--experiment" in capsys.readouterr().err
    assert cli.main(["trials", "--prometheus", "prometheus:9090"]) == 2
    assert "'prometheus:9090' is not an http(s) URL" in capsys.readouterr().err


def test_a_server_that_is_not_prometheus_is_named(pushgateway: Service) -> None:
    done = run_cli("trials", "--prometheus", pushgateway.url)
    assert_usage_error(done, "did not answer with Prometheus API JSON")


@pytest.fixture
def bare_prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus without the trainwatch rules."""
    with start_prometheus(tmp_path, {"global": {"scrape_interval": "1s"}}) as prom:
        yield prom


def test_prometheus_without_the_rules_is_a_config_error(bare_prometheus: Prometheus) -> None:
    done = run_cli("diagnose", "--prometheus", bare_prometheus.url, "--experiment", "e")
    assert_usage_error(done, "has no trainwatch recording rules loaded")
    assert "load prometheus/rules/*.yml" in done.stderr




def test_early_and_stale_reports_say_so_in_text_and_json() -> None:
    early = report()
    early.lifetime_seconds = 41.0
    early.verdict = verdict_module.early(early.verdict, 312)
    text = reports_text([early])
    assert "VERDICT (early, 312 steps): Data loader: 60.0% > threshold 30.0%" in text
    assert "EARLY: the trial is younger than the 5m rate window" in text and "41 s of samples" in text
    [doc] = json.loads(reports_json([early]))["reports"]
    assert (doc["verdict"]["early"], doc["verdict"]["steps"], doc["verdict"]["exit_code"]) == \
        (True, 312, 1)

    gone = report()
    rule = AlertRule("TrainwatchTrialStale", 300.0, "delete it", "runbook#stale")
    cleanup = remedies.DELETE_GROUP.format(pushgateway="http://pg:9091", experiment="exp",
                                           trial="t1", rank="0")
    gone.verdict = verdict_module.stale(423.0, rule, gone.verdict, 1200, cleanup)
    text = reports_text([gone])
    assert "VERDICT: Stopped pushing 7 minutes ago: crashed or killed (TrainwatchTrialStale: no " \
        "push for over 300 s)" in text
    assert "last timings: Data loader: 60.0% > threshold 30.0%" in text
    assert "last profile" not in text  # the profiler trace is "trace of rank ..."
    assert ("clean up once it is gone: curl -X DELETE http://pg:9091/metrics/job/trainwatch_trial"
            "/experiment/exp/trial/t1/rank/0") in text
    assert gone.verdict.exit_code == 1 and gone.verdict.steps == 1200


def test_a_share_says_the_time_it_is_over_and_the_dashboards_window_where_that_differs(
        ) -> None:
    def said(r: RankReport) -> tuple[str, str | None, str]:
        text = reports_text([r]).splitlines()
        [phases] = [line for line in text if line.startswith("  phases (")]
        measured = [line for line in text if line.startswith("  measured: ")]
        [doc] = json.loads(reports_json([r]))["reports"]
        return phases, (measured or [None])[0], doc["over"]

    running = report()
    assert said(running) == (
        "  phases (share of step time over the last 5m):",
        "  measured: dataloader_next share of step time, over the last 5m", "over the last 5m")
    # diagnose --window 2m against rules recorded over 5m: the dashboards' figure is another.
    windowed = dataclasses.replace(report(), window="120s", dashboard_window="5m")
    assert said(windowed)[1] == ("  measured: dataloader_next share of step time, over the last "
                                 "120s; the dashboards plot the last 5m")
    young = report()
    young.verdict = verdict_module.early(young.verdict, 312)
    assert said(young)[0] == ("  phases (share of step time over its whole run so far; the "
                              "dashboards plot the last 5m):")
    gone = report()
    gone.verdict = verdict_module.stale(423.0, AlertRule("TrainwatchTrialStale", 300.0, "x"),
                                        gone.verdict, 1200, "curl")
    whole_run = "over its whole run; the dashboards plot the last 5m"
    assert said(gone)[::2] == (f"  phases (share of step time {whole_run}):", whole_run)


def test_a_replaced_window_keeps_the_deployed_one_for_the_dashboards() -> None:
    deployed = Deployment.from_rules(loaded_rules())
    assert deployed.over("2m").over("1h").dashboard_window == deployed.names.window == "5m"


@pytest.mark.parametrize(("reason", "how", "alert", "remedy", "anchor"), [
    ("failed", "an exception or a non-zero exit", "TrainwatchTrialFailed", remedies.TRIAL_FAILED,
     "trainwatchtrialfailed"),
    ("terminated", "terminated (SIGTERM), its group left", None, remedies.EXITED_LEFT, "stale"),
    ("clean", "finished, its group left", None, remedies.EXITED_LEFT, "stale"),
    ("odd", "reason=odd", None, remedies.EXITED_LEFT, "stale"),
])
def test_an_ended_rank_says_how_it_ended_at_once(reason: str, how: str, alert: str | None,
                                                 remedy: str, anchor: str) -> None:
    ended = report()
    rule = AlertRule("TrainwatchTrialStale", 300.0, "delete it", "https://rb/runbooks.md#stale")
    stale = verdict_module.stale(4.0, rule, ended.verdict, 80, "curl -X DELETE x")
    ended.verdict = verdict_module.exited(reason, 4.0, stale)
    v = ended.verdict
    assert (v.kind, v.title, v.alert, v.remedy, v.exit_reason, v.exit_code, v.steps) == (
        "ended", f"Ended 4 seconds ago: {how}", alert, remedy, reason, 1, 80)
    # An ended run crossed no threshold: no figure, no comparison to print beside it.
    assert (v.measured, v.comparison, v.threshold) == (None, None, None)
    assert v.runbook_url == f"https://rb/runbooks.md#{anchor}"
    assert v.cleanup == "curl -X DELETE x" and v.last_profile == stale.last_profile
    text = reports_text([ended])
    head = f"VERDICT: Ended 4 seconds ago: {how}"
    assert (head + (f" ({alert})" if alert else "") + "\n") in text
    assert "  ENDED: numbers over its whole run up to its last push (80 steps)" in text
    assert "no push for over" not in text


def test_the_runbook_quotes_the_clean_up_line_diagnose_prints() -> None:
    runbook = (REPO / "docs" / "runbooks.md").read_text()
    line = remedies.DELETE_GROUP.format(pushgateway="http://PUSHGATEWAY", experiment="E",
                                        trial="T", rank="R")
    section = runbook.split("## TrainwatchTrialStale", 1)[1].split("\n## ", 1)[0]
    assert f"`{line}`" in section



@pytest.mark.parametrize(("shares", "node_cpu", "notes"), [
    # The flagged share is the largest and the node has CPU to spare: nothing to add.
    ({"dataloader_next": 0.6, "train_batch": 0.4}, 0.5, ()),
    # A larger share elsewhere: said, with its figure.
    ({"dataloader_next": 0.43, "train_batch": 0.56}, 0.5,
     (("train_batch takes a larger share of the step (56.0%): with a faster loader, the step is "
      "the limit"),)),
    # Equal shares: not larger.
    ({"dataloader_next": 0.5, "train_batch": 0.5}, None, ()),
    # CPUs exactly at the threshold are not over it; just over it, said.
    ({"dataloader_next": 0.6, "train_batch": 0.4}, 0.9, ()),
    ({"dataloader_next": 0.6, "train_batch": 0.4}, 0.95,
     (("node CPUs saturated (95.0% > threshold 90.0%): the loader and the training compete "
      "for them"),)),
])
def test_a_loader_finding_says_what_the_same_figures_also_show(
        shares: dict[str, float], node_cpu: float | None, notes: tuple[str, ...]) -> None:
    d = Deployment.from_rules(loaded_rules())
    v = verdict_module.decide(verdict_module.Measurements(shares, node_cpu=node_cpu), d.alerts)
    assert (v.kind, v.notes) == ("dataloader", notes)
    text = reports_text([dataclasses.replace(report(), verdict=v)])
    assert [line for line in text.splitlines() if line.startswith("  also: ")] == [
        f"  also: {note}" for note in notes]


def test_a_copy_bound_verdict_carries_what_its_phases_hide_as_the_loaders_does() -> None:
    """The sibling of the loader's notes: the copies' share is to_device plus from_device, so
    neither of them is the larger share elsewhere; train_batch is, and the saturated CPUs."""
    d = Deployment.from_rules(loaded_rules())
    v = verdict_module.decide(verdict_module.Measurements(
        {"to_device": 0.25, "from_device": 0.125, "train_batch": 0.5}, node_cpu=0.95), d.alerts)
    assert (v.kind, v.notes) == ("memory_copies", (
        ("train_batch takes a larger share of the step (50.0%): with a faster copy, the step "
         "is the limit"),
        ("node CPUs saturated (95.0% > threshold 90.0%): the loader and the training compete "
         "for them")))
    v = verdict_module.decide(verdict_module.Measurements(
        {"to_device": 0.25, "from_device": 0.125, "train_batch": 0.3}, node_cpu=0.5), d.alerts)
    assert (v.kind, v.notes) == ("memory_copies", ())  # 37.5% copies: the largest


def test_a_cpu_finding_carries_no_phase_note() -> None:
    d = Deployment.from_rules(loaded_rules())
    v = verdict_module.decide(verdict_module.Measurements(
        {"dataloader_next": 0.1, "train_batch": 0.9}, node_cpu=0.97), d.alerts)
    assert (v.kind, v.notes) == ("busy_cpu", ())
