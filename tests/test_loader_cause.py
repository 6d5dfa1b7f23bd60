"""Why the loader is slow, decided over recorded figures: each of the five causes with its own
evidence and only its own remedy; the thresholds come from thresholds.yaml through the deployed
alert's annotations. (This 2-core shared machine has no NVMe, no NIC that reports a speed and
no idle core to spare reliably: storage, remote storage and decode are decided here over
figures as a real node would record them; tests/test_loader_cause_live.py runs real loops.)"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from prometheus.rulegen import render_files
from prometheus.rulegen.settings import (
    DEFAULT_THRESHOLDS,
    SettingsError,
    load_settings,
    parse_settings,
)
from trainwatch.contract import remedies
from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND
from trainwatch.contract.checks import LOADER_CAUSE_THRESHOLDS
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.loader_cause import (
    DECODE_BOUND,
    LATENCY_BOUND,
    REMOTE_STORAGE,
    STORAGE_BOUND,
    TOO_FEW_WORKERS,
    LoaderEvidence,
    decide,
    explain,
)
from trainwatch.diagnose.verdict import Verdict

CAUSES = {"worker_busy": 0.5, "disk_busy": 0.6, "network_busy": 0.6, "rchar_over_read": 4.0}
SATURATED = 0.9
LOADER_REMEDIES = {TOO_FEW_WORKERS: remedies.LOADER_TOO_FEW_WORKERS,
                   DECODE_BOUND: remedies.LOADER_DECODE_BOUND,
                   STORAGE_BOUND: remedies.LOADER_STORAGE_BOUND,
                   REMOTE_STORAGE: remedies.LOADER_REMOTE_STORAGE,
                   LATENCY_BOUND: remedies.LOADER_LATENCY_BOUND}
MB = 1e6
# Recorded figures, as a 16-core node records them over the rate window.
WAITING = {"workers": 8.0, "workers_cpu": 0.4, "workers_wait": 0.0, "main_cpu": 0.9,
           "cpu_count": 16.0, "per_worker_cpu": 0.05}
CASES = {
    # 2 workers each computing a full core, 12 of 16 cores idle.
    TOO_FEW_WORKERS: LoaderEvidence(workers=2, workers_cpu=1.96, workers_wait=0.02, main_cpu=1.0,
                                    node_cpu=0.25, cpu_count=16, disk_busy=0.02,
                                    per_worker_cpu=0.99),
    # 16 workers on 16 saturated cores: each runs 0.55 s/s and waits 0.4 s/s for a CPU.
    DECODE_BOUND: LoaderEvidence(workers=16, workers_cpu=8.8, workers_wait=6.4, main_cpu=1.0,
                                 node_cpu=0.97, cpu_count=16, disk_busy=0.05,
                                 per_worker_cpu=0.95),
    # Workers wait; the NVMe the data sits on is busy 95% with the trial's own reads.
    STORAGE_BOUND: LoaderEvidence(**WAITING, node_cpu=0.2, disk_busy=0.95,
                                  read_bytes=900 * MB, rchar=910 * MB, network_busy=0.01),
    # Workers wait, disks idle, 1.1 GB/s read of which nothing from disks, the 10 GbE link
    # receiving at 92% of its speed: an NFS or object store mount.
    REMOTE_STORAGE: LoaderEvidence(**WAITING, node_cpu=0.2, disk_busy=0.01,
                                   read_bytes=0.5 * MB, rchar=1150 * MB, network_busy=0.92),
    # Workers wait (a remote service, a sleep), nothing on the node busy.
    LATENCY_BOUND: LoaderEvidence(**WAITING, node_cpu=0.1, disk_busy=0.01,
                                  read_bytes=0.0, rchar=2 * MB, network_busy=0.01),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_each_cause_names_its_evidence_and_only_its_own_remedy(kind: str) -> None:
    cause = decide(CASES[kind], CAUSES, SATURATED)
    assert cause is not None and cause.kind == kind, cause
    others = [text for k, text in LOADER_REMEDIES.items() if k != kind]
    assert not [text for text in others if text.split("{")[0] in cause.remedy]
    assert remedies.DATALOADER not in cause.remedy
    assert "CPU-seconds/s" in cause.evidence


EVIDENCE = {
    TOO_FEW_WORKERS: "2 workers wanting 0.99 CPU-seconds/s each (0.98 run, 0.01 waited for a "
                     "CPU), threshold 0.5; node CPU 25% busy of 16 cores, 12.0 idle",
    DECODE_BOUND: "16 workers wanting 0.95 CPU-seconds/s each (0.55 run, 0.40 waited for a "
                  "CPU), threshold 0.5; node CPU 97% busy of 16 cores (saturated at 90%)",
    STORAGE_BOUND: "mostly waiting: 8 workers wanting 0.05 CPU-seconds/s each (0.05 run, 0.00 "
                   "waited for a CPU), threshold 0.5; busiest local disk 95% busy (threshold "
                   "60%); the trial reads 910.0 MB/s, 900.0 MB/s of it from block devices",
    REMOTE_STORAGE: "mostly waiting: 8 workers wanting 0.05 CPU-seconds/s each (0.05 run, 0.00 "
                    "waited for a CPU), threshold 0.5; busiest local disk 1% busy (threshold "
                    "60%); the trial reads 1150.0 MB/s, 0.5 MB/s of it from block devices; "
                    "busiest NIC receiving at 92% of its link speed (threshold 60%)",
    LATENCY_BOUND: "mostly waiting: 8 workers wanting 0.05 CPU-seconds/s each (0.05 run, 0.00 "
                   "waited for a CPU), threshold 0.5; node CPU 10% busy of 16 cores; busiest "
                   "local disk 1% busy (threshold 60%); busiest NIC receiving at 1% of its link "
                   "speed (threshold 60%)",
}


@pytest.mark.parametrize("kind", list(CASES))
def test_each_causes_evidence_line_is_its_figures_in_full(kind: str) -> None:
    """Every figure as the case gives it (the split of the worker's CPU into run and waited
    adds up to it, with no "-0.00" of a float for a wait of 0), and no figure of another's."""
    cause = decide(CASES[kind], CAUSES, SATURATED)
    assert cause is not None and cause.evidence == EVIDENCE[kind]


