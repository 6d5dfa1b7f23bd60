"""The cause tables' evaluator (trainwatch.contract.causes) on its own: arithmetic as PromQL
does it, predicates on unknown figures or levels, the first cause that holds, which causes
cannot overlap (what the rule generator leans on), and the deployed thresholds read back
(issue 36: the causes mutation target). tests/test_cause_rules.py checks the shipped tables
against promtool and diagnose."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.frozen import assert_frozen
from trainwatch.contract import causes as c
from trainwatch.contract.causes import (
    Cause,
    Constant,
    Decision,
    Derived,
    Figure,
    Predicate,
    Threshold,
    decide,
    deployed,
    disjoint,
    evaluate,
    holds,
)

X, Y = Figure("x", "a figure"), Figure("y", "another")
T = Threshold("t", "AlertA", None, "alert A's own threshold")
K = Threshold("k", "AlertA", "k", "a cause threshold of alert A")
L = Threshold("l", "AlertB", "l", "a cause threshold of alert B")
HALF = Constant("half", 0.5, "a half")


def test_arithmetic_is_promqls_division_by_zero_included() -> None:
    divide = c.ARITHMETIC["/"]
    assert divide(6.0, 3.0) == 2.0
    assert divide(2.0, 0.0) == math.inf and divide(-2.0, 0.0) == -math.inf
    assert math.isnan(divide(0.0, 0.0))
    assert c.ARITHMETIC["-"](5.0, 3.0) == 2.0 and c.ARITHMETIC["*"](5.0, 3.0) == 15.0


def test_a_derived_figure_is_unknown_where_an_operand_is_unless_absent_is_zero() -> None:
    ratio = Derived("r", "x over y", X, "/", Y)
    assert evaluate(ratio, {"x": 3.0, "y": 2.0}) == 1.5
    assert evaluate(ratio, {"x": 3.0}) is None
    assert evaluate(ratio, {"y": 2.0}) is None
    assert evaluate(ratio, {"x": 3.0, "y": None}) is None
    lenient = Derived("r", "x over y, y absent as 0", X, "/", Y, absent_is_zero=True)
    assert evaluate(lenient, {"x": 3.0}) == math.inf
    assert evaluate(lenient, {"x": 3.0, "y": 2.0}) == 1.5
    assert evaluate(lenient, {"y": 2.0}) is None  # only the right operand may be absent
    nested = Derived("n", "1 - x/y", 1.0, "-", ratio)
    assert evaluate(nested, {"x": 1.0, "y": 4.0}) == 0.75
    assert evaluate(2, {}) == 2.0 and isinstance(evaluate(2, {}), float)
    assert evaluate(X, {"x": 0.0}) == 0.0


@pytest.mark.parametrize(("op", "below", "at", "above"), [
    (">=", False, True, True), (">", False, False, True), ("<", True, False, False)])
def test_a_predicate_holds_on_its_side_of_the_level(op: str, below: bool, at: bool,
                                                   above: bool) -> None:
    for level, thresholds in ((T, {"t": 0.5}), (HALF, {})):
        p = Predicate(X, op, level)
        assert [holds(p, {"x": v}, thresholds) for v in (0.4, 0.5, 0.6)] == [below, at, above]


def test_a_predicate_on_an_unknown_figure_or_level_never_holds() -> None:
    for op in (">=", ">", "<"):
        p = Predicate(X, op, T)
        assert not holds(p, {}, {"t": 0.5})
        assert not holds(p, {"x": 0.5}, {})
        assert not holds(p, {"x": 0.5}, {"t": None})
    # A level of 0 is a level, not an unknown one.
    assert holds(Predicate(X, ">", T), {"x": 0.1}, {"t": 0.0})
    assert not holds(Predicate(X, "<", T), {"x": 0.1}, {"t": 0.0})


DECISION = Decision(thresholds=(T, K, L), causes=(
    Cause("first", (Predicate(X, ">", T), Predicate(Y, ">=", K))),
    Cause("second", (Predicate(X, ">", T),)),
    Cause("third", (Predicate(Y, "<", HALF),)),
))


def test_the_first_cause_whose_predicates_all_hold_is_the_cause() -> None:
    at = {"t": 1.0, "k": 2.0}
    assert decide(DECISION, {"x": 2.0, "y": 3.0}, at) == "first"
    assert decide(DECISION, {"x": 2.0, "y": 1.0}, at) == "second"  # one of first's fails
    assert decide(DECISION, {"x": 0.5, "y": 0.1}, at) == "third"
    assert decide(DECISION, {"x": 0.5, "y": 0.9}, at) is None
    assert decide(DECISION, {}, at) is None
    assert decide(Decision((), (Cause("any", ()),)), {}, {}) == "any"  # no predicate: always


def test_a_decision_names_its_causes_and_each_alerts_cause_keys() -> None:
    assert DECISION.names == ("first", "second", "third")
    assert DECISION.cause_keys("AlertA") == ("k",)  # its own threshold has no key
    # An alert's name read from elsewhere (rules, settings): equal, not the same object.
    assert DECISION.cause_keys("".join(["Alert", "A"])) == ("k",)  # noqa: FLY002
    assert DECISION.cause_keys("AlertB") == ("l",)
    assert DECISION.cause_keys("AlertC") == ()


@dataclass
class Alert:
    threshold: float | None
    causes: dict[str, float] = field(default_factory=dict)


def test_the_deployed_thresholds_are_each_alerts_own_or_under_its_causes() -> None:
    found = deployed(DECISION, {"AlertA": Alert(0.3, {"k": 4.0}), "AlertB": Alert(0.9)})
    assert found == {"t": 0.3, "k": 4.0, "l": None}
    assert deployed(DECISION, {}) == {"t": None, "k": None, "l": None}


def test_causes_comparing_one_figure_with_one_level_in_opposite_ways_are_disjoint() -> None:
    at_least, under = Predicate(X, ">=", T), Predicate(X, "<", T)
    assert disjoint(Cause("a", (at_least,)), Cause("b", (under,)))
    assert disjoint(Cause("a", (under,)), Cause("b", (at_least,)))
    assert disjoint(Cause("a", (Predicate(Y, ">", K), at_least)),
                    Cause("b", (Predicate(Y, ">", HALF), under)))
    # Equal, not the same objects: a predicate written out twice in a table.
    assert disjoint(Cause("a", (Predicate(Figure("x", "a figure"), ">=", T),)),
                    Cause("b", (Predicate(Figure("x", "a figure"), "<", T),)))
    # Not opposite: the same direction, > against < (both miss the level itself), another
    # figure, another level, no predicate at all.
    assert not disjoint(Cause("a", (at_least,)), Cause("b", (at_least,)))
    assert not disjoint(Cause("a", (Predicate(X, ">", T),)), Cause("b", (under,)))
    assert not disjoint(Cause("a", (at_least,)), Cause("b", (Predicate(Y, "<", T),)))
    assert not disjoint(Cause("a", (at_least,)), Cause("b", (Predicate(X, "<", K),)))
    assert not disjoint(Cause("a", (at_least,)), Cause("b", ()))


@given(st.floats(allow_nan=False, min_value=-10, max_value=10),
       st.floats(allow_nan=False, min_value=-10, max_value=10))
def test_no_figure_holds_both_of_two_disjoint_predicates(value: float, level: float) -> None:
    for a, b in c.OPPOSITE:
        both = (holds(Predicate(X, a, T), {"x": value}, {"t": level})
                and holds(Predicate(X, b, T), {"x": value}, {"t": level}))
        assert not both


@pytest.mark.parametrize("value", [T, HALF, X, Derived("r", "m", X, "/", Y),
                                   Predicate(X, ">", T), Cause("a", ()), DECISION])
def test_the_tables_parts_are_frozen(value: object) -> None:
    assert_frozen(value)


def test_reads_with_no_block_device_series_are_all_remote_and_idle_cores_need_both() -> None:
    """The shipped derived figures: rchar over an absent read_bytes is +Inf (nothing read from
    a disk, as over 0), not unknown; idle cores need the CPU ratio and the count."""
    assert evaluate(c.RCHAR_OVER_READ, {"rchar": 2e6}) == math.inf
    assert evaluate(c.RCHAR_OVER_READ, {"rchar": 2e6, "read_bytes": 5e5}) == 4.0
    assert evaluate(c.RCHAR_OVER_READ, {"read_bytes": 5e5}) is None
    assert evaluate(c.IDLE_CORES, {"node_cpu": 0.75, "cpu_count": 16.0}) == 4.0
    assert evaluate(c.IDLE_CORES, {"node_cpu": 0.75}) is None
    assert evaluate(c.IDLE_CORES, {"cpu_count": 16.0}) is None


def test_a_cause_threshold_is_named_as_thresholds_yaml_and_its_annotation_name_it() -> None:
    """docs/design.md: the loader's thresholds are `causes` under their alert, carried to
    diagnose as its ``cause_<name>`` annotations: a cause threshold's name is its key."""
    keyed = [t for d in (c.LOADER, c.EXCHANGE) for t in d.thresholds if t.key is not None]
    assert len(keyed) == 5  # four of the loader's, one of the exchange's
    assert [t.name for t in keyed] == [t.key for t in keyed]


