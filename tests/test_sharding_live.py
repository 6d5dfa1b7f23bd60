"""Prometheus sharded by trial, run for real: two shard Prometheus servers with the scrape
relabelling, rules and remote_write the chart renders for `prometheus.shards: 2` (taken from
`helm template` by benchmarks/sharding.py, so test and chart cannot drift; only the targets and
URLs are local), one real
Pushgateway with two trials of three ranks each pushed through the library's push path, a real
Alertmanager, and a central Prometheus receiving the shards' remote_write. A trial's ranks all
land on one shard, the two trials on different shards, the loader-bound trial's alert fires on
its shard and reaches the Alertmanager, its recorded series are queryable centrally,
`trainwatch diagnose` and `report` given both shards find it, and diagnose, trials and report
given the central one alone answer as its shard does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, push_to_gateway

from benchmarks.fleet_shards import shard_of as predicted_shard
from benchmarks.sharding import chart_shard_configs, local_shard_config
from benchmarks.stack import (
    Prometheus,
    Service,
    http_get,
    start_alertmanager,
    start_prometheus,
    start_pushgateway,
    wait_until,
)
from prometheus import generate_rules
from trainwatch.cli import main as trainwatch
from trainwatch.contract.records import RecordNames
from trial_instrumentation import names
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.transport import make_handler

EXPERIMENT = "shard-live"
# Trial -> the share of its rank 0's step spent in dataloader_next; each further rank spends
# RANK_STEP more (every healthy rank under the alert's 0.3), so a figure read for the wrong
# rank shows. Prometheus's hashmod (md5 of "shard-live;<trial>", its last 8 bytes modulo 2)
# puts them on different shards.
TRIALS = {"slow": 0.6, "healthy": 0.05}
RANKS, RANK_STEP = 3, 0.08


def loader_share(trial: str, rank: int | str) -> float:
    return TRIALS[trial] + RANK_STEP * int(rank)
RATE_WINDOW, FOR = "3s", "1s"
RECORDS = RecordNames(RATE_WINDOW)


@dataclass
class Rank:
    trial: str
    rank: int
    state: TrialState
    registry: CollectorRegistry


def make_ranks() -> list[Rank]:
    ranks = []
    for trial in TRIALS:
        for rank in range(RANKS):
            state = TrialState(names.DEFAULT_BUCKETS, {"nodename": f"node-{trial}-{rank}",
                                                       "pid": str(100 + rank),
                                                       "world_size": str(RANKS)}, phase_buckets=())
            registry = CollectorRegistry()
            registry.register(TrialCollector(state))
            ranks.append(Rank(trial, rank, state, registry))
    return ranks


def keep_pushing(url: str, ranks: list[Rank], stop: threading.Event) -> None:
    """Every 0.25 s: a 0.1 s step per rank, its loader share from TRIALS, pushed."""
    handler = make_handler(2.0, 5.0)
    while not stop.is_set():
        for r in ranks:
            loader = 0.1 * loader_share(r.trial, r.rank)
            r.state.phase_histogram(names.DATALOADER_NEXT).observe(loader)
            r.state.phase_histogram(names.TRAIN_BATCH).observe(0.1 - loader)
            r.state.step.observe(0.1)
            r.state.progress.samples += 8
            push_to_gateway(url, names.JOB, r.registry, handler=handler,
                            grouping_key={"experiment": EXPERIMENT, "trial": r.trial,
                                          "rank": str(r.rank)})
        stop.wait(0.25)


@dataclass
class Sharded:
    shards: list[Prometheus]
    central: Prometheus
    alertmanager: Service


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sharded]:
    workdir = tmp_path_factory.mktemp("sharded")
    rules = workdir / "rules"
    generate_rules.write_rules(rules, rate_window=RATE_WINDOW, for_=FOR)
    stop = threading.Event()
    with ExitStack() as stack:
        dirs = {name: workdir / name for name in ("central", "shard-0", "shard-1", "am")}
        for path in dirs.values():
            path.mkdir()
        pgw = stack.enter_context(start_pushgateway(workdir))
        alertmanager = stack.enter_context(start_alertmanager(dirs["am"], {
            "route": {"receiver": "none"}, "receivers": [{"name": "none"}]}))
        central = stack.enter_context(start_prometheus(
            dirs["central"], {"global": {"scrape_interval": "1s"}},
            "--web.enable-remote-write-receiver"))
        shards = [stack.enter_context(start_prometheus(dirs[f"shard-{k}"], local_shard_config(
            chart, rules=rules, pushgateway_url=pgw.url, alertmanager=alertmanager.instance,
            remote_write_url=f"{central.url}/api/v1/write")))
            for k, chart in enumerate(chart_shard_configs(2))]
        pusher = threading.Thread(target=keep_pushing, args=(pgw.url, make_ranks(), stop),
                                  daemon=True)
        pusher.start()
        stack.callback(pusher.join, 10)
        stack.callback(stop.set)
        yield Sharded(shards, central, alertmanager)


def trials_on(prom: Prometheus, metric: str) -> dict[str, int]:
    """{trial: series of ``metric``} of the experiment on one Prometheus."""
    return {s["metric"]["trial"]: int(float(s["value"][1])) for s in prom.query(
        f'count by (trial) ({metric}{{experiment="{EXPERIMENT}"}})')}


def shard_of(sharded: Sharded) -> dict[str, int]:
    """Which shard each trial landed on, once both shards have scraped every rank."""
    def seen() -> list[dict[str, int]] | None:
        found = [trials_on(s, "trainwatch_trial_info") for s in sharded.shards]
        return found if sum(sum(f.values()) for f in found) == len(TRIALS) * RANKS else None

    found = wait_until(seen, timeout=30, what="every rank scraped by a shard", interval=0.2)
    return {trial: k for k, on in enumerate(found) for trial in on}


def test_a_trials_ranks_are_all_on_one_shard_and_the_trials_apart(sharded: Sharded) -> None:
    where = shard_of(sharded)
    assert sorted(where) == sorted(TRIALS)
    assert where["slow"] != where["healthy"], where
    # Where Prometheus's hashmod put each trial is where benchmarks/fleet_shards.py predicts
    # (the sharded fleet benchmark waits for exactly those ranks on each shard).
    assert where == {t: predicted_shard(EXPERIMENT, t, 2) for t in TRIALS}
    # Every series of a trial, not only its info: each rank's phase sums and its group's
    # push_time_seconds, all on the trial's shard and none on the other.
    for metric, per_rank in (("trainwatch_trial_info", 1), ("trainwatch_trial_phase_seconds_sum", 2),
                             ("push_time_seconds", 1)):
        for k, shard in enumerate(sharded.shards):
            assert trials_on(shard, metric) == {t: RANKS * per_rank for t in TRIALS
                                                if where[t] == k}, (metric, k)


def test_the_alert_fires_on_its_shard_and_reaches_the_alertmanager(sharded: Sharded) -> None:
    where = shard_of(sharded)
    home, other = sharded.shards[where["slow"]], sharded.shards[where["healthy"]]
    firing = 'ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing"}'
    alerts = home.wait_for_series(firing, timeout=40)
    assert {(a["metric"]["trial"], a["metric"]["rank"]) for a in alerts} == \
        {("slow", str(r)) for r in range(RANKS)}
    # The healthy trial's shard evaluated the same rule over its own ranks: nothing fires.
    assert other.query(firing) == []
    assert other.query(f'{RECORDS.phase_share}{{trial="healthy", phase="dataloader_next"}} < 0.3')

    def received() -> list[dict[str, Any]]:
        status, body = http_get(f"{sharded.alertmanager.url}/api/v2/alerts")
        return [a for a in json.loads(body) if status == 200
                and a["labels"].get("alertname") == "TrainwatchDataloaderBound"]

    delivered = wait_until(received, timeout=20, what="the alert at the Alertmanager")
    assert {a["labels"]["trial"] for a in delivered} == {"slow"}
    assert "prometheus_shard" not in delivered[0]["labels"]  # only the written series have it


def test_recorded_series_are_queryable_centrally_with_their_shard(sharded: Sharded) -> None:
    where = shard_of(sharded)
    central = sharded.central
    for trial in TRIALS:
        shares = central.wait_for_series(
            f'{RECORDS.phase_share}{{experiment="{EXPERIMENT}", trial="{trial}", '
            f'phase="dataloader_next"}}', timeout=30)
        assert {s["metric"]["rank"] for s in shares} == {str(r) for r in range(RANKS)}
        assert {s["metric"]["prometheus_shard"] for s in shares} == {str(where[trial])}
        for share in shares:  # each rank's own figure
            assert float(share["value"][1]) == pytest.approx(
                loader_share(trial, share["metric"]["rank"]), abs=0.02), (trial, share)
    central.wait_for_series('ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing", '
                            'trial="slow"}', timeout=30)
    assert central.query(f'count(trainwatch_trial_info{{experiment="{EXPERIMENT}"}})')[0][
        "value"][1] == str(len(TRIALS) * RANKS)
    # The raw samples stay on the shards.
    assert central.query('{__name__=~"trainwatch_trial_phase_seconds.*|trainwatch_trial_steps_total"}') == []


def test_diagnose_given_every_shard_reads_the_one_holding_the_trial(
        sharded: Sharded, capsys: pytest.CaptureFixture[str]) -> None:
    where = shard_of(sharded)
    sharded.shards[where["slow"]].wait_for_series(
        'ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing"}', timeout=40)
    urls = [arg for s in sharded.shards for arg in ("--prometheus", s.url)]
    code = trainwatch(["diagnose", *urls, "--experiment", EXPERIMENT, "--trial", "slow",
                       "--format", "json"])
    out = capsys.readouterr().out
    reports = json.loads(out)["reports"]
    assert code == 1, out
    assert {r["rank"] for r in reports} == {str(r) for r in range(RANKS)}
    assert {r["verdict"]["kind"] for r in reports} == {"dataloader"}, out
    for report in reports:  # each rank judged by its own share, read from the shard holding it
        assert report["verdict"]["measured"] == pytest.approx(
            loader_share("slow", report["rank"]), abs=0.02), report["verdict"]
    # A trial on no shard is one line and exit 2, naming every server asked.
    code = trainwatch(["diagnose", *urls, "--experiment", EXPERIMENT, "--trial", "absent"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and all(s.url in err for s in sharded.shards), err
    # trials lists every shard's ranks; compare reads one server, so two trials on two shards
    # is one line and exit 2.
    assert trainwatch(["trials", *urls, "--experiment", EXPERIMENT, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["trials"]
    assert sorted((r["trial"], r["rank"]) for r in rows) == \
        sorted((t, str(r)) for t in TRIALS for r in range(RANKS))
    code = trainwatch(["compare", *urls, f"{EXPERIMENT}/slow", f"{EXPERIMENT}/healthy"])
    err = capsys.readouterr().err
    assert code == 2 and "different Prometheus servers" in err and err.count("\n") == 1, err


def test_report_given_every_shard_reads_the_one_holding_the_trial(
        sharded: Sharded, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    where = shard_of(sharded)
    sharded.shards[where["slow"]].wait_for_series(
        'ALERTS{alertname="TrainwatchDataloaderBound", alertstate="firing"}', timeout=40)
    urls = [arg for s in sharded.shards for arg in ("--prometheus", s.url)]
    page = tmp_path / "slow.html"
    code = trainwatch(["report", *urls, "--experiment", EXPERIMENT, "--trial", "slow",
                       "-o", str(page)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "3 rank(s)" in out
    html = page.read_text()
    assert html.count('data-kind="dataloader"') == RANKS
    assert sharded.shards[where["slow"]].url in html
    assert "Thresholds" not in html  # the shard's own rules: nothing to say
    code = trainwatch(["report", *urls, "--experiment", EXPERIMENT, "--trial", "absent",
                       "-o", str(tmp_path / "absent.html")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and all(s.url in err for s in sharded.shards), err
    assert not (tmp_path / "absent.html").exists()


def test_the_central_server_alone_answers_as_the_shard_holding_the_trial(
        sharded: Sharded, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The global view loads no rules and holds no raw series: diagnose, trials and report
    read its recorded series and judge them by the thresholds this trainwatch ships, and say
    so; the verdict and its figures are the shard's."""
    where = shard_of(sharded)
    home, central = sharded.shards[where["slow"]], sharded.central
    central.wait_for_series('ALERTS{alertname="TrainwatchDataloaderBound", '
                            'alertstate="firing", trial="slow"}', timeout=40)

    def diagnose(url: str, *more: str) -> tuple[int, str]:
        code = trainwatch(["diagnose", "--prometheus", url, "--experiment", EXPERIMENT,
                           "--trial", "slow", *more])
        return code, capsys.readouterr().out

    (home_code, home_out), (code, out) = diagnose(home.url, "--format", "json"), \
        diagnose(central.url, "--format", "json")
    assert (code, home_code) == (1, 1), out
    mine, theirs = json.loads(out), json.loads(home_out)
    assert "thresholds_from" not in theirs
    said, = mine["thresholds_from"]
    assert "thresholds.yaml" in said and central.url in said and "global view" in said
    central_reports = {r["rank"]: r for r in mine["reports"]}
    home_reports = {r["rank"]: r for r in theirs["reports"]}
    assert sorted(central_reports) == sorted(home_reports) == [str(r) for r in range(RANKS)]
    for rank, there in home_reports.items():
        here = central_reports[rank]
        for key in ("kind", "title", "bottleneck", "threshold", "alert", "remedy",
                    "runbook_url", "metric", "exit_code"):
            assert here["verdict"][key] == there["verdict"][key], (rank, key)
        assert here["verdict"]["kind"] == "dataloader"
        assert abs(here["verdict"]["measured"] - there["verdict"]["measured"]) < 0.02
        assert here["window"] == there["window"] == RATE_WINDOW
        shares = {p["phase"]: p["share"] for p in here["phases"]}
        assert set(shares) == {p["phase"] for p in there["phases"]}
        assert abs(shares[names.DATALOADER_NEXT] - loader_share("slow", rank)) < 0.02
        assert abs(here["verdict"]["measured"] - loader_share("slow", rank)) < 0.02
        assert here["step_seconds"].keys() == there["step_seconds"].keys() != set()
        assert here["ranks"]["vs_median"] == pytest.approx(there["ranks"]["vs_median"], 0.05)
        # Its alerts: the ALERTS series the shard wrote, as the shard's own alerts list them.
        assert [(a["name"], a["state"]) for a in here["alerts"]] == \
            [(a["name"], a["state"]) for a in there["alerts"]] == \
            [("TrainwatchDataloaderBound", "firing")]
    code, text = diagnose(central.url)
    assert code == 1 and text.startswith(f"thresholds: {said}\n"), text
    # What only the raw series give is refused in one line, not answered from nothing.
    assert trainwatch(["diagnose", "--prometheus", central.url, "--experiment", EXPERIMENT,
                       "--window", "1m"]) == 2
    err = capsys.readouterr().err
    assert "--window" in err and "global view" in err and err.count("\n") == 1, err
    assert trainwatch(["compare", "--prometheus", central.url, f"{EXPERIMENT}/slow",
                       f"{EXPERIMENT}/healthy"]) == 2
    err = capsys.readouterr().err
    assert "raw counters" in err and "global view" in err and err.count("\n") == 1, err
    # trials over the global view lists both shards' trials, with the shards' causes.
    assert trainwatch(["trials", "--prometheus", central.url, "--experiment", EXPERIMENT,
                       "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["thresholds_from"] == [said]
    assert {(r["trial"], r["rank"], r["cause"]) for r in listed["trials"]} == \
        {(t, str(r), "dataloader" if t == "slow" else "no_gpu_metrics")
         for t in TRIALS for r in range(RANKS)}
    # report too: its verdict for every rank, saying where the thresholds came from.
    page = tmp_path / "central.html"
    assert trainwatch(["report", "--prometheus", central.url, "--experiment", EXPERIMENT,
                       "--trial", "slow", "-o", str(page)]) == 0, capsys.readouterr().err
    html = page.read_text()
    assert html.count('data-kind="dataloader"') == RANKS and "global view" in html