def test_one_worker_and_no_worker_are_worded_as_they_are() -> None:
    one = LoaderEvidence(workers=1, workers_cpu=0.6, workers_wait=0.2, node_cpu=0.25,
                         cpu_count=4, disk_busy=0.02, per_worker_cpu=0.8)
    cause = decide(one, CAUSES, SATURATED)
    assert cause is not None and cause.evidence == (
        "1 worker wanting 0.80 CPU-seconds/s (0.60 run, 0.20 waited for a CPU), threshold "
        "0.5; node CPU 25% busy of 4 cores, 3.0 idle")
    none = LoaderEvidence(workers=0, workers_cpu=0.0, workers_wait=0.0, main_cpu=0.3,
                          node_cpu=0.1, disk_busy=0.01, read_bytes=None, rchar=None,
                          network_busy=0.01, per_worker_cpu=0.3)
    cause = decide(none, CAUSES, SATURATED)
    assert cause is not None and cause.kind == LATENCY_BOUND and cause.evidence == (
        "mostly waiting: the trial process (no DataLoader workers) wanting 0.30 "
        "CPU-seconds/s, threshold 0.5; node CPU 10% busy of ? cores; busiest local disk 1% "
        "busy (threshold 60%); busiest NIC receiving at 1% of its link speed (threshold 60%)")
    assert cause.title.startswith("latency (the loader waits")


def test_too_few_workers_says_from_how_many_to_how_many_and_the_idle_cores() -> None:
    cause = decide(CASES[TOO_FEW_WORKERS], CAUSES, SATURATED)
    assert cause is not None
    assert cause.remedy.startswith("Raise DataLoader num_workers from 2 to ~14 (the node has "
                                   "12 idle cores")
    assert "node CPU 25% busy of 16 cores, 12.0 idle" in cause.evidence


