"""What a report reads (trainwatch.report.collect) without a Prometheus: a fake API answers the
exact queries (written out here), so the window's runs, the instant the verdict is read at, the
recorded window chosen, the step histogram, the alerts of the window and the baseline checks
are each checked against the series that feed them, with what must be left out. The live
path is tests/test_report_live.py."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose import rulesource
from trainwatch.diagnose.deployed import AlertRule, Deployment
from trainwatch.diagnose.figures import Gpu, RankReport, UnknownTrial
from trainwatch.diagnose.runs import Run
from trainwatch.report import collect, panels
from trainwatch.report.collect import NoData
from trainwatch.report.window import Asked, Window

DEPLOYMENT = Deployment(RecordNames("5m"), {TRIAL_STALE: AlertRule(TRIAL_STALE, 40.0, "x")})
T0 = 1_700_000_000.0
KEPT = 2e9  # the retention: T0 is a while ago
Rows = list[tuple[dict[str, str], float]]


class FakeAPI:
    """``query`` answers ``(instant, expr)`` from ``rows``, ``query_range`` ``(expr, start,
    end, step)`` from ``ranges``, ``samples`` ``(instant, expr)``, ``label_values`` its
    params (sorted); [] for any other. Every question is logged."""

    url = "http://prom:9090"

    def __init__(self, rows: dict[tuple[float | None, str], Rows] | None = None,
                 ranges: dict[tuple[str, float, float, float], Any] | None = None,
                 samples: dict[tuple[float | None, str], Any] | None = None,
                 labels: dict[tuple[Any, ...], list[str]] | None = None,
                 at: float | None = None, log: list[Any] | None = None) -> None:
        self.rows, self.ranges = rows or {}, ranges or {}
        self._samples, self.labels, self.at = samples or {}, labels or {}, at
        self.log = [] if log is None else log

    def pinned(self, at: float | None) -> FakeAPI:
        return FakeAPI(self.rows, self.ranges, self._samples, self.labels, at, self.log)

    def query(self, expr: str, kind: Any = None) -> Rows:
        self.log.append(("query", self.at, expr))
        return self.rows.get((self.at, expr), [])

    def query_range(self, expr: str, start: float, end: float, step: float,
                    kind: Any = None) -> Any:
        self.log.append(("range", expr, start, end, step))
        return self.ranges.get((expr, start, end, step), [])

    def samples(self, expr: str, kind: Any = None) -> Any:
        self.log.append(("samples", self.at, expr))
        return self._samples.get((self.at, expr), [])

    def label_values(self, label: str, **params: str) -> list[str]:
        self.log.append(("labels", label, params))
        return self.labels.get((label, *sorted(params.items())), [])

    def rules(self) -> list[dict[str, Any]]:
        """As /api/v1/rules gives them: strings decoded from JSON, not this module's."""
        return json.loads(json.dumps([
            {"type": "alerting", "name": "Slow", "annotations": {"runbook_url": "http://rb"}},
            {"type": "alerting", "name": "Bare"},
            {"type": "recording", "name": "Rec", "annotations": {"runbook_url": "http://no"}}]))


def run(rank: str = "0", first: float = T0, last: float = T0 + 600.0, **kw: Any) -> Run:
    return Run("e", "t", rank, "7", "n1", "1", first, last, **kw)


def window(start: float = T0, end: float = T0 + 3600.0) -> Window:
    return Window.of(None, start, end)


def test_the_instants_the_trial_had_series_at_sorted() -> None:
    w = window()
    api = FakeAPI(ranges={('max (trainwatch_trial_info{experiment="e", trial="t", rank="1"})',
                           w.start, w.end, w.step): [({}, [(T0 + 30.0, 1.0), (T0 + 10.0, 1.0)]),
                                                     ({}, [(T0 + 20.0, 1.0)])]})
    assert collect.seen_at(api, "e", "t", "1", w) == [T0 + 10.0, T0 + 20.0, T0 + 30.0]  # type: ignore[arg-type]


