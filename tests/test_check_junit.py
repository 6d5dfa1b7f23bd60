"""`trainwatch check --format junit` with hostile names: a file every CI system's XML parser
reads, the names escaped as the text output shows them (cliutil.printable)."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from trainwatch.diagnose.baseline import Baseline
from trainwatch.diagnose.baseline_stats import SLOWER, Judgement
from trainwatch.diagnose.check import Checked, as_junit

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