def test_decode_bound_shows_the_cpu_the_workers_waited_for() -> None:
    cause = decide(CASES[DECODE_BOUND], CAUSES, SATURATED)
    assert cause is not None
    assert "0.55 run, 0.40 waited for a CPU" in cause.evidence
    assert "node CPU 97% busy" in cause.evidence


def test_remote_storage_needs_the_link_near_its_speed_else_it_is_latency() -> None:
    figures = CASES[REMOTE_STORAGE]
    unknown_speed = LoaderEvidence(**{**figures.__dict__, "network_busy": None})  # a VM's NIC
    latency = decide(unknown_speed, CAUSES, SATURATED)
    assert latency is not None and latency.kind == LATENCY_BOUND
    assert "busiest NIC receiving at unknown of its link speed (threshold 60%)" in latency.evidence
    cached = LoaderEvidence(**{**figures.__dict__, "rchar": 1.0 * MB, "read_bytes": 0.9 * MB})
    assert decide(cached, CAUSES, SATURATED).kind == LATENCY_BOUND  # type: ignore[union-attr]


def test_a_busy_disk_that_the_trial_does_not_read_is_not_its_cause() -> None:
    other_job = LoaderEvidence(**{**CASES[STORAGE_BOUND].__dict__, "read_bytes": 0.0})
    assert decide(other_job, CAUSES, SATURATED).kind == LATENCY_BOUND  # type: ignore[union-attr]


def test_no_workers_the_trial_process_is_judged() -> None:
    computing = LoaderEvidence(workers=0, workers_cpu=0.0, main_cpu=0.99, node_cpu=0.3,
                               cpu_count=8, per_worker_cpu=0.99)
    cause = decide(computing, CAUSES, SATURATED)
    assert cause is not None and cause.kind == TOO_FEW_WORKERS
    assert "from 0 to ~5" in cause.remedy
    assert cause.evidence.startswith("the trial process (no DataLoader workers) wanting 0.99 "
                                     "CPU-seconds/s, threshold"), cause.evidence


def test_without_the_trials_loader_figures_or_the_thresholds_there_is_no_sub_verdict() -> None:
    assert decide(LoaderEvidence(node_cpu=0.5, cpu_count=4), CAUSES, SATURATED) is None
    assert decide(CASES[STORAGE_BOUND], {"worker_busy": 0.8}, SATURATED) is None


def rules() -> dict[str, AlertRule]:
    return {DATALOADER_BOUND: AlertRule(DATALOADER_BOUND, 0.3, remedies.DATALOADER, "rb",
                                        causes=CAUSES),
            CPU_SATURATED: AlertRule(CPU_SATURATED, SATURATED, remedies.BUSY_CPU)}


def test_explain_replaces_the_list_of_every_loader_fix_with_the_causes_own() -> None:
    verdict = Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, DATALOADER_BOUND,
                      remedies.DATALOADER, "rb")
    explained, cause = explain(verdict, CASES[STORAGE_BOUND], rules())
    assert cause is not None and explained.remedy == remedies.LOADER_STORAGE_BOUND
    assert (explained.kind, explained.measured, explained.alert) == ("dataloader", 0.9,
                                                                    DATALOADER_BOUND)
    other = Verdict("busy_cpu", "Node CPUs saturated", True, 0.95, ">", 0.9, CPU_SATURATED,
                    remedies.BUSY_CPU, None)
    assert explain(other, CASES[STORAGE_BOUND], rules()) == (other, None)
    assert explain(verdict, None, rules()) == (verdict, None)


