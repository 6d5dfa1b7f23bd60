"""The one duration grammar (trial_instrumentation.durations), on its own: every unit's size,
parts in order and each once, what is refused, and what Prometheus takes; property-based over
generated durations (issue 36: the durations mutation target)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trial_instrumentation.durations import UNITS, is_prometheus_duration, parse_duration

ORDER = ["y", "w", "d", "h", "m", "s", "ms"]
SIZES = {"y": 31_536_000.0, "w": 604_800.0, "d": 86_400.0, "h": 3600.0, "m": 60.0, "s": 1.0,
         "ms": 0.001}


@pytest.mark.parametrize("unit", ORDER)
def test_each_unit_has_its_size(unit: str) -> None:
    assert parse_duration(f"1{unit}") == SIZES[unit]
    assert parse_duration(f"3{unit}") == pytest.approx(3 * SIZES[unit])
    assert UNITS[unit] == SIZES[unit]
    assert list(UNITS) == ORDER  # largest first


@pytest.mark.parametrize(("text", "seconds"), [
    ("10", 10.0), ("2.5", 2.5), (" 10s ", 10.0), ("1m30s", 90.0), ("1h30m", 5400.0),
    ("500ms", 0.5), ("0.5s", 0.5), ("1.5m", 90.0), ("2d", 172_800.0), ("1w1d", 691_200.0),
    ("1y2w3d4h5m6s7ms", 31_536_000 + 2 * 604_800 + 3 * 86_400 + 4 * 3600 + 5 * 60 + 6.007),
    ("0s", 0.0), ("1e3", 1000.0)])
def test_a_duration_is_the_sum_of_its_parts(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert isinstance(parse_duration(text), float)


def test_a_number_is_seconds_and_a_boolean_is_refused() -> None:
    assert parse_duration(7) == 7.0 and isinstance(parse_duration(7), float)
    assert parse_duration(0.25) == 0.25
    with pytest.raises(TypeError, match="boolean"):
        parse_duration(True)
    with pytest.raises(TypeError, match="boolean"):
        parse_duration(False)


@pytest.mark.parametrize("text", [
    "", "s", "m5", "5x", "5 m", "5m 3s", "x5m", "5m!", "30s1m", "1m1m", "1s1m", "5ms1s",
    "1h1h30m", "-5m", "5m-", "1.m", ".5m", "5M", "ms"])
def test_what_is_not_a_duration_is_refused_saying_what_is(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected seconds \(10, 2\.5\) or a duration like "
                                         r"10s, 1m30s, 500ms, 2d"):
        parse_duration(text)


parts = st.lists(st.tuples(st.sampled_from(ORDER), st.integers(min_value=0, max_value=999)),
                 min_size=1, max_size=7, unique_by=lambda p: p[0])


@given(parts)
def test_parts_largest_first_read_as_their_sum_and_any_other_order_is_refused(
        found: list[tuple[str, int]]) -> None:
    ordered = sorted(found, key=lambda p: ORDER.index(p[0]))
    text = "".join(f"{n}{u}" for u, n in ordered)
    assert parse_duration(text) == pytest.approx(sum(n * SIZES[u] for u, n in ordered))
    assert is_prometheus_duration(text) == any(n for _, n in ordered)
    if len(ordered) > 1:
        backwards = "".join(f"{n}{u}" for u, n in reversed(ordered))
        with pytest.raises(ValueError):
            parse_duration(backwards)
        assert not is_prometheus_duration(backwards)
        twice = text + f"{ordered[-1][1]}{ordered[-1][0]}"  # the smallest unit again
        with pytest.raises(ValueError):
            parse_duration(twice)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_a_number_written_out_reads_as_itself(seconds: float) -> None:
    assert parse_duration(repr(seconds)) == seconds
    assert parse_duration(seconds) == seconds


@pytest.mark.parametrize(("value", "taken"), [
    ("5m", True), ("1h30m", True), ("0m5s", True), ("1h0m", True), ("500ms", True),
    ("0s", False), ("0m0s", False), ("1.5m", False), ("5", False), ("", False),
    ("30s1m", False), ("5x", False), (5, False), (5.0, False), (None, False)])
def test_prometheus_takes_whole_parts_in_order_not_all_zero(value: object, taken: bool) -> None:
    assert is_prometheus_duration(value) is taken
