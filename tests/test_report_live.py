"""`trainwatch report` on the shared live stack (tests/conftest.py's two_trials: a slow-loader
and a healthy PyTorch trial), opened in Debian's headless Chromium; trials that ended and were
retired by `trainwatch gc`, reported with no time given; the same figures after the rules were
re-rendered with another window, and from the raw series.

TRAINWATCH_REPORT_SCREENSHOT=docs/images/report.png saves the README's screenshot from here.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fake_nvml import fake_uuid
from benchmarks.stack import REPO, wait_until
from prometheus import generate_rules
from tests.browser import open_page
from tests.live_stack import (
    BUSY_GPU,
    IDLE_GPU,
    INTERVAL,
    RATE_OVERSHOOT,
    TWO_TRIALS_EXPERIMENT,
    TWO_TRIALS_FOR,
    TWO_TRIALS_RATE_WINDOW,
    LiveStack,
)
from trainwatch import gc
from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.runs import Run
from trainwatch.promapi import PrometheusAPI
from trainwatch.report import collect
from trainwatch.report.series import RAW, RECORDED
from trainwatch.report.window import Asked, utc
from trial_instrumentation import names
from trial_instrumentation.durations import parse_duration

TRAINWATCH = Path(sys.executable).parent / "trainwatch"
EXPERIMENT = TWO_TRIALS_EXPERIMENT
TRIAL_PANELS = ["phases-slow", "steps-slow", "samples-slow", "step-histogram-slow"]
GPU_PANELS = ["gpu-busy", "gpu-util", "gpu-sm", "gpu-tensor", "gpu-memory", "gpu-power", "gpu-clock"]
NODE_PANELS = ["node-cpu", "node-memory", "node-disk", "node-network"]
VERDICT_FIELDS = ("kind", "title", "bottleneck", "alert", "threshold", "remedy", "runbook_url")
# A trial of known steps that ends cleanly, long enough for several rate windows of steps.
ENDED_EXPERIMENT, ENDED_STEPS = "report-ended", 1500


def trainwatch(stack: LiveStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINWATCH), *args, "--prometheus", stack.prometheus.url],
                          capture_output=True, text=True, timeout=60, check=False)


def report(stack: LiveStack, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return trainwatch(stack, "report", "-o", str(out), "--since", "3m", *args)


def diagnose(stack: LiveStack, experiment: str, trial: str) -> dict[str, Any]:
    done = trainwatch(stack, "diagnose", "--experiment", experiment, "--trial", trial,
                      "--format", "json")
    [one] = json.loads(done.stdout)["reports"]
    return one


def panels(page: Any) -> dict[str, dict[str, Any]]:
    """Each figure's state, drawn marks, size and SVG text."""
    found = page.eval_on_selector_all("figure.panel", """figs => figs.map(f => {
        const svg = f.querySelector('svg'); const box = svg ? svg.getBoundingClientRect() : null;
        return [f.dataset.panel, {state: f.dataset.state,
            marks: svg ? svg.querySelectorAll('path, rect, polygon').length : 0,
            width: box ? box.width : 0, height: box ? box.height : 0,
            text: svg ? [...svg.querySelectorAll('text')].map(t => t.textContent).join('|') : ''}];
    })""")
    return dict(found)


