"""The exporter's exposition writer (exporter.exposition) on its own: what it writes parsed back
with prometheus_client's own parser, property-based over hostile label values, help texts and
values; each family type's header; the series memo reused, bounded and emptied at its bound
(issue 36: the exposition mutation target)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.parser import text_string_to_metric_families

from exporter import exposition
from exporter.exposition import render
from exporter.metrics import MetricSpec

SPEC = MetricSpec("trainwatch_test_bytes", "Bytes of a test.", ("device", "kind"))
COUNTER = MetricSpec("trainwatch_test_reads_total", "Reads of a test.", ("device",), "counter")
BARE = MetricSpec("trainwatch_test_up", "Whether a test is up.")
UNTYPED = MetricSpec("trainwatch_test_thing", "An untyped thing.", ("device",), "untyped")


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    """Each test from an empty memo, as a new exporter starts, and leaves none behind."""
    def clear() -> None:
        exposition._headers.clear()
        exposition._series.clear()
        exposition._kept = 0
    clear()
    yield
    clear()


def parsed(text: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text.decode())}


label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(label_values, label_values)
def test_any_label_value_reads_back_as_itself(device: str, kind: str) -> None:
    family = SPEC.family()
    family.add_metric([device, kind], 1.5)
    assert parsed(render([family])) == {
        "trainwatch_test_bytes": [("trainwatch_test_bytes", {"device": device, "kind": kind}, 1.5)]}


@given(label_values)
def test_a_foreign_familys_label_values_read_back_as_themselves(device: str) -> None:
    family = GaugeMetricFamily("trainwatch_test_other", "Other.", labels=["device"])
    family.add_metric([device], 2.0)
    assert parsed(render([family])) == {
        "trainwatch_test_other": [("trainwatch_test_other", {"device": device}, 2.0)]}


def test_label_values_are_escaped_exactly_as_the_format_says() -> None:
    family = SPEC.family()
    family.add_metric(['a\\b"c\nd', "plain"], 1.0)
    assert render([family]).decode().splitlines()[2] == (
        'trainwatch_test_bytes{device="a\\\\b\\"c\\nd",kind="plain"} 1.0')
    for raw, written in (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("é x", "é x")):
        assert exposition._label_value(raw) == written


@given(st.floats(allow_nan=True, allow_infinity=True)
       | st.integers(min_value=-10**15, max_value=10**15).map(float))
def test_any_value_reads_back_as_itself(value: float) -> None:
    family = BARE.family()
    family.add_metric([], value)
    [(name, labels, back)] = parsed(render([family]))["trainwatch_test_up"]
    assert (name, labels) == ("trainwatch_test_up", {})
    assert (math.isnan(back) and math.isnan(value)) or back == value


@pytest.mark.parametrize(("value", "written"), [
    (1.5, "1.5"), (3, "3.0"), (0.1, "0.1"), (-2.0, "-2.0"), (1e300, "1e+300"),
    (math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN")])
def test_values_are_written_in_the_formats_words(value: float, written: str) -> None:
    assert exposition._value(value) == written
    family = BARE.family()
    family.add_metric([], value)
    assert render([family]).decode().splitlines()[2] == f"trainwatch_test_up {written}"
    other = GaugeMetricFamily("trainwatch_test_other", "Other.", value=value)
    assert render([other]).decode().splitlines()[2] == f"trainwatch_test_other {written}"


def test_each_kind_has_its_type_line_and_a_help_escaped() -> None:
    spec = MetricSpec("trainwatch_test_help", "A \\ backslash\nand a new line.")
    families = [spec.family(), COUNTER.family(), UNTYPED.family()]
    families[0].add_metric([], 1.0)
    families[1].add_metric(["sda"], 7.0)
    families[2].add_metric(["x"], 2.0)
    assert render(families).decode() == (
        "# HELP trainwatch_test_help A \\\\ backslash\\nand a new line.\n"
        "# TYPE trainwatch_test_help gauge\n"
        "trainwatch_test_help 1.0\n"
        "# HELP trainwatch_test_reads_total Reads of a test.\n"
        "# TYPE trainwatch_test_reads_total counter\n"
        'trainwatch_test_reads_total{device="sda"} 7.0\n'
        "# HELP trainwatch_test_thing An untyped thing.\n"
        "# TYPE trainwatch_test_thing untyped\n"
        'trainwatch_test_thing{device="x"} 2.0\n')


def test_foreign_families_counter_gauge_and_untyped_not_others() -> None:
    counter = CounterMetricFamily("trainwatch_test_ops", "Ops.\nTwo lines.", labels=["op"])
    counter.add_metric(["read"], 3.0)
    gauge = GaugeMetricFamily("trainwatch_test_temp", "Temp.", value=40.0)
    assert render([counter, gauge]).decode() == (
        "# HELP trainwatch_test_ops_total Ops.\\nTwo lines.\n"
        "# TYPE trainwatch_test_ops_total counter\n"
        'trainwatch_test_ops_total{op="read"} 3.0\n'
        "# HELP trainwatch_test_temp Temp.\n"
        "# TYPE trainwatch_test_temp gauge\n"
        "trainwatch_test_temp 40.0\n")
    histogram = HistogramMetricFamily("trainwatch_test_h", "H.", buckets=[("+Inf", 1)],
                                      sum_value=1.0)
    with pytest.raises(ValueError, match="trainwatch_test_h: histogram families are not "
                                         "rendered here"):
        render([histogram])


def test_a_row_with_the_wrong_number_of_label_values_is_refused() -> None:
    for labels in (["sda"], ["sda", "x", "y"], []):
        family = SPEC.family()
        family.add_metric(labels, 1.0)
        with pytest.raises(ValueError, match=r"trainwatch_test_bytes: \d label values for "
                                             r"\('device', 'kind'\)"):
            render([family])


def test_a_series_text_is_made_once_and_reused_while_its_value_changes() -> None:
    first = SPEC.family()
    first.add_metric(["sda", "read"], 1.0)
    first.add_metric(("sdb", "read"), 2.0)
    assert render([first]).decode().splitlines()[2:] == [
        'trainwatch_test_bytes{device="sda",kind="read"} 1.0',
        'trainwatch_test_bytes{device="sdb",kind="read"} 2.0']
    assert exposition._kept == 2
    assert exposition._series[SPEC] == {("sda", "read"): 'trainwatch_test_bytes{device="sda",kind="read"} ',
                                        ("sdb", "read"): 'trainwatch_test_bytes{device="sdb",kind="read"} '}
    again = SPEC.family()
    again.add_metric(["sda", "read"], 3.0)  # a list: looked up as the tuple it was kept under
    assert render([again]).decode().splitlines()[2:] == [
        'trainwatch_test_bytes{device="sda",kind="read"} 3.0']
    assert exposition._kept == 2  # nothing made again
    bare = BARE.family()
    bare.add_metric((), 1.0)
    render([bare])
    assert exposition._series[BARE] == {(): "trainwatch_test_up "} and exposition._kept == 3


def test_the_memo_is_emptied_at_its_bound_and_the_output_stays_right(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exposition, "MAX_SERIES_MEMO", 3)
    family = COUNTER.family()
    for i in range(3):
        family.add_metric([f"d{i}"], float(i))
    render([family])
    assert exposition._kept == 3 and len(exposition._series[COUNTER]) == 3
    churn = COUNTER.family()
    churn.add_metric(["d9"], 9.0)
    churn.add_metric(["d0"], 0.5)
    assert render([churn]).decode().splitlines()[2:] == [
        'trainwatch_test_reads_total{device="d9"} 9.0',
        'trainwatch_test_reads_total{device="d0"} 0.5']
    # d9 found it full: emptied, then kept alone; d0 was looked up before, from the old memo.
    assert exposition._kept == 1 and exposition._series == {COUNTER: {("d9",): (
        'trainwatch_test_reads_total{device="d9"} ')}}
    assert exposition.MAX_SERIES_MEMO == 3



def test_a_bound_past_the_small_integers_is_reached_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count of 300 is not the same int object as the bound 300 (only -5..256 are shared):
    the memo is emptied by value, as at the default bound of 20,000."""
    monkeypatch.setattr(exposition, "MAX_SERIES_MEMO", int("300"))
    family = COUNTER.family()
    for i in range(301):
        family.add_metric([f"d{i}"], float(i))
    lines = render([family]).decode().splitlines()
    assert len(lines) == 303 and lines[-1] == 'trainwatch_test_reads_total{device="d300"} 300.0'
    assert exposition._kept == 1 and list(exposition._series[COUNTER]) == [("d300",)]


def test_a_new_process_empties_the_memo_after_exactly_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the module starts (reloaded: a new exporter process), the default bound: 20,000
    distinct series kept, the 20,001st finds it full and empties it."""
    import importlib

    importlib.reload(exposition)
    family = COUNTER.family()
    for i in range(20_000):
        family.add_metric([f"d{i}"], 1.0)
    render([family])
    assert exposition._kept == 20_000 and len(exposition._series[COUNTER]) == 20_000
    more = COUNTER.family()
    more.add_metric(["new"], 2.0)
    assert render([more]).decode().splitlines()[2] == 'trainwatch_test_reads_total{device="new"} 2.0'
    assert exposition._kept == 1 and list(exposition._series[COUNTER]) == [("new",)]


def test_a_foreign_unknown_family_is_written_untyped() -> None:
    unknown = UnknownMetricFamily("trainwatch_test_odd", "Odd.", labels=["k"])
    unknown.add_metric(["v"], 5.0)
    assert unknown.type == "unknown"  # prometheus_client's word; the text format's is untyped
    assert render([unknown]).decode() == (
        "# HELP trainwatch_test_odd Odd.\n"
        "# TYPE trainwatch_test_odd untyped\n"
        'trainwatch_test_odd{k="v"} 5.0\n')
