"""`trainwatch report` on the shared live stack (tests/conftest.py's two_trials: a slow-loader
and a healthy PyTorch trial), opened in Debian's headless Chromium.

TRAINWATCH_REPORT_SCREENSHOT=docs/images/report.png saves the README's screenshot from here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.stack import REPO, wait_until
from tests.browser import open_page
from tests.live_stack import TWO_TRIALS_EXPERIMENT, LiveStack

TRAINWATCH = Path(sys.executable).parent / "trainwatch"
EXPERIMENT = TWO_TRIALS_EXPERIMENT
TRIAL_PANELS = ["phases-slow", "steps-slow", "samples-slow", "step-histogram-slow"]
GPU_PANELS = ["gpu-util", "gpu-sm", "gpu-tensor", "gpu-memory", "gpu-power", "gpu-clock"]
NODE_PANELS = ["node-cpu", "node-memory", "node-disk", "node-network"]
VERDICT_FIELDS = ("kind", "title", "bottleneck", "alert", "threshold", "remedy", "runbook_url")


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
def slow_report(two_trials: LiveStack, finished: subprocess.Popen[bytes],
                tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The slow trial's report and, right after it, diagnose's JSON of the same trial."""
    out = tmp_path_factory.mktemp("report") / "slow.html"
    done = report(two_trials, out, "--experiment", EXPERIMENT, "--trial", "slow")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"wrote {out} (")
    return out, diagnose(two_trials, EXPERIMENT, "slow")


def test_report_of_the_slow_trial_renders_and_says_what_diagnose_says(
        slow_report: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
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


def test_finished_trial_without_gpus(two_trials: LiveStack, finished: subprocess.Popen[bytes],
                                    tmp_path: Path) -> None:
    """A trial that ended (its group deleted) is read at its last sample; with no GPU series
    the GPU section says so instead of drawing empty axes; its measured limits are shown."""
    assert finished.wait(timeout=60) == 0, two_trials.trial_log("done")
    prom = two_trials.prometheus
    wait_until(lambda: not prom.query('trainwatch_trial_info{trial="done"}'), 20,
               "the finished trial's series to go stale")
    out = tmp_path / "done.html"
    done = report(two_trials, out, "--experiment", "report-cpu")
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
        assert "the loader must get" in page.inner_text('table[data-limits="measured"]')
        assert "loader limit (measured)" in drawn["samples-done"]["text"]
        assert "step limit (measured)" in drawn["samples-done"]["text"]


@pytest.mark.parametrize(("args", "said"), [
    (("--experiment", "nope"), f"no experiment 'nope' in Prometheus; experiments: {EXPERIMENT}"),
    # The known trials are listed; the healthy one may have ended by now, so only the slow one
    # (its steps outlive the session) is certain.
    (("--experiment", EXPERIMENT, "--trial", "nope"),
     f"trials of experiment {EXPERIMENT}: "),
    (("--experiment", EXPERIMENT, "--trial", "nope"), "slow (rank 0)"),
    (("--experiment", EXPERIMENT, "--trial", "slow", "--start", "2000-01-01T00:00:00Z",
      "--end", "2000-01-01T01:00:00Z"), "no samples of trial live-diagnose/slow in the window"),
])
def test_bad_input_on_a_live_stack(two_trials: LiveStack, tmp_path: Path,
                                   args: tuple[str, ...], said: str) -> None:
    out = tmp_path / "r.html"
    done = trainwatch(two_trials, "report", "-o", str(out), *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []  # no file, no temp file left