def test_an_ended_run_ends_at_the_first_scrape_of_its_final_push() -> None:
    """Its group stayed 300.4 s after the final push (at T0 + 600): the exit marker's samples
    over the last 302 s (ceil + 1) say when it was first scraped."""
    ended = run(last=T0 + 900.4, pushed=T0 + 600.0, exit_reason="finished")
    marker = 'trainwatch_trial_exit{experiment="e", trial="t", rank="0"}[302s]'
    api = FakeAPI(samples={(T0 + 900.4, marker): [({}, [(T0 + 615.0, 1.0), (T0 + 630.0, 1.0)]),
                                                  ({}, [(T0 + 605.0, 1.0)])]})
    assert collect.as_ended(api, ended).last == T0 + 605.0  # type: ignore[arg-type]
    assert collect.as_ended(FakeAPI(), ended).last == T0 + 900.4  # type: ignore[arg-type]
    running = run(last=T0 + 900.4, pushed=T0 + 600.0)
    api = FakeAPI(samples={(T0 + 900.4, marker): [({}, [(T0 + 605.0, 1.0)])]})
    assert collect.as_ended(api, running) is running  # type: ignore[arg-type]
    assert api.log == []
    # Pulled (no push time): a second back at least.
    pulled = run(last=T0 + 900.0, exit_reason="failed")
    api = FakeAPI()
    collect.as_ended(api, pulled)  # type: ignore[arg-type]
    assert api.log == [("samples", T0 + 900.0,
                        'trainwatch_trial_exit{experiment="e", trial="t", rank="0"}[1s]')]
    # Its push stamped 2.5 s after its last sample (the Pushgateway's clock ahead): a second.
    ahead = run(last=T0 + 900.0, pushed=T0 + 902.5, exit_reason="failed")
    api = FakeAPI()
    collect.as_ended(api, ahead)  # type: ignore[arg-type]
    assert api.log == [("samples", T0 + 900.0,
                        'trainwatch_trial_exit{experiment="e", trial="t", rank="0"}[1s]')]


def test_the_window_keeps_the_runs_that_touch_it_and_says_when_the_trial_ran_otherwise() -> None:
    w = window(T0 + 1000.0, T0 + 2000.0)
    runs = [run("0", T0, T0 + 999.0), run("1", T0 + 1000.0, T0 + 1100.0),
            run("2", T0 + 1900.0, T0 + 2000.0), run("3", T0 + 2000.5, T0 + 2100.0),
            run("4", T0, T0 + 3000.0), run("5", T0 + 2000.0, T0 + 2100.0),
            run("6", T0 + 500.0, T0 + 1000.0)]
    assert [r.rank for r in collect.in_window(runs, w, "e", "t", None)] == [
        "1", "2", "4", "5", "6"]  # a run touching either edge is in
    with pytest.raises(NoData) as raised:
        collect.in_window([runs[3], runs[0]], w, "e", "t", "3")
    said = str(raised.value)
    assert said.startswith("no samples of trial e/t rank 3 in the window 2023-11-14 22:30:00 UTC"
                           " to 2023-11-14 22:46:40 UTC")
    assert "it has samples from 2023-11-14 22:13:20 UTC to 2023-11-14 22:48:20 UTC" in said
    with pytest.raises(NoData, match="^no samples of experiment e in the window"):
        collect.in_window([runs[0]], w, "e", None, None)
    with pytest.raises(NoData, match="^no samples of trial e/t in the window"):
        collect.in_window([runs[0]], w, "e", "t", None)


def recorded_api(counts: dict[str, float], names: list[str], end: float) -> FakeAPI:
    sel = 'experiment="e", trial="t"'
    prefix = "trial_phase:trainwatch_trial_phase_seconds:share_rate"
    match = f'{{__name__=~"{prefix}.+", {sel}}}'
    labels = {("__name__", ("end", f"{end:.3f}"), ("match[]", match),
               ("start", f"{T0 + 0.25:.3f}")): names}
    rows: dict[tuple[float | None, str], Rows] = {
        (end, f"sum (count_over_time({prefix}{w}{{{sel}}}[3600s]))"): [({}, c)]
        for w, c in counts.items()}
    return FakeAPI(rows, labels=labels)


