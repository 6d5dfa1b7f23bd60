"""A fleet of simulated ranks pushing to one real Pushgateway, scraped by a real Prometheus with
the trainwatch rules loaded: where push mode stops scaling.

    .venv/bin/python -m benchmarks.fleet_scale [--sizes 100,1000,4000] [--rounds 3]
        [--phase-buckets default,none]

For each size N, a fresh Pushgateway and Prometheus (10 s scrape and rule evaluation, the
committed rules) and N groups (experiment/trial/rank), each a trial_instrumentation TrialState
with the six standard phases, the step histogram, samples and info, pushed every 10 s through
the library's own push path (prometheus_client's push_to_gateway with trial_instrumentation's
bounded-timeout handler, as Pusher does) by a pool of threads. Bounded: ``--rounds`` rounds of
10 s per size, and every wait has a deadline. Prints, per size: push latency p50/p99 and the
pushes that finished inside the interval, the Pushgateway's /metrics size and how long it takes
to serve (our GET, and Prometheus's scrape_duration_seconds), the Pushgateway's RSS, the rule
groups' last evaluation time (prometheus_rule_group_last_duration_seconds) and head series.
Each size runs once per ``--phase-buckets`` setting, side by side: ``default`` (the phase
histograms with the step histogram's 19 bounds) and ``none`` (TRAINWATCH_PHASE_BUCKETS=none: the
phases' sums and counts only).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from prometheus_client import CollectorRegistry, push_to_gateway

from benchmarks.http_load import proc_status
from benchmarks.stack import scrape_config, start_prometheus, start_pushgateway, wait_until
from prometheus import generate_rules
from trial_instrumentation import names
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.transport import make_handler

INTERVAL = 10.0  # the library's default push interval, and the scrape/evaluation interval
RANKS_PER_TRIAL = 8
STEPS_PER_ROUND = 50


class Rank:
    """One simulated rank: its state, registry and grouping key."""

    def __init__(self, index: int, phase_buckets: tuple[float, ...] | None) -> None:
        trial, rank = divmod(index, RANKS_PER_TRIAL)
        self.key = {"experiment": "fleet", "trial": f"t{trial}", "rank": str(rank)}
        self.state = TrialState(names.DEFAULT_BUCKETS, {"nodename": f"node{index // 8}",
                                                        "pid": str(1000 + index),
                                                        "world_size": str(RANKS_PER_TRIAL)},
                                phase_buckets=phase_buckets)
        self.registry = CollectorRegistry()
        self.registry.register(TrialCollector(self.state))

    def train(self, rng: random.Random) -> None:
        train(self.state, rng)


def train(state: TrialState, rng: random.Random, healthy: bool = False) -> None:
    """A round's worth of steps: every standard phase and the step observed. Each phase takes
    1-50 ms (to_device + from_device are a third of the step: TrainwatchHostToDeviceBound
    fires for every rank); ``healthy``: train_batch takes 50-250 ms and the others 1-20 ms, so
    no trial alert fires, as in most of a real fleet."""
    for _ in range(STEPS_PER_ROUND):
        total = 0.0
        for phase in names.STANDARD_PHASES:
            if not healthy:
                seconds = rng.uniform(0.001, 0.05)
            elif phase == names.TRAIN_BATCH:
                seconds = rng.uniform(0.05, 0.25)
            else:
                seconds = rng.uniform(0.001, 0.02)
            state.phase_histogram(phase).observe(seconds)
            total += seconds
        state.step.observe(total)
        state.progress.samples += 32


def push_round(url: str, ranks: list[Rank], pool: ThreadPoolExecutor) -> tuple[list[float], int]:
    """Push every rank once; (latencies of the successful pushes, failures)."""
    handler = make_handler(2.0, 10.0)

    def push(rank: Rank) -> float | None:
        start = time.perf_counter()
        try:
            push_to_gateway(url, names.JOB, rank.registry, grouping_key=rank.key, handler=handler)
        except OSError:
            return None
        return time.perf_counter() - start

    results = list(pool.map(push, ranks))
    return [r for r in results if r is not None], sum(r is None for r in results)


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] if len(values) > 1 else \
        (values[0] if values else float("nan"))


def self_metrics(url: str) -> dict[str, float]:
    """Prometheus's own rule-group durations and head series, from its /metrics."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("prometheus_rule_group_last_duration_seconds{"):
            group = line.split('rule_group="', 1)[1].split('"', 1)[0].rsplit(";", 1)[-1]
            found[f"rules {group}"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("prometheus_tsdb_head_series "):
            found["head series"] = float(line.rsplit(" ", 1)[1])
    return found


PHASE_BUCKETS: dict[str, tuple[float, ...] | None] = {"default": None,
                                                      names.PHASE_BUCKETS_NONE: ()}


def run_size(size: int, rounds: int, threads: int, phase_buckets: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rules = workdir / "rules"
        generate_rules.write_rules(rules)
        ranks = [Rank(i, PHASE_BUCKETS[phase_buckets]) for i in range(size)]
        rng = random.Random(size)
        with start_pushgateway(workdir) as pgw, ThreadPoolExecutor(threads) as pool:
            config = {"global": {"scrape_interval": f"{INTERVAL:g}s",
                                 "evaluation_interval": f"{INTERVAL:g}s"},
                      "rule_files": [str(rules / "*.yml")],
                      "scrape_configs": [{**scrape_config("pushgateway", pgw.url,
                                                          interval=f"{INTERVAL:g}s",
                                                          honor_labels=True)}]}
            with start_prometheus(workdir, config) as prom:
                latencies: list[float] = []
                late = failures = 0
                for round_ in range(rounds):
                    begin = time.monotonic()
                    for rank in ranks:
                        rank.train(rng)
                    took, failed = push_round(pgw.url, ranks, pool)
                    latencies += took
                    failures += failed
                    spent = time.monotonic() - begin
                    print(f"        round {round_ + 1}/{rounds}: {len(took)} pushed, {failed} "
                          f"failed, in {spent:.1f} s", file=sys.stderr, flush=True)
                    late += spent > INTERVAL
                    time.sleep(max(0.0, INTERVAL - spent))
                # Prometheus has scraped every group and evaluated the rules over them.
                wait_until(lambda: prom.query(f"count(push_time_seconds) == {size}"),
                           timeout=6 * INTERVAL, what="every group scraped", interval=1.0)
                scraped_at = time.time()
                try:
                    wait_until(lambda: all(float(s["value"][1]) > scraped_at for s in prom.query(
                        "prometheus_rule_group_last_evaluation_timestamp_seconds")) or None,
                        timeout=3 * INTERVAL, what="an evaluation after the scrape", interval=1.0)
                except TimeoutError:  # a group takes longer than the interval: report it as is
                    print(f"        (a rule group did not finish within {3 * INTERVAL:g} s)")
                gets = []
                for _ in range(3):
                    start = time.perf_counter()
                    body = urllib.request.urlopen(f"{pgw.url}/metrics", timeout=60).read()
                    gets.append(time.perf_counter() - start)
                [scrape] = prom.query('scrape_duration_seconds{job="pushgateway"}')
                own = self_metrics(prom.url)
                costly = sorted(((r.get("evaluationTime", 0.0), r["name"])
                                 for g in prom.api("rules")["groups"] for r in g["rules"]),
                                reverse=True)[:3]
                rss = proc_status(pgw.proc.pid, "VmRSS") / 1024
        rules_total = sum(v for k, v in own.items() if k.startswith("rules "))
        slowest = max((k for k in own if k.startswith("rules ")), key=lambda k: own[k])
        print(f"{size:>6} groups, phase buckets {phase_buckets}: push p50 {quantile(latencies, 0.5) * 1e3:7.1f} ms, "
              f"p99 {quantile(latencies, 0.99) * 1e3:7.1f} ms, failed {failures}, "
              f"rounds over {INTERVAL:g} s {late}/{rounds}")
        print(f"        pushgateway /metrics {len(body) / 2**20:6.1f} MiB, GET "
              f"{statistics.median(gets):5.2f} s, Prometheus scrape "
              f"{float(scrape['value'][1]):5.2f} s, RSS {rss:6.0f} MiB")
        print(f"        rule evaluation {rules_total:5.3f} s in all ({slowest[6:]} "
              f"{own[slowest]:5.3f} s), head series {own['head series']:,.0f}")
        print("        costliest rules: " + ", ".join(f"{name} {seconds:.3f} s"
                                                   for seconds, name in costly))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,4000",
                        help="comma-separated group counts (default: 100,1000,4000)")
    parser.add_argument("--rounds", type=int, default=3, help="push rounds of 10 s per size")
    parser.add_argument("--threads", type=int, default=32, help="concurrent pushers")
    parser.add_argument("--phase-buckets", default="default,none",
                        help="comma-separated: default (19 bounds), none (sums and counts only)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    settings = args.phase_buckets.split(",")
    if any(s < 1 for s in sizes) or args.rounds < 1 or args.threads < 1:
        parser.error("--sizes, --rounds and --threads must be >= 1")
    if unknown := [s for s in settings if s not in PHASE_BUCKETS]:
        parser.error(f"--phase-buckets: {unknown} not among {list(PHASE_BUCKETS)}")
    print(f"fleet_scale: {args.rounds} rounds of {INTERVAL:g} s per size, {args.threads} "
          f"pushing threads, {RANKS_PER_TRIAL} ranks per trial")
    for size in sizes:
        for setting in settings:
            try:
                run_size(size, args.rounds, args.threads, setting)
            except TimeoutError as exc:  # past what this stack can serve: say so, go on
                print(f"{size:>6} groups, phase buckets {setting}: gave up: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
