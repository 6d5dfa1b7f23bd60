"""A fleet of simulated ranks in pull mode: real scrape targets, listed to a real Prometheus by
file-based service discovery, scraped at 10 s with the trainwatch rules loaded.

    .venv/bin/python -m benchmarks.fleet_pull [--sizes 1000,4000,10000] [--rounds 12]
        [--phase-buckets default,none] [--rules-from DIR] [--max-rss-gib 8] [--shards N]

``--shards N``: the ranks split by trial over N Prometheus servers as the chart splits them
(benchmarks/fleet_shards.py), each measured in turn with the machine to itself, as on a node of
its own, then the central Prometheus their remote_write fed (the global view).

How the ranks are served: one process, one asyncio HTTP/1.1 server (keep-alive, no gzip) on one
loopback port, one path per rank: ``/rank/<i>/metrics``. Each body is what a pull-mode trial
serves on its ``/metrics`` (the library's TrialCollector and LoaderProcessCollector with the
grouping key as labels, as ``Trial`` registers them when ``TRAINWATCH_PULL_PORT`` is set: the
six standard phases, the step histogram, samples, info, the loader's process tree), training
as a healthy rank does (train_batch most of the step: no trial alert fires). Rendering
10,000 registries every 10 s would take this 2-core machine more than the interval, so
``TEMPLATES`` states are trained and rendered with ``generate_latest`` each interval, their
trial/rank/nodename/pid label values left as tokens, and a rank's body is its template with its
own values spliced in when Prometheus asks: the same text a rank would serve, its counters
moving every interval. The file_sd file gives each target its ``__metrics_path__`` and the
labels the chart's pull-mode job gives a pod (a unique ``instance``, ``namespace``, ``pod``);
the job is the rules' trial job with ``honor_labels``, so experiment/trial/rank come from the
page, as they do from a real trial's.

Per size and ``--phase-buckets`` setting, a fresh Prometheus (10 s scrape and evaluation, the
committed rules or ``--rules-from``), ``--rounds`` rounds of 10 s, every wait with a deadline.
Prints: scrape duration p50/p99 (every target's ``scrape_duration_seconds`` over the rounds),
samples scraped per second, head series, Prometheus's RSS, each rule group's evaluation time
(the largest over the last half of the rounds) against its interval with its slowest
rule, the costliest rules, Prometheus's CPU (cores, mean over the rounds), the
query time of the dashboards' heaviest queries (every panel query of the Fleet and Trial profile
dashboards, timed as instant queries through the HTTP API) and of ``trainwatch diagnose`` (one
trial, each of its queries timed; the whole experiment, wall time), and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from unittest import mock

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.fleet_scale import PHASE_BUCKETS, quantile, train
from benchmarks.fleet_shards import pod_labels, shard_of, shard_scrape
from benchmarks.http_load import proc_status
from benchmarks.stack import Prometheus, start_prometheus, wait_until
from prometheus import generate_rules
from trainwatch.promapi import PrometheusAPI
from trial_instrumentation import names
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.loader_processes import LoaderProcessCollector, process_tree

REPO = Path(__file__).resolve().parent.parent
INTERVAL = 10.0  # the library's push interval: pulled ranks are scraped as often
RANKS_PER_TRIAL = 8
EXPERIMENT = "fleet"
TEMPLATES = 16  # distinct trained states; rank i serves template i % TEMPLATES
_TOKEN = re.compile(rb"@(TRIAL|RANK|NODE|PID)@")
_PATH = re.compile(rb"^/rank/([0-9]{1,7})/metrics$")
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
DASHBOARDS = ("fleet.json", "trial-profile.json")


def rank_labels(index: int) -> dict[bytes, bytes]:
    """The token values of rank ``index``: its trial, rank, node (8 ranks a node) and pid."""
    trial, rank = divmod(index, RANKS_PER_TRIAL)
    return {b"TRIAL": f"t{trial}".encode(), b"RANK": str(rank).encode(),
            b"NODE": f"node{index // 8}".encode(), b"PID": str(1000 + index).encode()}


class RankPages:
    """The ``/metrics`` bodies of ``size`` pulled ranks, from ``TEMPLATES`` trained states."""

    def __init__(self, size: int, phase_buckets: tuple[float, ...] | None,
                 seed: int = 0) -> None:
        self.size = size
        self._rng = random.Random(seed)
        self._registries: list[tuple[TrialState, CollectorRegistry]] = []
        key = {"experiment": EXPERIMENT, "trial": "@TRIAL@", "rank": "@RANK@"}
        for _ in range(min(size, TEMPLATES)):
            state = TrialState(names.DEFAULT_BUCKETS,
                               {"nodename": "@NODE@", "pid": "@PID@",
                                "world_size": str(RANKS_PER_TRIAL)},
                               phase_buckets=phase_buckets, started_at=time.time())
            registry = CollectorRegistry()
            registry.register(TrialCollector(state, key))
            registry.register(LoaderProcessCollector(process_tree, key))
            self._registries.append((state, registry))
        self._parts: list[list[bytes]] = []
        self.refresh()

    def refresh(self) -> None:
        """Train every template a round's worth of steps and render it again."""
        parts = []
        for state, registry in self._registries:
            train(state, self._rng, healthy=True)
            parts.append(_TOKEN.split(generate_latest(registry)))
        self._parts = parts  # one assignment: a request reads the old list or the new one

    def body(self, index: int) -> bytes | None:
        """Rank ``index``'s page, or None past the fleet."""
        if not 0 <= index < self.size:
            return None
        parts, values = self._parts[index % len(self._parts)], rank_labels(index)
        return b"".join(part if i % 2 == 0 else values[part] for i, part in enumerate(parts))

    def page(self, path: bytes) -> bytes | None:
        """The body for a request path ``/rank/<i>/metrics``, else None."""
        found = _PATH.match(path.split(b"?", 1)[0])
        return self.body(int(found.group(1))) if found else None