def test_the_recorded_window_is_the_one_holding_most_of_the_trials_samples() -> None:
    end = T0 + 3600.0
    sel = {"experiment": "e", "trial": "t", "rank": None}
    prefix = "trial_phase:trainwatch_trial_phase_seconds:share_rate"
    w = Window.of(None, T0 + 0.25, end)
    api = recorded_api({"5m": 100.0, "1m": 350.0, "10m": 349.0}, [prefix + "1m", prefix + "10m"],
                       end)
    assert collect.recorded_window(api, DEPLOYMENT, sel, w).window == "1m"  # type: ignore[arg-type]
    api = recorded_api({"5m": 350.0, "1m": 351.0}, [prefix + "1m"], end)
    assert collect.recorded_window(api, DEPLOYMENT, sel, w).window == "1m"  # type: ignore[arg-type]
    # A tie: the deployed window, whichever order the candidates come in.
    for names in ([prefix + "1m", prefix + "10m"], [prefix + "10m", prefix + "1m"]):
        api = recorded_api({"5m": 200.0, "1m": 200.0, "10m": 200.0}, names, end)
        assert collect.recorded_window(api, DEPLOYMENT, sel, w).window == "5m"  # type: ignore[arg-type]
    # The deployed window among the candidates (equal to the deployed names, another object),
    # tied with five others: the deployed, whichever comes first in a set (by hash); each of
    # the six deployed in turn.
    windows = ("1m", "2m", "5m", "10m", "30m", "1h")
    for deployed in windows:
        api = recorded_api(dict.fromkeys(windows, 200.0), [prefix + x for x in windows], end)
        rules = Deployment(RecordNames(deployed), DEPLOYMENT.alerts)
        assert collect.recorded_window(api, rules, sel, w).window == deployed  # type: ignore[arg-type]
    # The deployed series have no answer, a candidate one sample: the candidate.
    api = recorded_api({"1m": 1.0}, [prefix + "1m"], end)
    assert collect.recorded_window(api, DEPLOYMENT, sel, w).window == "1m"  # type: ignore[arg-type]
    # Samples counted over the window's length however short or far back it starts.
    for start, end_, seconds in ((T0, T0 + 0.4, 1), (T0, T0 + 1.6, 2), (1000.0, T0, T0 - 1000)):
        api = FakeAPI()
        collect.recorded_window(api, DEPLOYMENT, sel, Window.of(None, start, end_))  # type: ignore[arg-type]
        assert ("query", end_, (f"sum (count_over_time({prefix}5m{{experiment=\"e\", "
                f'trial="t"}}[{seconds:.0f}s]))')) in api.log
    # None holds a sample: the deployed one.
    api = recorded_api({}, [prefix + "1m"], end)
    assert collect.recorded_window(api, DEPLOYMENT, sel, w).window == "5m"  # type: ignore[arg-type]


def test_a_fired_alert_fired_unless_said_otherwise() -> None:
    assert collect.FiredAlert("A", "", T0, T0, None).fired is True


