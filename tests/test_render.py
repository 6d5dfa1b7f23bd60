"""trainwatch/diagnose/render.py: the text and JSON `diagnose` and `trials` print, line by line,
without a stack: what each line says for each kind of report, and what it must leave out."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from trainwatch.diagnose import render
from trainwatch.diagnose.figures import AlertState, Gpu, RankReport
from trainwatch.diagnose.ranks import RankSpread, TrialScaling
from trainwatch.diagnose.trials import TrialRow
from trainwatch.diagnose.verdict import ENDED, STALE, Verdict

BASE = RankReport("exp", "t7", "3", "node-b", "4242", "8", "5m")


def verdict(**kw: Any) -> Verdict:
    fields: dict[str, Any] = {"kind": "dataloader", "title": "Data-loader bound",
                              "bottleneck": True,
                                  "measured": 0.437, "comparison": ">", "threshold": 0.3,
                                  "alert": "TrainwatchDataloaderBound", "remedy": "add workers",
                                  "runbook_url": None}
    return Verdict(**(fields | kw))


def lines(r: RankReport) -> list[str]:
    return render.report_text(r).splitlines()


def test_the_head_line_names_the_rank_and_its_last_push_and_says_unknown_fields_as_such() -> None:
    assert lines(dataclasses.replace(BASE, push_age_seconds=12.34))[0] == (
        "Trial exp/t7 rank 3 on node-b (pid 4242, world size 8), rate window 5m, "
        "last push 12.3 s ago")
    bare = RankReport("exp", "t7", "3", None, None, None, "2m")
    assert lines(bare)[0] == "Trial exp/t7 rank 3 on ? (pid ?, world size ?), rate window 2m"


def test_step_time_rates_and_phases_are_each_figure_in_its_place() -> None:
    r = dataclasses.replace(BASE, step_seconds={"0.5": 0.0213, "0.95": 0.0876},
                            steps_per_second=46.5678, samples_per_second=1490.17,
                            phases=[("train_batch", 0.6), ("dataloader_next", 0.25)])
    got = lines(r)
    assert got[1] == ("  step time p50 21.3 ms, p95 87.6 ms; 46.57 steps/s, "
                      "1490.2 samples/s")
    assert got[2] == "  phases (share of step time over the last 5m):"
    # names padded to the longest, shares right-aligned, a bar of 30 for the whole step
    assert got[3] == "    train_batch      60.0%  " + "█" * 18
    assert got[4] == "    dataloader_next  25.0%  " + "█" * 8
    assert "(none recorded over the window)" not in got


def test_a_report_without_phases_gpus_or_figures_says_so_and_invents_nothing() -> None:
    got = lines(BASE)
    assert got[1] == "  step time p50 -, p95 -; - steps/s, - samples/s"
    assert "    (none recorded over the window)" in got
    assert "  GPUs: none reported by the trial" in got
    assert "  node CPU busy: -" in got
    for absent in ("EARLY", "ENDED", "STOPPED", "measured limits", "across ranks", "VERDICT",
                   "scaling", "trace of"):
        assert not any(absent in line for line in got), absent


def test_each_gpu_line_says_where_its_series_are_and_gpm_only_where_reported() -> None:
    r = dataclasses.replace(BASE, gpus=[
        Gpu("GPU-a", "10.0.0.5:9400", "1", utilization=0.93, memory_used=0.41,
            sm_active=0.72, tensor_active=0.31),
        Gpu("GPU-b", None, None, utilization=None, memory_used=0.05)])
    got = lines(r)
    assert ("  GPU GPU-a (GPU 1 on 10.0.0.5:9400): utilization 93.0%, SM active 72.0%, "
            "tensor active 31.0%, memory used 41.0%") in got
    assert "  GPU GPU-b (no exporter series): utilization -, memory used 5.0%" in got
    assert "GPUs: none reported" not in render.report_text(r)


def test_measured_limits_print_their_advice_or_both_ceilings() -> None:
    one = lines(dataclasses.replace(BASE, loader_limit=812.6))
    assert "  measured limits: loader 813 samples/s, step -" in one
    both = lines(dataclasses.replace(BASE, loader_limit=812.6, step_limit=95.2,
                                     limits_advice="the loader keeps up"))
    assert "  measured limits: the loader keeps up" in both
    assert not any("813" in line for line in both)
    step_only = lines(dataclasses.replace(BASE, step_limit=95.2))
    assert "  measured limits: loader -, step 95 samples/s" in step_only


def test_an_early_report_says_its_whole_run_so_far_and_an_ended_one_its_whole_run() -> None:
    early = dataclasses.replace(BASE, lifetime_seconds=41.6,
                                verdict=verdict(early=True, steps=1))
    got = lines(early)
    assert got[1] == ("  EARLY: the trial is younger than the 5m rate window; numbers over its "
                      "whole run so far (1 step, 42 s of samples)")
    assert "  phases (share of step time over its whole run so far; the dashboards plot the "\
           "last 5m):" in got
    assert render.verdict_text(early)[0] == (
        "VERDICT (early, 1 step): Data-loader bound: 43.7% > threshold 30.0% "
        "(TrainwatchDataloaderBound)")
    assert render.verdict_text(early)[0] in got
    ended = dataclasses.replace(BASE, verdict=verdict(kind=ENDED, steps=None, exit_reason="clean",
                                                      alert=None))
    assert lines(ended)[1] == "  ENDED: numbers over its whole run up to its last push (? steps)"
    stopped = dataclasses.replace(BASE, verdict=verdict(kind=STALE, steps=2, threshold=120.0,
                                                        alert="TrainwatchTrialStale"))
    assert lines(stopped)[1] == ("  STOPPED: numbers over its whole run up to its last push "
                                 "(2 steps)")
    assert "EARLY" not in render.report_text(stopped)


def test_over_says_the_dashboards_window_only_where_it_differs() -> None:
    assert render.over(BASE) == "over the last 5m"
    # the same window, read from the command line and from the rules: equal, not one object
    same = dataclasses.replace(BASE, window=f"{5}m", dashboard_window="5m")
    assert render.over(same) == "over the last 5m"
    assert render.over(dataclasses.replace(BASE, window="15m", dashboard_window="1m")) == (
        "over the last 15m; the dashboards plot the last 1m")
    assert render.over(dataclasses.replace(BASE, dashboard_window="1m")) == (
        "over the last 5m; the dashboards plot the last 1m")  # "1m" sorts before "5m"
    ended = dataclasses.replace(BASE, verdict=verdict(kind=ENDED))
    assert render.over(ended) == "over its whole run; the dashboards plot the last 5m"


def test_the_verdict_head_says_how_it_was_decided_for_each_kind() -> None:
    def head(v: Verdict) -> str:
        return render.verdict_text(dataclasses.replace(BASE, verdict=v))[0]

    assert head(verdict()) == ("VERDICT: Data-loader bound: 43.7% > threshold 30.0% "
                               "(TrainwatchDataloaderBound)")
    assert head(verdict(alert=None)) == "VERDICT: Data-loader bound: 43.7% > threshold 30.0%"
    # a kind that sorts after "stale" is judged on its figures, not read as stale
    assert head(verdict(kind="underused_gpu", title="GPU underused", comparison="<",
                        measured=0.12, alert="TrainwatchGpuUnderutilized")) == (
        "VERDICT: GPU underused: 12.0% < threshold 30.0% (TrainwatchGpuUnderutilized)")
    assert head(verdict(measured=None)) == "VERDICT: Data-loader bound"
    assert head(verdict(threshold=None)) == "VERDICT: Data-loader bound"
    assert head(verdict(kind=STALE, title="Stopped", threshold=180.0,
                        alert="TrainwatchTrialStale")) == (
        "VERDICT: Stopped (TrainwatchTrialStale: no push for over 180 s)")
    assert head(verdict(kind=ENDED, title="Ended", exit_reason="failed",
                        alert="TrainwatchTrialFailed")) == (
        "VERDICT: Ended (TrainwatchTrialFailed)")
    assert head(verdict(kind=ENDED, title="Ended", exit_reason="failed", alert=None)) == (
        "VERDICT: Ended")
    # an ended rank without an exit reason is judged on its figures, as a live one is
    assert head(verdict(kind=ENDED, title="Ended", exit_reason=None)) == (
        "VERDICT: Ended: 43.7% > threshold 30.0% (TrainwatchDataloaderBound)")
    assert render.verdict_text(BASE) == []


def test_the_verdicts_lines_each_appear_only_with_what_they_say() -> None:
    full = dataclasses.replace(
        BASE, alerts=[AlertState("TrainwatchDataloaderBound", "firing", "0.44"),
                      AlertState("TrainwatchLowGpuUtilization", "pending", "0.2")],
        verdict=verdict(metric="dataloader_next share of step time", last_profile="p 60%",
                        notes=("one", "two"), cleanup="trainwatch gc", runbook_url="http://r"))
    assert render.verdict_text(full)[1:] == [
        "  measured: dataloader_next share of step time, over the last 5m",
        "  last timings: p 60%",
        "  also: one", "  also: two",
        "  what to change: add workers",
        "  clean up once it is gone: trainwatch gc",
        "  alerts: TrainwatchDataloaderBound firing, TrainwatchLowGpuUtilization pending",
        "  runbook: http://r"]
    assert render.verdict_text(dataclasses.replace(BASE, verdict=verdict()))[1:] == [
        "  what to change: add workers", "  alerts: none pending or firing"]
    ended = dataclasses.replace(BASE, verdict=verdict(kind=ENDED))
    assert render.verdict_text(ended)[-1] == "  alerts: none fired during its run"


def test_across_ranks_names_each_straggler_and_the_remedy_only_with_one() -> None:
    spread = RankSpread(0.1234, 1.376, 1.25, (("5", "node-c", 1.8123), ("2", None, 1.3)),
                        remedy="look at rank 5's node")
    got = render.ranks_text(dataclasses.replace(BASE, ranks=spread))
    assert got == [
        ("  across ranks: own step time 123.4 ms (step time minus waiting for other ranks), "
        "1.38x the median rank's"),
        ("  STRAGGLER: rank 5 on node node-c takes 1.81x the median rank's own step time "
        "(threshold 1.25); every other rank waits for it"),
        ("  STRAGGLER: rank 2 on node ? takes 1.30x the median rank's own step time "
        "(threshold 1.25); every other rank waits for it"),
        "  what to change on the straggler: look at rank 5's node"]
    alone = dataclasses.replace(spread, stragglers=())
    assert render.ranks_text(dataclasses.replace(BASE, ranks=alone)) == got[:1]
    assert render.ranks_text(BASE) == []


def test_scaling_prints_each_part_it_has_and_nothing_it_lacks() -> None:
    spread = RankSpread(0.1, 1.0, 1.25)
    full = TrialScaling(0.614, 0.8, cause="network", why="the network", remedy="faster NICs",
                        evidence="NIC 91% busy")
    got = render.ranks_text(dataclasses.replace(BASE, ranks=spread, scaling=full))
    assert got[1:] == [
        "  scaling efficiency: 61.4% of ranks x the single-rank step limit (threshold 80.0%)",
        "  SCALING held back by the network",
        "  evidence: NIC 91% busy",
        "  what to change for scaling: faster NICs"]
    bare = render.scaling_text(dataclasses.replace(BASE, scaling=TrialScaling(0.95, None)))
    assert bare == ["  scaling efficiency: 95.0% of ranks x the single-rank step limit"]
    assert render.scaling_text(BASE) == []


def test_quantiles_are_marked_interpolated_inside_a_bucket_and_exact_on_a_bound() -> None:
    bounds = (0.01, 0.025, 0.05, 0.1)
    assert render.quantile_ms(0.0173, bounds) == "≈17.3 ms (within the 10–25 ms bucket)"
    assert render.quantile_ms(0.004, bounds) == "≈4.0 ms (within the 0–10 ms bucket)"
    assert render.quantile_ms(0.025, bounds) == "25.0 ms"
    assert render.quantile_ms(0.3, bounds) == "300.0 ms"  # past the last finite bound
    assert render.quantile_ms(None, bounds) == "-"


def test_bars_are_clamped_to_the_whole_width_and_steps_counted_in_words() -> None:
    assert render.bar(1.7) == "█" * render.BAR_WIDTH
    assert render.bar(-0.2) == ""
    assert render.bar(0.51) == "█" * 15
    assert (render.steps(None), render.steps(1), render.steps(0), render.steps(2)) == (
        "? steps", "1 step", "0 steps", "2 steps")
    assert render.num(3.14159, " s", 1) == "3.1 s" and render.num(None) == "-"
    assert render.pct(0.1234) == "12.3%" and render.pct(None) == "-"


def test_a_name_that_forges_a_line_stays_on_its_own_line() -> None:
    r = dataclasses.replace(BASE, trial="x\nVERDICT: healthy")
    got = lines(r)
    assert not any(line.startswith("VERDICT: healthy") for line in got)
    assert "x\\nVERDICT: healthy" in got[0]


class FakeBaseline:
    def __init__(self, said: str) -> None:
        self.said = said

    def line(self) -> str:
        return self.said

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.said}


def test_a_baseline_is_printed_and_carried_after_its_own_rank_only() -> None:
    other = dataclasses.replace(BASE, rank="4")
    baselines: Any = {("exp", "t7", "3"): FakeBaseline("12% slower\nthan E")}
    text = render.reports_text([BASE, other], baselines)
    first, second = text.split("\n\n")  # no verdict: no empty line inside a report
    assert first.endswith("\n  vs baseline: 12% slower\\nthan E")
    assert "vs baseline" not in second
    assert "vs baseline" not in render.reports_text([BASE])
    docs = json.loads(render.reports_json([BASE, other], baselines=baselines))["reports"]
    assert docs[0]["baseline"] == {"line": "12% slower\nthan E"} and "baseline" not in docs[1]


def test_the_json_report_carries_phases_window_verdict_code_and_notes_only_when_given() -> None:
    r = dataclasses.replace(BASE, phases=[("a", 0.7), ("b", 0.2)],
                            verdict=verdict(life_kind="gpu_bound"))
    text = render.reports_json([r], notes=["from the file x.yml"])
    assert text.startswith('{\n  "reports": [\n    {\n      "experiment": "exp"')  # indent 2
    doc = json.loads(text)
    [one] = doc["reports"]
    assert one["phases"] == [{"phase": "a", "share": 0.7}, {"phase": "b", "share": 0.2}]
    assert one["over"] == "over the last 5m"
    assert (one["verdict"]["exit_code"], one["verdict"]["finding"]) == (
        verdict().exit_code, "gpu_bound")
    assert doc["thresholds_from"] == ["from the file x.yml"]
    assert "thresholds_from" not in json.loads(render.reports_json([BASE]))
    assert json.loads(render.reports_json([BASE]))["reports"][0]["verdict"] is None
    assert "é" in render.reports_json([dataclasses.replace(BASE, trial="é")])  # not \u00e9
    assert render.notes_text(["a", "b"]) == ["thresholds: a", "thresholds: b"]


def row(**kw: Any) -> TrialRow:
    fields: dict[str, Any] = {"experiment": "exp", "trial": "t7", "rank": "0", "nodename": "n1",
                                  "steps_per_second": 12.345, "dataloader_share": 0.456,
                                  "gpu_busy": 0.789, "push_age_seconds": 95.0, "live": True,
                                  "state": "running", "pid": "77", "started": 1_700_000_000.0,
                                  "steps": 1_234_567, "cause": "dataloader", "mfu": 0.213}
    return TrialRow(**(fields | kw))


def test_the_trials_table_lines_up_every_column_under_its_header() -> None:
    text = render.trials_text([row(), row(trial="a-much-longer-trial", nodename=None, pid=None,
                                          started=None, push_age_seconds=None, steps=None,
                                          steps_per_second=None, dataloader_share=None,
                                          gpu_busy=None, mfu=None, cause=None)])
    # each column as wide as its widest cell, two spaces apart, no space at a line's end; the
    # start in UTC to the minute; every unknown a dash, none invented
    assert text.splitlines() == [
        ("EXPERIMENT  TRIAL                RANK  NODE  PID  STARTED           LAST PUSH       "
        "STATE    STEPS      STEPS/S  VS BASELINE  LOADER  GPU BUSY  MFU    CAUSE"),
        ("exp         t7                   0     n1    77   2023-11-14 22:13  95 seconds ago  "
        "running  1,234,567  12.35    no baseline  45.6%   78.9%     21.3%  dataloader"),
        ("exp         a-much-longer-trial  0     -     -    -                 -               "
        "running  -          -        no baseline  -       -         -      -")]
    forged = render.trials_text([row(trial="x\ny")]).splitlines()
    assert len(forged) == 2 and "x\\ny" in forged[1]


def test_an_ended_or_stale_rows_last_push_is_said_as_a_running_ones() -> None:
    rows = [row(live=False, state="ended clean", push_age_seconds=9000.0),
            row(live=False, state="stale", push_age_seconds=301.0),
            row(push_age_seconds=4.0)]
    cells = [line.split("  ") for line in render.trials_text(rows).splitlines()[1:]]
    said = [[c.strip() for c in line if c.strip().endswith(" ago")] for line in cells]
    assert said == [["2.5 hours ago"], ["5 minutes ago"], ["4 seconds ago"]]


def test_the_trials_start_is_utc_whatever_the_local_zone(
        local_zone: Callable[[str], None]) -> None:
    local_zone("XYZ+07:00")  # 7 h behind UTC
    assert time.localtime(0)[2:4] == (31, 17)  # the machine's zone really is another one
    cells = render.trials_text([row(started=1_700_000_000.0)]).splitlines()[1]
    assert "2023-11-14 22:13" in cells and "2023-11-14 15:13" not in cells


def test_trials_json_carries_every_field_and_notes_only_when_given() -> None:
    text = render.trials_json([row()], ["n"])
    assert text.startswith('{\n  "trials": [\n    {\n      "experiment": "exp"')  # indent 2
    doc = json.loads(text)
    assert doc["trials"][0] == dataclasses.asdict(row())
    assert doc["thresholds_from"] == ["n"]
    assert "thresholds_from" not in json.loads(render.trials_json([row()]))