class TargetServer:
    """Every rank's page from one asyncio HTTP/1.1 server (keep-alive) in a thread."""

    def __init__(self, pages: RankPages) -> None:
        self.pages = pages
        self.served = 0  # pages answered (200)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-pull-targets", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
                body = self.pages.page(path) if method == b"GET" else None
                status = b"200 OK" if body is not None else b"404 Not Found"
                self.served += body is not None  # before the write: a reader sees it counted
                body = body if body is not None else b"not found\n"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + CONTENT_TYPE
                             + b"\r\nContent-Length: " + str(len(body)).encode()
                             + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ValueError):
            pass
        finally:
            writer.close()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the target server did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def file_sd_groups(port: int, size: int) -> list[dict[str, Any]]:
    """One file_sd target group per rank: its path on the shared port, and the labels the
    chart's pull-mode job gives a pod (instance unique per rank, namespace, pod), and the
    discovery labels the chart's job relabels a pod by (``--shards``: its trial's shard)."""
    groups = []
    for index in range(size):
        trial, rank = divmod(index, RANKS_PER_TRIAL)
        groups.append({"targets": [f"127.0.0.1:{port}"],
                       "labels": {"__metrics_path__": f"/rank/{index}/metrics",
                                  "instance": f"127.0.0.1:{port}/rank/{index}",
                                  "namespace": EXPERIMENT, "pod": f"t{trial}-rank{rank}",
                                  **pod_labels(EXPERIMENT, f"t{trial}", f"t{trial}-rank{rank}",
                                               port)}})
    return groups


