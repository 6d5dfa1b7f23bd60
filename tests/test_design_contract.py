"""docs/design.md is the contract: every metric, recording rule and alert that trainwatch
produces is listed there, with the type and labels it really has, and everything listed there is
produced. Produced means: a live scrape of the exporter over the fake NVML (every collector on,
NICs with a link speed), a live trial's push to a real Pushgateway (phases, limits and the exit marker included), and the
rendered rules in prometheus/rules/ (the drift test keeps them equal to a fresh render)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import trial_instrumentation as ti
from benchmarks.cpu import spin
from benchmarks.fake_nvml import FakeNvml
from benchmarks.fake_sysfs import nic_speeds
from benchmarks.stack import REPO, Service, http_get
from exporter import metrics
from exporter.collectors import build_registry
from exporter.config import merge
from tests.exporter_server import serving

DESIGN = REPO / "docs" / "design.md"
RULES = REPO / "prometheus" / "rules"
# Labels that identify a series' source, not the metric: the scrape target's and a trial's
# grouping key, which design.md states once for all trial series.
TARGET_LABELS = {"job", "instance"}
GROUPING_KEY = {"experiment", "trial", "rank"}
NO_LABELS = ("", "-", "–", "—")  # how a table cell says "none"
# Pushed only by a profiler trace that captured CUDA: a CPU-only test run cannot produce them.
CUDA_ONLY = {ti.names.PROFILE_KERNELS_PER_STEP, ti.names.PROFILE_KERNEL_SECONDS_MEAN}
_ROW = re.compile(r"^\| `([^`]+)` \|(.*)\|\s*$")
# A metric name in an expression: not part of a record name (``level:metric:ops``) nor a quoted
# label value (``job="trainwatch_trial"``).
_METRIC_IN_EXPR = re.compile(r'(?<![\w:"])trainwatch_\w+(?![\w:"])')


@dataclass(frozen=True)
class Documented:
    kind: str  # gauge, counter, histogram, untyped; "" for records and alerts
    labels: frozenset[str]


def documented(section: str) -> dict[str, Documented]:
    """The rows of design.md's table under the heading that starts with ``### {section}``."""
    text = DESIGN.read_text()
    match = re.search(rf"^### {re.escape(section)}.*?(?=^##)", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/design.md has no section '### {section}'"
    rows: dict[str, Documented] = {}
    for line in match.group(0).splitlines():
        row = _ROW.match(line)
        if row is None:
            continue
        name, cells = row.group(1), [c.strip() for c in row.group(2).split("|")]
        assert name not in rows, f"docs/design.md lists {name} twice"
        if section in ("Exporter", "Trial"):  # metric | type | unit | labels | meaning
            labels = frozenset(x.strip() for x in cells[2].split(",")
                               if x.strip() not in NO_LABELS)
            rows[name] = Documented(cells[0], labels)
        else:
            rows[name] = Documented("", frozenset())
    assert rows, f"docs/design.md's section {section} lists nothing"
    return rows


def emitted(exposition: str, ignore: set[str]) -> dict[str, Documented]:
    """``trainwatch_*`` families in an exposition, named as PromQL selects them (a counter with
    ``_total``, a histogram by its base name), with their labels less ``ignore`` and ``le``."""
    found: dict[str, Documented] = {}
    for family in text_string_to_metric_families(exposition):
        if not family.name.startswith("trainwatch_"):
            continue
        name = family.name
        if family.type == "counter" and not name.endswith("_total"):
            name += "_total"
        labels = {key for s in family.samples for key in s.labels} - ignore - {"le"}
        found[name] = Documented("untyped" if family.type == "unknown" else family.type,
                                 frozenset(labels))
    return found


@pytest.fixture(scope="module")
def exporter_metrics() -> dict[str, Documented]:
    """Two scrapes of the real exporter's HTTP server, every collector on, over two fake GPUs
    (the second scrape: GPM rates need a previous sample)."""
    nvml = FakeNvml.with_gpus(2)
    with nic_speeds():
        registry = build_registry(merge(file={}, flags={"collector.gpu_process": True}), nvml)
        with serving(registry) as port:
            first = http_get(f"http://127.0.0.1:{port}/metrics")
            nvml.advance(1.0)
            second = http_get(f"http://127.0.0.1:{port}/metrics")
    assert first[0] == second[0] == 200
    return {**emitted(first[1].decode(), set()), **emitted(second[1].decode(), set())}


@pytest.fixture(scope="module")
def trial_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Documented]]:
    """What reached a real Pushgateway from a trial that timed every standard phase and
    wait_for_ranks, recorded a profiler trace, measured both limits and ended with an exception
    (its final push, with the exit marker, stays in the group)."""
    from benchmarks.stack import start_pushgateway

    workdir = tmp_path_factory.mktemp("contract")
    with start_pushgateway(workdir) as pgw, pytest.MonkeyPatch.context() as env:
        env.setenv(ti.names.ENV_PROFILE_DIR, str(workdir / "traces"))
        run_a_failing_trial(pgw)
        status, body = http_get(pgw.url + "/metrics")
        assert status == 200
        yield emitted(body.decode(), TARGET_LABELS | GROUPING_KEY)