def test_the_thresholds_travel_from_thresholds_yaml_to_diagnose() -> None:
    settings = load_settings()
    shipped = settings.alert(DATALOADER_BOUND).causes
    assert set(shipped) == set(LOADER_CAUSE_THRESHOLDS)
    rendered = [rule for text in render_files(settings).values()
                for g in yaml.safe_load(text)["groups"] for rule in g["rules"]]
    loaded = [{"type": "alerting" if "alert" in r else "recording",
               "name": r.get("alert") or r.get("record"), "annotations": r.get("annotations"),
               "query": r.get("expr")} for r in rendered]
    deployed = Deployment.from_rules(loaded)
    assert deployed.alerts[DATALOADER_BOUND].causes == shipped
    assert deployed.alerts[CPU_SATURATED].causes == {}


def test_a_misspelt_or_missing_cause_threshold_is_refused() -> None:
    parsed = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
    parsed["alerts"][DATALOADER_BOUND]["causes"]["disk_bsy"] = 0.5
    with pytest.raises(SettingsError, match="causes must name exactly"):
        render_files(parse_settings(parsed, "t.yaml"))
    parsed["alerts"][DATALOADER_BOUND]["causes"]["disk_busy"] = "high"
    with pytest.raises(SettingsError, match="not a number"):
        parse_settings(parsed, "t.yaml")


@pytest.mark.parametrize(("node_cpu", "kind"), [(0.55, TOO_FEW_WORKERS), (0.93, DECODE_BOUND)])
def test_explain_says_the_node_saturated_at_the_cpu_alerts_threshold_not_the_loaders(
        node_cpu: float, kind: str) -> None:
    """Computing workers on a node between the loader's threshold (0.3) and the CPU alert's
    (0.9) have idle cores to spare; past the CPU alert's, they decode on saturated CPUs."""
    verdict = Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, DATALOADER_BOUND,
                      remedies.DATALOADER, "rb")
    evidence = dataclasses.replace(CASES[TOO_FEW_WORKERS], node_cpu=node_cpu)
    explained, cause = explain(verdict, evidence, rules())
    assert cause is not None and cause.kind == kind
    assert (explained.remedy == remedies.LOADER_DECODE_BOUND) is (kind == DECODE_BOUND)
    assert (f"saturated at {SATURATED:.0%}" in cause.evidence) is (kind == DECODE_BOUND)


def test_explain_needs_both_alert_rules_a_loader_verdict_and_evidence() -> None:
    verdict = Verdict("dataloader", "Data loader", True, 0.9, ">", 0.3, DATALOADER_BOUND,
                      remedies.DATALOADER, "rb")
    full = rules()
    assert explain(verdict, CASES[STORAGE_BOUND], full)[1] is not None
    for missing in (DATALOADER_BOUND, CPU_SATURATED):
        partial = {name: rule for name, rule in full.items() if name != missing}
        assert explain(verdict, CASES[STORAGE_BOUND], partial) == (verdict, None), missing
    # A verdict kind that sorts after or before "dataloader" is not one.
    for kind in ("gpu_bound", "busy_cpu"):
        other = dataclasses.replace(verdict, kind=kind)
        assert explain(other, CASES[STORAGE_BOUND], full) == (other, None), kind


@pytest.mark.parametrize(("ran", "waited", "split"), [
    (0.2, 0.6, "(0.20 run, 0.60 waited for a CPU)"),  # more waited than ran
    (0.0, 0.8, "(0.00 run, 0.80 waited for a CPU)"),  # all of it waited
    (None, 0.8, "(0.00 run, 0.80 waited for a CPU)"),  # no CPU series: none ran
    (0.0, 0.0, ""),  # nothing to split (and no division by it)
    (0.8, None, ""),  # no wait series: no split
])
def test_the_worker_figure_is_split_into_run_and_waited_as_its_series_say(
        ran: float | None, waited: float | None, split: str) -> None:
    e = LoaderEvidence(workers=1, workers_cpu=ran, workers_wait=waited, node_cpu=0.25,
                       cpu_count=4, disk_busy=0.02, per_worker_cpu=0.8)
    cause = decide(e, CAUSES, SATURATED)
    assert cause is not None and cause.kind == TOO_FEW_WORKERS
    assert cause.evidence.startswith(f"1 worker wanting 0.80 CPU-seconds/s{' ' + split if split else ''}, threshold 0.5")