class Own:
    """collect's own_baseline: the baselines made and the runs judged."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def Baselines(self, api: Any, deployment: Any, now: float, since: float) -> str:
        self.asked.append(("baselines", now, since))
        return "baselines"

    def for_reports(self, baselines: str, runs: list[Run]) -> dict[Any, Any]:
        self.asked.append(("for", baselines, [r.rank for r in runs]))
        found = type("Found", (), {"line": lambda self: "23% slower", "comparison": "cmp"})
        return {runs[0].key: found()}


@pytest.mark.parametrize(("trials", "judged"), [(["t", "t"], True), (["t", "u"], False),
                                                ([], False)])
def test_a_report_of_one_trial_is_against_its_own_baseline(
        monkeypatch: pytest.MonkeyPatch, trials: list[str], judged: bool) -> None:
    own = Own()
    monkeypatch.setattr(collect, "own_baseline", own)
    reports = [RankReport("e", t, str(i), "n1", "7", "2", "5m", run=run(str(i)) if t == "t" else
                          Run("e", t, str(i), "7", "n1", "1", T0, T0 + 10.0))
               for i, t in enumerate(trials)]
    reports.append(RankReport("e", "t", "9", "n1", "7", "2", "5m"))  # no run: not judged
    doc = collect.Document("p", "e", None, None, window(), None, reports)
    collect.against_own(None, DEPLOYMENT, doc, 600.0, T0 + 5.0)  # type: ignore[arg-type]
    if judged:
        assert own.asked == [("baselines", T0 + 5.0, 600.0), ("for", "baselines", ["0", "1"])]
        assert (doc.baseline_line, doc.comparison) == ("23% slower", "cmp")
    else:
        assert own.asked == [] and (doc.baseline_line, doc.comparison) == (None, None)


def test_the_step_histogram_is_each_trials_steps_per_bucket_over_the_window() -> None:
    sel = {"experiment": "e", "trial": None, "rank": None}
    expr = ('sum by (trial, le) (increase(trainwatch_trial_step_seconds_bucket'
            '{experiment="e"}[1800s]))')
    api = FakeAPI({(None, expr): [
        ({"trial": "t", "le": "0.5"}, 30.0), ({"trial": "t", "le": "0.1"}, 10.0),
        ({"trial": "t", "le": "+Inf"}, 31.0), ({"trial": "t", "le": "0.25"}, 9.5),
        ({"trial": "u", "le": "0.1"}, 0.0), ({"trial": "u", "le": "+Inf"}, 0.0),
        ({"trial": "v", "le": "0.1"}, math.nan), ({"trial": "w"}, 4.0),
        ({"trial": "x", "le": "0.1"}, 0.5), ({"trial": "x", "le": "+Inf"}, 0.5)]})
    found = collect.step_histogram(api, sel, 1800)  # type: ignore[arg-type]
    # Sorted by bound; a count that went down (a rate's extrapolation) is no negative bucket.
    assert found == {"t": [(0.1, 10.0), (0.25, 0.0), (0.5, 20.5), (math.inf, 1.0)],
                     "w": [(math.inf, 4.0)],
                     "x": [(0.1, 0.5), (math.inf, 0.0)]}  # u: no step; v: NaN only


def alerts_range(w: Window, series: list[tuple[dict[str, str], list[tuple[float, float]]]]
                 ) -> FakeAPI:
    # As Prometheus answers: label values decoded from JSON, not this module's strings.
    return FakeAPI(ranges={("ALERTS", w.start, w.end, w.step): json.loads(json.dumps(series))})


def test_the_windows_alerts_are_the_ranks_gpus_and_nodes_own_once_each_firing_first() -> None:
    w = window()
    r0 = RankReport("e", "t", "0", "n1", "7", "2", "5m", gpus=[Gpu("GPU-a", None, None)])
    r1 = RankReport("e", "t", "1", None, "8", "2", "5m")
    rank0 = {"experiment": "e", "trial": "t", "rank": "0"}
    common = {"__name__": "ALERTS", "severity": "warning", "job": "rules"}
    series = [
        ({**common, "alertname": "Slow", "alertstate": "pending", **rank0}, [(T0 + 50, 1.0)]),
        ({**common, "alertname": "Slow", "alertstate": "firing", **rank0},
         [(T0 + 100, 1.0), (T0 + 160, 1.0)]),
        ({**common, "alertname": "Slow", "alertstate": "pending", **rank0}, [(T0 + 900, 1.0)]),
        ({"alertname": "Hot", "alertstate": "firing", "uuid": "GPU-a"}, [(T0 + 10, 1.0)]),
        ({"alertname": "Disk", "alertstate": "pending", "instance": "h1:9100"}, [(T0 + 5, 1.0)]),
        ({"alertname": "Node", "alertstate": "firing", "nodename": "n1"}, [(T0 + 70, 1.0)]),
        ({"alertname": "Wait", "alertstate": "firing", "experiment": "e", "trial": "t",
          "rank": "1"}, []),  # no point in the window
        ({"alertname": "Other", "alertstate": "firing", "experiment": "e", "trial": "u",
          "rank": "0", "nodename": "n1", "instance": "h1:9100"}, [(T0 + 1, 1.0)]),
        ({"alertname": "Far", "alertstate": "firing", "uuid": "GPU-z", "nodename": "n2",
          "instance": "h2:9100"}, [(T0 + 1, 1.0)]),
        ({"alertname": "Nobody", "alertstate": "firing"}, [(T0 + 1, 1.0)]),
        ({"alertname": "Odd", **rank0}, [(T0 + 3, 1.0)]),  # no state: not firing
    ]
    found = collect.fired(alerts_range(w, series), w, [r0, r1], {"Slow": "http://rb"},  # type: ignore[arg-type]
                          {"h1:9100": "n1", "h2:9100": "n2"})
    assert [(a.name, a.about, a.first, a.last, a.runbook_url, a.fired) for a in found] == [
        ("Hot", "uuid=GPU-a", T0 + 10, T0 + 10, None, True),
        ("Node", "nodename=n1", T0 + 70, T0 + 70, None, True),
        ("Slow", "experiment=e, rank=0, trial=t", T0 + 100, T0 + 160, "http://rb", True),
        ("Odd", "experiment=e, rank=0, trial=t", T0 + 3, T0 + 3, None, False),
        ("Disk", "instance=h1:9100", T0 + 5, T0 + 5, None, False)]


def test_an_alert_only_pending_keeps_its_first_pending_row() -> None:
    w = window()
    rank0 = {"experiment": "e", "trial": "t", "rank": "0"}
    series = [({"alertname": "A", "alertstate": "pending", **rank0}, [(T0 + 50, 1.0)]),
              ({"alertname": "A", "alertstate": "pending", **rank0}, [(T0 + 90, 1.0)])]
    r0 = RankReport("e", "t", "0", None, "7", "1", "5m")
    [found] = collect.fired(alerts_range(w, series), w, [r0], {}, {})  # type: ignore[arg-type]
    assert (found.first, found.fired) == (T0 + 50, False)


def test_a_baseline_comparison_is_of_the_reports_one_trial_and_its_one_rank(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []
    monkeypatch.setattr(collect, "compare_refs",
                        lambda api, deployment, ref, baseline, since, now:
                        asked.append((ref, baseline, since, now)) or "cmp")
    r = [RankReport("e", "t", "0", None, "7", "2", "5m"),
         RankReport("e", "t", "1", None, "8", "2", "5m")]
    assert collect.compare_with(None, DEPLOYMENT, r, "e/b", 86400.0, T0) == "cmp"  # type: ignore[arg-type]
    assert collect.compare_with(None, DEPLOYMENT, r[1:], "e/b/1", 60.0, T0 + 1) == "cmp"  # type: ignore[arg-type]
    assert asked == [("e/t", "e/b", 86400.0, T0), ("e/t/1", "e/b/1", 60.0, T0 + 1)]
    with pytest.raises(ValueError, match=r"has 0: \)$"):
        collect.compare_with(None, DEPLOYMENT, [], "e/b", 60.0, T0)  # type: ignore[arg-type]
    other = RankReport("e", "u", "0", None, "9", "1", "5m")
    with pytest.raises(ValueError, match=r"has 2: t, u\)$"):
        collect.compare_with(None, DEPLOYMENT, [r[0], other], "e/b", 60.0, T0)  # type: ignore[arg-type]


class Collected:
    """collect() with its readers of runs and reports replaced: what each was asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, runs: list[Run],
                 reports: list[RankReport] | None = None, source: str | None = None) -> None:
        self.asked: dict[str, Any] = {}
        self.reports = reports if reports is not None else [
            RankReport("e", "t", "0", "n1", "7", "1", "5m")]
        deployment = Deployment(DEPLOYMENT.names, DEPLOYMENT.alerts, source=source)

        def find_runs(api: Any, since: float, experiment: str, trial: str | None,
                      rank: str | None, now: float) -> list[Run]:
            self.asked["find_runs"] = (since, experiment, trial, rank)
            self.now = now
            return runs

        def gather_runs(api: Any, deployment: Deployment, experiment: str, trial: str | None,
                        rank: str | None, *, since: float, at: float | None,
                        now: float) -> list[RankReport]:
            self.asked["gather_runs"] = (experiment, trial, rank, since, at, now)
            return self.reports

        monkeypatch.setattr(collect, "retention", lambda api: KEPT)
        monkeypatch.setattr(rulesource, "deployment_of", lambda api, rules: deployment)
        monkeypatch.setattr(rulesource, "shipped_rules", lambda: json.loads(json.dumps([
            {"type": "alerting", "name": "Slow", "annotations": {"runbook_url": "http://ship"}}])))
        monkeypatch.setattr(collect, "find_runs", find_runs)
        monkeypatch.setattr(collect, "gather_runs", gather_runs)
        monkeypatch.setattr(collect, "unknown_message", lambda api, kept, e, t, r, now:
                            f"unknown {kept} {e} {t} {r}")
        monkeypatch.setattr(collect, "compare_refs", lambda api, d, ref, b, since, now:
                            ("compared", ref, b, since))
        monkeypatch.setattr(collect, "fired", lambda api, w, reports, runbooks, hosts:
                            self.asked.setdefault("runbooks", runbooks) and [])


