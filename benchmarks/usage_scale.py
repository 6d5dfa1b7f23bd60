"""`trainwatch usage` (and `trainwatch report --usage`) over a week of a 1,000-GPU fleet's usage
records (issue 40, "fast over a week of a 1,000-GPU fleet"): how long each takes end to end.

    .venv/bin/python -m benchmarks.usage_scale [--gpus 1000] [--days 7] [--runs 3] [--seed 0]
        [--hold SECONDS] [--before CHECKOUT]

What Prometheus holds: ``--gpus`` GPUs on nodes of 8 (1,000: 125 nodes), each node running one
trial of 8 ranks (a GPU each) after another over the last ``--days`` days: each trial 2-48 h
long (log-uniform; the first began up to a day before the week), 0-90 min idle between two
(several hundred trials at the defaults), in 20 experiments, 10 Kubernetes namespaces, 30 users,
30% of them Slurm jobs. Each trial has a profile: its GPUs' busy share (30-95%, a minute-to-minute
wobble), its idle time's split over the causes (waiting on data, host<->device copies, the
exchange or a straggler, other) and, for 70% of them, an MFU (5-50%; under 0.2 its busy
GPU-seconds are "busy, MFU low").

How it gets there: the usage records themselves, one sample a minute (the group's interval),
as prometheus/rulegen/usage.py's rules write them (held, busy, idle by cause, busy with a low
MFU, held with a known MFU, held x MFU per rank, and each one's rollup per trial and node with
the group labels, and the fleet's held, busy and idle by cause; unused and uninstrumented per GPU between the trials, the uninstrumented with
the pod or Slurm job it went to), with ``trainwatch_trial_info`` per rank (its grouping labels,
what code before the rollups joined), written as OpenMetrics
and backfilled with ``promtool tsdb create-blocks-from openmetrics`` (diagnose_scale's
promtool_blocks); then a Prometheus over those blocks with the shipped rules loaded (usage checks
they are) and a 30-day retention.

The cases, each ``--runs`` times through ``.venv/bin/trainwatch ... --prometheus URL`` in a
subprocess, timed from the start of the process to its exit (diagnose_scale's time_case): the
median against the 5 s target, then `usage --by experiment`'s table and each of usage's
queries timed by itself (where the time goes). With ``--before CHECKOUT`` (a ``git worktree`` of
an older commit) the same cases run first with that checkout's trainwatch package
(``PYTHONPATH``) against the same Prometheus: before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benchmarks.diagnose_scale import Case, promtool_blocks, time_case, trainwatch_cli
from benchmarks.stack import REPO, start_prometheus
from trainwatch.contract.records import IDLE_CAUSES, ROLLUP_LABELS, RecordNames
from trainwatch.promapi import PrometheusAPI
from trainwatch.usage import GROUPINGS, queries
from trial_instrumentation.names import TRIAL_INFO

TARGET = 5.0  # seconds, end to end
GPUS_PER_NODE = 8
EXPERIMENTS, NAMESPACES, USERS = 20, 10, 30
WOBBLE = 64  # minute-to-minute patterns of a trial's figures, repeated
RULES = REPO / "prometheus" / "rules" / "recording.yml"
N = RecordNames("5m")  # the GPU-seconds records' names carry no rate window


@dataclass
class Trial:
    name: str
    experiment: str
    namespace: str
    user: str
    slurm_job: str
    node: int
    first: int  # index of its first minute in the week (clipped to 0)
    last: int  # one past its last minute
    busy: float  # share of each held minute
    causes: dict[str, float]  # share of its idle time per cause (adds up to 1)
    mfu: float | None


def nodename(node: int) -> str:
    return f"gpu-node-{node:03d}"


def make_trials(gpus: int, minutes: int, seed: int) -> list[Trial]:
    rng = random.Random(seed)
    trials: list[Trial] = []
    for node in range(math.ceil(gpus / GPUS_PER_NODE)):
        t = -rng.randint(0, 24 * 60)
        while t < minutes:
            length = int(math.exp(rng.uniform(math.log(120), math.log(48 * 60))))
            k = len(trials)
            waits = rng.uniform(0.0, 0.4)
            wait_cause = "straggler" if rng.random() < 0.2 else "exchange"
            shares = {"data": rng.uniform(0.0, 0.6) if k % 3 == 0 else rng.uniform(0.0, 0.1),
                      "host_to_device": rng.uniform(0.0, 0.15), wait_cause: waits}
            scale = max(1.0, sum(shares.values()))
            causes = {c: shares.get(c, 0.0) / scale for c in IDLE_CAUSES if c != "other"}
            causes["other"] = 1.0 - sum(causes.values())
            trials.append(Trial(
                f"t{k:04d}", f"exp-{k % EXPERIMENTS:02d}", f"team-{k * 7 % NAMESPACES}",
                f"user{k * 11 % USERS}", str(400000 + k) if rng.random() < 0.3 else "", node,
                max(0, t), min(minutes, t + length), rng.uniform(0.3, 0.95), causes,
                rng.uniform(0.05, 0.5) if rng.random() < 0.7 else None))
            t += length + rng.randint(0, 90)
    return [tr for tr in trials if tr.last > tr.first]


def _v(value: float) -> str:
    return f"{value:.4g}"


def _ranks(count: int, value: float) -> str:
    """``count`` ranks' sum of ``value`` as each rank's series says it (_v): the rollup."""
    return f"{count * float(_v(value)):.10g}"


def write_openmetrics(out: IO[str], trials: list[Trial], gpus: int, start: int, minutes: int,
                      seed: int) -> int:
    """Every record's series, each series' samples together in time order, one metric name
    after another; the number of samples written."""
    rng = random.Random(seed + 1)
    stamps = [f" {start + 60 * i}\n" for i in range(minutes)]
    wobble = [1.0 + rng.uniform(-0.08, 0.08) for _ in range(WOBBLE)]
    written = 0

    def series(head: str, values: list[str], first: int, last: int) -> None:
        """``head`` (the name and labels) with values[i % WOBBLE] each minute in [first, last)."""
        nonlocal written
        heads = [f"{head} {v}" for v in values]
        n = len(heads)
        out.write("".join([heads[i % n] + stamps[i] for i in range(first, last)]))
        written += last - first

    def ranks(tr: Trial) -> list[tuple[int, str]]:
        return [(r, f'experiment="{tr.experiment}",trial="{tr.name}",rank="{r}"')
                for r in range(GPUS_PER_NODE) if tr.node * GPUS_PER_NODE + r < gpus]

    def busy(tr: Trial) -> list[float]:
        return [min(60.0, 60 * tr.busy * w) for w in wobble]

    def rollup(tr: Trial) -> tuple[str, int]:
        """The trial's rollup labels (its 8 ranks on one node: one series) and its ranks."""
        said = {"experiment": tr.experiment, "trial": tr.name, "nodename": nodename(tr.node),
                "k8s_namespace": tr.namespace, "slurm_job_id": tr.slurm_job, "user": tr.user}
        return (",".join(f'{label}="{said[label]}"' for label in ROLLUP_LABELS if said[label]),
                len(ranks(tr)))

    for tr in trials:  # trainwatch_trial_info: the groups' labels
        for r, key in ranks(tr):
            info = (f'{TRIAL_INFO}{{job="trainwatch_trial",{key},nodename="{nodename(tr.node)}",'
                    f'pid="{1000 + r}",world_size="8",k8s_namespace="{tr.namespace}",'
                    f'k8s_pod="{tr.name}-{r}",slurm_job_id="{tr.slurm_job}",'
                    f'slurm_job_user="{tr.user if tr.slurm_job else ""}",user="{tr.user}"}}')
            series(info, ["1"], tr.first, tr.last)
    for record, figure in ((N.gpu_seconds_held, lambda tr: ["60"]),
                           (N.gpu_seconds_busy, lambda tr: [_v(b) for b in busy(tr)])):
        for tr in trials:
            for _, key in ranks(tr):
                series(f"{record}{{{key}}}", figure(tr), tr.first, tr.last)
    for tr in trials:
        for cause, share in tr.causes.items():
            if share > 0:
                for _, key in ranks(tr):
                    series(f'{N.gpu_seconds_idle}{{{key},cause="{cause}"}}',
                           [_v((60 - b) * share) for b in busy(tr)], tr.first, tr.last)
    known = [tr for tr in trials if tr.mfu is not None]
    Figure = Callable[[Trial], list[float]]
    mfu_figures: tuple[tuple[str, Figure], ...] = (
        (N.gpu_seconds_low_mfu, busy),
        (N.gpu_seconds_held_mfu, lambda tr: [60.0]),
        (N.gpu_seconds_model, lambda tr: [60 * (tr.mfu or 0.0)]))
    for name, values in mfu_figures:
        for tr in known:
            if name != N.gpu_seconds_low_mfu or tr.mfu < 0.2:  # type: ignore[operator]
                for _, key in ranks(tr):
                    series(f"{name}{{{key}}}", [_v(v) for v in values(tr)], tr.first, tr.last)
    # The rollups: each trial's ranks summed (they share the trial's per-minute figures).
    held_busy: tuple[tuple[str, Figure], ...] = ((N.gpu_seconds_held, lambda tr: [60.0]),
                                                 (N.gpu_seconds_busy, busy))
    for name, values in held_busy:
        for tr in trials:
            key, count = rollup(tr)
            series(f"{N.rolled(name)}{{{key}}}", [_ranks(count, v) for v in values(tr)],
                   tr.first, tr.last)
    for tr in trials:
        key, count = rollup(tr)
        for cause, share in tr.causes.items():
            if share > 0:
                series(f'{N.rolled(N.gpu_seconds_idle)}{{{key},cause="{cause}"}}',
                       [_ranks(count, (60 - b) * share) for b in busy(tr)], tr.first, tr.last)
    for name, values in mfu_figures:
        for tr in known:
            if name != N.gpu_seconds_low_mfu or tr.mfu < 0.2:  # type: ignore[operator]
                key, count = rollup(tr)
                series(f"{N.rolled(name)}{{{key}}}", [_ranks(count, v) for v in values(tr)],
                       tr.first, tr.last)
    # The fleet's sums per minute (what report --usage plots): every trial's rollup added up.
    sums: dict[str, list[float]] = {}

    def add(head: str, values: list[float], tr: Trial, count: int) -> None:
        total = sums.setdefault(head, [0.0] * minutes)
        per_minute = [count * float(_v(v)) for v in values]
        for i in range(tr.first, tr.last):
            total[i] += per_minute[i % len(per_minute)]

    for tr in trials:
        _, count = rollup(tr)
        add(N.fleet(N.gpu_seconds_held), [60.0], tr, count)
        add(N.fleet(N.gpu_seconds_busy), busy(tr), tr, count)
        for cause, share in tr.causes.items():
            if share > 0:
                add(f'{N.fleet(N.gpu_seconds_idle)}{{cause="{cause}"}}',
                    [(60 - b) * share for b in busy(tr)], tr, count)
    for head, total in sums.items():  # a minute no trial held has no sample (sum of nothing)
        out.write("".join(f"{head} {v:.10g}{stamps[i]}" for i, v in enumerate(total) if v))
        written += sum(1 for v in total if v)
    # Between a node's trials its GPUs are held by none: unused, or (one node in 25, the
    # process collector on) uninstrumented: a pod's or a Slurm job's, gap by gap.
    by_node: dict[int, list[Trial]] = {}
    for tr in trials:
        by_node.setdefault(tr.node, []).append(tr)
    # Uninstrumented GPUs 45% busy.
    outside = {N.gpu_seconds_uninstrumented: "60", N.gpu_seconds_uninstrumented_busy: "27",
               N.gpu_seconds_unused: "60"}
    for record, value in outside.items():
        for node, own in sorted(by_node.items()):
            if (record != N.gpu_seconds_unused) != (node % 25 == 0):
                continue
            gaps, t = [], 0
            for tr in sorted(own, key=lambda x: x.first):
                if tr.first > t:
                    gaps.append((t, tr.first))
                t = max(t, tr.last)
            if t < minutes:
                gaps.append((t, minutes))
            for g in range(GPUS_PER_NODE):
                if node * GPUS_PER_NODE + g >= gpus:
                    continue
                head = (f'{record}{{instance="{nodename(node)}:10910",gpu="{g}",'
                        f'uuid="GPU-{node:03d}-{g}"')
                for i, (first, last) in enumerate(gaps):
                    owner = ("" if record == N.gpu_seconds_unused else
                             f',pod_uid="pod-{node}-{i}",nodename="{nodename(node)}"' if i % 2
                             else f',slurm_job_id="9{node:03d}{i:03d}",nodename="{nodename(node)}"')
                    series(f"{head}{owner}}}", [value], first, last)
    out.write("# EOF\n")
    return written


