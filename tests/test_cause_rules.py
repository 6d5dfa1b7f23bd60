"""The recorded causes (prometheus/rulegen/causes.py) and `trainwatch diagnose`'s
(loader_cause.decide, exchange.decide), both from the one table of each decision
(trainwatch/contract/causes.py), over the same cases: a few named ones with the cause written
here (what each cause means), and, generated from the table, every predicate of every cause
just under, exactly at and just over its threshold from that cause's named case (the cause
the table gives each). The cases render to one promtool file (two tests: every case's recorded
cause, and each cause value in the alerts' annotation; ~3 s) and diagnose decides the same
figures here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.stack import REPO, promtool
from prometheus.rulegen.settings import load_settings
from trainwatch.contract import causes as table
from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND, SCALING_INEFFICIENT
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import exchange, loader_cause
from trainwatch.diagnose.loader_cause import LoaderEvidence

SETTINGS = load_settings()
NAMES = RecordNames(SETTINGS.rate_window)
RULES = REPO / "prometheus" / "rules"
TRIAL, EXPORTER = 'job="trainwatch_trial"', 'job="trainwatch-exporter"'
SPEED = 1.25e9  # a 10 GbE link, bytes/s
MB = 1e6
EVAL = "12m"  # every `for` (DataloaderBound 2m, ScalingInefficient 10m) has ended
# A young run: started at START, its DataloaderBound alert not firing at NOT_YET and firing
# at YOUNG, when it is 3 minutes old, younger than the 5m rate window.
START, NOT_YET, YOUNG = "6m", "8m", "9m"


@dataclass(frozen=True)
class LoaderCase:
    """One data-loader-bound rank on its own node: its figures and the cause it must get."""

    expected: str | None  # None: no cause (the loader is under its threshold)
    figures: LoaderEvidence
    share: float = 0.5  # dataloader_next's share of step time


def _evidence(**figures: float | None) -> LoaderEvidence:
    """A rank's figures, its workers alive the whole window: the CPU one wants is theirs over
    their count (the recorded figure is over their worker-seconds, here count x window)."""
    base: dict[str, Any] = {"workers": 8.0, "workers_cpu": 0.4, "workers_wait": 0.0,
                            "main_cpu": 0.9, "cpu_count": 16.0, "node_cpu": 0.2,
                            "disk_busy": 0.01, "read_bytes": 0.0, "rchar": 2 * MB,
                            "network_busy": 0.01}
    return _steady(LoaderEvidence(**{**base, **figures}))


def _steady(e: LoaderEvidence) -> LoaderEvidence:
    workers = e.workers or 0
    wanted = ((e.workers_cpu or 0) + (e.workers_wait or 0)) / workers if workers else e.main_cpu
    return replace(e, per_worker_cpu=wanted)


# Waiting workers on a node whose disk or NIC is near its threshold, from each side.
REMOTE = {"disk_busy": 0.01, "read_bytes": 0.5 * MB, "rchar": 1150 * MB, "network_busy": 0.92}
LOADER_CASES = {
    "too_few": LoaderCase("too_few_workers", _evidence(
        workers=2, workers_cpu=1.96, workers_wait=0.02, node_cpu=0.25)),
    "decode": LoaderCase("decode_bound", _evidence(
        workers=16, workers_cpu=8.8, workers_wait=6.4, node_cpu=0.97)),
    "storage": LoaderCase("storage_bound", _evidence(
        disk_busy=0.95, read_bytes=900 * MB, rchar=910 * MB)),
    "remote": LoaderCase("remote_storage", _evidence(**REMOTE)),
    "latency": LoaderCase("latency_bound", _evidence()),
    # worker_busy (0.5 s/s a worker): just over computes, just under waits.
    "worker_over": LoaderCase("too_few_workers", _evidence(workers=2, workers_cpu=1.04)),
    "worker_under": LoaderCase("latency_bound", _evidence(workers=2, workers_cpu=0.96)),
    # The run-queue wait counts: 0.3 run + 0.25 waited is over 0.5.
    "worker_waits": LoaderCase("too_few_workers", _evidence(
        workers=2, workers_cpu=0.6, workers_wait=0.5, node_cpu=0.5)),
    # No workers: the trial process's own CPU is the figure.
    "no_workers": LoaderCase("too_few_workers", _evidence(workers=0, workers_cpu=0.0,
                                                          main_cpu=0.99, cpu_count=8)),
    # A whole idle core: 4 cores 70% busy leave 1.2, 80% busy leave 0.8.
    "one_core_idle": LoaderCase("too_few_workers", _evidence(
        workers=2, workers_cpu=1.9, cpu_count=4, node_cpu=0.7)),
    "no_core_idle": LoaderCase("decode_bound", _evidence(
        workers=2, workers_cpu=1.9, cpu_count=4, node_cpu=0.8)),
    # TrainwatchCPUSaturated's 90%: 16 cores at 88% still have 1.9 idle, yet saturated at 92%.
    "unsaturated": LoaderCase("too_few_workers", _evidence(
        workers=2, workers_cpu=1.9, node_cpu=0.88)),
    "saturated": LoaderCase("decode_bound", _evidence(
        workers=2, workers_cpu=1.9, node_cpu=0.92)),
    # disk_busy (60%), with the trial reading from the disk.
    "disk_over": LoaderCase("storage_bound", _evidence(
        disk_busy=0.62, read_bytes=300 * MB, rchar=310 * MB)),
    "disk_under": LoaderCase("latency_bound", _evidence(
        disk_busy=0.58, read_bytes=300 * MB, rchar=310 * MB)),
    "disk_not_read": LoaderCase("latency_bound", _evidence(
        disk_busy=0.95, read_bytes=0.0, rchar=0.0)),
    # rchar_over_read (4x) with the NIC full; network_busy (60%) with reads from elsewhere.
    "ratio_over": LoaderCase("remote_storage", _evidence(
        **{**REMOTE, "read_bytes": 100 * MB, "rchar": 420 * MB})),
    "ratio_under": LoaderCase("latency_bound", _evidence(
        **{**REMOTE, "read_bytes": 100 * MB, "rchar": 380 * MB})),
    "nic_over": LoaderCase("remote_storage", _evidence(**{**REMOTE, "network_busy": 0.62})),
    "nic_under": LoaderCase("latency_bound", _evidence(**{**REMOTE, "network_busy": 0.58})),
    "no_link_speed": LoaderCase("latency_bound", _evidence(**{**REMOTE, "network_busy": None})),
    # TrainwatchDataloaderBound's 30%: under it, no cause is recorded and no alert fires.
    "not_bound": LoaderCase(None, _evidence(workers=2, workers_cpu=1.96), share=0.28),
}


THRESHOLDS = table.deployed(table.LOADER, SETTINGS.alerts)
NEAR = 0.04  # "just under" and "just over": 4% of the level away


def _set(e: LoaderEvidence, figure: table.Figure | table.Derived, value: float
         ) -> LoaderEvidence:
    """``e`` with ``figure`` at ``value``, through the raw figures that make it."""
    if figure == table.WORKER_CPU:
        return replace(e, workers=2.0, workers_cpu=2 * value, workers_wait=0.0,
                       per_worker_cpu=value)
    if figure == table.IDLE_CORES:
        return replace(e, cpu_count=4.0, node_cpu=1 - value / 4)  # 4 cores: not saturated
    if figure == table.RCHAR_OVER_READ:
        return replace(e, rchar=value * (e.read_bytes or 0))
    field_of = {table.NODE_CPU: "node_cpu", table.DISK_BUSY: "disk_busy",
                table.READ_BYTES: "read_bytes", table.RCHAR: "rchar",
                table.NODE_NIC_BUSY: "network_busy"}
    return replace(e, **{field_of[figure]: value})  # type: ignore[index]


def _sides(level: float) -> dict[str, float]:
    if level == 0:  # none at all: nothing is under it
        return {"at": 0.0, "over": 1.0}
    return {"under": level * (1 - NEAR), "at": level, "over": level * (1 + NEAR)}


# Each cause's named case, from which its predicates are moved across their levels.
WITNESS = {"too_few_workers": "too_few", "decode_bound": "decode", "storage_bound": "storage",
           "remote_storage": "remote", "latency_bound": "latency"}
for _cause in table.LOADER.causes:
    for _p in _cause.when:
        _level = (_p.level.value if isinstance(_p.level, table.Constant)
                  else THRESHOLDS[_p.level.name])
        assert _level is not None
        for _side, _value in _sides(_level).items():
            _e = _set(LOADER_CASES[WITNESS[_cause.name]].figures, _p.figure, _value)
            LOADER_CASES[f"{_cause.name}-{_p.figure.name}-{_side}"] = LoaderCase(
                table.decide(table.LOADER, loader_cause.figures(_e), THRESHOLDS), _e)


@dataclass(frozen=True)
class ExchangeCase:
    """A 2-rank trial, each rank on its own node, under the scaling threshold (or not)."""

    expected: str | None
    own: tuple[float, float] = (0.2, 0.2)  # each rank's own step time, s
    loader_share: float = 0.1
    tx_busy: tuple[float | None, float | None] = (0.1, 0.1)  # transmit over link speed
    efficiency: float = 0.3
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)


EXCHANGE_CASES = {
    # RankStraggler's 1.25: 0.36 s over the median 0.28 is 1.29, 0.32 over 0.26 is 1.23.
    "straggler": ExchangeCase("straggler", own=(0.2, 0.36)),
    "almost_straggler": ExchangeCase("exchange", own=(0.2, 0.32)),
    # DataloaderBound's 30% as the median rank's share.
    "loader": ExchangeCase("loader", loader_share=0.35),
    "loader_under": ExchangeCase("exchange", loader_share=0.25),
    # network_busy (60%) on one of the two nodes, sending.
    "network": ExchangeCase("network", tx_busy=(0.1, 0.62)),
    "network_under": ExchangeCase("exchange", tx_busy=(0.1, 0.58)),
    # No link speed: however fast the NIC sends, never the network.
    "no_speed": ExchangeCase("exchange", tx_busy=(None, None)),
    # ScalingInefficient's 70%: at 72% nothing holds the trial back.
    "efficient": ExchangeCase(None, tx_busy=(0.9, 0.9), efficiency=0.72),
}


EXCHANGE_THRESHOLDS = table.deployed(table.EXCHANGE, SETTINGS.alerts)


def _exchange_figures(case: ExchangeCase) -> dict[str, float | None]:
    """The case's figures as the exchange decision names them (contract.causes.EXCHANGE)."""
    sent = [busy for busy in case.tx_busy if busy is not None]
    return {table.STRAGGLER_RATIO.name: max(case.own) / (sum(case.own) / 2),
            table.LOADER_SHARE.name: case.loader_share,
            table.TRIAL_NIC_BUSY.name: max([0.05, *sent]) if sent else None}