def write_file_sd(path: Path, groups: list[dict[str, Any]]) -> None:
    """Write ``groups`` as a file_sd JSON file, whole or not at all (Prometheus watches it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def pull_job(sd_file: Path) -> dict[str, Any]:
    """The scrape job: the rules' trial job, honor_labels as the chart's, targets from file."""
    return {"job_name": names.JOB, "honor_labels": True,
            "scrape_interval": f"{INTERVAL:g}s", "scrape_timeout": f"{INTERVAL:g}s",
            "file_sd_configs": [{"files": [str(sd_file)]}]}


def dashboard_queries(trial: str = "t0") -> list[tuple[str, str]]:
    """(dashboard: panel, expr) of every panel query of the Fleet and Trial profile dashboards,
    their variables set to one experiment, one trial and every rank."""
    values = {"$experiment": EXPERIMENT, "$trial": trial, "$rank": ".*", "$instance": ".*",
              "$gpu": ".*"}
    found = []
    for name in DASHBOARDS:
        board = json.loads((REPO / "grafana" / "dashboards" / name).read_text())

        def panels(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
            for panel in node.get("panels", []):
                yield panel
                yield from panels(panel)

        for panel in panels(board):
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                for var, value in values.items():
                    expr = expr.replace(var, value)
                if expr:
                    found.append((f"{name.removesuffix('.json')}: {panel.get('title')}", expr))
    return found


def timed_query(url: str, expr: str, timeout: float = 60.0) -> float:
    """Seconds one instant query takes through the HTTP API (failures raise)."""
    query = urllib.parse.urlencode({"query": expr})
    start = time.perf_counter()
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=timeout) as resp:
        doc = json.loads(resp.read())
    if doc.get("status") != "success":
        raise RuntimeError(f"query failed: {doc}")
    return time.perf_counter() - start


def time_dashboards(url: str, trial: str) -> list[tuple[float, str]]:
    """(seconds, title) of every dashboard panel query for ``trial``, slowest first; a failed
    query is infinitely slow, its error in its title."""
    queries = []
    for title, expr in dashboard_queries(trial):
        try:
            queries.append((timed_query(url, expr), title))
        except (OSError, RuntimeError) as exc:
            queries.append((float("inf"), f"{title} ({exc})"))
    return sorted(queries, reverse=True)


def time_diagnose(url: str, trial: str = "t0") -> tuple[float, list[tuple[float, str]]]:
    """``trainwatch diagnose`` of one trial, in process: its wall time and each API call's."""
    from trainwatch.cli import main as cli

    calls: list[tuple[float, str]] = []
    real_get = PrometheusAPI.get

    def get(self: PrometheusAPI, path: str, **params: str) -> Any:
        start = time.perf_counter()
        try:
            return real_get(self, path, **params)
        finally:
            calls.append((time.perf_counter() - start, params.get("query", path)))

    start = time.perf_counter()
    with mock.patch.object(PrometheusAPI, "get", get), open(os.devnull, "w") as sink, \
            mock.patch.object(sys, "stdout", sink):
        code = cli(["diagnose", "--prometheus", url, "--timeout", "60", "--experiment",
                    EXPERIMENT, "--trial", trial])
    if code not in (0, 1):  # 1: a finding; 2: it could not diagnose
        raise RuntimeError(f"trainwatch diagnose exited {code}")
    return time.perf_counter() - start, sorted(calls, reverse=True)


def diagnose_experiment(url: str, timeout: float) -> str:
    """Wall time of ``trainwatch diagnose`` of the whole experiment, in a bounded subprocess."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "trainwatch.cli", "diagnose", "--prometheus", url,
                        "--timeout", str(timeout), "--experiment", EXPERIMENT, "--format",
                        "json"], capture_output=True, timeout=timeout, check=False, cwd=REPO)
    except subprocess.TimeoutExpired:
        return f"> {timeout:g} s (stopped)"
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a finding; 2: it could not diagnose
        return f"failed ({done.returncode}) after {took:.2f} s: {done.stderr.decode()[-200:]!r}"
    return f"{took:.2f} s"


def api(prom: Prometheus, path: str, **params: str) -> Any:
    """``/api/v1/<path>``'s data, waiting up to 120 s (a loaded server answers slowly; the
    harness's own helper waits 5 s)."""
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{prom.url}/api/v1/{path}?{query}", timeout=120) as resp:
        doc = json.loads(resp.read())
    if doc.get("status") != "success":
        raise RuntimeError(f"Prometheus {path} {params} failed: {doc}")
    return doc["data"]


