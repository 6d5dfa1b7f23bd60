"""`trainwatch usage` on the real rules over known history (issue 40): two trials' raw series
backfilled with promtool (create-blocks-from openmetrics), a loader-bound one in namespace
team-a and a healthy one in team-b, each on its own GPU; then every recording rule the usage
records need, run over that history by promtool itself (create-blocks-from rules), a level of
rules per pass (a rule backfilled reads only what earlier passes wrote), on a real Prometheus;
then the CLI against a Prometheus holding it all with the shipped rules loaded. A live stack
would need minutes: the usage group records once a minute.

The bad input cases: --since beyond retention, an unknown --by, a Prometheus without the usage
rules, one unreachable: one line, exit 2.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import free_port, promtool, start_prometheus
from prometheus.rulegen import load_settings
from prometheus.rulegen.recording import recording_groups
from tests.test_cli_hostile_answers import BROKEN, VALUES, Hostile, assert_one_line_error
from tests.test_cli_hostile_answers import run as hostile_run
from tests.test_cli_hostile_answers import server as hostile_server
from trainwatch import cli
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE
from trainwatch.contract.records import IDLE_CAUSES, RecordNames
from trainwatch.promapi import PrometheusAPI
from trainwatch.report.usage_page import plotted
from trainwatch.usage import required
from trial_instrumentation import names

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "prometheus" / "rules" / "recording.yml"
STEP = 15  # seconds between backfilled samples (a push every 15 s)
BASE = (int(time.time()) - 3 * 3600) // 60 * 60
LIFE = 40 * 60  # each trial runs 40 minutes (its first minute held before its first shares: 2.5%)
# (trial, namespace, user, GPU, its GPU busy, seconds per 1 s step in each phase)
TRIALS = (
    ("slow", "team-a", "alice", "GPU-aaa", 0.1,
     {"dataloader_next": 0.9, "train_batch": 0.1}),
    ("fast", "team-b", "bob", "GPU-bbb", 0.85,
     {"dataloader_next": 0.02, "to_device": 0.03, "train_batch": 0.95}),
)
SAMPLES_PER_STEP, FLOPS, PEAK_FLOPS = 32, 1e12, 1e15
STARTS = {"slow": BASE + 300, "fast": BASE + 600}
END = BASE + 600 + LIFE + 600  # the history's end: both ended minutes before


def _samples() -> list[tuple[str, float, int]]:
    out: list[tuple[str, float, int]] = []
    exporter = 'job="trainwatch-exporter",instance="n1:10910"'
    for t in range(BASE, END + 1, STEP):
        for i, (_, _, _, uuid, busy, _) in enumerate(TRIALS):
            out.append(((f'trainwatch_gpu_utilization_ratio{{{exporter},gpu="{i}",'
                         f'uuid="{uuid}"}}'), busy, t))
            out.append(((f'trainwatch_gpu_peak_flops{{{exporter},gpu="{i}",uuid="{uuid}",'
                         f'dtype="bf16"}}'), PEAK_FLOPS, t))
        # Beside the trials' GPUs: two with a process but no trial (a pod's, a Slurm job's),
        # one with nothing on it; the exporter names its node.
        out.append((f'trainwatch_gpu_utilization_ratio{{{exporter},gpu="2",uuid="GPU-ccc"}}',
                    0.7, t))
        out.append(((f'trainwatch_gpu_process_info{{{exporter},gpu="2",uuid="GPU-ccc",pid="7",'
                     'pod_uid="p-7",container_id="c-7",slurm_job_id=""}'), 1, t))
        out.append((f'trainwatch_gpu_utilization_ratio{{{exporter},gpu="3",uuid="GPU-ddd"}}',
                    0, t))
        out.append((f'trainwatch_gpu_utilization_ratio{{{exporter},gpu="4",uuid="GPU-eee"}}',
                    0.4, t))
        out.append(((f'trainwatch_gpu_process_info{{{exporter},gpu="4",uuid="GPU-eee",pid="8",'
                     'pod_uid="",container_id="",slurm_job_id="81"}'), 1, t))
        out.append((f'trainwatch_host_info{{{exporter},nodename="n1"}}', 1, t))
    for trial, namespace, user, uuid, _, phases in TRIALS:
        key = f'job="trainwatch_trial",experiment="e",trial="{trial}",rank="0"'
        start = STARTS[trial]
        for t in range(start, start + LIFE + 1, STEP):
            age = t - start  # steps of 1 s back to back, pushed as they end
            info = (f'nodename="n1",pid="1",world_size="1",k8s_namespace="{namespace}",'
                    f'k8s_pod="{trial}-0",slurm_job_id="",slurm_job_user="",user="{user}"')
            out += [(f"{names.TRIAL_INFO}{{{key},{info}}}", 1, t),
                    (f'{names.GPU_INFO}{{{key},uuid="{uuid}"}}', 1, t),
                    (f"{names.START_TIME}{{{key}}}", start, t),
                    (f"push_time_seconds{{{key}}}", t, t),
                    (f"{names.STEP_SECONDS}_sum{{{key}}}", age, t),
                    (f"{names.STEP_SECONDS}_count{{{key}}}", age, t),
                    (f"{names.STEPS}_total{{{key}}}", age, t),
                    (f"{names.SAMPLES}_total{{{key}}}", SAMPLES_PER_STEP * age, t)]
            if trial == "fast":  # it says its FLOPs: MFU 32 x 1e12 / 1e15 = 0.032, under 0.2
                out.append((f'{names.MODEL_FLOPS}{{{key},precision="bf16"}}', FLOPS, t))
            out += [(f'{names.PHASE_SECONDS}_sum{{{key},phase="{phase}"}}', share * age, t)
                    for phase, share in phases.items()]
            if t + STEP > start + LIFE:  # its final push says it ended
                out.append((f'{names.EXIT}{{{key},reason="clean"}}', 1, t))
    return out


def _levels(groups: list[dict[str, Any]], wanted: set[str]) -> list[list[tuple[dict[str, Any], dict[str, Any]]]]:
    """The rules ``wanted`` records need, (group, rule) by level: a rule's level is one more
    than the highest of the records its expression reads (0: raw series only)."""
    rules = {r["record"]: (g, r) for g in groups for r in g["rules"] if "record" in r}
    reads = {name: {other for other in rules if other != name and
                    re.search(rf"(?<![\w:]){re.escape(other)}(?![\w:])", rule["expr"])}
             for name, (_, rule) in rules.items()}
    needed: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += reads[name]
    level: dict[str, int] = {}

    def of(name: str) -> int:
        if name not in level:
            level[name] = 1 + max((of(d) for d in reads[name]), default=-1)
        return level[name]

    out: list[list[tuple[dict[str, Any], dict[str, Any]]]] = [[] for _ in
                                                              range(1 + max(map(of, needed)))]
    for name in sorted(needed, key=of):
        out[of(name)].append(rules[name])
    return out


def _pass_file(path: Path, rules: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    groups: dict[str, dict[str, Any]] = {}
    for group, rule in rules:
        found = groups.setdefault(group["name"], {k: v for k, v in group.items() if k != "rules"})
        found.setdefault("rules", []).append(rule)
    path.write_text(yaml.safe_dump({"groups": list(groups.values())}, sort_keys=False))


@pytest.fixture(scope="module")
def usage_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("usage")
    # OpenMetrics: each series' samples together, in time order (a stable sort keeps it).
    ordered = sorted(_samples(), key=lambda sample: sample[0])
    (workdir / "raw.om").write_text("".join(f"{series} {value} {t}\n"
                                            for series, value, t in ordered) + "# EOF\n")
    tsdb = workdir / "tsdb"
    promtool("tsdb", "create-blocks-from", "openmetrics", workdir / "raw.om", tsdb)
    n = RecordNames(load_settings().rate_window)
    # What usage and its page read: the rollups and the fleet's sums (and what they sum).
    wanted = set(required(n)) | set(plotted(n))
    for i, rules in enumerate(_levels(recording_groups(load_settings()), wanted)):
        # One path for every pass: a group's evaluation offset is a hash of its name and file,
        # so a group's rules land on the same instants whichever pass wrote them, as live.
        rule_file, out = workdir / "rules.yml", workdir / f"out{i}"
        _pass_file(rule_file, rules)
        # A lookback under the usage group's 1m: backfilled records have no staleness markers,
        # and a rule reading one a minute after its last sample would see it still (a live
        # Prometheus marks a series stale when its rule stops returning it).
        with start_prometheus(workdir, {"global": {"scrape_interval": "1m"}},
                              "--storage.tsdb.retention.time=30d",
                              "--query.lookback-delta=59s") as prom:
            done = promtool("tsdb", "create-blocks-from", "rules", "--start", str(BASE),
                            "--end", str(END), "--eval-interval", "15s", "--output-dir", out,
                            "--url", prom.url, rule_file)
            assert "error" not in done.stderr.lower(), done.stderr
        for block in out.iterdir():
            shutil.move(str(block), tsdb / block.name)
    shutil.copy(RULES, workdir / "recording.yml")
    with start_prometheus(workdir, {"global": {"scrape_interval": "1m"},
                                    "rule_files": [str(workdir / "recording.yml")]},
                          "--storage.tsdb.retention.time=30d") as prom:
        yield prom.url


def test_every_gpu_hours_panel_query_answers_over_the_history(usage_prometheus: str) -> None:
    """The provisioned "Where the GPU-hours went" dashboard (grafana/gpu_hours.py): each query
    with Grafana's variables put in returns data, with its legend's labels; the totals and the
    tables agree with the records."""
    board = json.loads((REPO / "grafana" / "dashboards" / "gpu-hours.json").read_text())
    api = PrometheusAPI(usage_prometheus)
    since = f"{int(time.time()) - BASE + 300}s"
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for experiment in (".*", "e"):
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$__range", since).replace(
                    "$experiment", experiment)
                result = (api.query(expr) if target.get("instant") else
                          [(labels, values[-1][1]) for labels, values in
                           api.query_range(expr, BASE, END, 60)])
                assert result, (panel["title"], target["refId"], expr)
                legend = set(re.findall(r"\{\{(\w+)\}\}", target.get("legendFormat", "")))
                assert all(legend <= set(labels) for labels, _ in result), panel["title"]
                found[f"{panel['title']}/{target.get('legendFormat')}"] = result
    hours = {label: value for label, value in
             ((k.split("/")[1], v[0][1]) for k, v in found.items() if k.startswith("GPU-hours/"))}
    assert hours["held"] == pytest.approx(hours["busy"] + hours["wasted"])
    namespaces = {labels["k8s_namespace"]: value for labels, value in
                  found["Top namespaces by wasted GPU-hours/__auto"]}
    assert set(namespaces) == {"team-a", "team-b"} and namespaces["team-a"] > namespaces["team-b"]
    assert sum(namespaces.values()) == pytest.approx(hours["wasted"])


def _usage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["usage", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _implied(trial: str) -> dict[str, float]:
    """What the trial's own timings and its GPU imply over its life: GPU-seconds held, busy,
    and idle waiting on data (idle x the dataloader_next share of its step time)."""
    _, _, _, _, busy, phases = next(t for t in TRIALS if t[0] == trial)
    held = float(LIFE)  # one GPU
    idle = held * (1 - busy)
    return {"held": held, "busy": held * busy, "data": idle * phases["dataloader_next"],
            "host_to_device": idle * (phases.get("to_device", 0) + phases.get("from_device", 0))}


def test_usage_by_namespace_says_where_each_gpu_second_went(
        usage_prometheus: str, capsys: pytest.CaptureFixture[str]) -> None:
    since = f"{(int(time.time()) - BASE) // 60 + 5}m"
    code, out, err = _usage(capsys, "--prometheus", usage_prometheus, "--by", "namespace",
                            "--since", since, "--format", "json")
    assert (code, err) == (EXIT_OK, ""), err
    found = json.loads(out)
    groups = {g["group"]: g for g in found["groups"]}
    assert set(groups) == {"team-a", "team-b"}
    a, b = groups["team-a"], groups["team-b"]
    slow, fast = _implied("slow"), _implied("fast")
    # Held: the trial's minutes alive, to the one-minute sample; busy by its GPU (its first
    # minute may count held before its GPU-busy record is there: idle, as it was).
    for g, implied in ((a, slow), (b, fast)):
        assert g["held_gpu_seconds"] == pytest.approx(implied["held"], abs=60)
        busy = implied["busy"] / implied["held"]
        assert g["busy_gpu_seconds"] == pytest.approx(busy * g["held_gpu_seconds"], abs=60 * busy)
    # The loader-bound trial's idle GPU-seconds go to "waiting on data": within 5% of what
    # its own timings imply, per held second (held is counted to the minute).
    per_held = a["wasted_by_cause"]["data"] / a["held_gpu_seconds"]
    assert per_held == pytest.approx(slow["data"] / slow["held"], rel=0.05)
    assert a["wasted_by_cause"]["data"] > 0.85 * a["wasted_gpu_seconds"]  # 0.9 of its step
    # The healthy one wastes little, and little of it on data; its copies are named.
    assert b["wasted_by_cause"]["data"] / b["held_gpu_seconds"] == pytest.approx(
        fast["data"] / fast["held"], rel=0.05)
    assert b["wasted_by_cause"]["host_to_device"] / b["held_gpu_seconds"] == pytest.approx(
        fast["host_to_device"] / fast["held"], rel=0.05)
    assert a["wasted_gpu_seconds"] > 5 * b["wasted_gpu_seconds"]
    assert b["wasted_by_cause"]["straggler"] == a["wasted_by_cause"]["exchange"] == 0
    # Everything adds up: held = busy + wasted, per group and in total.
    for g in (a, b, found["total"]):
        assert g["held_gpu_seconds"] == pytest.approx(
            g["busy_gpu_seconds"] + g["wasted_gpu_seconds"], rel=1e-9)
        assert g["wasted_gpu_seconds"] == pytest.approx(sum(g["wasted_by_cause"].values()))
    assert found["total"]["held_gpu_seconds"] == pytest.approx(
        a["held_gpu_seconds"] + b["held_gpu_seconds"])
    assert a["top_offender"]["trial"] == "slow" and b["top_offender"]["trial"] == "fast"
    assert a["mfu"] is None  # no FLOPs figure: unknown, never 0
    assert b["mfu"] == pytest.approx(SAMPLES_PER_STEP * FLOPS / PEAK_FLOPS, rel=0.05)
    assert b["busy_low_mfu_gpu_seconds"] == pytest.approx(b["busy_gpu_seconds"], abs=60)
    assert a["busy_low_mfu_gpu_seconds"] == 0
    # GPUs outside any trial: GPU-ccc's and GPU-eee's processes all hour long, each its
    # owner's (pod p-7, Slurm job 81) on n1; GPU-ddd all hour, and each trial's GPU the 20
    # minutes it was not held, nobody's; every GPU-second of the 5 GPUs once.
    hour, outside = END - BASE, found["outside_trials"]
    assert outside["uninstrumented_gpu_seconds"] == pytest.approx(2 * hour, abs=120)
    owners = {o["owner"]: o for o in outside["uninstrumented_by_owner"]}
    assert set(owners) == {"pod p-7", "job 81"}, owners  # none for GPU-ddd: no process
    for owner in owners.values():
        assert owner["gpu_seconds"] == pytest.approx(hour, abs=60)
        assert owner["node"] == "n1" and owner["group"] is None  # a pod names no namespace
    # Busy by its GPU's busy: GPU-ccc 70%, GPU-eee 40%.
    for name, busy in (("pod p-7", 0.7), ("job 81", 0.4)):
        assert owners[name]["busy_gpu_seconds"] == pytest.approx(
            busy * owners[name]["gpu_seconds"], rel=1e-6)
    assert (owners["pod p-7"]["pod_uid"], owners["pod p-7"]["slurm_job_id"]) == ("p-7", None)
    assert (owners["job 81"]["pod_uid"], owners["job 81"]["slurm_job_id"]) == (None, "81")
    assert outside["unused_gpu_seconds"] == pytest.approx(hour + 2 * (hour - LIFE), abs=180)
    assert found["total"]["held_gpu_seconds"] + outside["uninstrumented_gpu_seconds"] + \
        outside["unused_gpu_seconds"] == pytest.approx(5 * hour, abs=300)
    assert found["causes"]["data"]["words"] == IDLE_CAUSES["data"] == "waiting on data"
    assert found["causes"]["data"]["verdict"] == "Data loader"


def test_uninstrumented_gpu_seconds_fall_under_their_job_and_node(
        usage_prometheus: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Where the labels say the group: the Slurm job's own id under --by job (a pod's is
    none), the node under --by node; never a namespace, which a pod UID does not name."""
    since = f"{(int(time.time()) - BASE) // 60 + 5}m"
    for by_, wanted in (("job", {"pod p-7": None, "job 81": "81"}),
                        ("node", {"pod p-7": "n1", "job 81": "n1"}),
                        ("namespace", {"pod p-7": None, "job 81": None})):
        code, out, err = _usage(capsys, "--prometheus", usage_prometheus, "--by", by_,
                                "--since", since, "--format", "json")
        assert code == EXIT_OK, err
        owners = json.loads(out)["outside_trials"]["uninstrumented_by_owner"]
        assert {o["owner"]: o["group"] for o in owners} == wanted, by_