def _set_exchange(case: ExchangeCase, figure: table.Figure | table.Derived, value: float
                  ) -> ExchangeCase:
    if figure == table.STRAGGLER_RATIO:  # 2 ranks: the slower over their mean
        return replace(case, own=(0.3, 0.3 * value / (2 - value)))
    if figure == table.LOADER_SHARE:
        return replace(case, loader_share=value)
    assert figure == table.TRIAL_NIC_BUSY
    return replace(case, tx_busy=(0.1, value))


# Prometheus reads a 0.3 s/s phase counter as 0.30000000000000004 (rate()'s extrapolation), so
# a share exactly at DataloaderBound's 0.3 is over it in the rule: no "at" case for it.
INEXACT = {table.LOADER_SHARE}
for _cause in table.EXCHANGE.causes:
    for _p in _cause.when:
        _level = EXCHANGE_THRESHOLDS[_p.level.name]
        assert _level is not None
        for _side, _value in _sides(_level).items():
            if _side == "at" and _p.figure in INEXACT:
                continue
            _case = _set_exchange(EXCHANGE_CASES[_cause.name], _p.figure, _value)
            EXCHANGE_CASES[f"{_cause.name}-{_p.figure.name}-{_side}"] = replace(
                _case, expected=table.decide(table.EXCHANGE, _exchange_figures(_case),
                                             EXCHANGE_THRESHOLDS))


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _counter(per_second: float) -> str:
    return f"0+{_number(per_second * 60)}x13"


