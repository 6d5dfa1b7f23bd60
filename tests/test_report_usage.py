"""`trainwatch report --usage` (issue 40): "Where the GPU-hours went" as one page, over
tests/test_usage.py's backfilled history (its promtool-evaluated usage records): the table's
figures are `trainwatch usage --format json`'s for the same window; names are escaped; the plots
are drawn and open in headless Chromium without a console error; bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import free_port
from tests.test_usage import BASE, usage_prometheus  # noqa: F401 (the fixture)
from trainwatch import cli
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE
from trainwatch.contract.records import IDLE_CAUSES
from trainwatch.report import usage_page
from trainwatch.usage import Group, Outside, hours

FIGURES = {"held": "held_gpu_seconds", "busy": "busy_gpu_seconds",
           "wasted": "wasted_gpu_seconds", "low-mfu": "busy_low_mfu_gpu_seconds"}


class Rows(HTMLParser):
    """The usage table's rows: each row's attributes, its cells' attributes and text; the
    figures' states and the embedded JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.figures: dict[str, str] = {}
        self.owners: dict[str, tuple[float, float]] = {}  # uninstrumented: held, busy
        self._cell: dict[str, Any] | None = None
        self._json: list[str] | None = None
        self.json = ""
        self.in_table = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.in_table = a.get("data-usage") == "groups"
        elif tag == "tr" and self.in_table and "data-group" in a:
            self.rows.append({"attrs": a, "cells": []})
        elif tag in ("td", "th") and self.in_table and self.rows:
            self._cell = {"attrs": a, "text": ""}
            self.rows[-1]["cells"].append(self._cell)
        elif tag == "figure":
            self.figures[a["data-panel"]] = a["data-state"]
        elif tag == "li" and "data-owner" in a:
            self.owners[a["data-owner"]] = (float(a["data-gpu-seconds"]),
                                            float(a["data-busy-gpu-seconds"]))
        elif tag == "script" and a.get("id") == "usage-json":
            self._json = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_table = False
        elif tag in ("td", "th"):
            self._cell = None
        elif tag == "script" and self._json is not None:
            self.json, self._json = "".join(self._json), None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell["text"] += data
        if self._json is not None:
            self._json.append(data)


def parse(text: str) -> Rows:
    rows = Rows()
    rows.feed(text)
    return rows


def _since() -> str:
    return f"{(int(time.time()) - BASE) // 60 + 5}m"


def _cells(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k[5:]: c for c in row["cells"] for k in c["attrs"]
            if k.startswith("data-") and not k.startswith("data-top-")}