def test_gather_reads_a_window_as_rates_and_a_life_as_rates_scaled_to_its_seconds() -> None:
    from trainwatch.diagnose import loader_cause
    from trainwatch.diagnose.runs import Run
    key = ("e", "t", "0")
    asked: list[str] = []

    def query(expr: str) -> dict[tuple[str, str, str], list[tuple[dict[str, str], float]]]:
        asked.append(expr)
        return {key: [({}, float(len(asked))), ({}, -1.0)]}  # the first row is the figure

    found = loader_cause.gather(query, "5m", {key: 0.4}, experiment="e")
    names = ["workers", "workers_cpu", "workers_wait", "main_cpu", "read_bytes", "rchar",
             "cpu_count", "disk_busy", "network_busy", "per_worker_cpu"]
    assert [getattr(found[key], n) for n in names] == [float(i + 1) for i in range(len(names))]
    assert found[key].node_cpu == 0.4
    window = asked[:]
    assert "rate(trainwatch_trial_loader_read_bytes_total" in window[4] and " / " not in window[4]
    assert "[5m]" in window[7] and "offset" not in window[7]
    # The NIC figure is the received bytes over the link's speed, as the cause rule reads it.
    assert "rate(trainwatch_network_receive_bytes_total[5m])" in window[8].replace(" ", "")
    assert "transmit" not in window[8] and "trainwatch_network_speed_bytes" in window[8]
    asked.clear()
    life = Run("e", "t", "0", "1", "n", "1", first=100, last=275, started=99, pushed=159)
    loader_cause.gather(query, "3m", {key: 0.4}, life, experiment="e")
    # rate over the 3m window that holds the life's samples, times 180 s, per its 60 s: the
    # increase per second of the life, every counter scaled as the worker figure is
    assert "rate(trainwatch_trial_loader_read_bytes_total" in asked[4]
    assert "increase(" not in asked[4] and asked[4].endswith("\n* 180\n/ 60.0"), asked[4]
    assert "[60s] offset 116s" in asked[7] and "[3m]" not in asked[7]
    assert "/ 60.0" in asked[9] and "* 180" in asked[9]
    assert loader_cause.gather(lambda expr: {}, "5m", {}, experiment="e") == {}


def test_an_extra_cause_threshold_is_no_missing_one_and_no_worker_count_is_no_verdict() -> None:
    more = {**CAUSES, "someday": 1.0}  # a deployed rule may carry one this code does not read
    cause = decide(CASES[STORAGE_BOUND], more, SATURATED)
    assert cause is not None and cause.kind == STORAGE_BOUND
    unknown = dataclasses.replace(CASES[TOO_FEW_WORKERS], workers=None)
    assert decide(unknown, CAUSES, SATURATED) is None


def test_evidence_and_causes_are_frozen_and_rates_are_megabytes() -> None:
    from tests.frozen import assert_frozen
    from trainwatch.diagnose import loader_cause
    assert_frozen(CASES[STORAGE_BOUND])
    cause = decide(CASES[STORAGE_BOUND], CAUSES, SATURATED)
    assert cause is not None
    assert_frozen(cause)
    assert loader_cause._rate(123_456_789_012.0) == "123456.8 MB/s"  # not 123456.7
    assert loader_cause._rate(None) == "unknown"


def test_gather_over_a_life_of_no_seconds_divides_by_a_millisecond() -> None:
    from trainwatch.diagnose import loader_cause
    from trainwatch.diagnose.runs import Run
    asked: list[str] = []
    instant = Run("e", "t", "0", "1", "n", "1", first=100, last=100, started=100, pushed=100)
    loader_cause.gather(lambda expr: asked.append(expr) or {}, "1m", {}, instant, experiment="e")
    assert asked[4].endswith("\n* 60\n/ 0.001"), asked[4]