def _gauge(value: float) -> str:
    return f"{_number(value)}x13"


def _node(node: str, cpu: float, cores: float, disk: float, rx: float | None,
          tx: float | None) -> list[tuple[str, str]]:
    """An exporter's series; ``rx``/``tx`` as fractions of the link speed, None: no speed
    (the NIC then moves 1.1 GB/s)."""
    instance = f'{EXPORTER}, instance="{node}:9400"'
    nic = f'{instance}, device="eth0"'
    series = [
        (f'trainwatch_host_info{{{instance}, nodename="{node}"}}', _gauge(1)),
        (f"trainwatch_cpu_count{{{instance}}}", _gauge(cores)),
        (f'trainwatch_cpu_seconds_total{{{instance}, mode="idle"}}',
         _counter((1 - cpu) * cores)),
        (f'trainwatch_disk_io_time_seconds_total{{{instance}, device="nvme0n1"}}',
         _counter(disk)),
        (f"trainwatch_network_receive_bytes_total{{{nic}}}",
         _counter((rx if rx is not None else 0.88) * SPEED)),
        (f"trainwatch_network_transmit_bytes_total{{{nic}}}",
         _counter((tx if tx is not None else 0.88) * SPEED)),
    ]
    if rx is not None and tx is not None:
        series.append((f"trainwatch_network_speed_bytes{{{nic}}}", _gauge(SPEED)))
    return series


