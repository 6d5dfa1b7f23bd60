"""`make gpu-check`'s runner (benchmarks/gpu_check.py): the figures it gathers, the rows a
junit file gives, what fails the run; and one real run of its tests step here, where every GPU
test is a row that says why it was skipped."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import MARK, Row, figures, junit_rows


def test_figures_are_read_wherever_the_line_starts_and_verdicts_follow_ok() -> None:
    output = "\n".join([
        "noise",
        '..' + MARK + '{"name": "a", "value": 0.80604, "target": "> 0.8", "ok": true}',
        MARK + '{"name": "b", "value": "+5.79%", "target": "<= +1.0%", "ok": false}',
        MARK + '{"name": "c", "value": 1.0, "target": "-", "ok": null}',
        MARK + '{"name": "d"',  # cut off
    ])
    rows = figures("s", output)
    assert [(r.name, r.value, r.verdict) for r in rows] == [
        ("a", "0.806", "ok"), ("b", "+5.79%", "FAIL"), ("c", "1", "-"),
        ("unreadable figure line", MARK + '{"name": "d"', "error")]
    assert [r.failed for r in rows] == [False, True, False, True]


def test_junit_rows_tell_pass_skip_failure_and_error_apart(tmp_path: Path) -> None:
    xml = tmp_path / "t.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_a" name="test_ok" time="1.25"/>'
        '<testcase classname="tests.test_a" name="test_skip" time="0">'
        '<skipped message="needs CUDA"/></testcase>'
        '<testcase classname="tests.test_b" name="test_fail" time="2">'
        '<failure message="assert 1 == 2"/></testcase>'
        '<testcase classname="tests.test_b" name="test_err" time="0">'
        '<error message="fixture"/></testcase>'
        '</testsuite></testsuites>')
    rows = junit_rows(xml)
    assert [(r.name, r.value, r.verdict) for r in rows] == [
        ("test_a::test_ok", "1.2 s", "ok"), ("test_a::test_skip", "0.0 s", "skipped: needs CUDA"),
        ("test_b::test_fail", "2.0 s", "FAIL"), ("test_b::test_err", "0.0 s", "FAIL")]


def test_the_gpu_tests_are_the_files_that_carry_the_marker() -> None:
    files = gpu_check.gpu_test_files()
    assert "tests/test_exporter_gpu.py" in files and "tests/test_trial_cuda.py" in files
    assert "tests/test_gpu_check.py" not in files  # this file names the marker only here
    assert all(f.startswith("tests/test_") for f in files)


def test_a_step_without_its_program_is_skipped_with_the_reason(tmp_path: Path) -> None:
    step = gpu_check.Step("scrape", ["true"], needs="no-such-program-xyz")
    (row,) = gpu_check.run_step(step, tmp_path)
    assert row.verdict.startswith("skipped: no no-such-program-xyz on PATH")
    assert not row.failed


def test_a_failing_step_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "steps", lambda out: [
        gpu_check.Step("good", ["python3", "-c", "print('" + MARK + "{\"name\": \"x\", "
                                "\"value\": 1, \"target\": \"1\", \"ok\": true}')"]),
        gpu_check.Step("bad", ["python3", "-c", "raise SystemExit(3)"])])
    assert gpu_check.main(["--out", str(tmp_path)]) == 1
    table = (tmp_path / "table.txt").read_text()
    lines = [line.split() for line in table.splitlines()]
    assert ["good", "x", "1", "1", "ok"] in lines
    assert ["bad", "step", "exit", "3", "exit", "0", "FAIL"] in lines
    assert (tmp_path / "bad.log").exists()
    monkeypatch.setattr(gpu_check, "steps", lambda out: [gpu_check.Step("good", ["true"])])
    assert gpu_check.main(["--out", str(tmp_path)]) == 0


def test_the_tests_step_runs_here_and_skips_each_gpu_test_with_a_reason(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    rows = gpu_check.run_step(gpu_check.steps(tmp_path)[0], tmp_path)
    tests = [r for r in rows if r.name != "step"]
    assert len(tests) >= 10
    if not Path("/dev/nvidia0").exists():
        assert all(r.verdict.startswith("skipped: ") and len(r.verdict) > 12 for r in tests)
    assert rows[-1] == Row("tests", "step", rows[-1].value, "exit 0", "ok")


def test_a_steps_own_variables_reach_it_and_its_pythonpath_comes_before_the_repo(
        tmp_path: Path) -> None:
    code = ("import os, sys; from benchmarks.gpu_check import figure; "
            "figure('x', os.environ['TW_X'], '-', None); "
            "figure('path', sys.path.index(os.environ['TW_FIRST']), '-', None)")
    step = gpu_check.Step("env", [sys.executable, "-c", code],
                          env={"TW_X": "42", "TW_FIRST": str(tmp_path),
                               "PYTHONPATH": str(tmp_path)})
    rows = gpu_check.run_step(step, tmp_path)
    assert [(r.name, r.value) for r in rows] == [("x", "42"), ("path", "1"), ("step", rows[-1].value)]
    assert rows[-1].verdict == "ok" and "TW_X" not in os.environ
