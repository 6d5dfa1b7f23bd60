"""Every dashboard query, run against a live stack: real Prometheus (recording rules and alerts
loaded), real Pushgateway, the real trainwatch-exporter (over the fake NVML: no GPU here) and a
real, data-loader-bound PyTorch CPU trial.

Grafana's macros and the variables are substituted as Grafana would; variable queries
(``label_values``) go to the label-values API as Grafana's Prometheus datasource sends them.
Rules and dashboards are rendered with the same shortened rate window, so the recording-rule
names in the queries are the ones Prometheus evaluates.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fake_nvml import fake_uuid
from benchmarks.stack import Prometheus
from grafana import fleet, generate, ranks
from tests.live_stack import FAKE_GPUS, IDLE_GPU, live_stack
from trainwatch.contract.records import RecordNames

RATE_WINDOW = "10s"  # long enough for ~10 samples at a 1s scrape, short enough to fill fast
FOR = "1s"
EXPERIMENT, TRIAL, RANK = "grafana-live", "t1", "0"
DDP_TRIAL = "ddp"
# What Grafana puts in for its macros at a 1s scrape interval over the last minute.
MACROS = {"__rate_interval": "4s", "__interval": "1s", "__range": "60s"}
RANGE_SECONDS = 60

# (dashboard, panel title, refId) whose query legitimately returns nothing on this stack:
# none. The CPU trial names both fake GPUs (TRAINWATCH_GPU_UUIDS), so the uuid joins have data.
ALLOWED_EMPTY: set[tuple[str, str, str]] = set()
# Dashboards whose records this stack cannot fill in a minute (the usage group records once a
# minute): tests/test_usage.py runs their every query over backfilled history instead.
BACKFILLED = {"gpu-hours.json"}
TRIAL_GPUS = ",".join(fake_uuid(i) for i in range(FAKE_GPUS))

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "bool", "offset", "inf", "nan"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
LABEL_VALUES = re.compile(r"^label_values\((?P<match>.+),\s*(?P<label>\w+)\)$", re.DOTALL)
GRAFANA_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (strings, ranges, matchers, groupings removed)."""
    e = STRING.sub('""', expr)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\boffset\s+-?(?:\d+[smhdwy]+)+", " ", e)  # `offset 5m`: a duration, no name
    e = GROUPING.sub(" ", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][\w:]*", e):
        if m.group().lower() in PROMQL_WORDS or e[m.end():].lstrip().startswith("("):
            continue  # a keyword, or a function / aggregation call
        names.add(m.group())
    return names


