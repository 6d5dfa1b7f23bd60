"""The ``python -m`` entry points, run in-process (runpy) or through their ``main``: `make
demo`'s arguments, exit codes and error lines with the demo itself stood in for; ``python -m
exporter`` reaching the exporter's own CLI; ``python -m trial_instrumentation.auto`` printing the
directory whose sitecustomize times a script."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

import trainwatch.demo.__main__ as demo_main
from trainwatch.alertmanager import AlertmanagerConfigError
from trainwatch.demo.run import DemoError
from trainwatch.layout import ENV_STATE_DIR, StackError
from trainwatch.promapi import PrometheusError


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, float]]:
    """The demo's runs (state directory, seconds), the demo itself never started."""
    seen: list[tuple[Path, float]] = []
    monkeypatch.setattr(demo_main, "run", lambda state_dir, seconds: seen.append(
        (state_dir, seconds)))
    return seen


def test_the_demo_runs_in_its_own_folder_of_the_stacks_state_directory(
        runs: list[tuple[Path, float]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path / "state"))
    assert demo_main.main([]) == 0
    assert runs == [(tmp_path / "state" / "demo", 45.0)]
    monkeypatch.chdir(tmp_path)
    assert demo_main.main(["--state-dir", "mine", "--seconds", "30"]) == 0
    assert runs[-1] == (tmp_path / "mine", 30.0)  # made absolute; 30 s is allowed


@pytest.mark.parametrize("seconds", ["29.9", "0", "-45"])
def test_fewer_than_30_seconds_are_refused_before_anything_runs(
        runs: list[tuple[Path, float]], capsys: pytest.CaptureFixture[str], seconds: str) -> None:
    with pytest.raises(SystemExit) as done:
        demo_main.main(["--seconds", seconds])
    assert done.value.code == 2 and runs == []
    assert "--seconds must be at least 30" in capsys.readouterr().err


@pytest.mark.parametrize("error", [DemoError("the alert never fired"),
                                   StackError("port 9191 is taken"),
                                   PrometheusError("Prometheus answered 503"),
                                   AlertmanagerConfigError("no receivers")])
def test_a_failure_is_one_line_naming_the_stack_to_stop_only_when_one_was_started(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        error: Exception) -> None:
    def fail(state_dir: Path, seconds: float) -> None:
        raise error
    monkeypatch.setattr(demo_main, "run", fail)
    assert demo_main.main(["--state-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"make demo: error: {error}\n"
    (tmp_path / "run").mkdir()
    assert demo_main.main(["--state-dir", str(tmp_path)]) == 2  # a folder, no pid in it
    assert capsys.readouterr().err == f"make demo: error: {error}\n"
    (tmp_path / "run" / "prometheus.pid").write_text("{}")
    assert demo_main.main(["--state-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"make demo: error: {error} (`trainwatch stack down --state-dir {tmp_path}` stops its "
        "stack)\n")


def test_an_interrupt_exits_130_naming_the_stack_and_other_errors_are_not_swallowed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def interrupted(state_dir: Path, seconds: float) -> None:
        raise KeyboardInterrupt
    monkeypatch.setattr(demo_main, "run", interrupted)
    assert demo_main.main(["--state-dir", str(tmp_path)]) == 130
    assert capsys.readouterr().err == (
        f"make demo: interrupted; `trainwatch stack down --state-dir {tmp_path}` stops its "
        "stack\n")

    def broken(state_dir: Path, seconds: float) -> None:
        raise ValueError("a bug")
    monkeypatch.setattr(demo_main, "run", broken)
    with pytest.raises(ValueError, match="a bug"):
        demo_main.main(["--state-dir", str(tmp_path)])


# This file imported trainwatch.demo.__main__ already: runpy runs it again as __main__, and says so.
@pytest.mark.filterwarnings("ignore:'trainwatch.demo.__main__' found in sys.modules")
def test_python_m_trainwatch_demo_exits_with_mains_code(
        runs: list[tuple[Path, float]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "argv", ["trainwatch.demo", "--state-dir", str(tmp_path)])
    monkeypatch.setattr(sys.modules["trainwatch.demo.run"], "run",
                        lambda state_dir, seconds: None)
    with pytest.raises(SystemExit) as done:
        runpy.run_module("trainwatch.demo", run_name="__main__")
    assert done.value.code == 0


def test_python_m_exporter_is_the_exporters_cli(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import exporter
    monkeypatch.setattr(sys, "argv", ["exporter", "--version"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("exporter", run_name="__main__")
    assert done.value.code == 0
    assert capsys.readouterr().out == f"trainwatch-exporter {exporter.__version__}\n"
    monkeypatch.setattr(sys, "argv", ["exporter", "--no-such-flag"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("exporter", run_name="__main__")
    assert done.value.code == 2


def test_python_m_auto_prints_the_folder_holding_its_sitecustomize(
        capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_module("trial_instrumentation.auto", run_name="__main__")
    printed = capsys.readouterr().out
    folder = Path(printed.strip())
    assert printed.count("\n") == 1 and folder.is_absolute()
    assert (folder / "sitecustomize.py").is_file() and folder.name == "site"