def test_usage_table_and_csv_by_user(usage_prometheus: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    since = f"{(int(time.time()) - BASE) // 60 + 5}m"
    code, out, err = _usage(capsys, "--prometheus", usage_prometheus, "--by", "user",
                            "--since", since)
    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert "waiting on data" in lines[1] and lines[2].startswith("alice")
    assert lines[3].startswith("bob") and lines[5].startswith("total")
    assert lines[6].startswith("waiting on data") and lines[7].startswith("host↔device copies")
    assert "as diagnose says it: Data loader. Feed the GPU faster" in out
    assert "e/slow" in lines[2]
    attributed = [line for line in lines if line.startswith("  uninstrumented: ")]
    assert len(attributed) == 2 and {line.split(" on n1: ")[0] for line in attributed} == {
        "  uninstrumented: pod p-7", "  uninstrumented: job 81"}
    assert {line.split("busy ")[1] for line in attributed} == {"(70%)", "(40%)"}
    code, out, _ = _usage(capsys, "--prometheus", usage_prometheus, "--by", "experiment",
                          "--since", since, "--format", "csv")
    rows = out.splitlines()
    assert code == EXIT_OK and rows[0].startswith("experiment,held_gpu_hours")
    assert [r.split(",")[0] for r in rows[1:]] == ["e", "total"]


def test_since_beyond_retention_is_one_line_exit_2(usage_prometheus: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _usage(capsys, "--prometheus", usage_prometheus, "--since", "60d")
    assert (code, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1 and "beyond Prometheus's retention (30d)" in err


def test_without_since_a_week_or_the_retention_where_shorter(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(RULES, tmp_path / "recording.yml")
    with start_prometheus(tmp_path, {"global": {"scrape_interval": "1m"},
                                     "rule_files": [str(tmp_path / "recording.yml")]},
                          "--storage.tsdb.retention.time=2d") as prom:
        code, out, err = _usage(capsys, "--prometheus", prom.url)
        assert code == EXIT_OK and out.startswith("GPU-hours over the last 2d, by experiment"), err
        code, out, err = _usage(capsys, "--prometheus", prom.url, "--since", "3d")
    assert (code, out) == (EXIT_USAGE, "") and "retention (2d)" in err


def test_a_prometheus_without_the_usage_rules_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = yaml.safe_load(RULES.read_text())
    old["groups"] = [g for g in old["groups"] if g["name"] != "trainwatch.usage.rules"]
    (tmp_path / "old.yml").write_text(yaml.safe_dump(old))
    with start_prometheus(tmp_path, {"global": {"scrape_interval": "1m"},
                                     "rule_files": [str(tmp_path / "old.yml")]}) as prom:
        code, out, err = _usage(capsys, "--prometheus", prom.url)
    assert (code, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1 and "has no trainwatch usage rules" in err
    assert "trial_node:trainwatch_trial_gpu_held:seconds_1m" in err


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    """tests/test_cli_hostile_answers.py's hostile Prometheus, for this module."""
    yield from hostile_server.__wrapped__()  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", (*(f"{what}:{v}" for what in ("value", "figure", "stamp")
                                     for v in VALUES),
                                   *(m for m in BROKEN if m not in ("alerts-not-a-list",
                                                                    "threshold-NaN"))))
def test_a_hostile_prometheus_is_one_line_naming_it_and_exit_2(
        hostile: str, mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    """tests/test_cli_hostile_answers.py's server: GPU-seconds that are not finite or under 0,
    answers without their fields or not JSON, no rules loaded. (usage reads no alert and no
    threshold.)"""
    Hostile.mode = mode
    code, out, err = hostile_run(capsys, "usage", "--prometheus", hostile)
    assert_one_line_error("usage", hostile, code, out, err)
    Hostile.mode = "ok"
    code, out, err = hostile_run(capsys, "usage", "--prometheus", hostile, "--by", "node")
    assert code == EXIT_OK and "node-1" in out, err


@pytest.mark.parametrize("argv", [["--by", "team"], ["--since", "0s"], ["--format", "xml"]])
def test_bad_flags_are_one_line_exit_2(argv: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["usage", *argv])
    _, err = capsys.readouterr()
    assert exited.value.code == EXIT_USAGE and err.count("\n") == 1


def test_an_unreachable_prometheus_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _usage(capsys, "--prometheus", f"http://127.0.0.1:{free_port()}",
                            "--timeout", "2")
    assert (code, out) == (EXIT_USAGE, "") and err.count("\n") == 1