def run_a_failing_trial(pgw: Service) -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError), ti.Trial(experiment="contract", trial="t", rank=0,
                                               pushgateway=pgw.url, push_interval=60,
                                               gpu_uuids="GPU-00000000-0000-0000-0000-000000000000") as trial:
        trial.measure_loader_limit(range(1000), seconds=0.02, samples=1)
        trial.measure_step_limit(lambda batch: spin(0.001), 0, seconds=0.02, samples=1)
        trial.set_flops_per_sample(6e9, "bf16")
        trial.profile(1)  # the profiler trace's gauges: warm-up 2 steps, then 1 recorded
        for _ in trial.loader(range(4), samples=2):
            torch.ones(2, 2).sum()  # an operator for the trace's top operators
            for phase in (*ti.STANDARD_PHASES[1:], ti.names.WAIT_FOR_RANKS):
                with trial.phase(phase):
                    pass
        raise RuntimeError("the trial fails, so its group keeps its final push")


def rules() -> list[dict[str, object]]:
    return [rule for path in sorted(RULES.glob("*.yml"))
            for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def differences(doc: dict[str, Documented], real: dict[str, Documented]) -> list[str]:
    problems = [f"{name} is produced but not in docs/design.md" for name in sorted(real.keys()
                                                                                   - doc.keys())]
    problems += [f"{name} is in docs/design.md but produced nowhere" for name in sorted(doc.keys()
                                                                                        - real.keys())]
    for name in sorted(doc.keys() & real.keys()):
        if doc[name] != real[name]:
            problems.append(f"{name}: docs/design.md says {doc[name].kind} "
                            f"{{{', '.join(sorted(doc[name].labels))}}}, the code produces "
                            f"{real[name].kind} {{{', '.join(sorted(real[name].labels))}}}")
    return problems


def test_every_exporter_metric_is_documented_with_its_type_and_labels(
        exporter_metrics: dict[str, Documented]) -> None:
    assert differences(documented("Exporter"), exporter_metrics) == []


def test_every_declared_exporter_metric_is_documented_even_where_this_machine_lacks_it() -> None:
    """The scrape above shows what the fake NVML has; exporter/metrics.py declares them all."""
    declared = {spec.name: Documented(spec.kind, frozenset(spec.labels)) for spec in metrics.ALL}
    assert differences(documented("Exporter"), declared) == []


def test_every_pushed_trial_metric_is_documented_with_its_type_and_labels(
        trial_metrics: dict[str, Documented]) -> None:
    doc = {name: row for name, row in documented("Trial").items()
           if name in trial_metrics or name not in CUDA_ONLY}
    assert differences(doc, trial_metrics) == []


def test_every_recording_rule_is_documented_and_every_documented_one_is_rendered() -> None:
    recorded = {str(rule["record"]): Documented("", frozenset()) for rule in rules()
                if "record" in rule}
    assert differences(documented("Recording rules"), recorded) == []


def test_every_alert_is_documented_and_every_documented_one_is_rendered() -> None:
    alerts = {str(rule["alert"]): Documented("", frozenset()) for rule in rules()
              if "alert" in rule}
    assert differences(documented("Alerts"), alerts) == []


def test_the_rules_read_only_documented_metrics() -> None:
    metrics = documented("Exporter").keys() | documented("Trial").keys()
    read = {re.sub(r"_(bucket|sum|count)$", "", name) for rule in rules()
            for name in _METRIC_IN_EXPR.findall(str(rule["expr"]))}
    read -= {name for name in read if name in metrics or f"{name}_count" in metrics}
    assert read == set(), f"rules read metrics docs/design.md does not list: {sorted(read)}"