def label_names(expr: str) -> set[str]:
    """Label names an expression matches on, groups by or joins on."""
    e = STRING.sub('""', expr)
    labels = {name for inner in re.findall(r"\{([^}]*)\}", e)
              for name in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", inner)}
    labels |= {name.strip() for group in GROUPING.findall(e) for name in group.split(",")}
    return labels - {""}


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in values, f"${name} is neither a dashboard variable nor a macro: {text}"
        return values[name]
    return GRAFANA_VAR.sub(one, text)


@dataclass
class Stack:
    prometheus: Prometheus
    exporter_instance: str
    dashboards: dict[str, dict[str, Any]]
    workdir: Path

    def label_values(self, match: str, label: str) -> list[str]:
        now = time.time()
        return list(self.prometheus.api(f"label/{label}/values", **{
            "match[]": match, "start": str(now - RANGE_SECONDS), "end": str(now)}))

    def run(self, expr: str, instant: bool) -> list[dict[str, Any]]:
        if instant:
            return self.prometheus.query(expr)
        now = time.time()
        return list(self.prometheus.api("query_range", query=expr, start=str(now - RANGE_SECONDS),
                                        end=str(now), step="1")["result"])


# Rank 1's extra seconds a step. Its own step over the median of two reads
# (b + d) / (b + d / 2): over the straggler threshold (1.25) while the others' step b stays
# under 1.5 d, 0.45 s here. A clean-clone run with the session's live trials beside it
# (torch's default threads on 2 cores) once kept 0.15 s under 1.25 for 90 s.
STRAGGLER_DELAY = "0.3"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("grafana_live")
    settings = generate.load_settings().with_overrides(rate_window=RATE_WINDOW)
    dashboards = {name: json.loads(text) for name, text in generate.render(settings).items()}
    # A peak for the fake GPUs and a FLOPs figure for the trial: the MFU panels have data.
    with live_stack(workdir, rate_window=RATE_WINDOW, for_=FOR,
                    exporter_args=("--gpu.peak-flops=fp32=1e12",)) as live:
        # Long enough to outlast the queries; stopped as soon as they are done.
        trial = live.start_trial(EXPERIMENT, TRIAL, "--steps", "3000", "--loader-delay", "0.05",
                                 "--batch-size", "8", "--workers", "1",
                                 env={"RANK": RANK, "TRAINWATCH_GPU_UUIDS": TRIAL_GPUS,
                                      "TRAINWATCH_FLOPS_PER_SAMPLE": "1e6",
                                      "TRAINWATCH_PRECISION": "fp32"})
        # A 2-rank gloo DDP trial whose rank 1 straggles: the ranks row and the Fleet's
        # straggler table have a straggler to show.
        live.start_trial(EXPERIMENT, DDP_TRIAL, "--steps", "3000", "--loader-delay", "0.05",
                         "--batch-size", "8", "--workers", "0", "--straggler-rank", "1",
                         "--straggler-delay", STRAGGLER_DELAY, "--step-limit-seconds", "1",
                         ranks=2, env={"OMP_NUM_THREADS": "1"})
        # A short trial that ends and keeps its group: the final push's exit marker, which
        # every "live" gate reads, is a series here too.
        live.start_trial(EXPERIMENT, "ended", "--steps", "20", "--batch-size", "8",
                         "--workers", "0")
        # And a second one: two runs that ended clean make the experiment's recorded baseline,
        # which the Trial profile's samples/s panel draws.
        live.start_trial(EXPERIMENT, "ended-again", "--steps", "20", "--batch-size", "8",
                         "--workers", "0")
        prom = live.prometheus
        prom.wait_for_series('trainwatch_trial_exit{trial="ended"}', 90)
        prom.wait_for_series('experiment:trainwatch_trial_throughput:baseline_median', 90)
        prom.wait_for_series(f'trial_ranks:trainwatch_trial_step_seconds:spread_rate{RATE_WINDOW}'
                             f'{{trial="{DDP_TRIAL}"}} > 1.25', 90)
        # Ready when the trial's timings made it through the recording rules into a firing
        # alert, and the host rules have two scrapes to rate over.
        prom.wait_for_series(f'ALERTS{{alertname="TrainwatchDataloaderBound", '
                             f'alertstate="firing", experiment="{EXPERIMENT}"}}', 90)
        prom.wait_for_series(f"instance:trainwatch_cpu_utilization:ratio_rate{RATE_WINDOW}", 30)
        prom.wait_for_series("trial_gpu:trainwatch_gpu_utilization:ratio", 30)
        assert trial.poll() is None, live.trial_log(TRIAL)
        yield Stack(prom, live.exporter_instance, dashboards, workdir)


def variable_values(stack: Stack, name: str) -> dict[str, str]:
    """Each variable's value, checked to be among its live query's answers, and "All"."""
    chosen = {"instance": stack.exporter_instance, "gpu": "0", "experiment": EXPERIMENT,
              "trial": TRIAL, "rank": RANK}
    values: dict[str, str] = {**MACROS}
    board = stack.dashboards[name]
    for var in board["templating"]["list"][1:]:  # [0] is the datasource variable
        m = LABEL_VALUES.match(substitute(var["query"], values))
        assert m, f"{name}: variable {var['name']} is not a label_values() query"
        answers = stack.label_values(m["match"], m["label"])
        assert chosen[var["name"]] in answers, f"{name}: ${var['name']} offers {answers}"
        values[var["name"]] = chosen[var["name"]]
    return values


def test_metric_name_and_label_extraction() -> None:
    expr = ('max by (experiment, trial) (rate(x_total{job="a", phase=~"b|c"}[5m])) '
            '* on(uuid) group_left(name) info_metric > 0.3 or vector(1)')
    assert metric_names(expr) == {"x_total", "info_metric"}
    assert metric_names("max (y_total offset 5m) and z offset 1h30m") == {"y_total", "z"}
    assert label_names(expr) == {"experiment", "trial", "job", "phase", "uuid", "name"}


def test_every_name_in_every_query_is_produced_by_the_project(stack: Stack) -> None:
    known = set(stack.prometheus.api("label/__name__/values"))
    rule_groups = stack.prometheus.api("rules")["groups"]
    recorded = {r["name"] for g in rule_groups for r in g["rules"] if r["type"] == "recording"}
    known |= recorded | {"ALERTS"}  # ALERTS is Prometheus' own series of the loaded alerts
    labels = set(stack.prometheus.api("labels"))
    assert "trainwatch_bogus_ratio" in metric_names("trainwatch_bogus_ratio{job=\"x\"}") - known
    problems = []
    for name, board in stack.dashboards.items():
        if name in BACKFILLED:  # its labels (k8s_namespace) are set by no trial of this stack
            continue
        exprs = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]
        exprs += [(f"variable {v['name']}", v["query"]) for v in board["templating"]["list"][1:]]
        for where, expr in exprs:
            expr = substitute(expr, {**MACROS, **{v: ".*" for v in
                                                  ("instance", "gpu", "experiment", "trial",
                                                   "rank")}})
            if m := LABEL_VALUES.match(expr):
                expr, used = m["match"], {m["label"]}
            else:
                used = set()
            if unknown := metric_names(expr) - known:
                problems.append(f"{name} {where}: unknown metrics {sorted(unknown)}")
            if unknown := (label_names(expr) | used) - labels:
                problems.append(f"{name} {where}: unknown labels {sorted(unknown)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("all_selected", [False, True], ids=["one-value", "all"])
def test_every_panel_query_runs_and_returns_data(stack: Stack, all_selected: bool) -> None:
    problems = []
    for name, board in sorted(stack.dashboards.items()):
        if name in BACKFILLED:
            continue
        values = variable_values(stack, name)
        if all_selected:
            values = {k: (v if k.startswith("__") else ".*") for k, v in values.items()}
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                key = (name, panel["title"], target["refId"])
                expr = substitute(target["expr"], values)
                try:
                    result = stack.run(expr, instant=target.get("instant", False))
                except AssertionError as err:
                    problems.append(f"{key}: query failed: {err}")
                    continue
                if bool(result) == (key in ALLOWED_EMPTY):
                    why = "data, yet allow-listed as empty" if result else "no data"
                    problems.append(f"{key}: {why}\n  {expr}")
                legend_labels = set(re.findall(r"\{\{(\w+)\}\}", target.get("legendFormat", "")))
                # One value selected: no series of another (an instance, GPU, experiment,
                # trial or rank the variables did not pick).
                chosen = {k: v for k, v in values.items()
                          if not k.startswith("__") and not all_selected}
                for series in result:
                    if other := {k: series["metric"][k] for k in chosen
                                 if series["metric"].get(k, chosen[k]) != chosen[k]}:
                        problems.append(f"{key}: a series of {other}, not the chosen "
                                        f"{ {k: chosen[k] for k in other} }")
                    if missing := legend_labels - set(series["metric"]):
                        problems.append(f"{key}: legend labels {sorted(missing)} missing from "
                                        f"{series['metric']}")
    assert not problems, "\n".join(problems)


def test_verdict_names_the_data_loader_for_a_loader_bound_trial(stack: Stack) -> None:
    board = stack.dashboards["trial-profile.json"]
    panel = next(p for p in board["panels"] if p["title"] == "Bottleneck")
    result = stack.run(substitute(panel["targets"][0]["expr"],
                                  variable_values(stack, "trial-profile.json")), instant=True)
    assert [(s["metric"]["trial"], s["value"][1]) for s in result] == [(TRIAL, "1")]
    words = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]["1"]["text"]
    assert words == "Data loader"


