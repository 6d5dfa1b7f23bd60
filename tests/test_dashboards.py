"""Generated dashboards: byte-for-byte regeneration and structure."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, promtool
from grafana import fleet, generate, trial_profile
from grafana.generate import DEFAULT_THRESHOLDS, load_settings
from trainwatch.contract.alerts import (
    DATALOADER_BOUND,
    GPU_UNDERUTILIZED,
    HOST_TO_DEVICE_BOUND,
    RANK_STRAGGLER,
    SCALING_INEFFICIENT,
    TRIAL_STALE,
)

DASHBOARDS = REPO / "grafana" / "dashboards"
EXPECTED_UIDS = {"node-gpu.json": "trainwatch-node-gpu",
                 "trial-profile.json": "trainwatch-trial-profile",
                 "fleet.json": "trainwatch-fleet",
                 "gpu-hours.json": "trainwatch-gpu-hours"}
EXPECTED_VARIABLES = {"node-gpu.json": ["datasource", "instance", "gpu"],
                      "trial-profile.json": ["datasource", "experiment", "trial", "rank"],
                      "fleet.json": ["datasource", "experiment"],
                      "gpu-hours.json": ["datasource", "experiment"]}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's own variables the dashboards may use.
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__data", "__url_time_range",
                    "__all"}
# $name, ${name}, ${name:format}, [[name]]
VARIABLE_USE = re.compile(r"\$(\w+)|\$\{(\w+)[^}]*\}|\[\[(\w+)[^\]]*\]\]")
GPU_SERIES = re.compile(r"\btrainwatch_gpu_\w+\{|\b(trial_gpu|gpu):")
HOST_SERIES = re.compile(r"\btrainwatch_(cpu|memory|network|disk)_\w+\{|\binstance(_device)?:")


def committed() -> dict[str, dict[str, Any]]:
    return {name: json.loads((DASHBOARDS / name).read_text()) for name in EXPECTED_UIDS}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row's children


def variables_used(value: Any) -> Iterator[str]:
    text = json.dumps(value)
    for match in VARIABLE_USE.finditer(text):
        yield next(g for g in match.groups() if g)


def test_regeneration_reproduces_the_committed_json_byte_for_byte(tmp_path: Path) -> None:
    # Run the script the way `make dashboards` does, into a temp dir.
    subprocess.run([sys.executable, "-m", "grafana.generate", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=REPO)
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in DASHBOARDS.glob("*.json")), \
        "grafana/dashboards/ holds files the generator does not write (or lacks some)"
    for name in generated:
        assert (tmp_path / name).read_bytes() == (DASHBOARDS / name).read_bytes(), \
            f"{name} drifted: run `make dashboards` and commit"


def test_rendering_twice_gives_identical_text() -> None:
    assert generate.render() == generate.render()


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_stable_uid_and_variables(name: str) -> None:
    board = committed()[name]
    assert board["uid"] == EXPECTED_UIDS[name]
    variables = board["templating"]["list"]
    assert [v["name"] for v in variables] == EXPECTED_VARIABLES[name]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    for var in variables[1:]:
        assert var["datasource"] == DATASOURCE, f"{name}: variable {var['name']}"


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_panel_ids_unique_and_grid_inside_24_columns_without_overlap(name: str) -> None:
    all_panels = list(panels(committed()[name]))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids {ids}"
    boxes = []
    for p in all_panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0, p["title"]
        assert g["x"] + g["w"] <= 24, f"{name}: {p['title']!r} leaves the 24-column grid"
        boxes.append((p["title"], g))
    for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        overlap = (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
                   and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])
        assert not overlap, f"{name}: {ta!r} overlaps {tb!r}"


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_every_panel_and_target_bound_to_datasource_variable_with_a_unit(name: str) -> None:
    for p in panels(committed()[name]):
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE, f"{name}: {p['title']!r}"
        assert p["fieldConfig"]["defaults"].get("unit"), f"{name}: {p['title']!r} has no unit"
        assert p["targets"], f"{name}: {p['title']!r} has no query"
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, f"{name}: {p['title']!r} {t['refId']}"
            assert t["expr"].strip(), f"{name}: {p['title']!r} {t['refId']} is empty"


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_every_variable_used_is_defined_before_use(name: str) -> None:
    board = committed()[name]
    defined: list[str] = []
    for var in board["templating"]["list"]:
        for used in variables_used(var.get("query", "")):
            # Grafana resolves variables in order: a query may use only earlier ones.
            assert used in defined, f"{name}: variable {var['name']} uses ${used} before it"
        defined.append(var["name"])
    for used in variables_used(board["panels"]):
        assert used in defined or used in GRAFANA_BUILTINS, f"{name}: ${used} is not defined"


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_legends_name_the_host_and_the_gpu(name: str) -> None:
    for p in panels(committed()[name]):
        if p["type"] not in ("timeseries", "state-timeline"):
            continue
        for t in p["targets"]:
            legend = t.get("legendFormat", "")
            if GPU_SERIES.search(t["expr"]):
                assert "{{instance}}" in legend and "{{gpu}}" in legend, (name, p["title"])
                assert "group_left(name)" in t["expr"], f"{p['title']}: no gpu_info join"
            elif HOST_SERIES.search(t["expr"]):
                assert "{{instance}}" in legend, (name, p["title"], legend)


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_table_overrides_match_the_columns_the_tables_show(name: str) -> None:
    # Overrides apply after the organize transformation: they must name a renamed header.
    for p in panels(committed()[name]):
        if p["type"] != "table":
            continue
        organize = next(t for t in p["transformations"] if t["id"] == "organize")
        headers = set(organize["options"]["renameByName"].values())
        for override in p["fieldConfig"]["overrides"]:
            assert override["matcher"]["options"] in headers, (name, p["title"], override)


def test_dataloader_threshold_is_read_from_thresholds_yaml(tmp_path: Path) -> None:
    committed_value = load_settings().threshold("TrainwatchDataloaderBound")
    for value in (committed_value, 0.42):
        doc = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
        doc["alerts"]["TrainwatchDataloaderBound"]["threshold"] = value
        edited = tmp_path / "thresholds.yaml"
        edited.write_text(yaml.safe_dump(doc))
        board = json.loads(generate.render(load_settings(edited))["trial-profile.json"])
        by_title = {p["title"]: p for p in panels(board)}
        loader = by_title[trial_profile.share_title("Data loader share", _WINDOW)]
        steps = loader["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps] == [None, value]
        assert f"> {value:g}" in by_title["Bottleneck"]["targets"][0]["expr"]


def test_share_panels_name_the_rate_window_of_the_rules_they_read(tmp_path: Path) -> None:
    doc = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
    for window in (doc["rate_window"], "7m"):
        doc["rate_window"] = window
        edited = tmp_path / "thresholds.yaml"
        edited.write_text(yaml.safe_dump(doc))
        boards = {name: json.loads(text)
                  for name, text in generate.render(load_settings(edited)).items()}
        shares = {p["title"]: p for p in panels(boards["trial-profile.json"])
                  if "share" in p["title"].lower()}
        assert set(shares) == {f"Data loader share over {window}",
                               f"Host↔device copy share over {window}",
                               f"Share of step time by phase over {window}"}
        for panel in shares.values():
            assert f"_rate{window}" in panel["targets"][0]["expr"]
            assert f"the last {window} while the trial runs" in panel["description"]
        table = next(p for p in panels(boards["fleet.json"]) if p["title"] == fleet.TRIALS_TABLE)
        headers = set(next(t for t in table["transformations"] if t["id"] == "organize")
                      ["options"]["renameByName"].values())
        assert f"Data loader share ({window})" in headers
        assert not any(f"_rate{other}" in json.dumps(boards) for other in ("5m", "7m")
                       if other != window)


def test_verdict_maps_every_code_its_query_yields_to_words() -> None:
    bottleneck = next(p for p in panels(committed()["trial-profile.json"])
                      if p["title"] == "Bottleneck")
    codes = re.findall(r"\* 0 \+ (\d+)", bottleneck["targets"][0]["expr"])
    options = bottleneck["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert codes == sorted(options, key=int) and len(codes) >= 5
    assert options["1"]["text"] == "Data loader"  # the first condition checked wins
    assert all(o["text"] for o in options.values())


# The trial's own alert, one on its GPU and one on its node are shown; alerts of another trial,
# GPU or node, and pending ones, are not. Checked by promtool evaluating the panel's query.
OURS = [
    ('ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing", experiment="e", '
    'trial="t", rank="0", severity="warning"}'),
    ('ALERTS{alertname="TrainwatchGPUThrottled", alertstate="firing", instance="n1:10910", '
    'gpu="0", uuid="GPU-a", reason="hw_slowdown"}'),
    'ALERTS{alertname="TrainwatchHostMemoryLow", alertstate="firing", instance="n1:10910"}',
]
NOT_OURS = [
    ('ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing", experiment="e", '
    'trial="other", rank="0"}'),
    ('ALERTS{alertname="TrainwatchGPUThrottled", alertstate="firing", instance="n2:10910", '
    'gpu="0", uuid="GPU-b", reason="hw_slowdown"}'),
    'ALERTS{alertname="TrainwatchHostMemoryLow", alertstate="firing", instance="n2:10910"}',
    ('ALERTS{alertname="TrainwatchHostMemoryLow", alertstate="pending", instance="n1:10910", '
    'severity="warning"}'),
    # pending alerts of the trial itself and of its GPU: not firing yet, not shown
    ('ALERTS{alertname="TrainwatchHostToDeviceBound", alertstate="pending", experiment="e", '
    'trial="t", rank="0", severity="warning"}'),
    ('ALERTS{alertname="TrainwatchGPUMemoryNearlyFull", alertstate="pending", '
    'instance="n1:10910", gpu="0", uuid="GPU-a"}'),
]
JOIN_SERIES = [
    ('trainwatch_trial_gpu_info{job="trainwatch_trial", experiment="e", trial="t", rank="0", '
    'uuid="GPU-a"}'),
    ('trainwatch_trial_info{job="trainwatch_trial", experiment="e", trial="t", rank="0", '
    'nodename="n1", pid="1", world_size="1"}'),
    'trainwatch_host_info{job="trainwatch-exporter", instance="n1:10910", nodename="n1"}',
    'trainwatch_host_info{job="trainwatch-exporter", instance="n2:10910", nodename="n2"}',
]


def test_firing_alerts_panel_shows_the_trials_own_gpu_and_node_alerts(tmp_path: Path) -> None:
    alerts = next(p for p in panels(committed()["trial-profile.json"])
                  if p["title"] == "Firing alerts")
    expr = (alerts["targets"][0]["expr"].replace("$experiment", "e").replace("$trial", "t")
            .replace("$rank", ".*"))
    case = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": "1"} for s in OURS + NOT_OURS + JOIN_SERIES],
        "promql_expr_test": [{"expr": expr, "eval_time": "0m",
                              "exp_samples": [{"labels": s, "value": 1} for s in OURS]}],
    }]}
    path = tmp_path / "firing_alerts_test.yml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    promtool("test", "rules", path)


# Ranks of trial "t" crossing several thresholds at once (default thresholds: loader 30%,
# copies 20%, node CPU 90%, GPU under 50%, launch-bound under 50% SMs at >= 90% utilization,
# tensor cores under 5% at >= 50% SMs): rank -> (phase shares, node, GPU utilization, and
# where the GPU has GPM, (SM activity, tensor activity)). Nodes n1 (CPU 95%) and n2 (CPU 50%).
VERDICT_RANKS: dict[str, tuple[dict[str, float], str, float | None,
                               tuple[float, float] | None]] = {
    "0": ({"dataloader_next": 0.4, "to_device": 0.25, "train_batch": 0.35}, "n1", 0.1, None),
    "1": ({"dataloader_next": 0.1, "to_device": 0.15, "from_device": 0.1}, "n1", 0.1, None),
    "2": ({"dataloader_next": 0.1, "to_device": 0.05, "train_batch": 0.85}, "n1", 0.1, None),
    "3": ({"train_batch": 0.9}, "n2", 0.1, None),
    "4": ({"train_batch": 0.9}, "n2", 0.9, (0.8, 0.6)),
    "5": ({"train_batch": 0.9}, "n2", None, None),
    "6": ({"train_batch": 0.9}, "n2", 0.99, (0.2, 0.2)),  # looks busy, SMs idle
    "7": ({"train_batch": 0.9}, "n2", 0.99, (0.8, 0.01)),  # fp32: tensor cores idle
    "8": ({"train_batch": 0.9}, "n2", 0.7, (0.2, 0.1)),  # underused by SM activity
    "9": ({"train_batch": 0.9}, "n2", 0.9, None),  # GPU-bound by NVML utilization (no GPM)
    "10": ({"train_batch": 0.9}, "n2", 0.9, None),  # busy, MFU under mfu_low (20%)
    "11": ({"train_batch": 0.9}, "n2", 0.99, (0.8, 0.6)),  # busy SMs, MFU under mfu_low
    "12": ({"train_batch": 0.9}, "n2", 0.9, None),  # busy, MFU at mfu_low: GPU-bound
    "13": ({"train_batch": 0.9}, "n2", 0.3, None),  # MFU low but GPU underused: underused
    "14": ({"train_batch": 0.9}, "n2", 0.9, None),  # MFU low, younger than the rate window
}
# Each check exactly at its threshold (the shipped thresholds.yaml, read here: no copies) is
# not over it, in the panel and in decide() alike; the next check or GPU-bound decides.
_AT = {name: load_settings().threshold(name) for name in (
    "TrainwatchDataloaderBound", "TrainwatchHostToDeviceBound", "TrainwatchCPUSaturated",
    "TrainwatchGPUUnderutilized")}
VERDICT_RANKS.update({
    "15": ({"dataloader_next": _AT["TrainwatchDataloaderBound"], "train_batch": 0.5}, "n2", 0.9,
           None),
    "16": ({"to_device": _AT["TrainwatchHostToDeviceBound"], "train_batch": 0.6}, "n2", 0.9,
           None),
    "17": ({"train_batch": 0.9}, "n3", 0.9, None),  # node CPU exactly at its threshold
    "18": ({"train_batch": 0.9}, "n2", _AT["TrainwatchGPUUnderutilized"], None),
})
NODE_CPU = {"n1": 0.95, "n2": 0.5, "n3": _AT["TrainwatchCPUSaturated"]}
# Ranks with an MFU (trial:trainwatch_trial_mfu:ratio_rate5m) and whether they counted samples
# a whole rate window ago (a younger rank's MFU rate reads low: never claimed).
VERDICT_MFU = {"9": (0.45, True), "10": (0.12, True), "11": (0.1, True), "12": (0.2, True),
               "13": (0.05, True), "14": (0.05, False)}


def test_bottleneck_panel_and_trainwatch_diagnose_name_the_same_bottleneck(
        tmp_path: Path) -> None:
    """The panel's query, run by promtool, against the CLI's decide() on the same numbers."""
    from trainwatch.diagnose.deployed import AlertRule
    from trainwatch.diagnose.verdict import Measurements, decide

    settings = load_settings()
    bottleneck = next(p for p in panels(committed()["trial-profile.json"])
                      if p["title"] == "Bottleneck")
    expr = (bottleneck["targets"][0]["expr"].replace("$experiment", "e").replace("$trial", "t")
            .replace("$rank", ".*"))
    words = {int(code): option["text"] for code, option
             in bottleneck["fieldConfig"]["defaults"]["mappings"][0]["options"].items()}
    series: list[tuple[str, float]] = []
    for node, cpu in NODE_CPU.items():
        host = f'instance="{node}:1"'
        series.append((f"instance:trainwatch_cpu_utilization:ratio_rate5m{{{host}}}", cpu))
        host_info = f'trainwatch_host_info{{job="trainwatch-exporter", {host}, nodename="{node}"}}'
        series.append((host_info, 1))
    for rank, (shares, node, gpu, gpm) in VERDICT_RANKS.items():
        trial = f'experiment="e", trial="t", rank="{rank}"'
        if gpm is not None:
            for record, value in zip(("sm_active", "tensor_active"), gpm, strict=True):
                name = f'trial_gpu:trainwatch_gpu_{record}:ratio{{{trial}, uuid="GPU-{rank}"}}'
                series.append((name, value))
        info = f'trainwatch_trial_info{{job="trainwatch_trial", {trial}, nodename="{node}"}}'
        series.append((info, 1))
        for phase, share in shares.items():
            share_series = (f"trial_phase:trainwatch_trial_phase_seconds:share_rate5m"
                            f'{{{trial}, phase="{phase}"}}')
            series.append((share_series, share))
        if gpu is not None:
            gpu_series = f'trial_gpu:trainwatch_gpu_utilization:ratio{{{trial}, uuid="GPU-{rank}"}}'
            series.append((gpu_series, gpu))
        # The GPU-busy rule: SM activity where GPM reports it, else NVML utilization.
        busy, source = (gpm[0], "sm_active") if gpm is not None else (gpu, "utilization")
        if busy is not None:
            busy_labels = f'{trial}, uuid="GPU-{rank}", source="{source}"'
            series.append((f"trial_gpu:trainwatch_gpu_busy:ratio{{{busy_labels}}}", busy))
        mfu, full_window = VERDICT_MFU.get(rank, (None, False))
        if mfu is not None:
            series.append((f'trial:trainwatch_trial_mfu:ratio_rate5m{{{trial}, precision="bf16"}}',
                           mfu))
        if full_window:
            series.append((f'trainwatch_trial_samples_total{{job="trainwatch_trial", {trial}}}', 1))
    alerts = {name: AlertRule(name, settings.threshold(name), "",
                              busy=settings.alert(name).busy,
                              mfu_low=settings.alert(name).mfu_low) for name in (
        "TrainwatchDataloaderBound", "TrainwatchHostToDeviceBound", "TrainwatchCPUSaturated",
        "TrainwatchGPUUnderutilized", "TrainwatchGPULaunchBound", "TrainwatchGPUTensorCoresIdle")}
    expected = []
    for rank, (shares, node, gpu, gpm) in VERDICT_RANKS.items():
        sm, tensor = gpm or (None, None)
        mfu, full_window = VERDICT_MFU.get(rank, (None, False))
        verdict = decide(Measurements(shares, NODE_CPU[node], gpu, sm, tensor,
                                      mfu=mfu if full_window else None), alerts)
        code = next(c for c, text in words.items() if text == verdict.title)
        expected.append({"labels": f'{{experiment="e", trial="t", rank="{rank}", '
                                   f'nodename="{node}"}}', "value": code})
    # Every outcome is reached: the cases cover the whole priority order.
    assert {e["value"] for e in expected} == set(words)
    case = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v}x10"} for s, v in series],
        "promql_expr_test": [{"expr": expr, "eval_time": "5m", "exp_samples": expected}],
    }]}
    path = tmp_path / "bottleneck_test.yml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    promtool("test", "rules", path)


def test_fleet_table_links_to_trial_profile_with_the_rows_labels() -> None:
    table = next(p for p in panels(committed()["fleet.json"]) if p["title"] == fleet.TRIALS_TABLE)
    urls = [link["url"] for link in table["fieldConfig"]["defaults"]["links"]]
    assert urls == [fleet.PROFILE_LINK]
    assert f"/d/{trial_profile.UID}?" in urls[0]
    profile_vars = {v["name"] for v in committed()["trial-profile.json"]["templating"]["list"]}
    linked = set(re.findall(r"var-(\w+)=\$\{__data\.fields\.(\w+)\}", urls[0]))
    assert linked == {(v, v) for v in ("experiment", "trial", "rank")}
    assert {v for v, _ in linked} <= profile_vars
    ages = [t["expr"] for t in table["targets"] if "push_time_seconds" in t["expr"]]
    assert ages and 'time() - push_time_seconds{job="trainwatch_trial"' in ages[0]


def test_bad_thresholds_fail_generation_naming_the_key(tmp_path: Path) -> None:
    doc = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
    del doc["alerts"]["TrainwatchDataloaderBound"]
    bad = tmp_path / "thresholds.yaml"
    bad.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "grafana.generate",
                             "--thresholds", str(bad), "--out", str(out)],
                            check=False, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert "alerts.TrainwatchDataloaderBound" in result.stderr and str(bad) in result.stderr
    assert not out.exists(), "nothing is written when the thresholds are bad"


def test_each_loader_cause_panel_draws_the_threshold_of_its_own_figure(tmp_path: Path) -> None:
    """Disk and NIC busy share 0.60 in thresholds.yaml; given apart, the disk panel (the disks'
    busy time) draws disk_busy and the NIC panel (bytes received) draws network_busy."""
    doc = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
    causes = doc["alerts"]["TrainwatchDataloaderBound"]["causes"]
    causes.update(disk_busy=0.71, network_busy=0.37)
    edited = tmp_path / "thresholds.yaml"
    edited.write_text(yaml.safe_dump(doc))
    board = json.loads(generate.render(load_settings(edited))["trial-profile.json"])
    drawn = {}
    for metric, cause in (("trainwatch_disk_io_time_seconds_total", "disk_busy"),
                          ("trainwatch_network_receive_bytes_total", "network_busy")):
        [panel] = [p for p in panels(board) if p["type"] == "timeseries"
                   and metric in p["targets"][0]["expr"]]
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        drawn[cause] = [s["value"] for s in steps][1:]
    assert drawn == {"disk_busy": [0.71], "network_busy": [0.37]}


def _colour_at(steps: list[dict[str, Any]], value: float) -> str:
    """The colour Grafana gives ``value`` under absolute threshold ``steps``: the last step at
    or under it (the first, valued null, is the base)."""
    return [s["color"] for s in steps if s["value"] is None or s["value"] <= value][-1]


_WINDOW = load_settings().rate_window
# Each threshold a dashboard draws or colours a column by, with edited thresholds.yaml values
# that differ from one another: (dashboard, panel title, column header or None) -> (the alert
# or loader cause it is, the side of it that is bad).
_DRAWN = {
    ("trial-profile.json", trial_profile.share_title("Data loader share", _WINDOW), None):
        (DATALOADER_BOUND, "above"),
    ("trial-profile.json", trial_profile.share_title("Host↔device copy share", _WINDOW), None):
        (HOST_TO_DEVICE_BOUND, "above"),
    ("trial-profile.json", "Slowest rank over median", None): (RANK_STRAGGLER, "above"),
    ("trial-profile.json", "Slowest rank", "× median"): (RANK_STRAGGLER, "above"),
    ("trial-profile.json", "Disk busy (the trial's nodes)", None): ("disk_busy", "above"),
    ("trial-profile.json", "NIC receive / link speed (the trial's nodes)", None):
        ("network_busy", "above"),
    ("fleet.json", "Scaling efficiency", None): (SCALING_INEFFICIENT, "below"),
    ("fleet.json", fleet.TRIALS_TABLE, f"Data loader share ({_WINDOW})"): (DATALOADER_BOUND, "above"),
    ("fleet.json", fleet.TRIALS_TABLE, "GPU busy"): (GPU_UNDERUTILIZED, "below"),
    ("fleet.json", fleet.TRIALS_TABLE, "Last push"): (TRIAL_STALE, "above"),
}
_EDITED = {DATALOADER_BOUND: 0.33, HOST_TO_DEVICE_BOUND: 0.17, RANK_STRAGGLER: 1.37,
           SCALING_INEFFICIENT: 0.61, GPU_UNDERUTILIZED: 0.43, TRIAL_STALE: 271,
           "disk_busy": 0.71, "network_busy": 0.37}


def test_each_threshold_drawn_is_its_own_alerts_and_colours_its_bad_side_red(
        tmp_path: Path) -> None:
    doc = yaml.safe_load(DEFAULT_THRESHOLDS.read_text())
    for name, value in _EDITED.items():
        if name in doc["alerts"]:
            doc["alerts"][name]["threshold"] = value
        else:
            doc["alerts"][DATALOADER_BOUND]["causes"][name] = value
    edited = tmp_path / "thresholds.yaml"
    edited.write_text(yaml.safe_dump(doc))
    boards = {name: json.loads(text)
              for name, text in generate.render(load_settings(edited)).items()}
    drawn = {}
    for name, board in boards.items():
        for p in panels(board):
            steps = p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps")
            if steps and len(steps) > 1:
                drawn[(name, p["title"], None)] = steps
            for override in p.get("fieldConfig", {}).get("overrides", []):
                for prop in override["properties"]:
                    if prop["id"] == "thresholds":
                        drawn[(name, p["title"], override["matcher"]["options"])] = \
                            prop["value"]["steps"]
    assert sorted(drawn, key=str) == sorted(_DRAWN, key=str)
    for where, (threshold, bad) in _DRAWN.items():
        steps, value = drawn[where], _EDITED[threshold]
        assert [s["value"] for s in steps[1:]] == [value], where
        under, over = _colour_at(steps, value * 0.97), _colour_at(steps, value * 1.03)
        assert (under, over) == (("red", "green") if bad == "below" else ("green", "red")), where


def test_gpu_hours_panels_turn_usage_records_into_hours_and_gpus(tmp_path: Path) -> None:
    """Three GPUs held for 40 usage intervals, two of them busy, one idle waiting for data, a
    quarter GPU busy with a low MFU: the panels read 2 GPU-hours held (40 min x 3), 4/3
    busy, 2/3 wasted, 1/2 with a low MFU; and 3 GPUs held, 2 busy at any minute."""
    from grafana import gpu_hours
    from trainwatch.contract.records import RecordNames

    settings = load_settings()
    n, interval = RecordNames(settings.rate_window), settings.usage_seconds
    labels = 'experiment="e", trial="t", nodename="n1"'
    gpus = {n.gpu_seconds_held: 3, n.gpu_seconds_busy: 2, n.gpu_seconds_low_mfu: 0.75}
    series = [{"series": f"{n.rolled(record)}{{{labels}}}", "values": f"_ {count * interval}x39"}
              for record, count in gpus.items()]
    series.append({"series": f'{n.rolled(n.gpu_seconds_idle)}{{{labels}, cause="data"}}',
                   "values": f"_ {interval}x39"})
    board = committed()["gpu-hours.json"]
    by_title = {p["title"]: p for p in panels(board)}

    def expr(title: str, ref_id: str) -> str:
        [target] = [t for t in by_title[title]["targets"] if t["refId"] == ref_id]
        return (target["expr"].replace(f"${trial_profile.EXPERIMENT}", ".*")
                .replace(gpu_hours.RANGE, "[1h]"))

    minutes = 40 * interval / 3600
    checks = [(expr("GPU-hours", ref), "50m", value * minutes) for ref, value in
              (("A", 3), ("B", 2), ("C", 1), ("D", 0.75))]
    checks += [(expr("GPUs held and busy", ref), "20m", value)
               for ref, value in (("A", 3), ("B", 2))]
    case = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": e, "eval_time": at, "exp_samples": [{"labels": "{}",
                                                                             "value": v}]}
                             for e, at, v in checks],
    }]}
    path = tmp_path / "gpu_hours_test.yml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    promtool("test", "rules", path)
