"""One trial rank's finding as every surface gives it (issue 35's verdict matrix): the alerts
Prometheus holds for it, `trainwatch diagnose` (JSON and text), `trainwatch trials`,
`trainwatch compare` against a healthy twin and `trainwatch report`'s headline.

A finding is ``kind`` or ``kind:cause``: the verdict's kind (contract.checks; ``gpu_bound``) and,
for a data-loader-bound rank, the loader's cause (``dataloader:latency_bound``). A surface that
says less says what it can: `trials` and the report's ``data-finding`` the kind, `compare` the
phase that explains the slowdown (mapped back to the kind it stands for). A surface with nothing
to say at an instant answers None, never a guess. The CLI is run in this process
(trainwatch.cli.main), as a shell runs it, minus an interpreter's start per call.
"""

from __future__ import annotations

import contextlib
import html.parser
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.live_stack import LiveStack
from trainwatch import cli
from trainwatch.contract import remedies
from trainwatch.contract.alerts import CPU_SATURATED, DATALOADER_BOUND
from trainwatch.contract.checks import CHECKS
from trial_instrumentation import names

# The alerts that name a verdict's kind (contract.checks: each check's alert), in its order.
ALERT_KINDS = {alert: kind for kind, _title, alert, _measurement, _above in CHECKS}
NODE_ALERTS = (CPU_SATURATED,)  # no trial label: every trial on the node shares it
# The verdict titles the text's VERDICT line carries, and GPU-bound's.
TITLES = {title: kind for kind, title, *_ in CHECKS} | {"GPU-bound": "gpu_bound"}
# The loader causes' titles (the text's "cause:" line), by the words they start with.
CAUSE_TITLES = {"too few workers": "too_few_workers",
                "decoding on saturated CPUs": "decode_bound", "local storage": "storage_bound",
                "remote storage": "remote_storage", "latency (": "latency_bound"}
# The loader causes' remedies (the report's "What to change"), by their opening words.
CAUSE_REMEDIES = {"too_few_workers": remedies.LOADER_TOO_FEW_WORKERS.split("{")[0],
                  "decode_bound": remedies.LOADER_DECODE_BOUND,
                  "storage_bound": remedies.LOADER_STORAGE_BOUND,
                  "remote_storage": remedies.LOADER_REMOTE_STORAGE,
                  "latency_bound": remedies.LOADER_LATENCY_BOUND}
# What `compare` against a healthy twin names as the phase that explains the slowdown.
PHASE_KINDS = {names.DATALOADER_NEXT: "dataloader", names.TRAIN_BATCH: "busy_cpu"}


def run_cli(stack: LiveStack, *args: str) -> tuple[int, str]:
    """``trainwatch ARGS --prometheus URL``: exit code and stdout; stderr must be empty."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*args, "--prometheus", stack.prometheus.url])
    assert err.getvalue() == "", (args, err.getvalue())
    return code, out.getvalue()


def run_gc(stack: LiveStack) -> tuple[int, str]:
    """`trainwatch gc` as the stack runs it, ended groups retired a second after their end."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(["gc", "--pushgateway", stack.pushgateway.url, "--ended-after", "1s"])
    return code, out.getvalue()


def finding(kind: str | None, cause: str | None = None) -> str | None:
    return None if kind is None else f"{kind}:{cause}" if cause else kind


@dataclass
class Ref:
    experiment: str
    trial: str
    rank: str = "0"

    @property
    def name(self) -> str:
        return f"{self.experiment}/{self.trial}/{self.rank}"

    def owns(self, labels: dict[str, str]) -> bool:
        return (labels.get("experiment"), labels.get("trial"), labels.get("rank")) == \
            (self.experiment, self.trial, self.rank)


def alert_findings(alerts: list[dict[str, Any]], ref: Ref, nodes: set[str]
                   ) -> dict[str, str | None]:
    """What the alerts say of the rank, by state (``firing``: what paged; ``pending``: under
    `for`, said to no one yet): its own verdict alerts, the first in the verdict's order, the
    loader's with its ``cause`` annotation; and, apart (``node firing``), its node's
    (``nodes``: the exporter instances of its node), which name busy_cpu for every trial
    there."""
    said: dict[str, str | None] = {"firing": None, "pending": None, "node firing": None}
    for state in ("firing", "pending"):
        own = {a["labels"]["alertname"]: a for a in alerts
               if a["state"] == state and a["labels"]["alertname"] in ALERT_KINDS
               and ref.owns(a["labels"])}
        for alert, kind in ALERT_KINDS.items():
            if alert in own:
                cause = own[alert]["annotations"].get("cause") if alert == DATALOADER_BOUND \
                    else None
                said[state] = finding(kind, cause)
                break
    if any(a["state"] == "firing" and a["labels"]["alertname"] in NODE_ALERTS
           and a["labels"].get("instance") in nodes for a in alerts):
        said["node firing"] = ALERT_KINDS[CPU_SATURATED]
    return said