def test_idle_gpus_table_lists_only_the_trials_idle_gpu(stack: Stack) -> None:
    board = stack.dashboards["fleet.json"]
    panel = next(p for p in board["panels"] if p["title"] == "GPUs allocated to trials but idle")
    result = stack.run(substitute(panel["targets"][0]["expr"], variable_values(stack, "fleet.json")),
                       instant=True)
    assert [(s["metric"]["uuid"], s["metric"]["trial"]) for s in result] == \
        [(fake_uuid(IDLE_GPU), TRIAL)]


def test_fleet_rows_carry_the_labels_its_links_use(stack: Stack) -> None:
    board = stack.dashboards["fleet.json"]
    table = next(p for p in board["panels"] if p["title"] == fleet.TRIALS_TABLE)
    values = variable_values(stack, "fleet.json")
    rows: dict[str, dict[tuple[str, str], float]] = {}
    for target in table["targets"]:
        column = rows.setdefault(target["refId"], {})
        for series in stack.run(substitute(target["expr"], values), instant=True):
            assert {"experiment", "trial", "rank"} <= set(series["metric"]), target["refId"]
            key = (series["metric"]["trial"], series["metric"]["rank"])
            assert key not in column, f"{target['refId']}: two rows for {key}"
            column[key] = float(series["value"][1])
    # One row per rank of every trial with a group, the ended ones too; no rank 2 of the DDP
    # trial's 2, no trial this stack did not start.
    assert set(rows["F"]) == {(TRIAL, RANK), (DDP_TRIAL, "0"), (DDP_TRIAL, "1"),
                              ("ended", "0"), ("ended-again", "0")}
    # Steps/s is the trial's steps, not its samples: over the recorded samples rate at the same
    # instant, one over the batch size (8).
    assert rows["A"][(TRIAL, RANK)] > 0
    steps = substitute(table["targets"][0]["expr"], values)
    samples = f'{RecordNames(RATE_WINDOW).samples_rate}{{trial="{TRIAL}"}}'
    [ratio] = stack.run(f"({steps}) / on(experiment, trial, rank) ({samples})", instant=True)
    assert float(ratio["value"][1]) == pytest.approx(1 / 8)


def test_straggler_table_and_slowest_rank_name_the_ddp_trials_rank_1(stack: Stack) -> None:
    fleet_board = stack.dashboards["fleet.json"]
    panel = next(p for p in fleet_board["panels"] if p["title"] == ranks.STRAGGLERS_TABLE)
    result = stack.run(substitute(panel["targets"][0]["expr"],
                                  variable_values(stack, "fleet.json")), instant=True)
    node = os.uname().nodename
    assert [(s["metric"]["trial"], s["metric"]["rank"], s["metric"]["nodename"])
            for s in result] == [(DDP_TRIAL, "1", node)]
    profile = stack.dashboards["trial-profile.json"]
    panel = next(p for p in profile["panels"] if p["title"] == "Slowest rank")
    values = {**variable_values(stack, "trial-profile.json"), "trial": DDP_TRIAL}
    [row] = stack.run(substitute(panel["targets"][0]["expr"], values), instant=True)
    assert (row["metric"]["rank"], row["metric"]["nodename"]) == ("1", node)
    assert float(row["value"][1]) > 1.25
