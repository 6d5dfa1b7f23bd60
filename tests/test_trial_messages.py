"""What a trial tells its user: where it pushes (or why it does not), unknown TRAINWATCH_*
variables, a Pushgateway URL with the /metrics path, durations with units, and a summary at
exit when no push ever succeeded. Against a real Pushgateway, and a real example script."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service
from tests.trial_support import closed_port_url
from trial_instrumentation import names
from trial_instrumentation.config import parse_duration

LOGGER = "trial_instrumentation"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("TRAINWATCH_"):
            monkeypatch.delenv(var)


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_start_line_names_where_the_trial_pushes(pushgateway: Service,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with ti.Trial(experiment="e", trial="t", pushgateway=pushgateway.url, push_interval="1m"):
        pass
    assert messages(caplog, logging.INFO) == [
        (f"trainwatch: pushing trial e/t rank 0 to {pushgateway.url} every 60s "
        "(job trainwatch_trial)")]
    assert messages(caplog, logging.WARNING) == []  # it pushed: no exit summary


def test_start_line_says_why_a_trial_is_disabled(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with ti.Trial(experiment="e", trial="t") as trial:
        assert not trial.enabled
    [line] = messages(caplog, logging.INFO)
    assert line.startswith("trainwatch: disabled, timings are not recorded: no Pushgateway "
                           "configured (set TRAINWATCH_PUSHGATEWAY or pass pushgateway=)")


def test_pull_mode_start_line_names_the_port(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    with ti.Trial(experiment="e", trial="t", pull_port=0) as trial:
        port = trial.pull_port
    assert messages(caplog, logging.INFO) == [
        f"trainwatch: serving trial e/t rank 0 on port {port} at /metrics"]


def test_a_misspelt_variable_is_named_with_the_closest_known_one(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TRAINWATCH_PUSHGATWAY", "http://127.0.0.1:9091")
    monkeypatch.setenv("TRAINWATCH_EXPERIMNET", "e")
    monkeypatch.setenv("TRAINWATCH_PROMETHEUS", "http://127.0.0.1:9090")  # the CLI's: known
    monkeypatch.setenv("TRAINWATCH_ZZZ", "1")
    trial = ti.Trial(trial="t")
    assert not trial.enabled
    assert messages(caplog, logging.WARNING) == [
        ("trainwatch: unknown environment variable TRAINWATCH_EXPERIMNET, ignored (did you mean "
        "TRAINWATCH_EXPERIMENT?)"),
        ("trainwatch: unknown environment variable TRAINWATCH_PUSHGATWAY, ignored (did you mean "
        "TRAINWATCH_PUSHGATEWAY?)"),
        "trainwatch: unknown environment variable TRAINWATCH_ZZZ, ignored (known: "
        + ", ".join(names.TRIAL_ENV) + ")"]


def test_the_removed_delete_on_exit_variable_says_it_does_nothing(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(names.ENV_DELETE_ON_EXIT, "1")
    ti.Trial(experiment="e", trial="t")
    assert messages(caplog, logging.WARNING) == [(
        "trainwatch: TRAINWATCH_DELETE_ON_EXIT is ignored: the trial never deletes its "
        "Pushgateway group (so its final push is scraped and no process deletes another's live "
        "group); `trainwatch gc` retires ended groups")]


def test_every_trainwatch_variable_the_code_reads_is_known() -> None:
    # The operator CLI, the stack and the exporter read some; a trial must not call them typos.
    used = set()
    for package in ("trial_instrumentation", "trainwatch", "exporter"):
        for path in (REPO / package).rglob("*.py"):
            used |= set(re.findall(r"\bTRAINWATCH_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    unknown = used - set(names.TRIAL_ENV) - set(names.OTHER_ENV) - set(names.REMOVED_ENV)
    assert unknown == set(), f"add {sorted(unknown)} to trial_instrumentation/names.py OTHER_ENV"


def test_a_url_with_the_metrics_path_gets_a_hint(caplog: pytest.LogCaptureFixture) -> None:
    ti.Trial(experiment="e", trial="t", pushgateway="http://127.0.0.1:9091/metrics")
    [hint] = messages(caplog, logging.WARNING)
    assert "argument pushgateway=: the Pushgateway URL http://127.0.0.1:9091/metrics has the " \
        "path /metrics" in hint and "will be answered 404" in hint
    assert hint.endswith("Give the Pushgateway's base URL, e.g. http://127.0.0.1:9091")


@pytest.mark.parametrize(("value", "seconds"), [
    (10, 10.0), ("10", 10.0), ("2.5", 2.5), ("10s", 10.0), ("1m", 60.0), ("1m30s", 90.0),
    ("500ms", 0.5), ("1h", 3600.0)])
def test_durations_take_seconds_or_units_everywhere(monkeypatch: pytest.MonkeyPatch,
                                                    value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds  # type: ignore[arg-type]
    trial = ti.Trial(experiment="e", trial="t", pushgateway="http://127.0.0.1:9",
                     push_interval=value, exit_timeout=value)  # type: ignore[arg-type]
    assert (trial.config.push_interval, trial.config.exit_timeout) == (seconds, seconds)
    monkeypatch.setenv(names.ENV_PUSH_INTERVAL, str(value))
    assert ti.Trial(experiment="e", trial="t").config.push_interval == seconds


@pytest.mark.parametrize("bad", ["10 parsecs", "s", "1m-5s", "-1s", "0s"])
def test_a_bad_duration_names_the_variable(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv(names.ENV_PUSH_INTERVAL, bad)
    with pytest.raises(ValueError, match=f"environment variable {names.ENV_PUSH_INTERVAL}: "
                                         "invalid value"):
        ti.Trial(experiment="e", trial="t")


def test_exit_summary_when_no_push_ever_succeeded(caplog: pytest.LogCaptureFixture) -> None:
    down = closed_port_url()
    with ti.Trial(experiment="e", trial="t", pushgateway=down, push_interval="0.1s",
                  exit_timeout="5s") as trial:
        for _ in trial.loader(range(3)):
            pass
    [summary] = [m for m in messages(caplog, logging.WARNING) if "succeeded" in m]
    assert re.fullmatch(rf"trainwatch: no push to {down} succeeded in this run \(\d+ failed; "
                        r"last error: .*Connection refused.*\): none of this trial's timings "
                        r"reached the Pushgateway", summary), summary


def test_the_example_prints_its_start_line_and_the_typo(pushgateway: Service) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRAINWATCH_PUSHGATWAY": pushgateway.url,
           "TRAINWATCH_PUSH_INTERVAL": "10s"}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "pytorch_loop.py"),
                           "--steps", "3", "--workers", "0", "--experiment", "e", "--trial", "t"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "unknown environment variable TRAINWATCH_PUSHGATWAY, ignored (did you mean " \
        "TRAINWATCH_PUSHGATEWAY?)" in done.stderr
    assert "trainwatch: disabled, timings are not recorded" in done.stderr
