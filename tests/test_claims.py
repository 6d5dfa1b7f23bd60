"""What the docs and the alerts claim, checked against what the code and thresholds do: the
runbooks' durations and thresholds, TrainwatchCollectorFailing's word on the exporter's log,
the example commands' interpreter, and apt calls that wait for the dpkg lock."""

from __future__ import annotations

import importlib
import logging
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from benchmarks.stack import REPO
from exporter.collector import CollectorError, ScrapeCollector
from prometheus import generate_rules

SETTINGS = generate_rules.load_settings()
RUNBOOKS = (REPO / "docs" / "runbooks.md").read_text()


def sections() -> Iterator[tuple[str, str]]:
    """(alert name, its runbook section's Meaning paragraph)."""
    for chunk in RUNBOOKS.split("\n## ")[1:]:
        name, _, body = chunk.partition("\n")
        if name in SETTINGS.alerts:
            meaning = body.split("**Meaning.**", 1)[1].split("\n\n", 1)[0]
            yield name, " ".join(meaning.split())


def minutes(duration: str) -> float:
    units = {"s": 1 / 60, "m": 1, "h": 60}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", duration))


@pytest.mark.parametrize(("alert", "meaning"), list(sections()), ids=lambda v: v[:30])
def test_runbook_meaning_says_the_deployed_for_and_threshold(alert: str, meaning: str) -> None:
    setting = SETTINGS.alert(alert)
    # "for N minutes" is the alert's `for` ("for more than N minutes" is a threshold).
    for said in re.findall(r"(?<!more than )\bfor (\d+) minutes?\b", meaning):
        assert float(said) == minutes(setting.for_), (alert, said, setting.for_)
    threshold = setting.threshold
    if threshold is not None and 0 < threshold < 1:
        assert f"{threshold * 100:g}%" in meaning, (alert, threshold, meaning)
    elif threshold is not None and threshold >= 60:
        assert f"{threshold / 60:g} minutes" in meaning, (alert, threshold, meaning)


class Broken:
    def __init__(self) -> None:
        self.message = "NVML: driver/library version mismatch"

    def collect(self) -> Iterator[object]:
        if self.message:
            raise CollectorError(self.message)
        yield from ()


def test_collector_failing_says_how_often_the_exporter_logs(
        caplog: pytest.LogCaptureFixture) -> None:
    rules = {r["alert"]: r for g in yaml.safe_load(
        (REPO / "prometheus" / "rules" / "exporter.yml").read_text())["groups"]
        for r in g["rules"] if "alert" in r}
    description = rules["TrainwatchCollectorFailing"]["annotations"]["description"]
    assert "logs the error when it starts or changes, at most one warning a minute per " \
        "collector (the others at debug, counted in " \
        "trainwatch_scrape_collector_warnings_suppressed_total), and a line when the collector " \
        "recovers" in " ".join(description.split())
    caplog.set_level(logging.DEBUG, "exporter")
    broken = Broken()
    registry = CollectorRegistry()
    now = [0.0]
    scrape = ScrapeCollector({"gpu": broken}, "test", clock=lambda: now[0])  # type: ignore[dict-item]
    registry.register(scrape)
    for _ in range(5):
        assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                         {"collector": "gpu"}) == 0
    broken.message = "NVML: unknown error"  # changed within the minute: debug, counted
    registry.get_sample_value("trainwatch_scrape_collector_success", {"collector": "gpu"})
    assert registry.get_sample_value("trainwatch_scrape_collector_warnings_suppressed_total",
                                     {"collector": "gpu"}) == 1
    now[0] = 61.0
    broken.message = "NVML: GPU is lost"  # a new error a minute on: a warning again
    for _ in range(3):
        registry.get_sample_value("trainwatch_scrape_collector_success", {"collector": "gpu"})
    broken.message = ""
    assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                     {"collector": "gpu"}) == 1
    by_level = {level: [r.getMessage() for r in caplog.records if r.levelno == level]
                for level in (logging.DEBUG, logging.INFO, logging.WARNING)}
    assert by_level[logging.WARNING] == [
        "collector gpu failed: NVML: driver/library version mismatch",
        "collector gpu failed: NVML: GPU is lost"]
    assert len(by_level[logging.DEBUG]) == 8  # 7 repeats (each read scrapes) and the change
    assert by_level[logging.INFO] == ["collector gpu recovered"]


COMMAND_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                *sorted((REPO / "examples").glob("*.py"))]


def test_example_commands_name_the_venvs_interpreter() -> None:
    # A system python has no torch: `python examples/x.py` fails with No module named 'torch'.
    runs = []
    for path in COMMAND_DOCS:
        for line in path.read_text().splitlines():
            for match in re.finditer(r"(\S*?)(python3?|torchrun)\s[^`]*?examples/\w+\.py", line):
                runs.append((path.name, match.group(1).lstrip("`"), match.group(0)))
    assert len(runs) >= 4, runs
    assert [r for r in runs if r[1] != ".venv/bin/"] == []


def test_every_apt_call_waits_for_the_dpkg_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^APT := .*apt-get -o DPkg::Lock::Timeout=\d+$", makefile, re.MULTILINE)
    for path in (REPO / "Makefile", REPO / ".ci" / "run"):
        for line in path.read_text().splitlines():
            if re.search(r"\bapt-get\b", line) and not line.lstrip().startswith("#"):
                assert "-o DPkg::Lock::Timeout=" in line, (path.name, line)


