"""`trainwatch check` (trainwatch.diagnose.check): its input checks, the verdict at both sides of
its bound, the text's and the JSON's figures and reasons; and `--format junit` with hostile
names: a file every CI system's XML parser reads, the names escaped as the text output shows
them (cliutil.printable)."""

from __future__ import annotations

import argparse
import json
from typing import Any, ClassVar
from xml.etree import ElementTree

import pytest

from trainwatch.cliutil import EXIT_FOUND, EXIT_OK
from trainwatch.diagnose import check as check_module
from trainwatch.diagnose.baseline import AUTO, Baseline
from trainwatch.diagnose.baseline_stats import SLOWER, Judgement
from trainwatch.diagnose.check import Checked, as_dict, as_json, as_junit, as_text
from trainwatch.diagnose.compare import Change, Comparison, Side

HOSTILE = "night\x1b[2J\x07\x00\n</testcase>\u2028x"


@pytest.mark.parametrize(("change", "failed"), [(-0.30, True), (-0.02, False)])
def test_junit_parses_and_shows_hostile_names_escaped(change: float, failed: bool) -> None:
    b = Baseline(reference=f"exp\x1b]0;t\x07/{HOSTILE}", against=f"the median of 3 runs of "
                 f"exp\n{HOSTILE}", unit="sample", throughput=70.0,
                 baseline_runs=["exp/a", "exp/b", "exp/c"], baseline_throughputs=[99, 100, 101],
                 judgement=Judgement(SLOWER, 3, 100.0, change, -0.01, 0.01))
    xml = as_junit(Checked(b, 0.05))
    suite = ElementTree.fromstring(xml.split("?>", 1)[1])  # parses: no raw control character
    assert suite.get("failures") == str(int(failed))
    # JUnit's root as CI systems read it: one testsuite of one test, no errors.
    assert (suite.tag, suite.get("tests"), suite.get("errors")) == ("testsuite", "1", "0")
    [case] = suite.iter("testcase")
    assert case.get("name") == "night\\x1b[2J\\x07\\x00\\n</testcase>\\u2028x"
    assert case.get("classname") == "trainwatch.exp\\x1b]0;t\\x07"
    text = "".join(case.itertext())
    assert "\x1b" not in xml and "\x00" not in xml and "\x07" not in xml
    if failed:
        [failure] = case.iter("failure")
        assert "\n" not in failure.get("message", "") and "30% slower" in failure.get("message")
        assert text.startswith("FAIL: ")
    else:
        assert not list(case.iter("failure")) and text.startswith("OK: ")


# -- the gate itself: its input checks, its verdict, its text and JSON ------------------------

def judged(change: float | None, state: str = SLOWER, median: float | None = 100.0,
           reasons: list[Change] | None = None, comparison: bool = True) -> Baseline:
    side = Side("exp/base-2", None, "ended")  # type: ignore[arg-type]
    return Baseline(reference="exp/night-9", against="the median of 3 runs of exp",
                    unit="sample", throughput=1234.5,
                    baseline_runs=["exp/base-1", "exp/base-2", "exp/base-3"],
                    baseline_throughputs=[1500.25, 1600.0, 1700.0],
                    judgement=Judgement(state, 3, median, change, -0.04, 0.06),
                    comparison=Comparison(side, side, None, [], "") if comparison else None,
                    reasons=reasons or [])


REASONS = [Change("dataloader_next", 0.214, 0.85), Change("optimizer", -0.0031, -0.0125),
           Change("train_batch", 0.0004, 0.0099), Change("untimed", 0.001, None, untimed=True),
           Change("backward", 0.0006, 0.01)]


@pytest.mark.parametrize(("change", "bound", "failed"), [
    (-0.0600, 0.05, True), (-0.0500, 0.05, False), (-0.0501, 0.05, True), (-0.30, 0.35, False)])
def test_check_fails_only_slower_than_the_bound(change: float, bound: float,
                                               failed: bool) -> None:
    c = Checked(judged(change), bound)
    assert (c.failed, c.exit_code) == (failed, EXIT_FOUND if failed else EXIT_OK)
    assert EXIT_FOUND != EXIT_OK


def test_the_text_says_the_verdict_the_figures_and_the_reasons_that_explain_a_percent() -> None:
    text = as_text(Checked(judged(-0.23, reasons=REASONS), 0.05)).splitlines()
    assert text[0] == ("FAIL: exp/night-9 23% slower than the median of 3 runs of exp "
                       "(dataloader_next +214 ms per step explains 85%): beyond the 5% allowed")
    assert text[1:] == [
        "  throughput: 1,234.50 samples/s per rank",
        ("  baseline: exp/base-1, exp/base-2, exp/base-3: 1,500.25, 1,600.00, 1,700.00 "
        "samples/s per rank (median 100.00)"),
        "  reasons (ms per step against exp/base-2, the baseline run nearest the median):",
        "    1. dataloader_next +214.0 ms per step: 85% of the difference",
        "    2. optimizer -3.1 ms per step: -1% of the difference",
        "    3. backward +0.6 ms per step: 1% of the difference"]  # under 1%: not shown


def test_an_ok_within_the_bound_says_what_is_allowed() -> None:
    text = as_text(Checked(judged(-0.03, reasons=REASONS), 0.05)).splitlines()
    assert text[0].startswith("OK: exp/night-9 3% slower than")
    assert text[0].endswith(" (allowed: 5% slower)")
    assert "beyond" not in text[0]


