"""`trainwatch usage` without a Prometheus (issue 36: the usage mutation target): the figures
gathered from answers a stand-in gives (groups, causes, the top offender, owners outside any
trial), the units and rounding of what is printed, both sides of each threshold, and what the
table, CSV and JSON must not say. tests/test_usage.py runs it against recorded series."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.stack import REPO
from trainwatch import usage
from trainwatch.contract import remedies
from trainwatch.contract.records import IDLE_CAUSES, RecordNames
from trainwatch.promapi import PrometheusError
from trainwatch.usage import (
    NONE,
    Group,
    Outside,
    Owner,
    Uninstrumented,
    UsageError,
    as_csv,
    as_json,
    as_table,
    hours,
    queries,
    required,
    totals,
)

N = RecordNames("5m")
DAY = 86400.0


class Stub:
    """A Prometheus that answers each usage query by the record it reads."""

    url = "http://prom"

    def __init__(self, answers: dict[str, list[tuple[dict[str, str], float]]],
                 loaded: list[str] | None = None, held: list[str] | None = None,
                 retention: str = "15d") -> None:
        self.answers, self.asked = answers, []  # type: ignore[var-annotated]
        self.loaded = required(N) if loaded is None else loaded
        self.held = held or []
        self.retention = retention

    def get(self, path: str) -> Any:
        assert path == "status/runtimeinfo"
        return {"storageRetention": self.retention}

    def rules(self) -> list[dict[str, str]]:
        return [{"type": "recording", "name": name} for name in self.loaded] + [
            {"type": "alerting", "name": "TrainwatchX"}]

    def label_values(self, label: str, **params: str) -> list[str]:
        assert label == "__name__" and "match[]" in params
        return self.held

    def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
        self.asked.append(expr)
        for record, answer in self.answers.items():
            if f"({record}[" in expr:
                return answer
        return []


def rolled(record: str) -> str:
    return N.rolled(record)


# --- printed units -------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "said"), [
    (36000, "10.0"), (35999, "10.00"), (3600 * 12.34, "12.3"), (3600, "1.00"),
    (360, "0.10"), (359, "0.100"), (36, "0.010"), (0, "0.000"), (7200 * 3.14159, "6.28")])
def test_hours_keep_three_figures_on_both_sides_of_each_step(seconds: float, said: str) -> None:
    assert hours(seconds) == said


@pytest.mark.parametrize(("seconds", "said"), [
    (DAY, "1d"), (2 * DAY, "2d"), (DAY + 3600, "25h"), (3600, "1h"), (7200, "2h"),
    (60, "1m"), (90, "90s"), (59, "59s"), (1.5, "1.5s"), (7 * DAY, "7d"), (DAY + 60, "1441m")])
def test_a_duration_is_said_in_its_largest_whole_unit(seconds: float, said: str) -> None:
    assert usage._duration(seconds) == said


def test_a_percent_of_nothing_is_a_dash() -> None:
    assert usage._percent(1, 4) == "25%"
    assert usage._percent(2, 3) == "67%"
    assert usage._percent(0, 4) == "0%"
    assert usage._percent(1, 0) == "-"
    assert usage._percent(0.25, 0.5) == "50%"  # under a GPU-second held: still a share


@given(st.floats(min_value=0, max_value=1e7, allow_nan=False))
def test_a_range_holds_the_whole_span_in_whole_seconds_at_least_one(seconds: float) -> None:
    said = usage._range(seconds)
    whole = int(said[1:-2])
    assert said == f"[{whole}s]" and whole >= 1 and whole >= seconds and whole - seconds < 1 + 1e-9


# --- groups --------------------------------------------------------------------------------

def test_a_groups_mfu_is_its_model_seconds_over_the_held_seconds_that_know_one() -> None:
    assert Group("g", held=100, model=30, held_mfu=60).mfu == pytest.approx(0.5)
    assert Group("g", held=100, model=0, held_mfu=60).mfu == 0.0
    assert Group("g", held=100, model=30, held_mfu=0).mfu is None
    assert Group("g", held=1, model=0.25, held_mfu=0.5).mfu == 0.5  # under a GPU-second
    g = Group("g")
    g.wasted["data"], g.wasted["other"] = 5.0, 2.5
    assert g.idle == 7.5


def test_adding_groups_sums_every_figure_and_keeps_the_larger_top_offender() -> None:
    a = Group("a", held=10, busy=4, low_mfu=1, model=2, held_mfu=8, top=("e", "t1", 3.0))
    a.wasted["data"] = 3.0
    b = Group("b", held=20, busy=5, low_mfu=2, model=3, held_mfu=9, top=("e", "t2", 4.0))
    b.wasted["data"], b.wasted["straggler"] = 1.0, 6.0
    whole = totals([a, b])
    assert (whole.name, whole.held, whole.busy, whole.low_mfu, whole.model, whole.held_mfu) == (
        "total", 30, 9, 3, 5, 17)
    assert whole.wasted == {**dict.fromkeys(IDLE_CAUSES, 0.0), "data": 4.0, "straggler": 6.0}
    assert whole.top == ("e", "t2", 4.0)
    assert totals([b, a]).top == ("e", "t2", 4.0)  # either order
    # A tie keeps the first; a group without one changes nothing.
    tie = Group("c", top=("e", "t3", 4.0))
    assert totals([b, tie]).top == ("e", "t2", 4.0)
    assert totals([a, Group("d")]).top == ("e", "t1", 3.0)
    assert totals([]).top is None and totals([]).held == 0
    assert a.held == 10 and a.wasted["data"] == 3.0  # the parts are left as they were


def test_an_owner_is_named_by_its_pod_and_job_and_grouped_only_where_its_labels_say() -> None:
    assert Owner("uid-1", "", "n1").name == "pod uid-1"
    assert Owner("", "42", "n1").name == "job 42"
    assert Owner("uid-1", "42").name == "pod uid-1, job 42"
    assert Owner().name == "no pod or job"
    assert Owner("uid-1", "42", "n1").group("job") == "42"
    assert Owner("uid-1", "42", "n1").group("node") == "n1"
    assert Owner("uid-1", "", "n1").group("job") is None  # said nothing: no group
    for by_ in ("experiment", "namespace", "user"):
        assert Owner("uid-1", "42", "n1").group(by_) is None
    assert Outside((Uninstrumented(Owner("p"), 5.0), Uninstrumented(Owner("q"), 7.0)),
                   3.0).uninstrumented == 12.0


# --- the range asked -----------------------------------------------------------------------

def test_without_since_a_week_or_the_retention_where_shorter() -> None:
    assert usage.over(Stub({}, retention="15d"), None) == 7 * DAY  # type: ignore[arg-type]
    assert usage.over(Stub({}, retention="2d"), None) == 2 * DAY  # type: ignore[arg-type]
    assert usage.over(Stub({}, retention="2d"), 2 * DAY) == 2 * DAY  # type: ignore[arg-type]
    assert usage.over(Stub({}, retention="2d"), 3600) == 3600  # type: ignore[arg-type]
    with pytest.raises(UsageError) as err:
        usage.over(Stub({}, retention="2d"), 2 * DAY + 1)  # type: ignore[arg-type]
    assert str(err.value) == ("--since 172801s is beyond Prometheus's retention (2d) at "
                              "http://prom: nothing older is kept; use --since 2d or less")


# --- the rules deployed --------------------------------------------------------------------

def test_rules_loaded_or_their_series_held_are_enough_and_what_is_missing_is_named() -> None:
    usage.check_deployed(Stub({}), N)  # type: ignore[arg-type]
    # A global view loads no rules but holds the series.
    usage.check_deployed(Stub({}, loaded=[], held=required(N)), N)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as err:  # holding some is not enough
        usage.check_deployed(Stub({}, loaded=[], held=required(N)[1:]),  # type: ignore[arg-type]
                             N)
    assert str(err.value).startswith(f"Prometheus at http://prom has no trainwatch usage rules "
                                     f"({required(N)[0]} and {len(required(N)) - 1} more not "
                                     "loaded): deploy this version's")
    # Some loaded: the series held do not stand in for the rest.
    with pytest.raises(UsageError) as err:
        usage.check_deployed(Stub({}, loaded=required(N)[:-1],  # type: ignore[arg-type]
                                  held=required(N)), N)
    assert str(err.value) == (f"Prometheus at http://prom has no trainwatch usage rule "
                              f"{required(N)[-1]}: deploy this version's "
                              "prometheus/rules/recording.yml (group trainwatch.usage.rules)")
    with pytest.raises(UsageError, match=r"and 1 more not loaded"):
        usage.check_deployed(Stub({}, loaded=required(N)[:-2]), N)  # type: ignore[arg-type]


# --- gathered from the answers -------------------------------------------------------------

def fleet() -> Stub:
    held, busy, idle = (rolled(N.gpu_seconds_held), rolled(N.gpu_seconds_busy),
                        rolled(N.gpu_seconds_idle))
    return Stub({
        held: [({"experiment": "a"}, 100.0), ({"experiment": "b"}, 50.0), ({}, 10.0),
               ({"experiment": ""}, 5.0)],
        busy: [({"experiment": "a"}, 40.0), ({"experiment": "b"}, 45.0)],
        idle: [({"experiment": "a", "trial": "t2", "cause": "data"}, 30.0),
               ({"experiment": "a", "trial": "t1", "cause": "data"}, 20.0),
               ({"experiment": "a", "trial": "t1", "cause": "other"}, 10.0),
               ({"experiment": "a", "trial": "t3", "cause": "nonsense"}, 99.0),
               ({"experiment": "b", "trial": "u1", "cause": "straggler"}, 5.0),
               ({"experiment": "b", "trial": "u0", "cause": "exchange"}, 5.0)],
        rolled(N.gpu_seconds_low_mfu): [({"experiment": "b"}, 7.0)],
        rolled(N.gpu_seconds_model): [({"experiment": "a"}, 12.0)],
        rolled(N.gpu_seconds_held_mfu): [({"experiment": "a"}, 60.0)],
        N.gpu_seconds_uninstrumented_busy: [
            ({"pod_uid": "p1", "nodename": "n1"}, 9.0),
            ({"slurm_job_id": "42", "nodename": "n2"}, 1.0)],
        N.gpu_seconds_uninstrumented: [
            ({"slurm_job_id": "42", "nodename": "n2"}, 20.0),
            ({"pod_uid": "p1", "nodename": "n1"}, 30.0),
            ({"pod_uid": "p1", "nodename": "n0"}, 30.0),
            ({"nodename": "n3"}, 40.0)],
        N.gpu_seconds_unused: [({}, 8.0), ({}, 2.0)],
    })


def test_gather_adds_each_figure_to_its_group_and_finds_each_groups_top_offender() -> None:
    api = fleet()
    groups, outside = usage.gather(api, "experiment", 3600)  # type: ignore[arg-type]
    assert all("[3600s]" in expr for expr in api.asked) and len(api.asked) == 9
    assert [g.name for g in groups] == ["a", "b", NONE]  # most wasted first
    a, b, none = groups
    assert (a.held, a.busy, a.low_mfu, a.model, a.held_mfu) == (100, 40, 0, 12, 60)
    assert (b.held, b.busy, b.low_mfu) == (50, 45, 7)
    assert none.held == 15.0 and none.idle == 0 and none.top is None  # no label, or empty
    # A cause outside the contract's five is not counted anywhere.
    assert a.wasted == {**dict.fromkeys(IDLE_CAUSES, 0.0), "data": 50.0, "other": 10.0}
    assert a.top == ("a", "t1", 30.0) or a.top == ("a", "t2", 30.0)
    assert a.top == ("a", "t1", 30.0)  # a tie: the first by name
    assert b.top == ("b", "u0", 5.0)
    assert b.wasted["straggler"] == 5.0 and b.wasted["exchange"] == 5.0
    # Owners outside any trial: most first, then by name, then node; busy matched per owner.
    assert [(o.owner, o.held, o.busy) for o in outside.owners] == [
        (Owner("", "", "n3"), 40.0, 0.0), (Owner("p1", "", "n0"), 30.0, 0.0),
        (Owner("p1", "", "n1"), 30.0, 9.0), (Owner("", "42", "n2"), 20.0, 1.0)]
    assert outside.unused == 10.0 and outside.uninstrumented == 120.0


def test_groups_wasting_alike_are_told_apart_by_name() -> None:
    idle = rolled(N.gpu_seconds_idle)
    api = Stub({idle: [({"user": "zoe", "trial": "t", "cause": "data"}, 5.0),
                       ({"user": "al", "trial": "t", "cause": "data"}, 5.0),
                       ({"user": "mo", "trial": "t", "cause": "data"}, 6.0)]})
    groups, _ = usage.gather(api, "user", 60)  # type: ignore[arg-type]
    assert [g.name for g in groups] == ["mo", "al", "zoe"]
    assert all("sum by (user" in expr for expr in api.asked[:6])


def test_the_top_offender_is_the_trial_that_wasted_most_not_the_first_or_least() -> None:
    idle = rolled(N.gpu_seconds_idle)
    api = Stub({idle: [({"experiment": "a", "trial": "t0", "cause": "data"}, 5.0),
                       ({"experiment": "a", "trial": "t1", "cause": "data"}, 7.0),
                       ({"experiment": "a", "trial": "t2", "cause": "other"}, 6.0),
                       ({"experiment": "a", "trial": "t3", "cause": "data"}, 1.0)]})
    [a], _ = usage.gather(api, "experiment", 60)  # type: ignore[arg-type]
    assert a.top == ("a", "t1", 7.0)


def test_queries_group_by_the_label_once_and_the_idle_one_per_trial_and_cause() -> None:
    asked = queries(N, "experiment", 90.5)
    assert asked["idle"].startswith("sum by (experiment, trial, cause) (sum_over_time(")
    assert asked["held"] == (f"sum by (experiment) (sum_over_time("
                             f"{rolled(N.gpu_seconds_held)}[91s]))")
    assert queries(N, "nodename", 60)["idle"].startswith(
        "sum by (nodename, experiment, trial, cause) (")
    assert asked["unused"] == f"sum(sum_over_time({N.gpu_seconds_unused}[91s]))"


def test_a_broken_answer_is_an_error_not_a_table() -> None:
    class Broken(Stub):
        def query(self, expr: str, kind: str = "any") -> list[tuple[dict[str, str], float]]:
            raise PrometheusError("Prometheus at http://prom: NaN")

    with pytest.raises(PrometheusError):
        usage.gather(Broken({}), "experiment", 60)  # type: ignore[arg-type]


# --- what is printed -----------------------------------------------------------------------

def gathered() -> tuple[list[Group], Outside]:
    return usage.gather(fleet(), "experiment", 2 * DAY)  # type: ignore[arg-type]


def test_the_table_says_each_figure_in_gpu_hours_with_its_share_and_the_totals_last() -> None:
    groups, outside = gathered()
    lines = as_table("experiment", 2 * DAY, groups, outside).splitlines()
    assert lines[0] == "GPU-hours over the last 2d, by experiment:"
    header = re.split(r" {2,}", lines[1].strip())
    assert header == ["experiment", "held", "busy", "wasted", *IDLE_CAUSES.values(),
                      usage.LOW_MFU_WORDS, "MFU", "top offender (wasted)"]
    a = lines[2].split()
    assert a[:6] == ["a", "0.028", "0.011", "(40%)", "0.017", "(60%)"]
    assert "20%" in a  # its MFU: 12 of 60
    assert "a/t1" in lines[2] and "(0.008)" in lines[2]
    assert set(lines[5]) == {"-", " "}  # the rule before the totals, after every group
    assert lines[6].split()[:6] == ["total", "0.046", "0.024", "(52%)", "0.019", "(42%)"]
    text = "\n".join(lines)
    for cause in ("data", "straggler", "exchange"):
        title, _ = usage.VERDICTS[cause]  # type: ignore[misc]
        assert f"{IDLE_CAUSES[cause]}: " in text and title in text
    assert f"{IDLE_CAUSES['other']}: " not in text  # wasted, but no verdict names it
    assert f"{IDLE_CAUSES['host_to_device']}: " not in text  # nothing wasted on it
    assert (f"{IDLE_CAUSES['data']}: 0.014 GPU-h (30% of held), as diagnose says it: "
            f"{usage.VERDICTS['data'][0]}. {remedies.DATALOADER}") in text  # type: ignore[index]
    assert f"GPU busy, MFU low: 0.002 GPU-h busy. {remedies.LOW_MFU}" in text
    assert ("Outside any trial: 0.033 GPU-h on GPUs with processes but no trial "
            "(uninstrumented), 0.003 GPU-h on GPUs with neither (unused).") in text
    assert "  uninstrumented: no pod or job on n3: 0.011 GPU-h, 0.000 busy (0%)" in text
    assert "  uninstrumented: pod p1 on n1: 0.008 GPU-h, 0.003 busy (30%)" in text
    assert "more (--format json" not in text and "no GPU-seconds recorded" not in text


def test_a_quiet_fleet_says_so_and_nothing_else_it_has_not_seen() -> None:
    text = as_table("user", 3600, [], Outside())
    assert text.splitlines()[0] == "GPU-hours over the last 1h, by user:"
    assert "(no GPU-seconds recorded in the last 1h)" in text
    for absent in ("Outside any trial", "uninstrumented:", usage.LOW_MFU_WORDS + ":",
                   "as diagnose says it"):
        assert absent not in text
    assert "Outside any trial" in as_table("user", 3600, [], Outside(unused=1.0))
    assert "Outside any trial" in as_table(
        "user", 3600, [], Outside((Uninstrumented(Owner("p"), 1.0),)))
    g = Group("g", held=10.0)
    assert "no GPU-seconds recorded" not in as_table("user", 3600, [g], Outside())
    assert "-" == as_table("user", 3600, [g], Outside()).splitlines()[2].split()[-1]
    g = Group("g", held=10.0, model=7.0, held_mfu=10.0)
    assert as_table("user", 3600, [g], Outside()).splitlines()[2].split()[-2:] == ["70%", "-"]


def test_the_table_lists_ten_owners_and_counts_the_rest() -> None:
    owners = tuple(Uninstrumented(Owner(f"p{i:02}"), 100.0 - i) for i in range(23))
    text = as_table("experiment", 3600, [], Outside(owners))
    assert text.count("  uninstrumented: ") == usage.MAX_OWNERS == 10
    assert "pod p09" in text and "pod p10" not in text
    assert "  ... and 13 more (--format json lists them all)" in text
    # Busy unsaid: none of it.
    assert "  uninstrumented: pod p00: 0.028 GPU-h, 0.000 busy (0%)" in text.splitlines()
    exactly = as_table("experiment", 3600, [], Outside(owners[:10]))
    assert exactly.count("  uninstrumented: ") == 10 and "more (--format json" not in exactly
    assert not [line for line in text.splitlines()  # no node said: none printed
                if "uninstrumented: " in line and " on " in line]


def test_csv_is_gpu_hours_per_group_and_the_totals() -> None:
    groups, _ = gathered()
    rows = list(csv.reader(io.StringIO(as_csv("experiment", groups))))
    assert rows[0] == ["experiment", "held_gpu_hours", "busy_gpu_hours", "wasted_gpu_hours",
                       *(f"wasted_{c}_gpu_hours" for c in IDLE_CAUSES),
                       "busy_low_mfu_gpu_hours", "mfu", "top_offender",
                       "top_offender_wasted_gpu_hours"]
    a = dict(zip(rows[0], rows[1]))
    assert float(a["held_gpu_hours"]) == pytest.approx(100 / 3600)
    assert float(a["busy_gpu_hours"]) == pytest.approx(40 / 3600)
    assert float(a["wasted_gpu_hours"]) == pytest.approx(60 / 3600)
    assert float(a["wasted_data_gpu_hours"]) == pytest.approx(50 / 3600)
    assert float(a["mfu"]) == pytest.approx(0.2)
    assert (a["top_offender"], float(a["top_offender_wasted_gpu_hours"])) == (
        "a/t1", pytest.approx(30 / 3600))
    b = dict(zip(rows[0], rows[2]))
    assert float(b["busy_low_mfu_gpu_hours"]) == pytest.approx(7 / 3600)
    none = dict(zip(rows[0], rows[3]))
    assert (none["experiment"], none["mfu"], none["top_offender"],
            none["top_offender_wasted_gpu_hours"]) == (NONE, "", "", "")
    assert rows[-1][0] == "total" and float(rows[-1][1]) == pytest.approx(165 / 3600)
    assert len(rows) == 5 and not as_csv("experiment", groups).endswith("\n")


def test_json_holds_the_seconds_and_the_causes_words_and_verdicts() -> None:
    groups, outside = gathered()
    said = json.loads(as_json("job", 2 * DAY, groups, outside))
    assert (said["by"], said["since_seconds"]) == ("job", 2 * DAY)
    assert said["causes"]["other"] == {"words": "other", "verdict": None, "remedy": None}
    assert said["causes"]["data"]["remedy"] == remedies.DATALOADER
    assert said["low_mfu"] == {"words": usage.LOW_MFU_WORDS, "remedy": remedies.LOW_MFU}
    a = said["groups"][0]
    assert a == {"group": "a", "held_gpu_seconds": 100.0, "busy_gpu_seconds": 40.0,
                 "wasted_gpu_seconds": 60.0,
                 "wasted_by_cause": {**dict.fromkeys(IDLE_CAUSES, 0.0), "data": 50.0,
                                     "other": 10.0},
                 "busy_low_mfu_gpu_seconds": 0.0, "mfu": pytest.approx(0.2),
                 "top_offender": {"experiment": "a", "trial": "t1", "wasted_gpu_seconds": 30.0}}
    assert said["groups"][2]["top_offender"] is None and said["groups"][2]["mfu"] is None
    assert said["total"]["held_gpu_seconds"] == 165.0
    out = said["outside_trials"]
    assert (out["uninstrumented_gpu_seconds"], out["unused_gpu_seconds"]) == (120.0, 10.0)
    assert out["uninstrumented_by_owner"][0] == {
        "owner": "no pod or job", "pod_uid": None, "slurm_job_id": None, "node": "n3",
        "group": None, "gpu_seconds": 40.0, "busy_gpu_seconds": 0.0}
    assert out["uninstrumented_by_owner"][3] == {
        "owner": "job 42", "pod_uid": None, "slurm_job_id": "42", "node": "n2",
        "group": "42", "gpu_seconds": 20.0, "busy_gpu_seconds": 1.0}
    assert out["uninstrumented_by_owner"][2]["pod_uid"] == "p1"


def test_json_groups_each_uninstrumented_owner_under_the_by_asked() -> None:
    outside = Outside((Uninstrumented(Owner("p7", "", "n4"), 37.0, 3.0),
                       Uninstrumented(Owner("", "93", "n6"), 21.0, 5.0)), 11.0)

    def grouped(by_: str) -> list[object]:
        said = json.loads(as_json(by_, DAY, [], outside))["outside_trials"]
        return [o["group"] for o in said["uninstrumented_by_owner"]]

    assert grouped("node") == ["n4", "n6"]  # its node, never its job's id
    assert grouped("job") == [None, "93"]  # a pod names no Slurm job
    for by_ in ("experiment", "namespace", "user"):
        assert grouped(by_) == [None, None]


@pytest.mark.parametrize("form", ["json", "csv", "table"])
def test_each_format_asked_on_the_command_line_is_the_one_printed(
        form: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The format as argparse hands it over: a string read from the command line, equal to the
    choice but not the same object as the literal in the code."""
    import argparse

    monkeypatch.setattr(usage, "PrometheusAPI", lambda url, timeout: fleet())
    monkeypatch.setattr(usage, "prometheus_url", lambda given: given)
    asked = "".join(list(form))
    args = argparse.Namespace(prometheus="http://prom", timeout=1.0, since=2 * DAY,
                              by="experiment", format=asked)
    assert usage.run(args) == 0
    out = capsys.readouterr().out
    if form == "json":
        assert json.loads(out)["by"] == "experiment"
        assert out.startswith('{\n  "by": "experiment",\n  "since_seconds": 172800.0,')
    elif form == "csv":
        assert out.startswith("experiment,held_gpu_hours,")
    else:
        assert out.startswith("GPU-hours over the last 2d, by experiment:")
    monkeypatch.setattr(usage, "PrometheusAPI", lambda url, timeout: Stub({}, loaded=[]))
    assert usage.run(args) == 2
    assert capsys.readouterr().err.startswith(
        "trainwatch usage: error: Prometheus at http://prom has no trainwatch usage rules")