@pytest.fixture(scope="module")
def finished(two_trials: LiveStack) -> subprocess.Popen[bytes]:
    """A short trial without GPUs that measures its loader and step limits first
    (examples/limits.py), started first so that it runs while the others are tested."""
    argv = [sys.executable, str(REPO / "examples" / "limits.py"), "--limit-seconds", "0.5",
            "--loader-delay", "0.01", "--batch-size", "8", "--workers", "0", "--steps", "300",
            "--experiment", "report-cpu", "--trial", "done",
            "--pushgateway", two_trials.pushgateway.url, "--push-interval", "0.5"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with open(two_trials.workdir / "trial-done.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=two_trials.workdir, start_new_session=True)
    two_trials.trials["done"] = proc  # stopped with the stack if a test fails first
    return proc


@pytest.fixture(scope="module")
def clean_trial(two_trials: LiveStack) -> subprocess.Popen[bytes]:
    """A trial of ENDED_STEPS steps on the busy GPU that exits cleanly, started first so that
    it runs while the others are tested."""
    return two_trials.start_trial(
        ENDED_EXPERIMENT, "clean", "--workers", "0", "--batch-size", "8", "--loader-delay",
        # 35 ms a batch: over 50 s on an idle machine, so its life has a steady part (three
        # rate windows in, one before its end) that figures() averages over.
        "0.035", "--steps", str(ENDED_STEPS), env={"TRAINWATCH_GPU_UUIDS": fake_uuid(BUSY_GPU)})


def retire(stack: LiveStack, proc: subprocess.Popen[bytes], trial: str) -> None:
    """Wait for the trial's clean exit, then `trainwatch gc` retires its group (1 s after its
    final push) and Prometheus no longer scrapes it."""
    assert proc.wait(timeout=240) == 0, stack.trial_log(trial)
    gateway = gc.Pushgateway(stack.pushgateway.url, 5, {})
    wait_until(lambda: any(g.labels.get("trial") == trial for g in
                           gc.collect(gateway, names.JOB, 3600, dry_run=False, ended_after=1.0)),
               60, f"gc to retire {trial}'s group")
    wait_until(lambda: not stack.prometheus.query(f'{names.TRIAL_INFO}{{trial="{trial}"}}'), 60,
               f"{trial}'s series to go stale")


Key = tuple[str, str]  # (panel, line)
# A recorded figure may differ from the raw one by this much besides when the rules evaluated.
FIGURE_REL, FIGURE_ABS = 0.01, 0.05
SHIFT = 0.25  # seconds between the raw readings that bound a recorded point


def run_of(doc: collect.Document) -> Run:
    """The one run the document reports."""
    [run] = [r.run for r in doc.reports]
    assert run is not None
    return run


def steady(doc: collect.Document) -> dict[Key, dict[int, float]]:
    """Each recorded line's points over the run's steady part (from three rate windows after
    its first sample to one before its last), by their index on the window's step grid."""
    run = run_of(doc)
    window = RecordNames(doc.rate_window)
    seconds = float(window.window.rstrip("s"))
    low, high = run.first + 3 * seconds, run.last - seconds
    found: dict[Key, dict[int, float]] = {}
    for panel in doc.sections[0][1]:  # the training loop's
        for series in panel.series:
            values = {round((t - doc.window.start) / doc.window.step): v
                      for t, v in series.points if low <= t <= high and not math.isnan(v)}
            if values and not series.reference:
                found[(panel.spec.key, series.name)] = values
    return found


def figures(doc: collect.Document) -> dict[Key, float]:
    """Each recorded line's mean over the run's steady part: the figures that must not depend
    on the rules."""
    return {key: sum(values.values()) / len(values) for key, values in steady(doc).items()}


@pytest.fixture(scope="module")
def ended(two_trials: LiveStack, clean_trial: subprocess.Popen[bytes]) -> collect.Document:
    """The clean trial, ended and retired, as the recorded series give it."""
    retire(two_trials, clean_trial, "clean")
    prom = two_trials.prometheus
    # Its last push reached Prometheus: the step counter's last value is every step.
    [last] = prom.query(f'max_over_time({names.STEPS}_total{{trial="clean"}}[10m])')
    assert float(last["value"][1]) == ENDED_STEPS
    assert prom.query(f'max_over_time({names.EXIT}{{trial="clean", reason="clean"}}[10m])')
    doc = collect.collect(PrometheusAPI(prom.url), ENDED_EXPERIMENT, "clean", None, Asked(),
                          force=RECORDED)
    return doc


@pytest.fixture(scope="module")
def ended_clean(ended: collect.Document) -> dict[Key, float]:
    """The clean trial's figures as the recorded series give them."""
    return figures(ended)


def evaluation_lag(api: PrometheusAPI, doc: collect.Document) -> float:
    """How long before a grid instant the recorded value read there may have been computed:
    the longest gap between the recorded lines' own evaluations over the run (an evaluation
    interval, more where the group skipped one), and a scrape interval more for a scrape that
    landed after the evaluation that would have read it."""
    run = run_of(doc)
    rules = RecordNames(doc.rate_window)
    span = math.ceil(run.last - run.first) + 60
    gaps = [b - a for name in (rules.phase_share, rules.steps_rate, rules.samples_rate)
            for _, points in api.pinned(run.last + 30).samples(
                f'{name}{{trial="clean"}}[{span}s]')
            for (a, _), (b, _) in itertools.pairwise(points)
            if run.first <= a and b <= run.last]
    assert gaps, "no recorded evaluations of the clean trial"
    return max(gaps) + parse_duration(INTERVAL)


@pytest.fixture(scope="module")
def raw_envelope(two_trials: LiveStack, ended: collect.Document
                 ) -> dict[Key, tuple[float, float]]:
    """Each figure's bounds as the raw series give them when each recorded point may be the
    expression at any instant up to the measured evaluation lag before it: the means of the
    raw series' least and greatest value at each point over windows shifted back by SHIFT.

    A recorded point is the rules' value at their last evaluation, not at the grid instant:
    under load that was enough to move a small share's figure by 1.7% (a loaded run read
    3.234 recorded against 3.291 raw for train_batch, whose 1.2 ms steps the load stretches)."""
    api = PrometheusAPI(two_trials.prometheus.url)
    window = ended.window
    lag = evaluation_lag(api, ended)
    seen: dict[Key, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in range(math.ceil(lag / SHIFT) + 1):
        doc = collect.collect(api, ENDED_EXPERIMENT, "clean", None,
                              Asked(start=window.start - SHIFT * i, end=window.end - SHIFT * i),
                              force=RAW)
        assert {p.source for p in doc.sections[0][1]} == {RAW}
        assert doc.window.step == window.step
        # Index k of the shifted grid lies SHIFT * i before index k of the unshifted one.
        for key, values in steady(doc).items():
            for index, v in values.items():
                seen[key][index].append(v)
    bounds = {}
    for key, values in steady(ended).items():
        around = [seen[key][index] for index in values if seen[key][index]]
        assert len(around) >= 0.9 * len(values), (key, len(around), len(values))
        bounds[key] = (sum(map(min, around)) / len(around), sum(map(max, around)) / len(around))
    return bounds


def assert_within(found: dict[Key, float], bounds: dict[Key, tuple[float, float]],
                  rel: float = 0.0, abs_: float = 0.0) -> None:
    """Each figure within its bounds, widened by ``rel`` of it or ``abs_``, whichever is more."""
    assert set(found) == set(bounds)
    outside = {key: (figure, bounds[key]) for key, figure in found.items()
               if not bounds[key][0] - max(rel * abs(figure), abs_) <= figure
               <= bounds[key][1] + max(rel * abs(figure), abs_)}
    assert outside == {}


@pytest.fixture(scope="module")
def slow_profiled(two_trials: LiveStack) -> None:
    """The slow trial asked for a profiler trace of its next steps (SIGUSR2, as `trainwatch
    profile` sends it), first thing, so that it captures while the other trials start."""
    two_trials.trials["slow"].send_signal(signal.SIGUSR2)


@pytest.fixture(scope="module")
def slow_report(two_trials: LiveStack, slow_profiled: None, finished: subprocess.Popen[bytes],
                clean_trial: subprocess.Popen[bytes],
                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The slow trial's report, once its trace's split is in Prometheus, and, right after it,
    diagnose's JSON of the same trial."""
    two_trials.prometheus.wait_for_series(
        f'{names.PROFILE_TIME_SECONDS}{{trial="slow"}}', timeout=120)  # Kineto's first load
    out = tmp_path_factory.mktemp("report") / "slow.html"
    done = report(two_trials, out, "--experiment", EXPERIMENT, "--trial", "slow")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"wrote {out} (")
    return out, diagnose(two_trials, EXPERIMENT, "slow")


def profiled(page: Any, expected: dict[str, Any], workdir: Path) -> None:
    """The slow trial's capture: the trace diagnose names, its file on disk, its operators, and
    its split in CPU time, mostly idle (the trial waits 50 ms a batch on its loader, in Python)."""
    capture = page.locator('[data-profile="capture"][data-rank="slow/0"]')
    trace = expected["trace"]
    assert capture.locator('[data-profile="path"]').inner_text() == trace["path"]
    assert (workdir / trace["path"]).is_file()  # relative to the trial's working directory
    first, last = map(int, capture.locator("tr", has_text="steps").locator("td").inner_text()
                      .replace(",", "").split("–"))
    assert last - first + 1 == 5  # TRAINWATCH_PROFILE_STEPS' default
    assert utc(trace["ended"]) in capture.locator("tr", has_text="captured").inner_text()
    ops = capture.locator('table[data-profile="ops"] tr[data-op]')
    assert 1 <= ops.count() <= 5 and [ops.nth(i).get_attribute("data-op")
                                      for i in range(ops.count())] == [o[0] for o in trace["ops"]]
    split = capture.locator('table[data-profile="split"]')
    assert split.get_attribute("data-device") == "cpu" and "CPU time" in capture.inner_text()
    shares = {kind: int(split.locator(f'tr[data-kind="{kind}"] td').nth(2).inner_text()
                        .rstrip("%")) for kind in ("idle", "compute", "communication")}
    assert shares["idle"] > 50 and shares["communication"] == 0, shares
    assert sum(shares.values()) in (99, 100, 101), shares  # each rounded
    idle = trace["split"]["idle"] / sum(trace["split"].values())
    assert f"{shares['idle']}%" == f"{idle:.0%}" and trace["split_device"] == "cpu"


def test_report_of_the_slow_trial_renders_and_says_what_diagnose_says(
        slow_report: tuple[Path, dict[str, Any]], two_trials: LiveStack, tmp_path: Path) -> None:
    out, expected = slow_report
    html = out.read_text()
    # Self-contained: nothing to load, and small.
    assert "src=" not in html and "<link" not in html and not re.search(r"url\((?!#)", html)
    assert len(html.encode()) < 3_000_000
    with open_page(out) as (page, problems):
        assert problems == []
        drawn = panels(page)
        for key in TRIAL_PANELS + GPU_PANELS + NODE_PANELS:
            p = drawn.get(key)
            assert p is not None and p["state"] == "plot", (key, p)
            assert p["marks"] > 10 and p["width"] > 300 and p["height"] > 100, (key, p)
        # Units on the axes; legends name the node and the GPU.
        assert "time (UTC)" in drawn["gpu-util"]["text"]
        assert "utilization (%)" in drawn["gpu-util"]["text"]
        assert f"{expected['nodename']} GPU 1" in drawn["gpu-util"]["text"]
        assert "memory (GiB)" in drawn["gpu-memory"]["text"]
        # Its own GPU only: never the healthy trial's busy one on the same node.
        for key in GPU_PANELS:
            assert f"{expected['nodename']} GPU {IDLE_GPU}" in drawn[key]["text"], key
            assert f"{expected['nodename']} GPU {BUSY_GPU}" not in drawn[key]["text"], key
        # "GPU busy" says which source the rule used: the fake board reports GPM (the
        # NVML-utilization case is tests/test_report.py's).
        busy = page.locator('figure[data-panel="gpu-busy"] figcaption').inner_text()
        assert busy == "GPU busy: SM activity (NVML GPM)"
        assert f"{expected['nodename']} GPU 1: SM activity (NVML GPM)" in drawn["gpu-busy"]["text"]
        assert "steps (count)" in drawn["step-histogram-slow"]["text"]
        assert "dataloader_next" in drawn["phases-slow"]["text"]
        # The verdict is diagnose's: the same fields, the same words.
        section = page.locator('section.verdict[data-rank="slow/0"]')
        assert section.locator(".title").inner_text() == expected["verdict"]["title"]
        assert section.locator(".fix").inner_text() == expected["verdict"]["remedy"]
        assert section.get_attribute("data-kind") == expected["verdict"]["kind"] == "dataloader"
        [embedded] = json.loads(page.locator("#diagnose-json").text_content())["reports"]
        assert {k: embedded["verdict"][k] for k in VERDICT_FIELDS} == \
            {k: expected["verdict"][k] for k in VERDICT_FIELDS}
        assert embedded["verdict"]["measured"] == pytest.approx(
            expected["verdict"]["measured"], abs=0.05)
        # The alert that fired in the window, with its runbook.
        row = page.locator('table[data-alerts="fired"] tr', has_text="TrainwatchDataloaderBound")
        assert "#trainwatchdataloaderbound" in row.first.locator("a").get_attribute("href")
        profiled(page, expected, two_trials.workdir)
        shot = page.screenshot(full_page=True)
        # The README's picture: the header, the verdict and the first plots.
        top = page.screenshot(full_page=True,
                              clip={"x": 0, "y": 0, "width": 1400, "height": 1250})
    (tmp_path / "slow.png").write_bytes(shot)
    (tmp_path / "top.png").write_bytes(top)
    if os.environ.get("TRAINWATCH_REPORT_SCREENSHOT"):
        shutil.copy(tmp_path / "top.png", os.environ["TRAINWATCH_REPORT_SCREENSHOT"])
    assert len(shot) > 50_000  # a page of plots, not a blank one


def test_dark_mode_recolours_page_and_plots(slow_report: tuple[Path, dict[str, Any]]) -> None:
    out, _ = slow_report
    colours = {}
    for scheme in ("light", "dark"):
        with open_page(out, scheme) as (page, problems):
            assert problems == []
            colours[scheme] = page.evaluate("""() => [getComputedStyle(document.body).backgroundColor,
                getComputedStyle(document.querySelector('figure.panel svg text')).fill]""")
    assert colours["light"] == ["rgb(255, 255, 255)", "rgb(31, 35, 40)"]
    assert colours["dark"] == ["rgb(13, 17, 23)", "rgb(230, 237, 243)"]


def test_page_fits_a_narrow_window_and_no_time_label_overlaps(
        slow_report: tuple[Path, dict[str, Any]]) -> None:
    out, _ = slow_report
    for width in (1400, 800):
        with open_page(out, width=width) as (page, problems):
            assert problems == []
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            crowded = page.evaluate("""() => [...document.querySelectorAll(
                'figure.panel:not([data-panel^="step-histogram"]) svg.plot')].filter(svg => { const boxes = [...svg.querySelectorAll('g[id^="xtick_"] text')]
                    .map(t => t.getBoundingClientRect());
                  return boxes.some((b, i) => i > 0 && b.left < boxes[i - 1].right); }).length""")
            assert crowded == 0, width


def test_panel_titles_stand_above_their_axis_text(
        slow_report: tuple[Path, dict[str, Any]]) -> None:
    """A panel's title reads larger than the tick labels of the plot under it, wide and
    narrow: the SVG scales with the panel, its 9 pt text with it (issue 38: titles looked small
    beside their axis text at 1400 and 800 px)."""
    out, _ = slow_report
    for width in (1400, 800):
        with open_page(out, width=width) as (page, problems):
            assert problems == []
            sizes = page.evaluate("""() => [...document.querySelectorAll(
                'figure.panel[data-state="plot"]')].map(f => {
                  const tick = f.querySelector('svg.plot g[id^="ytick_"] text');
                  return [parseFloat(getComputedStyle(f.querySelector('figcaption')).fontSize),
                          tick.getScreenCTM().a * parseFloat(getComputedStyle(tick).fontSize)];
                })""")
            assert sizes, width
            for title, tick in sizes:
                assert title >= 1.2 * tick, (width, title, tick)
                assert tick >= 10, (width, tick)  # and the axis text stays readable


def test_finished_trial_without_gpus(two_trials: LiveStack, finished: subprocess.Popen[bytes],
                                    tmp_path: Path) -> None:
    """A trial that ended (its group retired by gc) is read at its last sample; with no GPU
    series the GPU section says so instead of drawing empty axes; its measured limits are
    shown."""
    retire(two_trials, finished, "done")
    out = tmp_path / "done.html"
    done = trainwatch(two_trials, "report", "-o", str(out), "--experiment", "report-cpu")
    assert done.returncode == 0, done.stderr
    with open_page(out) as (page, problems):
        assert problems == []
        drawn = panels(page)
        assert not [k for k in drawn if k.startswith("gpu-")]
        assert "No GPU series for this trial" in page.locator(
            '[data-section-note="GPUs"]').inner_text()
        assert drawn["steps-done"]["state"] == "plot" and drawn["steps-done"]["marks"] > 10
        assert "last sample of the trial" in page.inner_text("dl.meta")
        assert page.locator('section.verdict[data-rank="done/0"] .title').inner_text()
        # The loader delivers 8 / 0.01 = 800 samples/s at most; the tiny step many times that.
        # One row, this rank's, each figure in its own column and the advice from the two.
        rows = page.locator('table[data-limits="measured"] tr:has(td)')
        assert rows.count() == 1
        cells = rows.locator("td").all_inner_texts()
        assert cells[0] == "done/0"
        loader, step = float(cells[1]), float(cells[2])
        assert 0 < loader <= 800 < step, cells
        advice = re.fullmatch(r"the loader delivers (\d+) samples/s, the step consumes (\d+) "
                              r"samples/s: the loader must get ([\d.]+)x faster", cells[3])
        assert advice is not None and (advice[1], advice[2]) == (cells[1], cells[2]), cells
        assert float(advice[3]) == pytest.approx(step / loader, abs=0.06), cells
        assert "loader limit (measured)" in drawn["samples-done"]["text"]
        assert "step limit (measured)" in drawn["samples-done"]["text"]
        # It was never profiled: one line says how to, and no table.
        assert page.locator('[data-profile="capture"]').count() == 0
        assert "trainwatch profile --experiment report-cpu" in page.locator(
            '[data-profile="none"]').inner_text()


@pytest.mark.parametrize(("args", "said"), [
    (("--experiment", "live-diagnos"),
     ("no experiment 'live-diagnos' in Prometheus over the last 15 days (did you mean "
      f"{EXPERIMENT}?); experiments: ")),
    # The known trials are listed; the healthy one may have ended by now, so only the slow one
    # (its steps outlive the session) is certain.
    (("--experiment", EXPERIMENT, "--trial", "slo"),
     f"(did you mean {EXPERIMENT}/slow?); trials of experiment {EXPERIMENT}: "),
    (("--experiment", EXPERIMENT, "--trial", "nope"), "slow (rank 0)"),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--start", "2000-01-01T00:00:00Z",
      "--end", "2000-01-01T01:00:00Z"), "days ago, outside the 15 days Prometheus keeps"),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--at", "2000-01-01T00:00:00Z"),
     "--at is "),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--since", "1h", "--end",
      str(int(time.time()) - 3600)), "no samples of trial live-diagnose/slow in the window"),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--baseline", f"{EXPERIMENT}/slow"),
     f"--baseline {EXPERIMENT}/slow is the trial itself"),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--baseline", f"{EXPERIMENT}/nope"),
     f"no trial {EXPERIMENT}/nope in Prometheus"),
])
def test_bad_input_on_a_live_stack(two_trials: LiveStack, tmp_path: Path,
                                   args: tuple[str, ...], said: str) -> None:
    out = tmp_path / "r.html"
    done = trainwatch(two_trials, "report", "-o", str(out), *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []  # no file, no temp file left


def test_an_ended_trial_is_reported_over_its_life_with_no_time_given(
        two_trials: LiveStack, ended_clean: dict[Key, float], tmp_path: Path) -> None:
    out = tmp_path / "clean.html"
    done = trainwatch(two_trials, "report", "-o", str(out), "--experiment", ENDED_EXPERIMENT,
                      "--trial", "clean")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    html = out.read_text()
    # The state first; the verdict over its life.
    state = re.search(r'<p class="state" data-state="([^"]+)"[^>]*>([^<]+)', html)
    assert state is not None and state[1] == "ended clean", html[:3000]
    assert state[2].startswith("Ended ") and f"(clean, {ENDED_STEPS:,} steps in " in state[2]
    title = re.search(r'class="title">([^<]+)', html)
    assert title is not None and f"{ENDED_STEPS:,} steps in" in title[1]
    assert 'data-source="recorded"' in html and 'data-source="raw"' not in html
    drawn = dict(re.findall(r'data-panel="([^"]+)" data-state="(\w+)"', html))
    for key in ["phases-clean", "steps-clean", "samples-clean", "step-histogram-clean",
                *GPU_PANELS, *NODE_PANELS]:
        assert drawn.get(key) == "plot", (key, drawn)
    assert "<figcaption>GPU busy: SM activity (NVML GPM)</figcaption>" in html
    assert {k for k, _ in ended_clean} >= {"phases-clean", "steps-clean", "samples-clean"}
    # Steps/s under one batch per 35 ms load (as rate() reads it), and samples/s 8 a step
    # (batch 8) beside it.
    steps_per_second = ended_clean[("steps-clean", "rank 0")]
    assert 1 < steps_per_second < RATE_OVERSHOOT / 0.035, ended_clean
    assert ended_clean[("samples-clean", "rank 0")] == pytest.approx(8 * steps_per_second,
                                                                    rel=0.01), ended_clean


def test_raw_series_give_the_same_figures(
        two_trials: LiveStack, ended_clean: dict[Key, float],
        raw_envelope: dict[Key, tuple[float, float]]) -> None:
    """Same trial, same window: the figures drawn from the raw series are the recorded ones,
    up to when the rules evaluated (the raw series read up to the measured lag earlier) and
    1% (0.05 percentage points for the smallest shares)."""
    doc = collect.collect(PrometheusAPI(two_trials.prometheus.url), ENDED_EXPERIMENT, "clean",
                          None, Asked(), force=RAW)
    assert {p.source for p in doc.sections[0][1]} == {RAW}
    assert_within(figures(doc), raw_envelope)  # the unshifted reading is one of the bounds'
    assert_within(ended_clean, raw_envelope, FIGURE_REL, FIGURE_ABS)


@pytest.fixture
def rules_with_another_window(two_trials: LiveStack) -> Iterator[str]:
    """The stack's rules re-rendered with a 30 s window and reloaded; the shared stack's own
    rules back afterwards."""
    def load(window: str) -> None:
        generate_rules.write_rules(two_trials.workdir / "rules", rate_window=window,
                                   for_=TWO_TRIALS_FOR)
        reload = urllib.request.Request(f"{two_trials.prometheus.url}/-/reload", method="POST")
        urllib.request.urlopen(reload, timeout=10).close()
        share = RecordNames(window).phase_share
        wait_until(lambda: any(r.get("name") == share for g in
                               two_trials.prometheus.api("rules")["groups"] for r in g["rules"]),
                   20, f"the rules with the {window} window")

    load("30s")
    yield "30s"
    load(TWO_TRIALS_RATE_WINDOW)


def test_rules_with_another_window_change_no_figure(
        two_trials: LiveStack, ended_clean: dict[Key, float],
        raw_envelope: dict[Key, tuple[float, float]], rules_with_another_window: str,
        tmp_path: Path) -> None:
    out = tmp_path / "clean.html"
    done = trainwatch(two_trials, "report", "-o", str(out), "--experiment", ENDED_EXPERIMENT,
                      "--trial", "clean")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    drawn = dict(re.findall(r'data-panel="([^"]+)" data-state="(\w+)"', out.read_text()))
    assert [k for k, state in drawn.items() if state != "plot"] == []
    api = PrometheusAPI(two_trials.prometheus.url)
    recorded = collect.collect(api, ENDED_EXPERIMENT, "clean", None, Asked())
    raw = collect.collect(api, ENDED_EXPERIMENT, "clean", None, Asked(), force=RAW)
    for doc in (recorded, raw):
        assert doc.rate_window == TWO_TRIALS_RATE_WINDOW  # the window it was recorded under
    assert figures(recorded) == pytest.approx(ended_clean, rel=FIGURE_REL, abs=FIGURE_ABS)
    assert_within(figures(raw), raw_envelope)


def test_baseline_names_what_changed(two_trials: LiveStack, tmp_path: Path) -> None:
    out = tmp_path / "versus.html"
    done = trainwatch(two_trials, "report", "-o", str(out), "--experiment", EXPERIMENT,
                      "--trial", "slow", "--since", "3m", "--baseline", f"{EXPERIMENT}/healthy")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    html = out.read_text()
    assert 'data-compare="side-by-side"' in html
    summary = re.search(r'data-compare="summary">([^<]+)', html)
    assert summary is not None and "dataloader_next" in summary[1] and "slowdown" in summary[1]
    [first] = re.findall(r'<tr data-phase="([^"]+)"', html)[:1]
    assert first == "dataloader_next"
    # Side by side: this trial's column is the slow trial's, the baseline's the healthy one's;
    # the slow trial waits 50 ms a step on its loader, the healthy one hardly at all.
    side = {k: (a, b) for k, a, b in
            re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td><td>([^<]*)</td></tr>", html)}
    assert side["trial"] == (f"{EXPERIMENT}/slow rank 0", f"{EXPERIMENT}/healthy")
    slow_ms, healthy_ms = (float(cell.split(" ms")[0]) for cell in side["dataloader_next"])
    assert slow_ms > 30 > healthy_ms, side["dataloader_next"]
    # Each change is this trial's minus the baseline's, in ms per step, with its share of the
    # difference in step time; the shares of every phase and the untimed rest make it whole.
    changes = {phase: (float(delta), int(share)) for phase, delta, share in re.findall(
        r'<tr data-phase="([^"]+)"><td>[^<]+</td><td class="num">([+-]?[\d.]+) ms per step'
        r'</td><td class="num">(-?\d+)%</td></tr>', html)}
    assert len(changes) == html.count("<tr data-phase="), changes
    assert changes["dataloader_next"][0] == pytest.approx(slow_ms - healthy_ms, abs=0.15)
    assert changes["dataloader_next"][1] > 50, changes
    assert abs(sum(share for _, share in changes.values()) - 100) <= len(changes), changes
