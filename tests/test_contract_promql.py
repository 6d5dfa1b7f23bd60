"""The PromQL building blocks (trainwatch.contract.promql) on their own: label values escaped
so that PromQL reads back exactly the value (property-based, any text), selectors and matchers,
grouping clauses, numbers, and records inlined into the expression over the raw series (issue
36: the promql mutation target)."""

from __future__ import annotations

import codecs
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwatch.contract.promql import (
    BY_TRIAL,
    escape,
    inline,
    matchers,
    number,
    on,
    rank_key,
    rank_order,
    rank_sort_key,
    select,
)
from trainwatch.contract.promql import by as by_


def read_back(literal: str) -> str:
    """A PromQL double-quoted string's inside as PromQL reads it (Go's escapes: \\\\, \\", \\u,
    \\U)."""
    return codecs.decode(literal.encode("ascii", "backslashreplace").decode("ascii"),
                         "unicode_escape")


@given(st.text())
def test_an_escaped_value_reads_back_as_itself_and_is_one_printable_literal(value: str) -> None:
    written = escape(value)
    assert written.isprintable()
    assert read_back(written) == value
    # Every quote is escaped: the literal cannot end early.
    assert re.search(r'(?<!\\)(\\\\)*"', written) is None


@pytest.mark.parametrize(("value", "written"), [
    ("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("\\\"", '\\\\\\"'),
    ("a\nb", "a\\u000ab"), ("\r", "\\u000d"), ("\t", "\\u0009"), ("\u2028", "\\u2028"),
    ("é ü", "é ü"), ("\U0001f600", "\U0001f600"), ("\U000e0001", "\\U000e0001"),
    ("\x7f", "\\u007f"), ('"\n', '\\"\\u000a'),
    # The last of the Basic Multilingual Plane as \u, the first past it as \U.
    ("\uffff", "\\uffff"), ("\ufffe", "\\ufffe"), ("\U000e0000", "\\U000e0000"),
    ("\U0010ffff", "\\U0010ffff")])
def test_values_are_escaped_as_promql_writes_them(value: str, written: str) -> None:
    assert escape(value) == written


def test_a_selector_keeps_written_matchers_then_escaped_labels_skipping_empty_ones() -> None:
    assert select("up") == "up"
    assert select("up", "", trial=None) == "up"
    assert select("up", 'job="x"', "", 'rank=~"1|2"', trial='a"b', rank=None, node="") == (
        'up{job="x", rank=~"1|2", trial="a\\"b", node=""}')
    assert matchers(experiment="e", trial="t") == 'experiment="e", trial="t"'
    assert matchers() == ""


def test_grouping_clauses_and_the_rank_key() -> None:
    assert by_("a", "b") == "by (a, b)" and on("a") == "on (a)" and by_() == "by ()"
    assert BY_TRIAL == "by (experiment, trial, rank)"
    assert rank_key({"experiment": "e", "trial": "t", "rank": "3", "job": "x"}) == ("e", "t", "3")
    assert rank_key({"rank": "3"}) == ("", "", "3")


@pytest.mark.parametrize(("value", "written"), [
    (0.3, "0.3"), (300.0, "300"), (1e-5, "1e-05"), (0.0, "0"), (1.25, "1.25"), (2, "2")])
def test_a_number_is_written_as_promql_would(value: float, written: str) -> None:
    assert number(value) == written


def test_records_read_bare_are_inlined_all_the_way_down() -> None:
    records = {"a:b:rate5m": "sum(rate(a[5m]))", "c:d": "a:b:rate5m * 2"}
    assert inline("c:d + 1", records) == "((sum(rate(a[5m]))) * 2) + 1"
    # A reference with matchers, a function of the same name, a longer name: left as written.
    assert inline('a:b:rate5m{x="1"}', records) == 'a:b:rate5m{x="1"}'
    assert inline("c:d:more + xc:d", records) == "c:d:more + xc:d"
    assert inline("rate(c:d[5m])", {"rate": "bad", "c:d": "e"}) == "rate((e)[5m])"
    assert inline("x", {}) == "x"


def test_a_record_that_reads_itself_stays_a_reference_at_any_depth() -> None:
    records = {"x:y": "f or x:y offset 1m", "z:w": "x:y + z:w"}
    assert inline("x:y", records) == "(f or x:y offset 1m)"
    assert inline("x:y", records, within=("x:y",)) == "x:y"
    assert inline("z:w", records) == "((f or x:y offset 1m) + z:w)"


def test_a_gpus_identity_is_its_scrape_target_and_the_labels_every_gpu_metric_carries() -> None:
    from exporter import metrics
    from trainwatch.contract.promql import GPU_LABELS
    specs = [s for s in vars(metrics).values() if isinstance(s, metrics.MetricSpec)
             and s.name.startswith("trainwatch_gpu_") and s.labels[:1] == ("gpu",)]  # per GPU
    common = set.intersection(*(set(s.labels) for s in specs))
    assert len(specs) > 20 and GPU_LABELS[0] == "instance"  # the target label Prometheus adds
    assert GPU_LABELS[1:] == tuple(label for label in specs[0].labels if label in common)
    assert set(GPU_LABELS[1:]) == common


def test_ranks_go_by_number_and_a_rank_that_is_no_number_after_every_number() -> None:
    ranks = ["x", "10", "1073741825", "2", "007", "0", "²", "99999999999999999999", "a", "٣"]
    assert sorted(ranks, key=rank_order) == [
        "0", "2", "007", "10", "1073741825", "99999999999999999999", "a", "x", "²", "٣"]
    assert rank_order("x") > rank_order("9" * 5000)  # no int() of 5,000 digits either
    assert rank_order("8") < rank_order("10") < rank_order("a") < rank_order("b")
    assert rank_order("7") == rank_order("07")


def test_a_listing_orders_by_experiment_then_trial_then_rank_by_number() -> None:
    labels = [{"experiment": "e", "trial": "t", "rank": "10"},
              {"experiment": "e", "trial": "t", "rank": "2"},
              {"experiment": "e", "trial": "s", "rank": "11"},
              {"experiment": "d", "trial": "z", "rank": "3"},
              {"experiment": "e", "trial": "t"}]  # no rank label: "" sorts as no number
    assert [(x["experiment"], x["trial"], x.get("rank")) for x in
            sorted(labels, key=rank_sort_key)] == [
        ("d", "z", "3"), ("e", "s", "11"), ("e", "t", "2"), ("e", "t", "10"), ("e", "t", None)]