def test_a_window_asked_ending_in_the_past_reads_the_verdict_at_its_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = Collected(monkeypatch, [run("0", T0, T0 + 600.0), run("1", T0, T0 + 500.0)])
    doc = collect.collect(FakeAPI(), "e", "t", None, Asked(start=T0 - 100.0, end=T0 + 300.0))  # type: ignore[arg-type]
    assert c.asked["find_runs"] == (KEPT, "e", "t", None)
    assert c.asked["gather_runs"] == ("e", "t", None, KEPT, T0 + 300.0, c.now)
    assert (doc.window.start, doc.window.end, doc.evaluated_at) == (T0 - 100.0, T0 + 300.0,
                                                                    T0 + 300.0)
    assert (doc.prometheus, doc.experiment, doc.trial, doc.rank) == (
        "http://prom:9090", "e", "t", None)
    assert (doc.stale_after, doc.thresholds_from, doc.now) == (40.0, None, c.now)
    assert doc.reports == c.reports
    assert c.asked["runbooks"] == {"Slow": "http://rb", "Bare": None}


def test_a_window_past_the_trials_end_reads_it_at_its_last_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = Collected(monkeypatch, [run("0", T0, T0 + 600.0), run("1", T0, T0 + 500.0)])
    doc = collect.collect(FakeAPI(), "e", "t", "0", Asked(start=T0 - 100.0, end=T0 + 900.0))  # type: ignore[arg-type]
    assert c.asked["gather_runs"][2:5] == ("0", KEPT, T0 + 600.0)
    assert doc.evaluated_at == T0 + 600.0