def test_a_cause_with_any_waste_is_said_even_under_a_second() -> None:
    g = Group("g", held=10.0)
    g.wasted["data"] = 0.5
    text = as_table("experiment", 3600, [g], Outside())
    assert f"{IDLE_CAUSES['data']}: 0.000 GPU-h (5% of held), as diagnose says it" in text
    g.wasted["data"] = 0.0
    assert "as diagnose says it" not in as_table("experiment", 3600, [g], Outside())


def test_the_rule_before_the_totals_is_there_for_hundreds_of_groups() -> None:
    groups = [Group(f"g{i:03}", held=3600.0) for i in range(300)]
    lines = as_table("experiment", 3600, groups, Outside()).splitlines()
    assert set(lines[-2]) == {"-", " "} and lines[-1].startswith("total ")
    assert sum(set(line) == {"-", " "} for line in lines) == 1


@pytest.mark.parametrize("value", [Owner("p"), Uninstrumented(Owner("p"), 1.0), Outside()])
def test_what_usage_gathers_outside_trials_is_frozen(value: object) -> None:
    from tests.frozen import assert_frozen

    assert_frozen(value)


def test_busy_with_a_low_mfu_is_said_whenever_there_is_any() -> None:
    g = Group("g", held=10.0, busy=5.0, low_mfu=0.5)
    assert f"GPU busy, MFU low: 0.000 GPU-h busy. {remedies.LOW_MFU}" in as_table(
        "experiment", 3600, [g], Outside())
    g.low_mfu = 0.0
    assert "GPU busy, MFU low:" not in as_table("experiment", 3600, [g], Outside())


def test_the_format_is_a_table_unless_csv_or_json_is_asked_for() -> None:
    from tests.test_cli_metavars_unit import commands
    parser = commands()["usage"]
    readme = (REPO / "README.md").read_text()
    assert "--format csv   # or json; table by default" in readme
    assert parser.parse_args([]).format == "table"
    assert {parser.parse_args(["--format", f]).format for f in ("csv", "json")} == {"csv", "json"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--format", "top_offender"])