def query(prom: Prometheus, expr: str) -> list[dict[str, Any]]:
    return list(api(prom, "query", query=expr)["result"])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rule_cpu(prom: Prometheus, rules: Path, at: float, repeat: int = 3) -> dict[str, float]:
    """Prometheus's CPU seconds per evaluation of each group of ``rules`` (*.yml), its rules'
    expressions run as instant queries at ``at`` wrapped in count() (no result to encode).
    Prometheus must be idle (``quiesce``): the CPU it uses meanwhile is the queries'. Unlike
    evaluationTime, this does not grow while the process waits for a CPU on a loaded machine."""
    cost: dict[str, float] = {}
    for path in sorted(rules.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            before = cpu_seconds(prom.proc.pid)
            for _ in range(repeat):
                for rule in group["rules"]:
                    api(prom, "query", query=f"count(({rule['expr']}))", time=f"{at:.3f}")
            cost[group["name"]] = (cpu_seconds(prom.proc.pid) - before) / repeat
    return cost


def quiesce(prom: Prometheus, workdir: Path) -> None:
    """Reload ``prom`` with no scrape job and no rule: only the queries run from here on."""
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(
        {"global": {"scrape_interval": f"{INTERVAL:g}s"}, "scrape_configs": []}))
    request = urllib.request.Request(f"{prom.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=120):
        pass


def load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def head_stats(prom: Prometheus) -> dict[str, float]:
    text = urllib.request.urlopen(f"{prom.url}/metrics", timeout=30).read().decode()
    wanted = ("prometheus_tsdb_head_series", "prometheus_tsdb_head_samples_appended_total",
              "process_cpu_seconds_total")
    found: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


@contextmanager
def rules_dir(rules_from: Path | None) -> Iterator[Path]:
    if rules_from is not None:
        yield rules_from
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate_rules.write_rules(Path(tmp))
        yield Path(tmp)


def run_size(size: int, rounds: int, setting: str, rules_from: Path | None,
             max_rss: float, diagnose_timeout: float, cost_rules: list[Path],
             shards: int = 1) -> None:
    label = f"{size:>6} ranks, phase buckets {setting}"
    print(f"{label}: load average at start {load()}", flush=True)
    pages = RankPages(size, PHASE_BUCKETS[setting], seed=size)
    with tempfile.TemporaryDirectory() as tmp, rules_dir(rules_from) as rules, \
            TargetServer(pages) as server:
        workdir = Path(tmp)
        sd_file = workdir / "ranks.json"
        write_file_sd(sd_file, file_sd_groups(server.port, size))
        run = Run(pages, server, rules, rounds, max_rss, diagnose_timeout, cost_rules)
        config = {"global": {"scrape_interval": f"{INTERVAL:g}s",
                             "evaluation_interval": f"{INTERVAL:g}s"},
                  "rule_files": [str(rules / "*.yml")], "scrape_configs": [pull_job(sd_file)]}
        if shards == 1:
            measure(run, workdir / "prometheus", config, label, size, "t0")
            return
        (workdir / "central").mkdir()
        with start_prometheus(workdir / "central", {"global": {"scrape_interval": "1m"}},
                              "--web.enable-remote-write-receiver") as central:
            jobs, writes = shard_scrape(shards, sd_file, central.url, INTERVAL)
            trials = -(-size // RANKS_PER_TRIAL)
            for k in range(shards):
                mine = [t for t in range(trials) if shard_of(EXPERIMENT, f"t{t}", shards) == k]
                ranks = sum(min(RANKS_PER_TRIAL, size - RANKS_PER_TRIAL * t) for t in mine)
                (workdir / f"shard-{k}").mkdir()
                measure(run, workdir / f"shard-{k}",
                        {**config, "scrape_configs": [jobs[k]], "remote_write": [writes[k]]},
                        f"{label}, shard {k}/{shards} ({len(mine)} trials, {ranks} ranks)",
                        ranks, f"t{mine[0]}")
            measure_central(central, f"{label}, central (remote_write of {shards} shards)")


@dataclass(frozen=True)
class Run:
    """What every Prometheus of one size is measured against."""

    pages: RankPages
    server: TargetServer
    rules: Path
    rounds: int
    max_rss: float
    diagnose_timeout: float
    cost_rules: list[Path]


def measure_central(central: Prometheus, label: str) -> None:
    """The global view after the shards ran: what reached it, and the dashboards and diagnose
    read from it alone (Grafana's datasource in the sharded chart)."""
    stats = head_stats(central)
    shards = sorted((s["metric"].get("prometheus_shard", "?"), int(float(s["value"][1])))
                    for s in query(central, "count by (prometheus_shard) "
                                   f"(last_over_time({names.TRIAL_INFO}[1h]))"))
    queries = time_dashboards(central.url, "t0")
    try:
        wall, calls = time_diagnose(central.url)
        diag = f"one trial {wall:.2f} s ({len(calls)} API calls)"
    except Exception as exc:  # noqa: BLE001 - a broken diagnose must not lose the run
        diag = f"one trial failed: {exc!r}"
    rss = proc_status(central.proc.pid, "VmRSS") / 2**20
    print(f"{label}: head series {stats['prometheus_tsdb_head_series']:,.0f}, RSS {rss:.2f} GiB, "
          "ranks received per shard " + ", ".join(f"{k}: {n}" for k, n in shards))
    print(f"        dashboards: {len(queries)} queries, {sum(q for q, _ in queries):.2f} s in "
          "all; slowest " + "; ".join(f"{t} {q:.3f} s" for q, t in queries[:3]))
    print(f"        diagnose {diag}; load average {load()}", flush=True)


def measure(run: Run, workdir: Path, config: dict[str, Any], label: str, size: int,
            trial: str) -> None:
    """One Prometheus with ``config`` scraping ``size`` of the ranks for ``run.rounds`` rounds:
    its figures, printed under ``label``; ``trial`` (one it holds) for the queries."""
    pages, server, rules, rounds = run.pages, run.server, run.rules, run.rounds
    max_rss, diagnose_timeout, cost_rules = run.max_rss, run.diagnose_timeout, run.cost_rules
    workdir.mkdir(exist_ok=True)
    with start_prometheus(workdir, config) as prom:
        started = time.monotonic()
        wait_until(lambda: query(prom, f'count(up{{job="{names.JOB}"}} == 1) == {size}'),
                   timeout=36 * INTERVAL, what=f"all {size} targets up", interval=2.0)
        print(f"        every target up {time.monotonic() - started:.0f} s after Prometheus "
              "was ready", file=sys.stderr, flush=True)
        began = time.time()
        groups: dict[str, tuple[float, float]] = {}  # name -> (max evaluation, interval)
        slowest: dict[str, tuple[float, str]] = {}  # group -> its slowest rule then
        rss = 0.0
        first = head_stats(prom)
        for round_ in range(rounds):
            start = time.monotonic()
            pages.refresh()
            rss = max(rss, proc_status(prom.proc.pid, "VmRSS") / 2**20)
            if round_ >= rounds // 2:
                for group in api(prom, "rules")["groups"]:
                    name = group["name"]
                    if group["evaluationTime"] >= groups.get(name, (0.0, 0.0))[0]:
                        groups[name] = (group["evaluationTime"], group["interval"])
                        slowest[name] = max((r.get("evaluationTime", 0.0), r.get("name", ""))
                                            for r in group["rules"])
            print(f"        round {round_ + 1}/{rounds}: served {server.served}, RSS "
                  f"{rss:.2f} GiB, load {load()}", file=sys.stderr, flush=True)
            if rss > max_rss:
                print(f"{label}: stopped after round {round_ + 1}: Prometheus RSS "
                      f"{rss:.2f} GiB > {max_rss:g} GiB")
                break
            time.sleep(max(0.0, INTERVAL - (time.monotonic() - start)))
        spent = time.time() - began
        last = head_stats(prom)
        window = f"{max(INTERVAL, spent):.0f}s"
        durations = [float(v) for s in query(prom,
            f'scrape_duration_seconds{{job="{names.JOB}"}}[{window}]')
            for _, v in s["values"]]
        [scraped] = query(prom, f'sum(scrape_samples_scraped{{job="{names.JOB}"}})')
        failed = query(prom, f'count(up{{job="{names.JOB}"}} == 0)')
        costly = sorted(((r.get("evaluationTime", 0.0), r.get("name", ""))
                         for g in api(prom, "rules")["groups"] for r in g["rules"]),
                        reverse=True)[:5]
        queries = time_dashboards(prom.url, trial)
        try:
            diag_wall, diag_calls = time_diagnose(prom.url, trial)
            diag = (f"one trial {diag_wall:.2f} s ({len(diag_calls)} API calls; slowest "
                    f"{diag_calls[0][0]:.3f} s: {diag_calls[0][1][:120]!r})")
        except Exception as exc:  # noqa: BLE001 - a broken diagnose must not lose the run
            diag = f"one trial failed: {exc!r}"
        diag_all = diagnose_experiment(prom.url, diagnose_timeout)
        rss = max(rss, proc_status(prom.proc.pid, "VmRSS") / 2**20)
        end_load = load()
        costs = {}
        if cost_rules:
            quiesce(prom, workdir)
            for source in (rules, *cost_rules):
                costs[source] = rule_cpu(prom, source, began + spent)
    appended = (last["prometheus_tsdb_head_samples_appended_total"]
                - first["prometheus_tsdb_head_samples_appended_total"]) / spent
    cores = (last["process_cpu_seconds_total"] - first["process_cpu_seconds_total"]) / spent
    print(f"{label}: scrape p50 {quantile(durations, 0.5) * 1e3:.1f} ms, p99 "
          f"{quantile(durations, 0.99) * 1e3:.1f} ms ({len(durations)} scrapes, "
          f"{len(failed) and int(float(failed[0]['value'][1]))} targets down at the end)")
    print(f"        samples scraped {float(scraped['value'][1]) / INTERVAL:,.0f}/s "
          f"(appended {appended:,.0f}/s), head series {last['prometheus_tsdb_head_series']:,.0f}, "
          f"Prometheus RSS {rss:.2f} GiB (max over the run), CPU {cores:.2f} cores "
          "(mean over the rounds)")
    for name, (worst, interval) in sorted(groups.items()):
        seconds, rule = slowest[name]
        print(f"        rule group {name}: {worst:.3f} s of {interval:g} s "
              f"({worst / interval:.0%}; slowest rule {rule} {seconds:.3f} s)")
    print("        costliest rules: " + ", ".join(f"{n} {s:.3f} s" for s, n in costly))
    print(f"        dashboards: {len(queries)} queries, {sum(q for q, _ in queries):.2f} s in "
          "all; slowest " + "; ".join(f"{t} {q:.3f} s" for q, t in queries[:3]))
    print(f"        diagnose {diag}; the whole experiment {diag_all}")
    print(f"        load average at end {end_load}", flush=True)
    for source, cost in costs.items():
        print(f"        rule CPU per evaluation ({source}): {sum(cost.values()):.2f} s in all; "
              + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in cost.items()),
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,10000",
                        help="comma-separated rank counts (default: 1000,4000,10000)")
    parser.add_argument("--rounds", type=int, default=12,
                        help="rounds of 10 s per size after every target is up (default 12)")
    parser.add_argument("--phase-buckets", default="default,none",
                        help="comma-separated: default (19 bounds), none (sums and counts only)")
    parser.add_argument("--rules-from", type=Path,
                        help="a directory of rule files to load instead of a fresh render "
                             "(e.g. an older checkout's prometheus/rules)")
    parser.add_argument("--max-rss-gib", type=float, default=8.0,
                        help="stop a size once Prometheus's RSS passes this (default 8)")
    parser.add_argument("--cost-rules", type=Path, action="append", default=[],
                        help="after the run, stop scraping and evaluating and measure "
                             "Prometheus's CPU seconds per evaluation of each rule group, of the "
                             "loaded rules and of these (repeatable; e.g. an older checkout's)")
    parser.add_argument("--shards", type=int, default=1,
                        help="split the ranks by trial over this many Prometheus servers as the "
                             "chart does (prometheus.shards), each measured in turn, with a "
                             "central one receiving their remote_write (default 1: one server)")
    parser.add_argument("--diagnose-timeout", type=float, default=30.0,
                        help="seconds `trainwatch diagnose` of the whole experiment may take "
                             "(default 30)")
    args = parser.parse_args(argv)
    # A stopped run stops its Prometheus too (the context managers' exits run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s) for s in args.sizes.split(",")]
    settings = args.phase_buckets.split(",")
    if any(s < 1 for s in sizes) or args.rounds < 2 or args.shards < 1:
        parser.error("--sizes and --shards must be >= 1 and --rounds >= 2")
    if unknown := [s for s in settings if s not in PHASE_BUCKETS]:
        parser.error(f"--phase-buckets: {unknown} not among {list(PHASE_BUCKETS)}")
    if args.rules_from is not None and not list(args.rules_from.glob("*.yml")):
        parser.error(f"--rules-from: no *.yml in {args.rules_from}")
    print(f"fleet_pull: {args.rounds} rounds of {INTERVAL:g} s per size, {RANKS_PER_TRIAL} "
          f"ranks per trial, rules from {args.rules_from or 'a fresh render'}"
          + (f", {args.shards} shards by trial (the chart's)" if args.shards > 1 else ""))
    for size in sizes:
        for setting in settings:
            try:
                run_size(size, args.rounds, setting, args.rules_from, args.max_rss_gib,
                         args.diagnose_timeout, args.cost_rules, args.shards)
            except (TimeoutError, RuntimeError) as exc:
                print(f"{size:>6} ranks, phase buckets {setting}: gave up: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