def per_query(url: str, since: float) -> None:
    """Where the time goes: each query `usage` asks, timed once by itself, per grouping."""
    api = PrometheusAPI(url, timeout=300)
    for by_ in ("experiment", "namespace"):
        timed = []
        for figure, expr in queries(N, GROUPINGS[by_], since).items():
            began = time.perf_counter()
            answer = api.query(expr)
            timed.append(f"{figure} {time.perf_counter() - began:.2f} s ({len(answer)})")
        print(f"queries by {by_} (seconds, series answered): {', '.join(timed)}", flush=True)


def agree(checkout: Path, url: str, since: str) -> str:
    """`usage --by namespace --format json` of ``checkout`` and of this code: each group's
    held, busy and wasted GPU-seconds, the same to 1e-6 or the first that differs. ``since``
    reaches back before the history's first sample: "the last 7d" asked seconds apart drops
    a minute at its start between one query and the next, and the two would differ by it."""
    answers = []
    for env in ({**os.environ, "PYTHONPATH": str(checkout)}, dict(os.environ)):
        done = subprocess.run([*trainwatch_cli(), "usage", "--since", since, "--by", "namespace",
                               "--format", "json", "--prometheus", url, "--timeout", "120"],
                              capture_output=True, text=True, cwd=REPO, env=env, check=False)
        if done.returncode != 0:
            which = "before" if "PYTHONPATH" in env else "after"
            return f"no answer to compare: {which} exit {done.returncode}: {done.stderr[-500:]}"
        answers.append({g["group"]: (g["held_gpu_seconds"], g["busy_gpu_seconds"],
                                     g["wasted_gpu_seconds"])
                        for g in json.loads(done.stdout)["groups"]})
    old, new = answers
    if set(old) != set(new):
        return f"answers differ: groups {sorted(old)} before, {sorted(new)} after"
    for group, figures in old.items():
        if any(not math.isclose(a, b, rel_tol=1e-6) for a, b in zip(figures, new[group])):
            return f"answers differ: {group}: {figures} before, {new[group]} after"
    return (f"answers agree (--since {since}): {len(new)} namespaces' held, busy and wasted "
            "GPU-seconds, before and after")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1000, help="the fleet's GPUs (default 1000)")
    p.add_argument("--days", type=float, default=7.0, help="the history (default 7)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hold", type=float, default=0.0,
                   help="keep Prometheus up this many seconds at the end, its URL printed")
    p.add_argument("--before", type=Path, metavar="CHECKOUT",
                   help="a checkout of older code (git worktree add --detach DIR COMMIT): its "
                   "cases timed first, against the same Prometheus")
    args = p.parse_args(argv)
    minutes = int(args.days * 1440)
    # The last sample over 5 minutes (Prometheus's lookback) old when Prometheus starts: else the
    # loaded usage rules, evaluated live, read the newest backfilled per-rank records and
    # append rollup and fleet samples of their own (a minute more of the last trials).
    end = int(time.time()) // 60 * 60 - 360
    start = end - 60 * (minutes - 1)
    trials = make_trials(args.gpus, minutes, args.seed)
    print(f"fleet: {args.gpus} GPUs on {math.ceil(args.gpus / GPUS_PER_NODE)} nodes, "
          f"{len(trials)} trials of 8 ranks in {EXPERIMENTS} experiments and {NAMESPACES} "
          f"namespaces over {args.days:g} days, one sample a minute", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="usage-scale-"))
    try:
        began = time.perf_counter()
        source = workdir / "usage.om"
        with source.open("w", encoding="utf-8", buffering=1 << 22) as out:
            samples = write_openmetrics(out, trials, args.gpus, start, minutes, args.seed)
        wrote = time.perf_counter() - began
        print(f"wrote {samples:,} samples ({source.stat().st_size / 2**30:.1f} GiB of "
              f"OpenMetrics) in {wrote:.0f} s", flush=True)
        began = time.perf_counter()
        promtool_blocks(source, workdir / "tsdb")
        source.unlink()
        print(f"promtool backfilled them in {time.perf_counter() - began:.0f} s", flush=True)
        shutil.copy(RULES, workdir / "recording.yml")
        with start_prometheus(workdir, {"global": {"scrape_interval": "1m"},
                                        "rule_files": [str(workdir / "recording.yml")]},
                              "--storage.tsdb.retention.time=30d") as prom:
            since = f"{int(args.days * 1440)}m" if args.days != 7 else "7d"
            cases = [Case(f"usage --by {b}", ["usage", "--since", since, "--by", b], samples,
                          len(trials)) for b in ("experiment", "namespace")]
            cases.append(Case("report --usage --by experiment",
                              ["report", "--usage", "--since", since, "-o",
                               str(workdir / "usage.html")], samples, len(trials)))
            before = [Case(f"before: {c.name}", c.argv, c.series, c.runs) for c in cases] \
                if args.before else []
            if before:
                os.environ["PYTHONPATH"] = str(args.before.resolve())  # its trainwatch first
                try:
                    probe = "import trainwatch.usage as u; print(u.__file__)"
                    said = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                          text=True, cwd=workdir, check=True).stdout.strip()
                    print(f"  before: trainwatch.usage from {said}", flush=True)
                    assert said.startswith(str(args.before.resolve())), said
                    for case in before:
                        print(f"  {case.name}:", flush=True)
                        time_case(case, prom.url, args.runs, timeout=300)
                finally:
                    del os.environ["PYTHONPATH"]
            for case in cases:
                print(f"  {case.name}:", flush=True)
                time_case(case, prom.url, args.runs, timeout=300)
            table = subprocess.run([*trainwatch_cli(), "usage", "--since", since, "--by",
                                    "experiment", "--prometheus", prom.url],
                                   capture_output=True, text=True, cwd=REPO, check=False)
            print(f"\n{'case':42} {'median':>8}  target {TARGET:g} s")
            for case in [*before, *cases]:
                said = case.failure or f"{case.median:.2f} s"
                verdict = "" if case.median is None else (
                    "ok" if case.median <= TARGET else "OVER")
                print(f"{case.name:42} {said:>8}  {verdict}"
                      f"  (runs: {', '.join(f'{s:.2f}' for s in case.seconds)})")
            print(f"\n$ trainwatch usage --since {since} --by experiment\n{table.stdout}"
                  f"{table.stderr}")
            page = (workdir / "usage.html").read_text(encoding="utf-8")
            drawn = page.count('data-state="plot"')
            print(f"report --usage drew {drawn} of its 2 plots", flush=True)
            if before:  # the same answer before and after, group by group
                print(agree(args.before.resolve(), prom.url, f"{minutes + 1440}m"), flush=True)
            per_query(prom.url, minutes * 60.0)
            if args.hold:
                print(f"Prometheus at {prom.url} for {args.hold:g} s", flush=True)
                time.sleep(args.hold)
        return 0 if all(c.median is not None and c.median <= TARGET for c in cases[:2]) else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