def _rank(trial: str, rank: int, node: str, step: float, phases: dict[str, float]
          ) -> list[tuple[str, str]]:
    """A rank's pushed series: one step a second of ``step`` s, ``phases`` s of it each."""
    key = f'{TRIAL}, experiment="x", trial="{trial}", rank="{rank}"'
    series = [
        (f'trainwatch_trial_info{{{key}, nodename="{node}", pid="1{rank}", world_size="2"}}',
         _gauge(1)),
        (f"push_time_seconds{{{key}}}", "0+60x13"),
        (f"trainwatch_trial_step_seconds_sum{{{key}}}", _counter(step)),
        (f"trainwatch_trial_step_seconds_count{{{key}}}", _counter(1)),
    ]
    series += [(f'trainwatch_trial_phase_seconds_sum{{{key}, phase="{phase}"}}',
                _counter(seconds)) for phase, seconds in phases.items()]
    return series


def _loader_series(name: str, case: LoaderCase) -> list[tuple[str, str]]:
    e, node = case.figures, f"node-{name}"
    key = f'{TRIAL}, experiment="x", trial="{name}", rank="0"'
    series = _rank(name, 0, node, 1.0, {"dataloader_next": case.share})
    series += [(f"trainwatch_trial_loader_workers{{{key}}}", _gauge(e.workers or 0)),
               # its workers alive all along: worker-seconds grow by their count each second
               (f"trainwatch_trial_loader_worker_seconds_total{{{key}}}",
                _counter(e.workers or 0)),
               (f'trainwatch_trial_loader_cpu_seconds_total{{{key}, process="workers"}}',
                _counter(e.workers_cpu or 0)),
               (f'trainwatch_trial_loader_cpu_seconds_total{{{key}, process="main"}}',
                _counter(e.main_cpu or 0)),
               (f"trainwatch_trial_loader_cpu_wait_seconds_total{{{key}}}",
                _counter(e.workers_wait or 0)),
               (f"trainwatch_trial_loader_read_bytes_total{{{key}}}", _counter(e.read_bytes or 0)),
               (f"trainwatch_trial_loader_rchar_bytes_total{{{key}}}", _counter(e.rchar or 0))]
    return series + _node(node, e.node_cpu or 0, e.cpu_count or 0, e.disk_busy or 0,
                          e.network_busy, 0.0 if e.network_busy is not None else None)


def _exchange_series(name: str, case: ExchangeCase) -> list[tuple[str, str]]:
    series = []
    samples = case.efficiency * 100  # per rank, against a 100 samples/s single-rank limit
    for rank in (0, 1):
        node = f"node-{name}-{rank}"
        own, wait = case.own[rank], max(case.own) - case.own[rank]
        step = own + wait
        key = f'{TRIAL}, experiment="x", trial="{name}", rank="{rank}"'
        series += _rank(name, rank, node, step, {"dataloader_next": case.loader_share * step,
                                                 "wait_for_ranks": wait})
        series += [(f"trainwatch_trial_samples_total{{{key}}}", _counter(samples)),
                   (f"trainwatch_trial_step_limit_samples_per_second{{{key}}}", _gauge(100))]
        busy = case.tx_busy[rank]
        series += _node(node, 0.3, 16, 0.01, None if busy is None else 0.05, busy)
    return series