def first_firing(alert: str) -> float:
    """Seconds after the first scrape at which trial_first_minutes.yml pins ``alert`` firing."""
    doc = yaml.safe_load((REPO / "prometheus" / "tests" / "trial_first_minutes.yml").read_text())
    times = [minutes(case["eval_time"]) * 60 for test in doc["tests"]
             for case in test.get("alert_rule_test", [])
             if case["alertname"] == alert and case.get("exp_alerts")]
    return min(times)


def seconds(text: str) -> float:
    return minutes(text) * 60


def test_runbook_says_when_an_alert_fires_counted_as_the_pipeline_adds_up() -> None:
    from trial_instrumentation.config import resolve

    prometheus = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())["global"]
    push = resolve(env={}).push_interval  # the first push, after one interval
    scrape, evaluation = seconds(prometheus["scrape_interval"]), \
        seconds(prometheus["evaluation_interval"])
    claims = re.search(r"TrainwatchDataloaderBound or TrainwatchHostToDeviceBound (\S+) after "
                       r"Prometheus's first scrape of it \(`for: 2m`\) and "
                       r"TrainwatchGPUUnderutilized (\S+) after it .* at most about (\S+) and "
                       r"(\S+) with the defaults", " ".join(RUNBOOKS.split()))
    assert claims, "docs/runbooks.md: the 'When they fire and end' paragraph changed"
    loader, gpu, loader_total, gpu_total = (seconds(g) for g in claims.groups())
    assert loader == first_firing("TrainwatchDataloaderBound")
    assert gpu == first_firing("TrainwatchGPUUnderutilized")
    assert loader_total == loader + push + scrape + evaluation
    assert gpu_total == gpu + push + scrape + evaluation


def test_readme_says_what_the_demo_renders() -> None:
    # The module (trainwatch.demo's `run` attribute is the function of that name).
    demo = importlib.import_module("trainwatch.demo.run")
    readme = " ".join((REPO / "README.md").read_text().split())
    deployed = SETTINGS.alert("TrainwatchDataloaderBound").for_
    assert (f"rendered with a {demo.RATE_WINDOW[:-1]} s rate window and a {demo.FOR[:-1]} s "
            f"`for` instead of the deployed {SETTINGS.rate_window} window and {deployed} `for`, "
            f"scraped every {demo.SCRAPE_INTERVAL[:-1]} s") in readme


def make_dry_run(*targets: str, venv_run: str) -> str:
    done = subprocess.run(["make", "-n", "-B", f"VENV_RUN={venv_run}", *targets], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_make_run_stop_status_install_the_light_venv_and_never_torch(tmp_path: Path) -> None:
    # -B: every recipe as on a fresh clone, printed, none run.
    light = str(tmp_path / "run-venv")
    for target in ("run", "stop", "status"):
        commands = make_dry_run(target, venv_run=light)
        installs = [line for line in commands.splitlines() if "pip install" in line]
        assert installs == [f"{light}/bin/python -m pip install --progress-bar on -e ."], \
            (target, installs)
        assert "torch==" not in commands and "-e '.[" not in commands
        assert ".venv/" not in commands and f"{light}/bin/python -m pip install -q" not in commands
        assert f"{light}/bin/trainwatch stack" in commands
    # make test and make demo keep the full development venv, torch and the extras in it.
    full = make_dry_run("demo", venv_run=light)
    assert "pip install -q torch==" in full and "-e '.[torch,test,dev,report]'" in full
    assert light not in full


def test_readme_first_commands_activate_the_venv_make_run_builds() -> None:
    makefile = (REPO / "Makefile").read_text()
    venv_run = re.search(r"^VENV_RUN \?= (\S+)$", makefile, re.MULTILINE)
    assert venv_run and venv_run[1] != ".venv"
    top = (REPO / "README.md").read_text().split("```")[1]
    assert f"\nsource {venv_run[1]}/bin/activate " in top
    assert "source .venv/bin/activate" not in top


def test_readme_says_when_an_alert_can_first_fire_with_the_shipped_windows() -> None:
    from trial_instrumentation.config import resolve

    prometheus = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())["global"]
    route = yaml.safe_load((REPO / "prometheus" / "alertmanager" / "alertmanager.yml"
                            ).read_text())["route"]
    alert = SETTINGS.alert("TrainwatchDataloaderBound")
    top = " ".join((REPO / "README.md").read_text().split("\n## ")[0].split())
    claim = re.search(r"With the shipped windows \(a (\S+) rate window, `for: (\S+)`\) a trial "
                      r"that is loader-bound from its first step fires TrainwatchDataloaderBound "
                      r"(\S+) after Prometheus's first scrape of it, at most about (\S+) after "
                      r"the trial starts, and Alertmanager delivers its notification after its "
                      r"`group_wait` of (\S+), about (\S+) in", top)
    assert claim, "README: the 'When an alert can first fire' paragraph changed"
    window, for_, fires, latest, group_wait, notified = claim.groups()
    assert (window, for_) == (SETTINGS.rate_window, alert.for_)
    assert seconds(fires) == first_firing("TrainwatchDataloaderBound")
    assert seconds(latest) == seconds(fires) + resolve(env={}).push_interval + \
        seconds(prometheus["scrape_interval"]) + seconds(prometheus["evaluation_interval"])
    assert seconds(group_wait) == seconds(route["group_wait"])
    assert seconds(notified) == seconds(latest) + seconds(group_wait)
    # The short windows for a short trial are on the first screen, as `make run` takes them.
    assert "`make run ARGS='--for 20s --rate-window 30s'`" in top