# What `decide`'s callers give it: each figure and threshold by the name the module's example
# (and exchange.decide's) spells, not through the table's objects.
LOADER_AT = {"worker_busy": 0.5, "disk_busy": 0.6, "network_busy": 0.6, "rchar_over_read": 4.0,
             "cpu_saturated": 0.9}
# A rank whose workers wait, on a node with 4 idle cores of 16 and nothing else busy.
WAITING = {"worker_cpu": 0.2, "node_cpu": 0.75, "cpu_count": 16.0, "disk_busy": 0.1,
           "read_bytes": 5e5, "rchar": 6e5, "network_busy": 0.1}


@pytest.mark.parametrize(("figures", "cause"), [
    ({**WAITING, "worker_cpu": 0.7}, "too_few_workers"),
    ({**WAITING, "worker_cpu": 0.7, "node_cpu": 0.95}, "decode_bound"),  # saturated: no core
    ({**WAITING, "disk_busy": 0.8}, "storage_bound"),
    ({**WAITING, "rchar": 3e6, "network_busy": 0.7}, "remote_storage"),
    (WAITING, "latency_bound")])
def test_the_loader_decision_reads_figures_and_thresholds_by_their_names(
        figures: dict[str, float], cause: str) -> None:
    assert decide(c.LOADER, figures, LOADER_AT) == cause


EXCHANGE_AT = {"straggler": 1.25, "dataloader_bound": 0.3, "network_busy": 0.6}
QUIET = {"straggler_ratio": 1.1, "loader_share": 0.1, "network_busy": 0.2}


@pytest.mark.parametrize(("figures", "cause"), [
    ({**QUIET, "straggler_ratio": 1.4}, "straggler"),
    ({**QUIET, "loader_share": 0.35}, "loader"),
    ({**QUIET, "network_busy": 0.9}, "network"),
    (QUIET, "exchange")])
def test_the_exchange_decision_reads_figures_and_thresholds_by_their_names(
        figures: dict[str, float], cause: str) -> None:
    assert decide(c.EXCHANGE, figures, EXCHANGE_AT) == cause