def test_at_an_instant_the_verdict_is_read_there_and_the_window_is_the_life_on_then(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = Collected(monkeypatch, [run("0", T0, T0 + 600.0)])
    collect.collect(FakeAPI(), "e", "t", None, Asked(at=T0 + 400.0))  # type: ignore[arg-type]
    assert c.asked["gather_runs"][4] == T0 + 400.0
    c = Collected(monkeypatch, [run("0", T0, T0 + 600.0)])
    collect.collect(FakeAPI(), "e", "t", None, Asked(at=T0 + 700.0))  # type: ignore[arg-type]
    assert c.asked["gather_runs"][4] == T0 + 600.0


def test_a_running_trial_is_read_now(monkeypatch: pytest.MonkeyPatch) -> None:
    import time
    now = time.time()
    c = Collected(monkeypatch, [run("0", now - 600.0, now - 5.0, current=True,
                                    pushed=now - 6.0)])
    doc = collect.collect(FakeAPI(), "e", "t", None, Asked(since=900.0))  # type: ignore[arg-type]
    assert c.asked["gather_runs"][4] is None
    assert doc.evaluated_at is None and doc.window.ends_now


def test_no_run_is_an_unknown_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    Collected(monkeypatch, [])
    with pytest.raises(UnknownTrial, match=f"^unknown {KEPT} e t 2$"):
        collect.collect(FakeAPI(), "e", "t", "2", Asked())  # type: ignore[arg-type]


@pytest.mark.parametrize(("rank", "baseline"), [(None, "e/t"), ("1", "e/t/1"), ("1", "e/t")])
def test_a_baseline_that_is_the_trial_itself_is_refused(
        monkeypatch: pytest.MonkeyPatch, rank: str | None, baseline: str) -> None:
    c = Collected(monkeypatch, [run()])
    with pytest.raises(ValueError, match=f"^--baseline {baseline} is the trial itself"):
        collect.collect(FakeAPI(), "e", "t", rank, Asked(), baseline=baseline)  # type: ignore[arg-type]
    assert "find_runs" not in c.asked


@pytest.mark.parametrize("baseline", ["e/t/2", "e/u", "f/t", "e/a", "a/t"])
def test_another_rank_or_trial_is_compared(monkeypatch: pytest.MonkeyPatch,
                                           baseline: str) -> None:
    Collected(monkeypatch, [run()])
    doc = collect.collect(FakeAPI(), "e", "t", "1", Asked(start=T0, end=T0 + 600.0),  # type: ignore[arg-type]
                          baseline=baseline)
    assert doc.comparison == ("compared", "e/t/0", baseline, KEPT)  # type: ignore[comparison-overlap]


def test_a_global_view_names_its_thresholds_source_and_the_shipped_runbooks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = Collected(monkeypatch, [run()], source="shipped rules")
    doc = collect.collect(FakeAPI(), "e", "t", None, Asked(start=T0, end=T0 + 600.0))  # type: ignore[arg-type]
    assert doc.thresholds_from == "shipped rules"
    assert c.asked["runbooks"] == {"Slow": "http://ship"}


def test_the_plots_span_the_trials_part_of_the_window_and_the_gpus_are_named() -> None:
    w = Window.of(None, T0, T0 + 3600.0)  # a 10 s step
    sel = 'experiment="e", trial="t", rank="0"'
    gpu_info = f"trainwatch_trial_gpu_info{{{sel}}}"
    busy = panels.gpu_panels({"experiment": "e", "trial": "t", "rank": "0"})[0].lines[0].expr
    api = FakeAPI(
        rows={(T0 + 1800.0, "trainwatch_host_info"): [({"instance": "h1:9100",
                                                       "nodename": "n1"}, 1.0)],
              (T0 + 1800.0, (f"trainwatch_gpu_info * on (uuid) group_left () max by (uuid) "
                            f"({gpu_info})")): [({"uuid": "GPU-a", "name": "H100"}, 1.0)]},
        ranges={(f"max (trainwatch_trial_info{{{sel}}})", w.start, w.end, w.step):
                [({}, [(T0 + 600.0, 1.0), (T0 + 900.0, 1.0), (T0 + 1200.0, 1.0)])],
                (busy, w.start, w.end, w.step): [({"uuid": "GPU-a", "gpu": "0", "instance": "h1:9100",
                                                   "source": "sm_active"},
                                                  [(T0 + 600.0, 0.5)])]})
    doc = collect.Document("p", "e", "t", "0", w, T0 + 1800.0,
                           [RankReport("e", "t", "0", "n1", "7", "1", "5m")])
    hosts = collect.draw(api, doc, DEPLOYMENT, [run()], None)  # type: ignore[arg-type]
    assert hosts == {"h1:9100": "n1"}
    assert doc.span == (T0 + 590.0, T0 + 1210.0)
    assert doc.gpu_names == {"GPU-a": "H100"}
    assert doc.rate_window == "5m"
    assert [(title, len(ps), note) for title, ps, note in doc.sections] == [
        ("Training loop", 3, None), ("GPUs", len(panels.gpu_panels({})), None),
        ("Nodes", len(panels.node_panels(DEPLOYMENT.names, {})), None)]
    assert doc.sections[1][1][0].series[0].name == "n1 GPU 0: SM activity (NVML GPM)"
    assert not any("trial t" in p.spec.title for p in doc.sections[0][1])  # one trial: unnamed
    assert ("query", T0 + 1800.0, ('sum by (trial, le) (increase('
            f'trainwatch_trial_step_seconds_bucket{{{sel}}}[1800s]))')) in api.log


def test_a_trial_without_gpu_series_says_so_and_its_plots_span_the_whole_window() -> None:
    w = Window.of(None, T0, T0 + 3600.0)
    sel = 'experiment="e", trial="t"'
    api = FakeAPI(ranges={(f"max (trainwatch_trial_info{{{sel}}})", w.start, w.end, w.step):
                          [({}, [(T0 + 5.0, 1.0), (T0 + 3598.0, 1.0)])]})
    doc = collect.Document("p", "e", "t", None, w, None,
                           [RankReport("e", "t", "0", "n1", "7", "1", "5m"),
                            RankReport("e", "t", "1", "n1", "8", "1", "5m")])
    collect.draw(api, doc, DEPLOYMENT, [run()], None)  # type: ignore[arg-type]
    assert doc.span == (T0, T0 + 3600.0)  # a step before the first and after the last: cut
    gpus = doc.sections[1]
    assert gpus[1] == [] and gpus[2] is not None and gpus[2].startswith("No GPU series")
    assert ("query", None, ('sum by (trial, le) (increase(trainwatch_trial_step_seconds_bucket'
            f'{{{sel}}}[3600s]))')) in api.log
    assert ("query", None, "trainwatch_host_info") in api.log  # read now: no instant asked


@pytest.mark.parametrize(("start", "end", "seconds"), [
    (T0, T0 + 0.4, 1), (1000.0, T0, T0 - 1000)])  # under a second; from near 1970
def test_the_histogram_is_over_the_windows_length_at_least_a_second(
        start: float, end: float, seconds: float) -> None:
    w = Window.of(None, start, end)
    api = FakeAPI()
    doc = collect.Document("p", "e", "t", None, w, None,
                           [RankReport("e", "t", "0", "n1", "7", "1", "5m")])
    collect.draw(api, doc, DEPLOYMENT, [run()], None)  # type: ignore[arg-type]
    assert ("query", None, ("sum by (trial, le) (increase(trainwatch_trial_step_seconds_bucket"
            f'{{experiment="e", trial="t"}}[{seconds:.0f}s]))')) in api.log


def test_several_trials_get_a_set_of_loop_panels_each() -> None:
    w = Window.of(None, T0, T0 + 3600.0)
    doc = collect.Document("p", "e", None, None, w, None,
                           [RankReport("e", "u", "0", "n1", "7", "1", "5m"),
                            RankReport("e", "t", "0", "n1", "8", "1", "5m"),
                            RankReport("e", "t", "1", "n1", "9", "1", "5m")])
    collect.draw(FakeAPI(), doc, DEPLOYMENT, [run()], None)  # type: ignore[arg-type]
    assert doc.span is None
    titles = [p.spec.title for p in doc.sections[0][1]]
    assert len(titles) == 6 and titles[0].endswith("— trial t") and titles[3].endswith(
        "— trial u")