@pytest.mark.parametrize("by_", ["namespace", "experiment"])
def test_the_page_shows_usage_figures_for_the_same_window(
        usage_prometheus: str, by_: str, tmp_path: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    since = _since()
    out = tmp_path / "usage.html"
    code = cli.main(["report", "--usage", "--prometheus", usage_prometheus, "--by", by_,
                     "--since", since, "-o", str(out)])
    said, err = capsys.readouterr()
    assert (code, err) == (EXIT_OK, ""), err
    assert said.startswith(f"wrote {out}") and f"GPU-hours by {by_}" in said
    code = cli.main(["usage", "--prometheus", usage_prometheus, "--by", by_, "--since", since,
                     "--format", "json"])
    answer, err = capsys.readouterr()
    assert code == EXIT_OK, err
    found = json.loads(answer)
    page = parse(out.read_text())
    rows = {r["attrs"]["data-group"]: r for r in page.rows}
    wanted = {g["group"]: g for g in found["groups"]} | {"total": found["total"]}
    assert list(rows) == [g["group"] for g in found["groups"]] + ["total"]  # most wasted first
    for name, g in wanted.items():
        cells = _cells(rows[name])
        for attr, key in FIGURES.items():
            assert float(cells[attr]["attrs"][f"data-{attr}"]) == pytest.approx(g[key], rel=1e-9)
            # Busy and wasted with their share of the GPU-hours held, nothing else after.
            held = g["held_gpu_seconds"]
            share = f" ({100 * g[key] / held:.0f}%)" if attr in ("busy", "wasted") else ""
            assert cells[attr]["text"] == hours(g[key]) + share, (name, attr, g)
        for cause, seconds in g["wasted_by_cause"].items():
            attr = f"wasted-{cause.replace('_', '-')}"
            assert float(cells[attr]["attrs"][f"data-{attr}"]) == pytest.approx(seconds, rel=1e-9)
        mfu = cells["mfu"]["attrs"]["data-mfu"]
        assert (None if mfu == "" else float(mfu)) == (None if g["mfu"] is None else
                                                        pytest.approx(g["mfu"], rel=1e-9))
        top = next(c for c in rows[name]["cells"] if "top" in c["attrs"].get("class", ""))
        if g["top_offender"] is None:
            assert top["text"] == "-"
        else:
            assert top["attrs"]["data-top-trial"] == g["top_offender"]["trial"]
            assert float(top["attrs"]["data-top-wasted"]) == pytest.approx(
                g["top_offender"]["wasted_gpu_seconds"], rel=1e-9)
    # The embedded JSON is usage's own, the plots drawn.
    embedded = json.loads(page.json)
    assert [(g["group"], g["held_gpu_seconds"]) for g in embedded["groups"]] == [
        (g["group"], pytest.approx(g["held_gpu_seconds"], rel=1e-9)) for g in found["groups"]]
    outside, embedded_outside = found["outside_trials"], embedded["outside_trials"]
    for key in ("uninstrumented_gpu_seconds", "unused_gpu_seconds"):
        assert embedded_outside[key] == pytest.approx(outside[key], rel=1e-9)
    owners = [(o["owner"], o["node"], o["group"], pytest.approx(o["gpu_seconds"], rel=1e-9),
               pytest.approx(o["busy_gpu_seconds"], rel=1e-9))
              for o in outside["uninstrumented_by_owner"]]
    assert [(o["owner"], o["node"], o["group"], o["gpu_seconds"], o["busy_gpu_seconds"])
            for o in embedded_outside["uninstrumented_by_owner"]] == owners
    # Whom the uninstrumented GPU-hours went to, and how busy, on the page too.
    assert page.owners == {o[0]: (o[3], o[4]) for o in owners} and len(owners) == 2
    assert all(0 < busy < held for held, busy in page.owners.values())
    assert page.figures == {"usage-wasted": "plot", "usage-held": "plot"}
    text = out.read_text()
    assert IDLE_CAUSES["data"] in text and "as diagnose says it: <b>Data loader</b>" in text
    # A line for each cause with a verdict that wasted GPU-hours (none for one that wasted
    # none), with its GPU-hours and their share of those held in all.
    total = found["total"]
    listed = dict(re.findall(r'<li data-cause="([^"]+)">(.*?)</li>', text))
    assert set(listed) == {c for c, seconds in total["wasted_by_cause"].items()
                           if seconds > 0 and found["causes"][c]["verdict"] is not None} | (
        {"low_mfu"} if total["busy_low_mfu_gpu_seconds"] > 0 else set()), listed
    for cause, said in listed.items():
        if cause != "low_mfu":
            seconds = total["wasted_by_cause"][cause]
            share = f"{100 * seconds / total['held_gpu_seconds']:.0f}%"
            verdict = found["causes"][cause]["verdict"]
            assert f"</b>: {hours(seconds)} GPU-h ({share} of held), as diagnose says it: " \
                f"<b>{verdict}</b>" in said, (cause, said)
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_plots_hold_the_records_over_time(usage_prometheus: str) -> None:  # noqa: F811
    """The plots' lines: GPUs held, busy and idle by cause over the history, one minute a
    point; held = busy + idle at each minute; at most one trial's GPU held per namespace."""
    from trainwatch.promapi import PrometheusAPI

    doc = usage_page.collect(PrometheusAPI(usage_prometheus), "namespace",
                             time.time() - BASE + 300)
    assert doc.step == 60 and doc.held and doc.busy and doc.wasted["data"]
    held, busy = dict(doc.held), dict(doc.busy)
    idle = {t: sum(dict(p).get(t, 0.0) for p in doc.wasted.values()) for t in held}
    assert max(held.values()) == pytest.approx(2)  # both trials' GPUs at once
    assert all(held[t] == pytest.approx(busy.get(t, 0.0) + idle[t], abs=1e-6) for t in held)
    assert all(BASE <= t <= time.time() for t in held)
    assert sum(held.values()) * doc.step == pytest.approx(
        sum(g.held for g in doc.groups), rel=0.05)


def _hostile_doc() -> usage_page.UsageDoc:
    name = '</td><script>alert("x")</script>\x1b[2J\u202e'
    g = Group(name, held=7200.0, busy=3600.0, top=(name, "<img src=x onerror=1>", 3600.0))
    g.wasted["data"] = 3600.0
    now = time.time()
    points = [(now - 3600 + 60 * i, 1.0) for i in range(60)]
    return usage_page.UsageDoc("experiment", 3600.0, now, [g], Outside(), "http://p:9090", 60.0,
                               {"data": points}, points, [(t, 0.5) for t, _ in points])


def test_a_hostile_name_is_escaped() -> None:
    text = usage_page.page(_hostile_doc())
    assert "<script>alert" not in text and "<img" not in text and "\x1b" not in text
    assert "\u202e" not in text
    page = parse(text)
    assert [r["attrs"]["data-group"] for r in page.rows] == [
        '</td><script>alert("x")</script>\\x1b[2J\\u202e', "total"]
    assert page.rows[0]["cells"][0]["text"] == page.rows[0]["attrs"]["data-group"]
    assert json.loads(page.json)["groups"][0]["group"].startswith("</td><script>")


def test_the_page_opens_in_chromium(usage_prometheus: str, tmp_path: Path,  # noqa: F811
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from tests.browser import open_page

    out = tmp_path / "usage.html"
    assert cli.main(["report", "--usage", "--prometheus", usage_prometheus, "--since", _since(),
                     "-o", str(out)]) == EXIT_OK
    capsys.readouterr()
    hostile = tmp_path / "hostile.html"
    hostile.write_text(usage_page.page(_hostile_doc()))
    for path, scheme in ((out, "light"), (hostile, "dark")):
        with open_page(path, scheme) as (page, problems):
            assert page.title().startswith("trainwatch usage")
            for key in ("usage-wasted", "usage-held"):
                plot = page.locator(f'figure[data-panel="{key}"] svg.plot')
                box = plot.bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 100
                assert plot.locator("path").count() > 5
            assert page.locator("table[data-usage=groups] tr").count() >= 3
            assert page.evaluate("() => window.__x === undefined")
            page.screenshot(path=str(tmp_path / f"{path.stem}-{scheme}.png"), full_page=True)
            assert problems == []
    assert (tmp_path / "usage-light.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, said", [
    (["--usage", "--experiment", "e"], "--experiment does not go with it"),
    (["--usage", "--at", "2025-01-01T00:00:00"], "--at does not go with it"),
    (["--by", "namespace", "--experiment", "e"], "--by goes with --usage"),
    ([], "--experiment is required"),
])
def test_flags_that_do_not_go_together_are_one_line_exit_2(
        argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["report", *argv, "--prometheus", f"http://127.0.0.1:{free_port()}",
                     "-o", str(tmp_path / "u.html")])
    out, err = capsys.readouterr()
    assert (code, out) == (EXIT_USAGE, "") and err.count("\n") == 1 and said in err, err
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_as_usage_says_it(usage_prometheus: str, tmp_path: Path,  # noqa: F811
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "u.html"
    for argv, said in ((["--prometheus", usage_prometheus, "--since", "60d"],
                        "beyond Prometheus's retention (30d)"),
                       (["--prometheus", f"http://127.0.0.1:{free_port()}", "--timeout", "2"],
                        "127.0.0.1")):
        code = cli.main(["report", "--usage", *argv, "-o", str(out)])
        said_out, err = capsys.readouterr()
        assert (code, said_out) == (EXIT_USAGE, "") and err.count("\n") == 1, err
        assert err.startswith("trainwatch report: error:") and said in err
        assert list(tmp_path.iterdir()) == []  # nothing written, no temp file left
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", "--usage", "--by", "team", "-o", str(out)])
    assert exited.value.code == EXIT_USAGE and capsys.readouterr()[1].count("\n") == 1
    code = cli.main(["report", "--usage", "--prometheus", usage_prometheus, "-o", str(tmp_path)])
    assert code == EXIT_USAGE and "is a directory" in capsys.readouterr()[1]
