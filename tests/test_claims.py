"""What the docs and the alerts claim, checked against what the code and thresholds do: the
runbooks' durations and thresholds, TrainwatchCollectorFailing's word on the exporter's log,
the example commands' interpreter, and apt calls that wait for the dpkg lock."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

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
    assert "logs the error once, when it starts or changes (on every scrape at " \
        "--log.level=debug), and a line when the collector recovers" in description
    caplog.set_level(logging.DEBUG, "exporter")
    broken = Broken()
    registry = CollectorRegistry()
    registry.register(ScrapeCollector({"gpu": broken}, "test"))  # type: ignore[dict-item]
    for _ in range(5):
        assert registry.get_sample_value("trainwatch_scrape_collector_success",
                                         {"collector": "gpu"}) == 0
    broken.message = "NVML: GPU is lost"  # a new error: logged once more
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
    assert len(by_level[logging.DEBUG]) == 6  # the repeats, at debug only
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