def test_the_text_leaves_out_what_is_unknown() -> None:
    b = judged(None, state="no baseline", median=None, reasons=REASONS, comparison=False)
    b.throughput, b.baseline_throughputs = None, []
    text = as_text(Checked(b, 0.1)).splitlines()
    assert len(text) == 1 and text[0].startswith("OK: exp/night-9 ")
    assert text[0].endswith(" (allowed: 10% slower)")
    b = judged(-0.2, median=None, reasons=REASONS, comparison=False)
    text = as_text(Checked(b, 0.1)).splitlines()
    assert text[2] == ("  baseline: exp/base-1, exp/base-2, exp/base-3: 1,500.25, 1,600.00, "
                       "1,700.00 samples/s per rank")
    assert len(text) == 3  # no comparison run: no reasons
    b = judged(-0.2, reasons=[Change("x", 0.001, None)])
    assert len(as_text(Checked(b, 0.1)).splitlines()) == 3  # no reason explains any of it


def test_the_json_is_the_baselines_with_the_bound_and_the_exit_code() -> None:
    c = Checked(judged(-0.23), 0.05)
    assert as_json(c).startswith('{\n  "check": {\n    "trial": "exp/night-9",\n')
    b = json.loads(as_json(c))["check"]
    assert b == {**json.loads(json.dumps(c.baseline.as_dict())), "max_slowdown": 0.05,
                 "failed": True, "exit_code": EXIT_FOUND}
    ok = Checked(judged(-0.01), 0.05)
    assert (as_dict(ok)["failed"], as_dict(ok)["exit_code"]) == (False, EXIT_OK)
    named = judged(-0.01)
    named.reference = "exp/nuit-é"
    assert '"trial": "exp/nuit-é"' in as_json(Checked(named, 0.05))  # as it is, not \u00e9


class Baselines:
    """check's Baselines, answering what it was asked."""

    made: ClassVar[list[tuple[Any, ...]]] = []

    def __init__(self, api: Any, deployment: Any, since: float | None = None) -> None:
        Baselines.made.append(("init", api, deployment, since))

    def trial_run(self, experiment: str, trial: str) -> str:
        Baselines.made.append(("trial_run", experiment, trial))
        return "the run"

    def of(self, run: str, baseline: str) -> Baseline:
        Baselines.made.append(("of", run, baseline))
        return judged(-0.1)


def test_check_reads_the_trials_run_against_the_baseline_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_module, "Baselines", Baselines)
    Baselines.made = []
    c = check_module.check("api", "deployment", "exp/night-9", "exp/base-2", "7%", since=600.0)  # type: ignore[arg-type]
    assert c.max_slowdown == pytest.approx(0.07)
    assert Baselines.made == [("init", "api", "deployment", 600.0),
                              ("trial_run", "exp", "night-9"), ("of", "the run", "exp/base-2")]
    Baselines.made = []
    auto = (AUTO + "x")[:-1]  # "auto" as an option gives it: equal, another object
    assert auto == AUTO and auto is not AUTO
    check_module.check("api", "deployment", "exp/night-9", auto, "0.05")  # type: ignore[arg-type]
    assert Baselines.made[0] == ("init", "api", "deployment", None)
    assert Baselines.made[2] == ("of", "the run", AUTO)
    Baselines.made = []  # a baseline sorting after the trial is another trial all the same
    check_module.check("api", "deployment", "exp/night-9", "exp/zeta", "5%")  # type: ignore[arg-type]
    assert Baselines.made[2] == ("of", "the run", "exp/zeta")


@pytest.mark.parametrize(("reference", "baseline", "said"), [
    ("exp/night-9/1", AUTO, "check takes experiment/trial"),
    ("exp/night-9", "exp/night-9", "--baseline exp/night-9 is the trial checked"),
    ("abc/t", "abc/t", "--baseline abc/t is the trial checked"),  # sorts before "auto"
    ("abc/t", "abc", "experiment/trial"),
    ("exp/night-9", "exp", "experiment/trial"),
    # a rank in the baseline was dropped unsaid: the trial checked against itself passed
    ("exp/night-9", "exp/night-9/0", "--baseline 'exp/night-9/0': check takes experiment/trial"),
    ("exp/night-9", "exp/base-2/3", "--baseline 'exp/base-2/3': check takes experiment/trial"),
    ("exp/night-9", AUTO, "slow")])
def test_bad_input_is_refused_before_anything_is_read(
        monkeypatch: pytest.MonkeyPatch, reference: str, baseline: str, said: str) -> None:
    monkeypatch.setattr(check_module, "Baselines", Baselines)
    Baselines.made = []
    given = (baseline + "x")[:-1]  # as an option gives it: equal, another object
    assert given == baseline and given is not baseline
    with pytest.raises(ValueError, match=said):
        check_module.check("api", "deployment", reference, given,  # type: ignore[arg-type]
                           "slow" if said == "slow" else "5%")
    assert Baselines.made == []


def test_the_arguments_default_to_the_automatic_baseline_and_five_percent() -> None:
    parser = argparse.ArgumentParser()
    check_module.add_arguments(parser)
    args = parser.parse_args(["exp/night-9"])
    assert (args.trial, args.baseline, args.max_slowdown) == ("exp/night-9", AUTO, "5%")
    args = parser.parse_args(["exp/n", "--baseline", "exp/b", "--max-slowdown", "0.1"])
    assert (args.baseline, args.max_slowdown) == ("exp/b", "0.1")
    assert "5%" in parser.format_help()