def _annotations(alert: str, labels: dict[str, str], value: str, cause: str) -> dict[str, str]:
    """The rendered alert's annotations with its templates filled in as Prometheus would."""
    [rule] = [r for g in yaml.safe_load((RULES / "trial.yml").read_text())["groups"]
              for r in g["rules"] if r.get("alert") == alert]
    filled = {}
    for key, text in rule["annotations"].items():
        for label, label_value in labels.items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
        filled[key] = text.replace("{{ $value | humanizePercentage }}", value)
    return {**filled, "cause": cause}


# One case per cause value, for the alerts' annotation (the record decides every case above).
ANNOTATED = ("too_few", "decode", "storage", "remote", "latency", "straggler", "loader",
             "network", "no_speed")


def _alert_test(loader: dict[str, LoaderCase], exchanges: dict[str, ExchangeCase],
                at: str = EVAL) -> list[dict[str, Any]]:
    loader_alerts = [{"exp_labels": {"severity": "warning", "experiment": "x", "trial": name,
                                     "rank": "0", "phase": "dataloader_next"},
                      "exp_annotations": _annotations(
                          DATALOADER_BOUND, {"experiment": "x", "trial": name, "rank": "0"},
                          f"{case.share:.0%}", case.expected or "")}
                     for name, case in loader.items()]
    # A multi-rank trial held back by its loader is data-loader-bound too: without the loader
    # series, its cause is unknown.
    loader_alerts += [{"exp_labels": {"severity": "warning", "experiment": "x", "trial": name,
                                      "rank": str(rank), "phase": "dataloader_next"},
                       "exp_annotations": _annotations(
                           DATALOADER_BOUND, {"experiment": "x", "trial": name,
                                              "rank": str(rank)},
                           f"{case.loader_share:.0%}", "unknown")}
                      for name, case in exchanges.items()
                      if case.loader_share > SETTINGS.threshold(DATALOADER_BOUND)
                      for rank in (0, 1)]
    exchange_alerts = [{"exp_labels": {"severity": "warning", "experiment": "x",
                                       "trial": name},
                        "exp_annotations": _annotations(
                            SCALING_INEFFICIENT, {"experiment": "x", "trial": name},
                            f"{case.efficiency:.0%}", case.expected or "")}
                       for name, case in exchanges.items()]
    return [{"eval_time": at, "alertname": DATALOADER_BOUND, "exp_alerts": loader_alerts},
            {"eval_time": at, "alertname": SCALING_INEFFICIENT, "exp_alerts": exchange_alerts}]


def _young(series: list[dict[str, str]]) -> list[dict[str, str]]:
    """The same series with every trial starting at START (and saying so with its start-time
    gauge): until it is as old as the rate window the rules read it over its age, as they read
    a new run's. Its nodes' exporters ran from 0, as long before a run as they do."""
    start = int(START.removesuffix("m"))
    found = []
    for s in series:
        if TRIAL not in s["series"]:  # an exporter's: the same pace, running through the run
            found.append({**s, "values": s["values"].replace("x13", f"x{13 + start}")})
        elif s["series"].startswith("push_time_seconds"):
            found.append({**s, "values": f"_x{start} {start * 60}+60x13"})
        else:
            found.append({**s, "values": f"_x{start} {s['values']}"})
    starts = {s["series"].split("{", 1)[1] for s in series
              if s["series"].startswith("push_time_seconds")}
    return found + [{"series": f"trainwatch_trial_start_time_seconds{{{labels}",
                     "values": f"_x{start} {start * 60}x13"} for labels in sorted(starts)]


def _series(loader: dict[str, LoaderCase], exchanges: dict[str, ExchangeCase]
            ) -> list[dict[str, str]]:
    found = [s for name, case in loader.items() for s in _loader_series(name, case)]
    found += [s for name, case in exchanges.items() for s in _exchange_series(name, case)]
    return [{"series": series, "values": values} for series, values in found]


