"""One window rule for a run's figures: [the later of its start and now - window, the earlier of
now and its final push]. Read on backfilled series (promtool create-blocks-from openmetrics)
whose true rates are known: an ended run's group stays scraped for minutes after its final push
with flat counters and an idle node, and a young run is 75 s into a 5m rate window. Either
figure divided over the wrong span reads a third or a quarter of the truth."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from benchmarks.stack import promtool, start_prometheus
from tests.test_diagnose import loaded_rules
from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import loader_cause
from trainwatch.diagnose.compare import side_of
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.figures import FIRED, RankReport, _young_loader_evidence, by_rank
from trainwatch.diagnose.history import _fired_in_life, _loader_over_life, gather_runs
from trainwatch.diagnose.runs import Run, find_runs
from trainwatch.diagnose.trials import list_trials
from trainwatch.diagnose.verdict import Measurements, decide
from trainwatch.promapi import PrometheusAPI
from trainwatch.report.rates import RawRates
from trial_instrumentation import names

BASE = (int(time.time()) - 2 * 3600) // 60 * 60
WINDOW = "5m"
CPU_RECORD = RecordNames(WINDOW).cpu_utilization
WORKERS_CPU = f"{names.LOADER_CPU_SECONDS}_total"
# The ended run: 60 s of life at 0.8 CPU-seconds/s in its one worker on a busy node (0.9),
# then its group kept 116 s more, flat, on an idle node (0.05), as until gc retires it.
ENDED_WORKER_CPU, ENDED_NODE_CPU, IDLE_NODE_CPU = 0.8, 0.95, 0.05
# Its node: 16 CPUs, a disk busy 70% and a 1 GB/s NIC receiving at 60% while it lived.
CPU_COUNT, ENDED_DISK_BUSY, ENDED_NIC_BUSY, LINK = 16, 0.7, 0.6, 1e9
# Its phases: under the loader's threshold (0.3), so its node's saturated CPUs decide.
ENDED_GPU_BUSY = 0.8
ENDED_SHARES = {"dataloader_next": 0.2, "train_batch": 0.8}
LIFE = range(BASE, BASE + 61, 5)
AFTER = range(BASE + 65, BASE + 177, 5)
# The same run on the other node, idle all along: GPU-bound (its GPU busy over its life).
GPU_ENDED = "gpu-ended"
# The young run: 75 s old, its worker at 0.65 CPU-seconds/s.
YOUNG_WORKER_CPU, YOUNG_START, YOUNG_AGE = 0.65, BASE + 600, 75
YOUNG_SHARES, YOUNG_PHASES_FROM = {"dataloader_next": 0.9, "train_batch": 0.1}, 30
# Experiment "w": runs 30 s old whose one worker forked 20 s in (issue 35), burning a core
# ("forked") or idle at 0.05 CPU-seconds/s ("forked-idle"), pushed every 5 s with the
# workers' own lifetimes (trainwatch_trial_loader_worker_seconds_total).
FORKED_START, FORKED_AGE, FORKED_AT = BASE + 1200, 30, 20
FORKED = {"forked": 1.0, "forked-idle": 0.05}


def _samples() -> list[tuple[str, float, int]]:
    out: list[tuple[str, float, int]] = []
    for t in range(BASE - 300, YOUNG_START + YOUNG_AGE + 1, 5):
        out.append(('trainwatch_host_info{instance="i1",nodename="n1"}', 1, t))
        # Its node's disk and NIC busy while the run lived, idle after (a second NIC at 10%).
        lived = max(0, min(t, BASE + 60) - BASE)
        out += [('trainwatch_cpu_count{instance="i1"}', CPU_COUNT, t),
                ('trainwatch_disk_io_time_seconds_total{instance="i1",device="sda"}',
                 ENDED_DISK_BUSY * lived, t)]
        for device, received in (("eth0", ENDED_NIC_BUSY * LINK * lived),
                                 ("eth1", 0.1 * LINK * (t - BASE + 300))):
            out += [(f'trainwatch_network_receive_bytes_total{{instance="i1",device="{device}"}}',
                     received, t),
                    (f'trainwatch_network_speed_bytes{{instance="i1",device="{device}"}}', LINK, t)]
        busy = ENDED_NODE_CPU if t <= BASE + 60 else IDLE_NODE_CPU
        out.append((f'{CPU_RECORD}{{instance="i1"}}', busy, t))
        # Another node, idle while the run's was saturated: never the run's node CPU.
        out.append(('trainwatch_host_info{instance="i2",nodename="n2"}', 1, t))
        out.append((f'{CPU_RECORD}{{instance="i2"}}', IDLE_NODE_CPU, t))
        # The ended run's loader alert fired while it ran; its node's alert only after it ended
        # (another job's), and another trial's alert meanwhile: neither is the run's.
        if BASE + 20 <= t <= BASE + 60:
            out.append((('ALERTS{alertname="TrainwatchDataloaderBound",alertstate="firing",'
                        'experiment="e",trial="ended",rank="0",phase="dataloader_next"}'), 1, t))
            out.append((('ALERTS{alertname="TrainwatchDataloaderBound",alertstate="firing",'
                        'experiment="e",trial="other",rank="0",phase="dataloader_next"}'), 1, t))
        if BASE + 100 <= t <= BASE + 176:
            out.append((('ALERTS{alertname="TrainwatchCPUSaturated",alertstate="firing",'
                        'instance="i1"}'), 1, t))
    for trial, times, start, rate in (
            ("ended", [*LIFE, *AFTER], BASE - 1, ENDED_WORKER_CPU),
            (GPU_ENDED, [*LIFE, *AFTER], BASE - 1, ENDED_WORKER_CPU),
            ("young", range(YOUNG_START, YOUNG_START + YOUNG_AGE + 1, 5), YOUNG_START - 1,
             YOUNG_WORKER_CPU)):
        key = f'experiment="e",trial="{trial}",rank="0"'
        ended = trial != "young"
        node, instance = ("n2", "i2") if trial == GPU_ENDED else ("n1", "i1")
        final = max(t for t in times if t <= start + 1 + 60) if ended else None
        for t in times:
            at = min(t, final) if final is not None else t  # flat after the final push
            out += [
                (f'{names.TRIAL_INFO}{{{key},pid="1",nodename="{node}",world_size="1"}}', 1, t),
                (f"{names.START_TIME}{{{key}}}", start, t),
                (f"push_time_seconds{{{key}}}", at - 1, t),
                (f"{names.LOADER_WORKERS}{{{key}}}", 1, t),
                (f'{WORKERS_CPU}{{{key},process="{names.PROCESS_WORKERS}"}}',
                 rate * (at - times[0]), t),
                (f'{WORKERS_CPU}{{{key},process="{names.PROCESS_MAIN}"}}',
                 5 + 0.1 * (at - times[0]), t),
            ]
            if ended:  # its GPU busy while it ran, idle after
                busy = ENDED_GPU_BUSY if t <= final else IDLE_NODE_CPU
                out.append(((f'{RecordNames(WINDOW).trial_gpu_busy}{{{key},uuid="GPU-{node}",'
                            f'instance="{instance}",gpu="0",source="sm_active"}}'), busy, t))
                out += [(f"{names.STEP_SECONDS}_sum{{{key}}}", at - times[0], t),
                        (f"{names.STEPS}_total{{{key}}}", at - times[0], t)]
                out += [(f'{names.PHASE_SECONDS}_sum{{{key},phase="{phase}"}}',
                         share * (at - times[0]), t) for phase, share in ENDED_SHARES.items()]
            if trial == "young":  # steps back to back; its phases first pushed 30 s in
                age = t - times[0]
                out += [(f"{names.STEP_SECONDS}_sum{{{key}}}", age, t),
                        (f"{names.STEPS}_total{{{key}}}", 0.2 * age, t)]
                if age >= YOUNG_PHASES_FROM:
                    out += [(f'{names.PHASE_SECONDS}_sum{{{key},phase="{phase}"}}', share * age, t)
                            for phase, share in YOUNG_SHARES.items()]
            if final is not None and t >= final:
                out.append((f'{names.EXIT}{{{key},reason="clean"}}', 1, t))
    for trial, cpu in FORKED.items():
        key = f'experiment="w",trial="{trial}",rank="0"'
        for t in range(FORKED_START, FORKED_START + FORKED_AGE + 1, 5):
            lived = max(0, t - FORKED_START - FORKED_AT)
            out += [
                (f'{names.TRIAL_INFO}{{{key},pid="1",nodename="n1",world_size="1"}}', 1, t),
                (f"{names.START_TIME}{{{key}}}", FORKED_START, t),
                (f"push_time_seconds{{{key}}}", t, t),
                (f"{names.LOADER_WORKERS}{{{key}}}", 1 if lived or t == FORKED_START +
                 FORKED_AT else 0, t),
                (f"{names.LOADER_WORKER_SECONDS}_total{{{key}}}", lived, t),
                (f'{WORKERS_CPU}{{{key},process="{names.PROCESS_WORKERS}"}}', cpu * lived, t),
                (f"{names.LOADER_CPU_WAIT_SECONDS}_total{{{key}}}", 0, t),
                (f'{WORKERS_CPU}{{{key},process="{names.PROCESS_MAIN}"}}',
                 5 + 0.1 * (t - FORKED_START), t),
            ]
    return out


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusAPI]:
    workdir = tmp_path_factory.mktemp("life")
    by_series: dict[str, list[str]] = {}
    for series, value, t in sorted(_samples(), key=lambda s: s[2]):
        by_series.setdefault(series, []).append(f"{series} {value} {t}")
    source = workdir / "life.om"
    source.write_text("\n".join([*(line for lines in by_series.values() for line in lines),
                                 "# EOF"]) + "\n")
    promtool("tsdb", "create-blocks-from", "openmetrics", source, workdir / "tsdb")
    with start_prometheus(workdir, {"global": {"scrape_interval": "1m"}},
                          "--storage.tsdb.retention.time=30d") as prom:
        yield PrometheusAPI(prom.url)


def test_an_ended_runs_loader_figures_end_at_its_final_push(api: PrometheusAPI) -> None:
    [run] = find_runs(api, 3600, "e", "ended", now=BASE + 400)
    # Its group was scraped 116 s past its final push: the figures must not see that time.
    assert (run.end, run.last) == (BASE + 59, AFTER[-1]) and run.seconds == 60
    node_cpu, evidence = _loader_over_life(api, Deployment(RecordNames(WINDOW), {}), run)
    assert evidence is not None and evidence.workers == 1 and evidence.node_cpu == node_cpu
    assert evidence.per_worker_cpu == pytest.approx(ENDED_WORKER_CPU, rel=0.05)
    assert evidence.main_cpu == pytest.approx(0.1, rel=0.05)  # not its 5 s of import
    assert evidence.node_cpu == pytest.approx(ENDED_NODE_CPU, abs=0.05)
    # Its node's disk and busiest NIC over its life (the cause rule's definitions), not the
    # idle minutes after it nor the quieter NIC.
    assert evidence.cpu_count == CPU_COUNT
    assert evidence.disk_busy == pytest.approx(ENDED_DISK_BUSY, rel=0.05)
    assert evidence.network_busy == pytest.approx(ENDED_NIC_BUSY, rel=0.05)


def test_a_young_runs_loader_figures_are_over_its_own_life(api: PrometheusAPI) -> None:
    now = YOUNG_START + YOUNG_AGE
    key = ("e", "young", "0")
    found = _young_loader_evidence(api.pinned(now), {key}, {key: YOUNG_START - 1}, {}, now,
                                   {}, {"experiment": "e", "trial": "young"})
    assert set(found) == {key}
    assert found[key].per_worker_cpu == pytest.approx(YOUNG_WORKER_CPU, rel=0.08)
    # The same rank over the whole rate window: diluted by the minutes before it started.
    pinned = api.pinned(now)
    diluted = loader_cause.gather(lambda expr: by_rank(pinned, expr), WINDOW, {},
                                  experiment="e", trial="young")[key]
    assert diluted.per_worker_cpu is not None and diluted.per_worker_cpu < 0.5 * YOUNG_WORKER_CPU


def test_the_reports_raw_figures_follow_the_same_window_rule(api: PrometheusAPI) -> None:
    """The raw fallback (the rules' expressions, from trainwatch.contract.figures) of a young
    run whose phases were first pushed 30 s in with 30 s already counted: its true shares and
    steps/s, where the rate window's rate() would read 0.6 and 0.05."""
    pinned = api.pinned(YOUNG_START + YOUNG_AGE)
    raw = RawRates(WINDOW)
    shares = {labels["phase"]: value for labels, value in
              pinned.query(raw.phase_share(experiment="e", trial="young"))}
    assert shares == pytest.approx(YOUNG_SHARES, abs=0.01)
    [(_, steps)] = pinned.query(raw.counter_rate(f"{names.STEPS}_total", trial="young"))
    assert steps == pytest.approx(0.2, rel=0.05)


def test_an_ended_runs_alerts_are_those_that_fired_in_its_life(api: PrometheusAPI) -> None:
    [run] = find_runs(api, 3600, "e", "ended", now=BASE + 400)
    ended = RankReport("e", "ended", "0", "n1", "1", "1", WINDOW)
    fired = _fired_in_life(api, run, ended)
    assert [(a.name, a.state) for a in fired] == [("TrainwatchDataloaderBound", FIRED)]


def test_trials_decides_an_ended_run_as_diagnose_does_over_its_life(api: PrometheusAPI) -> None:
    """Its shares under every phase threshold, its node saturated while it ran and idle for
    the two minutes its group stayed: CPU-bound, as diagnose's decision on the life's figures
    (not what the idle minutes after it, or no node CPU at all, would say)."""
    deployment = Deployment.from_rules(loaded_rules())
    [row] = [r for r in list_trials(api, deployment, "e", since=3600, now=BASE + 400)
             if r.trial == "ended"]
    node_cpu, _ = _loader_over_life(api, deployment, find_runs(api, 3600, "e", "ended",
                                                                now=BASE + 400)[0])
    expected = decide(Measurements(ENDED_SHARES, node_cpu), deployment.alerts)
    assert (row.state, row.cause, expected.kind) == ("ended clean", "busy_cpu", "busy_cpu")
    assert row.dataloader_share == pytest.approx(ENDED_SHARES["dataloader_next"])
    # Its GPU busy over its life (not the idle minutes after), its steps at its final push.
    assert (row.gpu_busy, row.steps) == (pytest.approx(ENDED_GPU_BUSY), 60)


def test_compare_reads_an_ended_runs_gpu_busy_over_its_life(api: PrometheusAPI) -> None:
    side = side_of(api, Deployment(RecordNames(WINDOW), {TRIAL_STALE: AlertRule(TRIAL_STALE, 300,
                                                                                "x")}),
                   ("e", "ended", "0"), 3600, BASE + 400)
    assert side.gpu_busy == pytest.approx(ENDED_GPU_BUSY, abs=0.01)


@pytest.mark.parametrize(("trial", "finding", "title"), [
    ("ended", "busy_cpu", "Node CPUs saturated: "), (GPU_ENDED, "gpu_bound", "GPU-bound: ")])
def test_diagnose_and_trials_give_an_ended_run_one_finding_and_its_title_names_it(
        api: PrometheusAPI, trial: str, finding: str, title: str) -> None:
    """Over its life: the CPU-bound run on its saturated node, the GPU-bound one on its idle
    node by its GPU's busy (not "No GPU metrics", as diagnose once said where trials said
    gpu_bound), the verdict's title the finding it carries (it once named the shares-only
    profile: "No GPU metrics" for both)."""
    deployment = Deployment.from_rules(loaded_rules())
    [report] = gather_runs(api.pinned(BASE + 400), deployment, "e", trial, since=3600,
                           now=BASE + 400)
    [row] = [r for r in list_trials(api, deployment, "e", since=3600, now=BASE + 400)
             if r.trial == trial]
    assert report.verdict is not None and report.verdict.kind == "ended"
    assert (report.verdict.finding, row.cause) == (finding, finding), report.verdict
    assert f": over its life, {title}" in report.verdict.title, report.verdict.title
    assert "No GPU metrics" not in report.verdict.title


@pytest.mark.parametrize(("trial", "truth"), list(FORKED.items()))
def test_a_worker_forked_late_reads_its_own_cpu_however_diagnose_reads_the_run(
        api: PrometheusAPI, trial: str, truth: float) -> None:
    """Its CPU over the seconds it lived, whatever the span (the rate window, the run's age,
    its life as an ended run's): not over the run's age, where a core read a third (a
    decode-bound trial called latency-bound), nor low where it idles."""
    now, key, sel = FORKED_START + FORKED_AGE, ("w", trial, "0"), {"experiment": "w",
                                                                  "trial": trial}
    pinned = api.pinned(now)
    window = loader_cause.gather(lambda expr: by_rank(pinned, expr), WINDOW, {}, **sel)[key]
    young = _young_loader_evidence(pinned, {key}, {key: FORKED_START}, {}, now, {}, sel)[key]
    life = Run("w", trial, "0", "1", "n1", "1", first=FORKED_START, last=now,
               started=FORKED_START, pushed=now)
    ended = loader_cause.gather(lambda expr: by_rank(pinned, expr), f"{FORKED_AGE}s", {},
                                life, **sel)[key]
    for evidence in (window, young, ended):
        assert evidence.per_worker_cpu == pytest.approx(truth, rel=0.05), evidence
        assert evidence.workers == 1
    assert ended.main_cpu == pytest.approx(0.1, rel=0.05)  # the life's rates, as before
