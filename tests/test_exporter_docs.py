"""The exporter's text output and the README's metric list agree with the code (the docstring
examples run in test_doctests.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.fake_nvml import FakeNvml
from benchmarks.fake_sysfs import nic_speeds
from exporter import exposition, metrics
from exporter.collectors import build_registry
from exporter.config import merge
from exporter.exposition import render
from exporter.family import Family

README = Path(__file__).resolve().parent.parent / "README.md"


def parsed(text: bytes) -> set[tuple[str, str, tuple[tuple[str, str], ...], float]]:
    return {(f.type, s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(text.decode()) for s in f.samples}


def test_render_says_what_prometheus_client_says() -> None:
    registry = build_registry(merge(file={}, flags={"collector.gpu_process": True}),
                              FakeNvml.with_gpus(3))
    families = list(registry.collect())
    ours, reference = parsed(render(families)), parsed(generate_latest(_Fixed(families)))
    assert ours == reference
    assert len(ours) > 100


def test_render_escapes_label_values_and_special_floats() -> None:
    family = metrics.GPU_INFO.family()
    family.add_metric(["0", "GPU-x", 'A "quoted"\\name\nline2', "b", "d"], 1.0)
    gauge = metrics.GPU_TEMPERATURE.family()
    for index, value in enumerate((math.inf, -math.inf, math.nan)):
        gauge.add_metric([str(index), "GPU-x"], value)
    text = render([family, gauge])
    assert b'name="A \\"quoted\\"\\\\name\\nline2"' in text
    assert text.endswith(b'} +Inf\n' + _line(b"1", b"-Inf") + _line(b"2", b"NaN"))
    (info,) = [s for f in text_string_to_metric_families(text.decode()) for s in f.samples
               if s.name == "trainwatch_gpu_info"]
    assert info.labels["name"] == 'A "quoted"\\name\nline2'


def test_each_series_text_follows_its_labels_and_the_memo_stays_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A series' text up to its value is kept between scrapes: a GPU replaced under the same
    index (a new uuid) gets its own, escaped as any label value; a churning label empties
    the memo once it is full instead of growing it."""
    monkeypatch.setattr(exposition, "MAX_SERIES_MEMO", 4)
    monkeypatch.setattr(exposition, "_series", {})
    monkeypatch.setattr(exposition, "_kept", 0)

    def scrape(uuid: str, value: float) -> bytes:
        family = Family(metrics.GPU_TEMPERATURE)
        family.add_metric(("0", uuid), value)
        return render([family]).splitlines()[-1]

    assert scrape("GPU-a", 40.0) == _line(b"0", b"40.0").replace(b"GPU-x", b"GPU-a").strip()
    assert scrape("GPU-b", 41.0) == _line(b"0", b"41.0").replace(b"GPU-x", b"GPU-b").strip()
    assert scrape("GPU-a", math.nan) == _line(b"0", b"NaN").replace(b"GPU-x", b"GPU-a").strip()
    assert scrape('A "q"\\\n', 1.0).endswith(b'uuid="A \\"q\\"\\\\\\n"} 1.0')
    for n in range(20):
        assert scrape(f"GPU-{n}", n).endswith(f'uuid="GPU-{n}"}} {float(n)!r}'.encode())
        assert sum(map(len, exposition._series.values())) <= 4


def _line(gpu: bytes, value: bytes) -> bytes:
    return b'trainwatch_gpu_temperature_celsius{gpu="' + gpu + b'",uuid="GPU-x"} ' + value + b"\n"


class _Fixed:
    def __init__(self, families: list) -> None:  # type: ignore[type-arg]
        self.families = families

    def collect(self) -> list:  # type: ignore[type-arg]
        return self.families


def readme_metrics() -> dict[str, tuple[str, str]]:
    """``name -> (type, labels)`` from the table in the README's ``## Metrics`` section."""
    text = README.read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(trainwatch_\w+)` \| (\w+) \| ([^|]*) \|", section, re.MULTILINE)
    return {name: (kind, labels.strip()) for name, kind, labels in rows}


def test_readme_lists_every_metric_with_its_type_and_labels() -> None:
    documented = readme_metrics()
    in_code = {spec.name: (spec.kind, ", ".join(spec.labels)) for spec in metrics.ALL}
    assert documented == in_code


def test_every_spec_is_served() -> None:
    with nic_speeds():
        registry = build_registry(merge(file={}, flags={"collector.gpu_process": True}),
                                  FakeNvml.with_gpus(1))
        served = {f.name for f in registry.collect()}
    expected = {spec.name.removesuffix("_total") for spec in metrics.ALL}
    assert served == expected


def test_readme_names_every_clock_event_reason() -> None:
    from exporter.gpu import CLOCK_EVENT_REASONS

    section = README.read_text().split("\n## Metrics\n", 1)[1]
    listed = re.search(r"one series per reason NVML knows:(.*?)\.", section, re.DOTALL)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == [r for _, r in CLOCK_EVENT_REASONS]