def _promtool_file(folder: Path) -> Path:
    """The promtool cases file, written into ``folder`` (mutation/rules.py's GENERATED_CASES
    judges rule mutants with it too)."""
    loader_records = [{"labels": f'{NAMES.loader_cause}{{experiment="x", trial="{name}", '
                                 f'rank="0", cause="{case.expected}"}}', "value": 1}
                      for name, case in LOADER_CASES.items() if case.expected is not None]
    exchange_records = [{"labels": f'{NAMES.exchange_cause}{{experiment="x", trial="{name}", '
                                   f'cause="{case.expected}"}}', "value": 1}
                        for name, case in EXCHANGE_CASES.items() if case.expected is not None]
    annotated_loader = {n: c for n, c in LOADER_CASES.items() if n in ANNOTATED}
    annotated_exchange = {n: c for n, c in EXCHANGE_CASES.items() if n in ANNOTATED}
    doc = {
        "rule_files": [str(RULES / "recording.yml"), str(RULES / "trial.yml")],
        "evaluation_interval": "1m",
        # Groups evaluated in file order, recording before alerting, as promtool otherwise
        # orders them at random: a young run's alert then fires a minute early in some runs.
        "group_eval_order": [g["name"] for f in ("recording.yml", "trial.yml")
                             for g in yaml.safe_load((RULES / f).read_text())["groups"]],
        "tests": [{
            "name": "each cause recorded on both sides of the thresholds that separate it",
            "interval": "1m",
            "input_series": _series(LOADER_CASES, EXCHANGE_CASES),
            "promql_expr_test": [
                {"expr": f'{NAMES.loader_cause}{{experiment="x"}}', "eval_time": EVAL,
                 "exp_samples": loader_records},
                {"expr": f'{NAMES.exchange_cause}{{experiment="x"}}', "eval_time": EVAL,
                 "exp_samples": exchange_records}],
        }, {
            "name": "the alerts' cause annotation names each cause (unknown without figures)",
            "interval": "1m",
            "input_series": _series(annotated_loader, annotated_exchange),
            "alert_rule_test": _alert_test(annotated_loader, annotated_exchange),
        }, {
            # A young run's alert (pending 1m after its start, firing 3m after) fires while
            # the run is younger than the rate window: its cause then is the one diagnose
            # gives it, not "unknown" (issue 35's young run, whose pending alert said unknown).
            "name": "a young run's loader alert names its cause when it first fires",
            "interval": "1m",
            "input_series": _young(_series(annotated_loader, {})),
            "alert_rule_test": [
                {"eval_time": NOT_YET, "alertname": DATALOADER_BOUND, "exp_alerts": []},
                *_alert_test(annotated_loader, {}, YOUNG)[:1]],
        }],
    }
    path = folder / "causes.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return path


def test_the_rules_name_each_cause_on_both_sides_of_its_thresholds(tmp_path: Path) -> None:
    assert "SUCCESS" in promtool("test", "rules", _promtool_file(tmp_path)).stdout


@pytest.mark.parametrize("name", [n for n, c in LOADER_CASES.items() if c.expected])
def test_diagnose_decides_each_loader_case(name: str) -> None:
    found = loader_cause.decide(LOADER_CASES[name].figures,
                                dict(SETTINGS.alert(DATALOADER_BOUND).causes),
                                SETTINGS.threshold(CPU_SATURATED))
    assert found is not None and found.kind == LOADER_CASES[name].expected, found


@pytest.mark.parametrize("name", [n for n, c in EXCHANGE_CASES.items() if c.expected])
def test_diagnose_decides_each_exchange_case(name: str) -> None:
    case = EXCHANGE_CASES[name]
    median = sum(case.own) / 2
    ranks = sorted(((str(rank), f"node-{name}-{rank}", own / median)
                    for rank, own in enumerate(case.own)), key=lambda r: -r[2])
    nics = [exchange.NicUse(f"node-{name}-{rank}", "eth0", "transmit",
                            (busy if busy is not None else 0.88) * SPEED,
                            SPEED if busy is not None else None)
            for rank, busy in enumerate(case.tx_busy)]
    found = exchange.decide(ranks, None, case.loader_share, nics, EXCHANGE_THRESHOLDS, "r")
    assert found.cause == case.expected, found
