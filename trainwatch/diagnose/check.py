"""`trainwatch check E/T`: a gate for CI on training speed. Exit 0 within the bound (or no
baseline to judge against: said so), 1 slower than the baseline by more than
``--max-slowdown`` and beyond the baseline runs' own spread, with the reasons ranked (`compare`'s
decomposition per phase, ms per step), 2 on bad input (cliutil's codes), one line.

    trainwatch check E/T [--baseline auto|E/T] [--max-slowdown 5%] [--format text|json|junit]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any
from xml.etree import ElementTree

from trainwatch.cliutil import EXIT_FOUND, EXIT_OK, printable, signed
from trainwatch.diagnose.baseline import AUTO, Baseline, Baselines
from trainwatch.diagnose.baseline_stats import parse_slowdown
from trainwatch.diagnose.compare import parse_reference
from trainwatch.diagnose.deployed import Deployment
from trainwatch.promapi import PrometheusAPI

DEFAULT_MAX_SLOWDOWN = "5%"  # the help text says it too


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("trial", metavar="E/T", help="the run to check: experiment/trial")
    sub.add_argument("--baseline", default=AUTO, metavar="auto|E/T",
                     help="auto (default): the median of the last runs of the experiment that "
                     "ended clean with its world size; or one trial E/T")
    sub.add_argument("--max-slowdown", default=DEFAULT_MAX_SLOWDOWN, metavar="PERCENT",
                     help="slower than this fails (default 5%%; 5%% or 0.05)")


@dataclasses.dataclass
class Checked:
    baseline: Baseline
    max_slowdown: float

    @property
    def failed(self) -> bool:
        return self.baseline.judgement.beyond(self.max_slowdown)

    @property
    def exit_code(self) -> int:
        return EXIT_FOUND if self.failed else EXIT_OK


def _trial_only(reference: str, said: str) -> tuple[str, str]:
    """Experiment and trial of ``reference``; ValueError, saying ``said``, where it names a rank."""
    experiment, trial, rank = parse_reference(reference)
    if rank is not None:
        raise ValueError(f"{said}: check takes experiment/trial (its lowest rank is read)")
    return experiment, trial


def check(api: PrometheusAPI, deployment: Deployment, reference: str, baseline: str,
          max_slowdown: str, since: float | None = None) -> Checked:
    """ValueError (bad input) or UnknownTrial before anything is judged."""
    bound = parse_slowdown(max_slowdown)
    experiment, trial = _trial_only(reference, repr(reference))
    if baseline != AUTO:
        _trial_only(baseline, f"--baseline {baseline!r}")  # never dropped unsaid: E/T/0 is E/T
        if baseline == reference:
            raise ValueError(f"--baseline {baseline} is the trial checked")
    baselines = Baselines(api, deployment, since=since)
    run = baselines.trial_run(experiment, trial)
    return Checked(baselines.of(run, baseline), bound)


def as_text(c: Checked) -> str:
    b = c.baseline
    verdict = ("FAIL" if c.failed else "OK") + f": {b.reference} {b.line()}"
    verdict += (f": beyond the {c.max_slowdown:.0%} allowed" if c.failed
                else f" (allowed: {c.max_slowdown:.0%} slower)")
    lines = [verdict]
    per = f"{b.unit}s/s per rank"
    if b.throughput is not None:
        lines.append(f"  throughput: {b.throughput:,.2f} {per}")
    if b.baseline_throughputs:
        lines.append(f"  baseline: {', '.join(b.baseline_runs)}: "
                     + ", ".join(f"{v:,.2f}" for v in b.baseline_throughputs)
                     + (f" {per} (median {b.judgement.median:,.2f})"
                        if b.judgement.median is not None else f" {per}"))
    # The phases that explain 1% or more of the difference (the JSON has them all).
    shown = [r for r in b.reasons if r.explained is not None and abs(r.explained) >= 0.01]
    if b.comparison is not None and shown:
        lines.append(f"  reasons (ms per step against {b.comparison.b.reference}, the baseline "
                     "run nearest the median):")
        lines += [f"    {i}. {r.phase} {signed(r.delta_seconds * 1000)} ms per step: "
                  f"{r.explained:.0%} of the difference"
                  for i, r in enumerate(shown, 1)]
    return "\n".join(printable(line) for line in lines)  # a name stays on its line


def as_dict(c: Checked) -> dict[str, Any]:
    return {**c.baseline.as_dict(), "max_slowdown": c.max_slowdown, "failed": c.failed,
            "exit_code": c.exit_code}


def as_json(c: Checked) -> str:
    return json.dumps({"check": as_dict(c)}, indent=2, ensure_ascii=False)


def as_junit(c: Checked) -> str:
    """One test case, failed when the check fails: what CI systems read."""
    b = c.baseline
    suite = ElementTree.Element("testsuite", name="trainwatch check", tests="1",
                                failures=str(int(c.failed)), errors="0")
    # Names escaped as the text is (cliutil.printable): XML 1.0 has no way to write a control
    # character, escaped or not, and a CI system's parser refuses the file that holds one.
    experiment, trial = (printable(part) for part in b.reference.split("/", 1))
    case = ElementTree.SubElement(suite, "testcase", classname=f"trainwatch.{experiment}",
                                  name=trial)
    if c.failed:
        failure = ElementTree.SubElement(case, "failure", message=printable(b.line()))
        failure.text = as_text(c)
    else:
        ElementTree.SubElement(case, "system-out").text = as_text(c)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)