def diagnose_json(stack: LiveStack, ref: Ref) -> dict[str, Any]:
    _, out = run_cli(stack, "diagnose", "--experiment", ref.experiment, "--trial", ref.trial,
                     "--format", "json")
    [report] = [r for r in json.loads(out)["reports"] if str(r["rank"]) == ref.rank]
    return dict(report)


def json_finding(report: dict[str, Any]) -> str | None:
    verdict, cause = report["verdict"], report.get("loader_cause")
    kind = verdict["finding"]
    return finding(kind, cause["kind"] if cause and kind == "dataloader" else None)


def text_finding(stack: LiveStack, ref: Ref) -> str | None:
    """From the rank's block of the text: the verdict title on its VERDICT line, the cause on
    its ``cause:`` line."""
    _, out = run_cli(stack, "diagnose", "--experiment", ref.experiment, "--trial", ref.trial)
    head = f"Trial {ref.experiment}/{ref.trial} rank {ref.rank} on "
    sections = re.split(r"^(?=Trial )", out, flags=re.MULTILINE)
    [block] = [b for b in sections if b.startswith(head)]
    verdict = next(line for line in block.splitlines() if line.startswith("VERDICT"))
    # The first verdict title named on the line (an ended run's: "over its life, <title>:").
    hits = sorted((verdict.find(t), kind) for t, kind in TITLES.items() if t in verdict)
    kind = hits[0][1] if hits else None
    causes = [line.split("cause: ", 1)[1] for line in block.splitlines()
              if line.startswith("  cause: ")]
    cause = next((k for t, k in CAUSE_TITLES.items() for c in causes if c.startswith(t)), None)
    return finding(kind, cause if kind == "dataloader" else None)


def trials_finding(stack: LiveStack, ref: Ref) -> tuple[str | None, dict[str, Any]]:
    """The latest run's CAUSE column, and its row."""
    _, out = run_cli(stack, "trials", "--experiment", ref.experiment, "--since", "1h",
                     "--format", "json")
    rows = [r for r in json.loads(out)["trials"]
            if (r["trial"], str(r["rank"])) == (ref.trial, ref.rank)]
    assert rows, (ref, out)
    return rows[-1]["cause"], rows[-1]


def compare_finding(stack: LiveStack, ref: Ref, twin: Ref) -> str | None:
    """The phase `compare` names first against ``twin``, as the kind it stands for (an unknown
    phase as itself); None when it sees no slowdown."""
    _, out = run_cli(stack, "compare", ref.name, twin.name, "--format", "json")
    changes = json.loads(out)["comparison"]["changes"]
    if not changes or changes[0]["explained"] is None:
        return None
    return PHASE_KINDS.get(changes[0]["phase"], changes[0]["phase"])


class _Headline(html.parser.HTMLParser):
    """The report's verdict sections: each rank's data-finding and its "What to change"."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, str]] = {}
        self._rank: str | None = None
        self._in_fix = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and "data-finding" in a:
            self._rank = a.get("data-rank") or ""
            self.sections[self._rank] = {"finding": a["data-finding"] or "", "fix": ""}
        self._in_fix = tag == "span" and a.get("class") == "fix"

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in_fix = False

    def handle_data(self, data: str) -> None:
        if self._in_fix and self._rank is not None:
            self.sections[self._rank]["fix"] += data


def report_finding(stack: LiveStack, ref: Ref, out: Path) -> str | None:
    """The headline's data-finding for the rank, with the loader cause its "What to change"
    names (the cause's own remedy, as diagnose gives it)."""
    run_cli(stack, "report", "--experiment", ref.experiment, "--trial", ref.trial,
            "-o", str(out))
    page = _Headline()
    page.feed(out.read_text())
    section = page.sections.get(f"{ref.trial}/{ref.rank}")
    if section is None:
        return None
    kind = section["finding"]
    causes = [k for k, remedy in CAUSE_REMEDIES.items() if section["fix"].startswith(remedy)]
    return finding(kind, causes[0] if kind == "dataloader" and causes else None)
